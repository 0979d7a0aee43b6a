"""The metric of a tagging, classification or language-modelling run on a split: accuracy
(per word for tagging, per text for classification) or perplexity (per token)."""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from keras_transformer.validation import check_optional, check_positive_int

# The metric `keras-transformer evaluate` reports first for each task.
MAIN_METRICS = {
    "tagging": "accuracy",
    "classification": "accuracy",
    "language_modeling": "perplexity",
}


@dataclasses.dataclass
class TaskEvaluation:
    """What `evaluate_run` returns.

    Attributes:
        task: the run's task.
        data: where the split came from: `"tfds:<name>:<split>"` or `"<offline set>:<split>"`.
        examples: the number of examples scored.
        scores: `accuracy` (per labelled word, text or token), `perplexity` for a
            language model (exp of the mean cross-entropy of every token), and `loss`
            (the unsmoothed cross-entropy as Keras' `evaluate` averages it: per batch,
            weighted by examples).
    """

    task: str
    data: str
    examples: int
    scores: dict[str, float]

    def format(self) -> str:
        """One line per score, the task's main metric first."""
        main = MAIN_METRICS[self.task]
        names = [main] + sorted(k for k in self.scores if k != main)
        lines = [f"{name} = {self.scores[name]:.4f}" for name in names]
        return "\n".join([f"{self.task} on {self.data} ({self.examples} examples)", *lines])

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def evaluate_run(
    run_dir: str,
    split: str = "test",
    *,
    source: str | None = None,
    data_dir: str | None = None,
    download: bool | None = None,
    max_examples: int | None = None,
    batch_size: int | None = None,
) -> TaskEvaluation:
    """Scores a run's model on a split of its task's data.

    Args:
        run_dir: the run directory (its `config.yaml` says the task and the data).
        split: the split (TFDS slicing included).
        source: another dataset than the run's `data.source` (a TFDS name or the offline
            set).
        data_dir: the TFDS data folder (default: the run's).
        download: whether TFDS may download (default: the run's).
        max_examples: score only the first N examples.
        batch_size: examples per batch (default: the run's).

    Returns:
        A `TaskEvaluation`.

    Example (not run as a doctest: it needs a trained run directory):

    ```python
    evaluate_run("runs/sentiment", "test").scores  # {"accuracy": 0.97, "loss": 0.09}
    ```
    """
    from keras_transformer.config import load_config
    from keras_transformer.data.batching import count_batches
    from keras_transformer.data.task_pipeline import make_task_batches
    from keras_transformer.run_dir import RunPaths, load_run
    from keras_transformer.tasks.data import load_task_split, read_labels, task_max_length
    from keras_transformer.tasks.models import task_loss_and_metrics

    check_optional(check_positive_int, "max_examples", max_examples)
    check_optional(check_positive_int, "batch_size", batch_size)
    config = load_config(RunPaths(run_dir).config)
    if config.task == "translation":
        raise ValueError(
            f"Received a translation run directory ({run_dir}); score translations with "
            "`keras_transformer.evaluation.evaluate_translator` (BLEU, chrF)."
        )
    d = config.data
    data_overrides = {
        k: v
        for k, v in (("source", source), ("data_dir", data_dir), ("download", download))
        if v is not None
    }
    config = dataclasses.replace(config, data=dataclasses.replace(d, **data_overrides))
    model, tokenizer, _ = load_run(run_dir)
    data = load_task_split(config, split, max_examples)
    if config.task != "language_modeling" and data.labels != read_labels(run_dir):
        raise ValueError(
            f"Received data whose labels {list(data.labels)} differ from the run's "
            f"{list(read_labels(run_dir))} ({data.origin})."
        )
    batches = make_task_batches(
        config.task,
        data.dataset,
        tokenizer,
        batch_size=batch_size or d.batch_size,
        max_length=task_max_length(config),
        bucket_step=d.bucket_step,
        shuffle=False,
    )
    count = count_batches(batches)
    if count == 0:
        raise ValueError(f"Received an empty split {split!r} of {data.origin}.")
    batches = batches.apply(tf.data.experimental.assert_cardinality(count))
    loss, metrics = task_loss_and_metrics(config.task, label_smoothing=0.0)
    model.compile(loss=loss, metrics=metrics)
    scores = model.evaluate(batches, verbose=0, return_dict=True)
    return TaskEvaluation(
        task=config.task,
        data=f"{data.origin}:{split}",
        examples=int(data.dataset.reduce(0, lambda count, _: count + 1)),
        scores={k: float(v) for k, v in scores.items()},
    )
