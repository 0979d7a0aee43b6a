"""A task's splits, labels and texts as an experiment config describes them."""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf

from keras_transformer import storage
from keras_transformer.data.task_sources import (
    TaskData,
    load_classification_data,
    load_language_modeling_data,
    load_tagging_data,
)

LABELS_FILENAME = "labels.txt"


def load_task_split(config: Any, split: str, limit: int | None = None) -> TaskData:
    """The raw split `split` of `config.task`'s data (`data.source`, the task's section).

    Args:
        config: an `ExperimentConfig` whose task is not translation.
        split: the split.
        limit: keep only the first `limit` examples.
    """
    d = config.data
    common = {"data_dir": d.data_dir, "download": d.download}
    if config.task == "tagging":
        s = config.tagging
        data = load_tagging_data(
            d.source,
            split,
            words_feature=s.words_feature,
            tags_feature=s.tags_feature,
            fallback=s.fallback,
            **common,
        )
    elif config.task == "classification":
        s = config.classification
        data = load_classification_data(
            d.source,
            split,
            text_feature=s.text_feature,
            label_feature=s.label_feature,
            fallback=s.fallback,
            **common,
        )
    elif config.task == "language_modeling":
        s = config.language_modeling
        data = load_language_modeling_data(
            d.source,
            split,
            text_feature=s.text_feature,
            document_separator=s.document_separator,
            fallback=s.fallback,
            **common,
        )
    else:
        raise ValueError(
            "Received an invalid value for `task`, expected a task other than translation. "
            f"Received: task={config.task!r}"
        )
    if limit:
        data = TaskData(data.dataset.take(limit), data.labels, data.origin)
    return data


def task_max_length(config: Any) -> int:
    """The longest example of the task: `data.max_source_length` for the encoder tasks,
    `data.max_target_length` (BOS included) for language modelling."""
    d = config.data
    return d.max_target_length if config.task == "language_modeling" else d.max_source_length


def task_texts(task: str, dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The text of each raw example (what the tokenizer learns from): scalar `tf.string`."""
    if task == "tagging":
        return dataset.map(lambda words, tags: tf.strings.reduce_join(words, separator=" "))
    if task == "classification":
        return dataset.map(lambda text, label: text)
    return dataset


def write_labels(run_dir: str, labels: tuple[str, ...]) -> str:
    """Writes the label names, one a line, to `run_dir/labels.txt`; returns the path."""
    for label in labels:
        if not label or "\n" in label:
            raise ValueError(
                "Received an invalid label name, expected a non-empty single line. "
                f"Received: {label!r}"
            )
    path = os.path.join(run_dir, LABELS_FILENAME)
    storage.write_text(path, "".join(f"{label}\n" for label in labels))
    return path


def read_labels(run_dir: str) -> tuple[str, ...]:
    """The label names of a tagging or classification run (`run_dir/labels.txt`)."""
    path = os.path.join(run_dir, LABELS_FILENAME)
    if not storage.exists(path):
        raise FileNotFoundError(
            f"Received an incomplete run directory {run_dir!r}: expected {path!r} (the label "
            "names of a tagging or classification run) to exist."
        )
    lines = storage.read_text(path).split("\n")
    return tuple(line for line in lines if line)
