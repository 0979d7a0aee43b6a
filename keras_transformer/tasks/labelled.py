"""What the encoder-only tasks share (tagging, classification): label names kept with the
run, the `TransformerEncoderModel`, scoring with Keras' `evaluate`, and the one
`serving_default` signature."""

from __future__ import annotations

import abc
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.data.task_sources import TaskData
from keras_transformer.evaluation import EvaluationResult
from keras_transformer.run_dir import read_labels
from keras_transformer.tasks.base import Task, count_examples
from keras_transformer.training.models import TrainingEncoderModel, build_training_model


def model_arguments(config: Any, vocabulary_size: int, dtype_policy: str | None) -> dict:
    """The constructor arguments every task's model shares, from the `model` section."""
    m = config.model
    return {
        "vocabulary_size": vocabulary_size,
        "d_model": m.d_model,
        "num_heads": m.num_heads,
        "d_ff": m.d_ff,
        "dropout": m.dropout,
        "attention_dropout": m.attention_dropout,
        "activation": m.activation,
        "max_length": m.max_length,
        "norm_first": m.norm_first,
        "layer_norm_epsilon": m.layer_norm_epsilon,
        "pad_id": m.pad_id,
        "dtype": dtype_policy or config.training.dtype_policy,
    }


def evaluate_with_keras(
    task: Task,
    run_dir: str,
    split: str,
    *,
    max_examples: int | None = None,
    batch_size: int | None = None,
    progress: bool = False,
) -> EvaluationResult:
    """Scores a run's model on a split with Keras' `evaluate` and the task's metrics (the
    loss unsmoothed): accuracy, perplexity, and `loss` (Keras' per-batch average); `progress`
    shows Keras' progress bar."""
    from keras_transformer.run_dir import load_run

    model, tokenizer, _ = load_run(run_dir)
    data = task.load_split(split, limit=max_examples)
    if task.labelled and data.labels != read_labels(run_dir):
        raise ValueError(
            f"Received data whose labels {list(data.labels)} differ from the run's "
            f"{list(read_labels(run_dir))} ({data.origin})."
        )
    batches = task.make_batches(data, (tokenizer, tokenizer), shuffle=False, batch_size=batch_size)
    count = count_examples(batches)
    if count == 0:
        raise ValueError(f"Received an empty split {split!r} of {data.origin}.")
    batches = batches.apply(tf.data.experimental.assert_cardinality(count))
    loss, metrics = task.loss_and_metrics(label_smoothing=0.0)
    model.compile(loss=loss, metrics=metrics)
    scores = model.evaluate(batches, verbose=1 if progress else 0, return_dict=True)
    return EvaluationResult.of_scores(
        {k: float(v) for k, v in scores.items()},
        task=task.name,
        data=f"{data.origin}:{split}",
        num_sentences=count_examples(data.dataset),
        main=task.main_metric,
    )


class LabelledTask(Task, abc.ABC):
    """Tagging and classification: `TransformerEncoderModel` with a head over the labels."""

    labelled = True
    hard_vocab_limit = False
    main_metric = "accuracy"

    @abc.abstractmethod
    def num_classes(self, labels: tuple[str, ...]) -> int:
        """The classes of the model's head."""

    @property
    def pooling(self) -> str | None:
        """The sequence head's pooling (None: a per-token head)."""
        return None

    def build_model(
        self,
        tokenizers: tuple[Any, Any],
        labels: tuple[str, ...] | None,
        *,
        remat: bool | None = None,
        dtype_policy: str | None = None,
    ) -> keras.Model:
        if not labels:
            raise ValueError(f"Expected the label names for task {self.name!r}. Received none.")
        m = self.config.model
        arguments = model_arguments(self.config, tokenizers[0].vocab_size, dtype_policy)
        arguments.update(
            num_layers=m.num_encoder_layers,
            num_classes=self.num_classes(labels),
            pooling=self.pooling,
        )
        return build_training_model(
            TrainingEncoderModel,
            arguments,
            remat=m.remat if remat is None else remat,
        )

    def evaluate(
        self,
        run_dir: str,
        split: str,
        *,
        max_examples: int | None = None,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> EvaluationResult:
        return evaluate_with_keras(
            self,
            run_dir,
            split,
            max_examples=max_examples,
            batch_size=batch_size,
            progress=progress,
        )

    @classmethod
    def export_info(cls, predictor: Any) -> dict[str, Any]:
        return {
            "task": cls.name,
            "labels": list(predictor.labels),
            "model": model_info(predictor.model),
        }


def model_info(model: keras.Model) -> dict[str, Any]:
    """The model's architecture as `export_info.json` records it."""
    config = model.get_config()
    return {k: v for k, v in config.items() if k not in ("name", "trainable", "dtype")}


def task_texts(data: TaskData, text: Any) -> tf.data.Dataset:
    """`(text, "")` pairs of each example's text: the one tokenizer learns from them."""
    return data.dataset.map(lambda *example: (text(*example), ""))
