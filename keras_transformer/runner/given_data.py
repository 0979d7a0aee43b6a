"""`train`'s own data (`train_data`, `validation_data`, `labels`) checked and wrapped as the
task's `TaskData`, before anything is written to the run directory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from keras_transformer.data.task_sources import TaskData
from keras_transformer.run_dir import label_names


def given_data(
    task: Any,
    train_data: tf.data.Dataset | TaskData | None,
    validation_data: tf.data.Dataset | TaskData | None,
    labels: Sequence[str] | None,
) -> tuple[TaskData, TaskData | None] | None:
    """`train`'s own data as `TaskData` (None: the config's data): each dataset's elements
    are the task's raw examples (`Task.check_examples`), the label names valid
    (`run_dir.label_names`) and the same for both (a `TaskData`'s own, or `labels`).

    Raises:
        ValueError: naming the argument at fault, for data or labels that do not fit.
    """
    if train_data is None:
        for name, value in (("validation_data", validation_data), ("labels", labels)):
            if value is not None:
                raise ValueError(
                    f"Received `{name}` without `train_data`, expected both (or neither: the "
                    "config's data)."
                )
        return None
    if not task.labelled:
        if labels is not None:
            raise ValueError(
                "Received an invalid value for argument `labels`, expected None for a "
                f"{task.name} run (its examples have no labels). Received: labels={labels!r}"
            )
    elif isinstance(train_data, TaskData):
        own = label_names(train_data.labels, "train_data.labels")
        if labels is not None and label_names(labels) != own:
            raise ValueError(
                "Received an invalid value for argument `labels`, expected None or the "
                f"labels of `train_data` (a TaskData), {list(own)}. Received: labels={labels!r}"
            )
        labels = own
    elif labels is None:
        raise ValueError(
            f"Received `train_data` for a {task.name} run without `labels`, expected the "
            "names of its label ids, e.g. labels=['negative', 'positive']."
        )
    else:
        labels = label_names(labels)

    def wrap(data: tf.data.Dataset | TaskData, origin: str) -> TaskData:
        if not isinstance(data, TaskData):
            task.check_examples(data, origin)
            return TaskData(data, labels, origin)
        task.check_examples(data.dataset, f"{origin}.dataset")
        if task.labelled and data.labels != labels:
            raise ValueError(
                f"Received an invalid value for argument `{origin}`, expected a TaskData of "
                f"the training data's labels {list(labels)}. Received: {origin}.labels="
                f"{data.labels!r}"
            )
        return data

    return (
        wrap(train_data, "train_data"),
        None if validation_data is None else wrap(validation_data, "validation_data"),
    )
