"""`train(config)`: one training run for every task, driven through its `Task`.

It writes the run directory (`keras_transformer.run_dir.RunPaths`): `config.yaml`, the
tokenizers (trained from the training split on the first run, reused after; one tokenizer
saved as both when the vocabulary is shared), `labels.txt` (tasks with labels),
`checkpoints/`, `backup/` (mid-epoch resume), `logs/` (TensorBoard) and, at the end,
`model.keras` (the plain model).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from keras_transformer import storage
from keras_transformer.config import ExperimentConfig, save_config
from keras_transformer.data.batching import count_batches, without_autotuning
from keras_transformer.data.task_sources import TaskData
from keras_transformer.run_dir import RunPaths, write_labels
from keras_transformer.runner.given_data import given_data
from keras_transformer.runner.resuming import (
    backup_mismatch,
    check_not_finished,
    check_resumable,
    check_same_labels,
)
from keras_transformer.tasks import get_task
from keras_transformer.training.callbacks import BackupMismatchError
from keras_transformer.training.compile import compile_model
from keras_transformer.training.run_loop import fit_and_save
from keras_transformer.training.schedules import TransformerSchedule
from keras_transformer.training.strategies import is_chief, make_strategy
from keras_transformer.training.tokenizer_files import (
    check_reusable,
    load_or_train_tokenizers,
    tokenizer_settings,
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class TrainingResult:
    """What `train` returns.

    Attributes:
        history: Keras' `History` of the run.
        model: the trained training model (`model.to_plain()`: the plain model).
        paths: the run directory's paths (`paths.root`: the directory).
        tokenizers: `(source_tokenizer, target_tokenizer)`, one tokenizer twice when the
            vocabulary is shared.
        task: the run's `Task`.
    """

    history: keras.callbacks.History
    model: keras.Model
    paths: RunPaths
    tokenizers: tuple[Any, Any]
    task: Any

    @property
    def run_dir(self) -> str:
        """The run directory."""
        return self.paths.root

    def predictor(self, **options: Any) -> Any:
        """The run's predictor, as `Task.load_predictor` loads it from the run directory
        (the saved model: a `Translator` for translation, ...); `options` are its
        arguments (decoding settings, `batch_size`)."""
        return self.task.load_predictor(self.paths.root, **options)


def _no_batch_message(data) -> str:
    """The error for training data that makes no batch (`data`: the config's section)."""
    if data.drop_remainder:
        batch = (
            f"{data.tokens_per_batch} tokens"
            if data.tokens_per_batch
            else f"{data.batch_size} examples"
        )
        return (
            "Received training data that makes no full batch with "
            f"`data.drop_remainder=True`: no length bucket fills a batch of {batch}. "
            "Expected more training examples, smaller batches, or "
            "data.drop_remainder=false."
        )
    return (
        "Received training data that makes no batch: no training example is left after "
        "reading the training data and dropping the examples over the task's length limits "
        "(its `max_*_length` options). Expected at least one training example within them."
    )


def train(
    config: ExperimentConfig,
    run_dir: str | None = None,
    *,
    train_data: tf.data.Dataset | TaskData | None = None,
    validation_data: tf.data.Dataset | TaskData | None = None,
    labels: Sequence[str] | None = None,
    strategy: tf.distribute.Strategy | None = None,
    extra_callbacks: list[keras.callbacks.Callback] | None = None,
) -> TrainingResult:
    """Runs (or resumes) a training experiment of any task and writes its run directory.

    The data is the config's (`data.source`) unless `train_data` is given: a
    `tf.data.Dataset` of the task's raw examples, as its loaders yield them (translation:
    `(source_text, target_text)` string pairs; tagging: `(words, tag_ids)`;
    classification: `(text, label_id)`; language modelling: `text`). Nothing is written
    to the run directory before the data is found.

    Args:
        config: the experiment (its `task` picks the `Task`).
        run_dir: overrides `config.training.run_dir`.
        train_data: the training examples instead of the config's data.
        validation_data: the validation examples (with `train_data`; None: the config's
            `data.validation_holdout` of `train_data`, else no validation).
        labels: the label names of `train_data`'s ids (tagging, classification).
        strategy: a strategy to use instead of the one `config.training` describes.
        extra_callbacks: more Keras callbacks, appended after the run's own.

    Returns:
        A `TrainingResult`: `result.predictor()` translates (tags, classifies, generates)
        with the saved model.

    Raises:
        ValueError: for a run directory that holds a finished run (its `model.keras` and no
            backup: use a new one), an interrupted run's directory with another model than
            its `config.yaml`'s (its `model` section but the training-only options), or
            tokenizers trained with other settings, own data whose elements are not the
            task's raw examples (`Task.example_spec`), invalid `labels`
            (`run_dir.label_names`) or an interrupted run's directory with other labels than
            its `labels.txt`, before anything is written; for an interrupted run whose
            backup does not fit the model or optimizer (EMA turned on, say), before the first
            step, its `config.yaml` left as it was.
        tf.errors.InvalidArgumentError: as the examples are encoded, for a label id outside
            `[0, len(labels))` or a sentence of more or fewer tags than words, naming the
            data (`train_data`, `validation_data`).

    Example (not run as a doctest: it trains):

    ```python
    config = load_config("multi30k_de_en", training={"epochs": 1})
    result = train(config, "runs/mine")
    result.predictor(beam_size=4).translate(["Ein Hund läuft."])

    pairs = tf.data.Dataset.from_tensor_slices((["Ein Hund."], ["A dog."]))
    result = train(config, "runs/pairs", train_data=pairs)
    ```
    """
    start = time.monotonic()
    config.validate()
    task = get_task(config)
    t = config.training
    paths = RunPaths(run_dir or t.run_dir)
    check_not_finished(paths)
    check_resumable(config, paths)
    if strategy is None:
        strategy = make_strategy(t.strategy, t.devices)
    chief = is_chief(strategy)

    given = given_data(task, train_data, validation_data, labels)
    train_split, validation_data = task.load_training_data(given)
    check_same_labels(paths, train_split.labels)
    if chief:  # before the config is saved: a refused run directory keeps its own
        check_reusable(paths, _tokenizer_settings(task, train_split, given is not None))
    # The data is found: the run directory is written from here on.
    storage.makedirs(paths.root)
    # A resumed run's config.yaml stays the config its backup was taken with until the
    # backup is restored: a backup that does not fit the rerun's model leaves it as it was.
    resuming = chief and storage.exists(paths.backup)
    if chief and not resuming:
        save_config(config, paths.config)
    train_data, tokenizers = training_data(
        task, paths, strategy, data=train_split, given=given is not None
    )
    # Seeded once the data and tokenizers are ready: preparing a TFDS dataset draws from
    # Python's `random` (its temporary folder names), so a seed set before it would give the
    # first run on a machine other weights than the runs that find the dataset prepared.
    keras.utils.set_random_seed(t.seed)
    train_batches = _distributed(
        task.make_batches(
            train_data,
            tokenizers,
            shuffle=True,
            sample_subwords=True,
            drop_remainder=config.data.drop_remainder,
        )
    )
    validation_batches = None
    if validation_data is not None:
        validation_batches = _distributed(
            task.make_batches(validation_data, tokenizers, shuffle=False)
        )
    steps_per_epoch = t.steps_per_epoch
    if steps_per_epoch is None:
        steps_per_epoch = count_batches(train_batches)
        logger.info("An epoch is %d steps.", steps_per_epoch)
    # No batch: a counted epoch of 0 steps or, with the steps given and only full batches
    # kept, no first batch.
    if not (
        count_batches(train_batches.take(1))
        if t.steps_per_epoch and config.data.drop_remainder
        else steps_per_epoch
    ):
        raise ValueError(_no_batch_message(config.data))
    # A tf.data iterator, destroyed, waits for its autotuning thread to wake: the training
    # process sat idle for 9-60 s at some epoch starts and validations (README, Results).
    # So the training data repeats and `fit` is told the steps of an epoch: Keras then keeps
    # one iterator for the whole run. An epoch is one pass (each length bucket makes the
    # same number of batches every pass); with sampled segmentations
    # (`data.subword_sampling`) the first pass's count.
    train_batches = train_batches.repeat()
    if validation_batches is not None:
        # Keras makes the validation iterator anew at every validation: not autotuned, it
        # has no such thread to wait for.
        validation_batches = without_autotuning(validation_batches)
        if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            # A known length: else the first validation ends in Keras' "Your input ran out
            # of data; interrupting training" warning. (Multi-worker data is not counted.)
            validation_batches = validation_batches.apply(
                tf.data.experimental.assert_cardinality(count_batches(validation_batches))
            )

    model, schedule = build_and_compile(
        task, tokenizers, train_data.labels, strategy, t.epochs * steps_per_epoch
    )
    logger.info(
        "Model: %d parameters; jit_compile=%s (per replica: %s).",
        model.count_params(),
        model.jit_compile,
        model.per_replica_jit_compile,
    )
    callbacks = task.callbacks(validation_data, tokenizers, paths, start=start, chief=chief)
    if resuming:  # after the backup's restore, the first callback
        callbacks = [
            keras.callbacks.LambdaCallback(
                on_train_begin=lambda logs: save_config(config, paths.config)
            ),
            *callbacks,
        ]
    try:
        history = fit_and_save(
            model,
            config,
            paths,
            strategy,
            train_batches,
            validation_batches,
            schedule=schedule,
            steps_per_epoch=steps_per_epoch,
            start=start,
            saved_model=model.to_plain,
            task_callbacks=callbacks,
            extra_callbacks=extra_callbacks,
        )
    except BackupMismatchError as error:
        raise backup_mismatch(error, config, paths) from error
    return TrainingResult(
        history=history, model=model, paths=paths, tokenizers=tokenizers, task=task
    )


def training_data(
    task: Any,
    paths: RunPaths,
    strategy: tf.distribute.Strategy | None = None,
    *,
    data: TaskData | None = None,
    given: bool = False,
) -> tuple[Any, tuple[Any, Any]]:
    """The training data (`data`, else the training split of the task's config,
    `data.max_train_examples` of it) and the run's tokenizers (trained on it on the first
    run, reused after); the chief writes the label names of a task with labels. `given`:
    `data` was given to `train`, not the config's (recorded in the tokenizers' settings).

    Returns:
        `(train_data, (source_tokenizer, target_tokenizer))`: a `TaskData` and the two
        `SubwordTokenizer`s (one, twice, with a shared vocabulary).
    """
    d = task.config.data
    strategy = strategy or tf.distribute.get_strategy()
    train_data = data or task.load_split(d.train_split, limit=d.max_train_examples)
    logger.info("Task %s on %s.", task.name, train_data.origin)
    if task.labelled and is_chief(strategy):
        write_labels(paths.root, train_data.labels)
    tokenizers = load_or_train_tokenizers(
        task.config,
        paths,
        task.tokenizer_texts(train_data),
        strategy,
        shared=task.shared_vocab,
        settings=_tokenizer_settings(task, train_data, given),
        hard_vocab_limit=task.hard_vocab_limit,
    )
    return train_data, tokenizers


def _tokenizer_settings(task: Any, data: TaskData, given: bool) -> dict[str, Any]:
    """What the run's tokenizers are trained from and with (`tokenizer_settings`)."""
    return tokenizer_settings(task.config, data.origin, shared=task.shared_vocab, given=given)


def build_and_compile(
    task: Any,
    tokenizers: tuple[Any, Any],
    labels: tuple[str, ...] | None,
    strategy: tf.distribute.Strategy,
    total_steps: int,
    **compile_options: Any,
) -> tuple[keras.Model, TransformerSchedule]:
    """The task's model built and compiled under `strategy` as `train` does: its loss and
    metrics, Adam on the config's schedule (decaying over `total_steps`) and the `training`
    section's optimizer options, `compile_options` (e.g. `jit_compile=True`) over them.

    Returns:
        `(model, schedule)`.
    """
    t = task.config.training
    with strategy.scope():
        model = task.build_model(tokenizers, labels)
        loss, metrics = task.loss_and_metrics(t.label_smoothing)
        schedule = TransformerSchedule(
            model.d_model,
            t.warmup_steps,
            t.learning_rate_scale,
            decay=t.lr_decay,
            total_steps=total_steps,
        )
        compile_model(
            model,
            learning_rate=schedule,
            strategy=strategy,
            loss=loss,
            metrics=metrics,
            **{**_optimizer_options(task.config), **compile_options},
        )
    return model, schedule


def _optimizer_options(config: ExperimentConfig) -> dict[str, Any]:
    """`compile_model`'s options from the `training` section."""
    t = config.training
    return {
        "use_ema": t.use_ema,
        "ema_momentum": t.ema_momentum,
        "beta_1": t.beta_1,
        "beta_2": t.beta_2,
        "epsilon": t.epsilon,
        "clipnorm": t.clipnorm,
        "global_clipnorm": t.global_clipnorm,
        "rdrop_alpha": t.rdrop_alpha,
        "rdrop_start_epoch": t.rdrop_start_epoch,
        "rdrop_min_epochs": t.rdrop_min_epochs,
        "jit_compile": t.jit_compile,
        "steps_per_execution": t.steps_per_execution,
    }


def _distributed(batches: tf.data.Dataset) -> tf.data.Dataset:
    """Sharded by data across workers (each worker reads the whole input)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return batches.with_options(options)
