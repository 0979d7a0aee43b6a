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
from typing import Any

import keras
import tensorflow as tf

from keras_transformer import storage
from keras_transformer.config import ExperimentConfig, save_config
from keras_transformer.data.batching import count_batches
from keras_transformer.run_dir import RunPaths, write_labels
from keras_transformer.tasks import get_task
from keras_transformer.training.compile import compile_model
from keras_transformer.training.run_loop import fit_and_save
from keras_transformer.training.schedules import TransformerSchedule
from keras_transformer.training.strategies import is_chief, make_strategy
from keras_transformer.training.tokenizer_files import load_or_train_tokenizers

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class TrainingResult:
    """What `train` returns: the History, the trained (training) model and the run's paths."""

    history: keras.callbacks.History
    model: keras.Model
    paths: RunPaths


def train(
    config: ExperimentConfig,
    run_dir: str | None = None,
    *,
    strategy: tf.distribute.Strategy | None = None,
    extra_callbacks: list[keras.callbacks.Callback] | None = None,
) -> TrainingResult:
    """Runs (or resumes) a training experiment of any task and writes its run directory.

    Args:
        config: the experiment (its `task` picks the `Task`).
        run_dir: overrides `config.training.run_dir`.
        strategy: a strategy to use instead of the one `config.training` describes.
        extra_callbacks: more Keras callbacks, appended after the run's own.

    Returns:
        A `TrainingResult`.

    Example (not run as a doctest: it trains on Multi30k):

    ```python
    config = load_config("multi30k_de_en", ["training.epochs=1"])
    result = train(config)
    ```
    """
    start = time.monotonic()
    config.validate()
    task = get_task(config)
    t, d = config.training, config.data
    paths = RunPaths(run_dir or t.run_dir)
    storage.makedirs(paths.root)
    keras.utils.set_random_seed(t.seed)
    if strategy is None:
        strategy = make_strategy(t.strategy, t.devices)
    chief = is_chief(strategy)
    if chief:
        save_config(config, paths.config)

    train_data, tokenizers = training_data(task, paths, strategy)
    validation_data = None
    if d.validation_split or d.validation_source:
        validation_data = task.load_split(
            d.validation_split or "", validation=True, limit=d.max_validation_examples
        )
    train_batches = _distributed(task.make_batches(train_data, tokenizers, shuffle=True))
    if t.steps_per_epoch:
        train_batches = train_batches.repeat()
    validation_batches = None
    if validation_data is not None:
        validation_batches = _distributed(
            task.make_batches(validation_data, tokenizers, shuffle=False)
        )
    steps_per_epoch = t.steps_per_epoch
    if steps_per_epoch is None:
        steps_per_epoch = count_batches(train_batches)
        if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            # A known length: Keras' progress bar shows the total and an estimate.
            train_batches = train_batches.apply(
                tf.data.experimental.assert_cardinality(steps_per_epoch)
            )
        logger.info("An epoch is %d steps.", steps_per_epoch)

    with strategy.scope():
        model = task.build_model(tokenizers, train_data.labels)
        loss, metrics = task.loss_and_metrics(t.label_smoothing)
        schedule = TransformerSchedule(
            model.d_model,
            t.warmup_steps,
            t.learning_rate_scale,
            decay=t.lr_decay,
            total_steps=t.epochs * steps_per_epoch,
        )
        compile_model(
            model,
            learning_rate=schedule,
            strategy=strategy,
            loss=loss,
            metrics=metrics,
            **_optimizer_options(config),
        )
    logger.info(
        "Model: %d parameters; jit_compile=%s (per replica: %s).",
        model.count_params(),
        model.jit_compile,
        model.per_replica_jit_compile,
    )
    callbacks = task.callbacks(validation_data, tokenizers, paths, start=start, chief=chief)
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
    return TrainingResult(history=history, model=model, paths=paths)


def training_data(
    task: Any, paths: RunPaths, strategy: tf.distribute.Strategy | None = None
) -> tuple[Any, tuple[Any, Any]]:
    """The training split of a task's config (`data.max_train_examples` of it) and the run's
    tokenizers (trained on it on the first run, reused after); the chief writes the label
    names of a task with labels.

    Returns:
        `(train_data, (source_tokenizer, target_tokenizer))`: a `TaskData` and the two
        `SubwordTokenizer`s (one, twice, with a shared vocabulary).
    """
    d = task.config.data
    strategy = strategy or tf.distribute.get_strategy()
    train_data = task.load_split(d.train_split, limit=d.max_train_examples)
    logger.info("Task %s on %s.", task.name, train_data.origin)
    if task.labelled and is_chief(strategy):
        write_labels(paths.root, train_data.labels)
    tokenizers = load_or_train_tokenizers(
        task.config,
        paths,
        task.tokenizer_texts(train_data),
        strategy,
        shared=task.shared_vocab,
        hard_vocab_limit=task.hard_vocab_limit,
    )
    return train_data, tokenizers


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
        "jit_compile": t.jit_compile,
        "steps_per_execution": t.steps_per_execution,
    }


def _distributed(batches: tf.data.Dataset) -> tf.data.Dataset:
    """Sharded by data across workers (each worker reads the whole input)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return batches.with_options(options)
