"""`evaluate_run`: scores a run of any task on a split of the data it was trained on (or
other data), through its `Task`: sacreBLEU for translation, accuracy for tagging and
classification, perplexity for language modelling."""

from __future__ import annotations

import dataclasses
import inspect
import logging
from typing import TYPE_CHECKING, Any

from keras_transformer.evaluation import EvaluationResult
from keras_transformer.run_dir import RunPaths
from keras_transformer.validation import check_optional, check_positive_int

if TYPE_CHECKING:
    from keras_transformer.config.loading import Overrides

logger = logging.getLogger(__name__)


def run_config(run_dir: str, overrides: Overrides | None = None) -> Any:
    """The `ExperimentConfig` a run was trained with (`config.yaml`; the defaults, a
    translation run, without one), with `overrides` (`section.key=value`) applied: e.g.
    other data to evaluate on."""
    from keras_transformer import storage
    from keras_transformer.config import load_config

    path = RunPaths(run_dir).config
    if not storage.exists(path):
        # A model and tokenizers saved by hand: a translation run (`run_dir.run_task`), with
        # the defaults.
        logger.info("No %s: the run is read as a translation run with the defaults.", path)
        return load_config(None, overrides)
    return load_config(path, overrides)


def evaluate_run(
    run_dir: str,
    split: str = "test",
    *,
    source: str | None = None,
    data_dir: str | None = None,
    download: bool | None = None,
    overrides: Overrides | None = None,
    max_examples: int | None = None,
    data: Any = None,
    **options: Any,
) -> EvaluationResult:
    """Scores a run's model on a split of its task's data, or on `data`.

    The data is the run's own (`data.source` of its `config.yaml`: what it was trained on)
    unless `data`, `source` or `overrides` say otherwise. A run trained on data given to
    `train` (`train_data=`) has no data of its own to score: it needs one of them (or a
    translation's `source_file` and `reference_file`).

    Args:
        run_dir: the run directory.
        split: the split (TFDS slicing included).
        source: another dataset than the run's `data.source`.
        data_dir: the TFDS data folder (default: the run's).
        download: whether TFDS may download (default: the run's).
        overrides: more changes to the run's config, as `load_config` takes them
            (`["section.key=value", ...]` or `{"section.key": value}`; e.g.
            `translation.local_dir=...`).
        max_examples: score only the first N examples.
        data: the examples to score instead of a split: a `tf.data.Dataset` of the task's
            examples, as `train` takes them (label ids index the run's `labels.txt`), or a
            `TaskData`.
        **options: the task's evaluation options (`Task.evaluate`: a translation's
            metrics, files and decoding settings; `batch_size` for the other tasks).

    Returns:
        An `EvaluationResult`.

    Example (not run as a doctest: it needs a trained run directory):

    ```python
    evaluate_run("runs/sentiment", "test").scores  # {"accuracy": 0.97, "loss": 0.09}
    ```
    """
    from keras_transformer.config.loading import override_keys
    from keras_transformer.tasks import get_task
    from keras_transformer.training.tokenizer_files import trained_on_given_data

    check_optional(check_positive_int, "max_examples", max_examples)
    files_given = options.get("source_file") is not None
    other_data = data is not None or source is not None or files_given
    other_data = other_data or "data.source" in override_keys(overrides)
    if not other_data and trained_on_given_data(RunPaths(run_dir)):
        raise ValueError(
            f"Received no data to score the run {run_dir!r} on: it was trained on data given "
            "to `train` (train_data=...), not on its config's data.source. Expected the data "
            "to score: `evaluate_run(run_dir, data=dataset)` in Python, or on the command "
            "line `--data NAME` (for translation also `--source-file` and `--reference-file`)."
        )
    config = run_config(run_dir, overrides)
    data_overrides = {
        k: v
        for k, v in (("source", source), ("data_dir", data_dir), ("download", download))
        if v is not None
    }
    trained_on = config.data.source
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, **data_overrides))
    task = get_task(config)
    _check_options(task, options)
    d = config.data
    if data is not None:
        return task.evaluate(
            run_dir,
            split,
            max_examples=max_examples,
            data=_task_data(task, run_dir, data),
            **options,
        )
    if (
        task.reads_local_files
        and d.source == trained_on
        and not files_given
        and split
        not in (
            d.train_split,
            d.validation_split,
        )
    ):
        raise ValueError(
            f"Received split {split!r} of the run's local files ({d.source}), which have no "
            f"splits: expected {d.validation_split!r} (its validation data) or test files: "
            "`--source-file FILE --reference-file FILE` (in Python, `source_file=`, "
            "`reference_file=`)."
        )
    return task.evaluate(run_dir, split, max_examples=max_examples, **options)


def _task_data(task: Any, run_dir: str, data: Any) -> Any:
    """`evaluate_run`'s `data` as a `TaskData`: a dataset's label ids name the run's labels."""
    import tensorflow as tf

    from keras_transformer.data.task_sources import TaskData
    from keras_transformer.run_dir import read_labels

    if isinstance(data, TaskData):
        return data
    if not isinstance(data, tf.data.Dataset):
        raise ValueError(
            "Received an invalid value for argument `data`, expected a tf.data.Dataset of "
            f"the task's examples or a TaskData. Received: {type(data).__name__}"
        )
    task.check_examples(data, "data")
    return TaskData(data, read_labels(run_dir) if task.labelled else None, "data")


def _check_options(task: Any, options: dict[str, Any]) -> None:
    """Refuses, by name, options that the task's `evaluate` does not take."""
    parameters = inspect.signature(task.evaluate).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = sorted(set(options) - set(parameters))
    if unknown:
        raise ValueError(
            f"Received evaluation options that a {task.name} run does not take: {unknown}; "
            f"expected some of {sorted(set(parameters) - {'run_dir', 'split'})}."
        )
