"""Training the tagging, classification and language-modelling tasks from an experiment
config: what `keras_transformer.training.train` runs when `config.task` is not translation.

The run directory has translation's layout (`keras_transformer.run_dir`): `config.yaml`,
`model.keras` (a plain `TransformerEncoderModel` or `TransformerDecoderModel`), the one
tokenizer of the task's texts saved as both `tokenizers/source` and `tokenizers/target`,
`checkpoints/`, `backup/`, `logs/`, and `labels.txt` (the label names of tagging and
classification, one a line, in id order).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import keras
import tensorflow as tf

from keras_transformer import storage
from keras_transformer.config import save_config
from keras_transformer.run_dir import RunPaths
from keras_transformer.tasks.data import (
    load_task_split,
    task_max_length,
    task_texts,
    write_labels,
)
from keras_transformer.tasks.models import build_task_model, task_loss_and_metrics

logger = logging.getLogger(__name__)


def make_task_datasets(config: Any, train_data, validation_data, tokenizer):
    """Batched training (repeated when `steps_per_epoch` is set) and validation datasets."""
    from keras_transformer.data.task_pipeline import make_task_batches

    d, t = config.data, config.training
    common = {
        "batch_size": d.batch_size,
        "max_length": task_max_length(config),
        "bucket_step": d.bucket_step,
    }
    train = make_task_batches(
        config.task,
        train_data.dataset,
        tokenizer,
        shuffle=True,
        shuffle_buffer_size=d.shuffle_buffer_size,
        seed=t.seed,
        **common,
    )
    if t.steps_per_epoch:
        train = train.repeat()
    validation = None
    if validation_data is not None:
        validation = make_task_batches(
            config.task, validation_data.dataset, tokenizer, shuffle=False, **common
        )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train = train.with_options(options)
    if validation is not None:
        validation = validation.with_options(options)
    return train, validation


def train_task(
    config: Any,
    run_dir: str | None = None,
    *,
    strategy: tf.distribute.Strategy | None = None,
    extra_callbacks: list[keras.callbacks.Callback] | None = None,
):
    """Runs (or resumes) a tagging, classification or language-modelling experiment.

    Args:
        config: the `ExperimentConfig`.
        run_dir: overrides `config.training.run_dir`.
        strategy: a strategy to use instead of the one `config.training` describes.
        extra_callbacks: more Keras callbacks, appended after the run's own.

    Returns:
        A `keras_transformer.training.TrainingResult`.

    Example (not run as a doctest: it trains a model):

    ```python
    config = load_config("synthetic_sentiment", ["training.epochs=1"])
    result = train_task(config)  # or keras_transformer.training.train(config)
    ```
    """
    from keras_transformer.data.batching import count_batches
    from keras_transformer.training.run_loop import fit_and_save
    from keras_transformer.training.schedules import TransformerSchedule
    from keras_transformer.training.strategies import is_chief, make_strategy
    from keras_transformer.training.trainer import (
        TrainingResult,
        compile_model,
        load_or_train_tokenizers,
    )

    start = time.monotonic()
    config.validate()
    t, d = config.training, config.data
    paths = RunPaths(run_dir or t.run_dir)
    storage.makedirs(paths.root)
    keras.utils.set_random_seed(t.seed)
    if strategy is None:
        strategy = make_strategy(t.strategy, t.devices)
    chief = is_chief(strategy)
    if chief:
        save_config(config, paths.config)

    train_data = load_task_split(config, d.train_split, d.max_train_examples)
    validation_data = None
    if d.validation_split:
        validation_data = load_task_split(config, d.validation_split, d.max_validation_examples)
    logger.info("Task %s on %s.", config.task, train_data.origin)
    if train_data.labels is not None and chief:
        write_labels(paths.root, train_data.labels)
    # The texts as (text, "") pairs: the shared-vocabulary path of the translation trainer
    # trains one tokenizer on them (empty sentences are skipped) and saves it as both of
    # the run's tokenizers, waiting for the chief's under multi-worker training.
    # `data.vocab_size` is a most here: a recipe sized for its TFDS dataset also trains on
    # the much smaller offline set it falls back to.
    texts = task_texts(config.task, train_data.dataset).map(lambda text: (text, ""))
    shared = dataclasses.replace(config, data=dataclasses.replace(d, shared_vocab=True))
    tokenizer, _ = load_or_train_tokenizers(shared, paths, texts, strategy, hard_vocab_limit=False)
    train, validation = make_task_datasets(config, train_data, validation_data, tokenizer)
    steps_per_epoch = t.steps_per_epoch
    if steps_per_epoch is None:
        steps_per_epoch = count_batches(train)
        if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            train = train.apply(tf.data.experimental.assert_cardinality(steps_per_epoch))
        logger.info("An epoch is %d steps.", steps_per_epoch)

    with strategy.scope():
        model = build_task_model(config, tokenizer.vocab_size, train_data.labels)
        loss, metrics = task_loss_and_metrics(config.task, t.label_smoothing)
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
            use_ema=t.use_ema,
            ema_momentum=t.ema_momentum,
            beta_1=t.beta_1,
            beta_2=t.beta_2,
            epsilon=t.epsilon,
            clipnorm=t.clipnorm,
            global_clipnorm=t.global_clipnorm,
            jit_compile=t.jit_compile,
            steps_per_execution=t.steps_per_execution,
            strategy=strategy,
            loss=loss,
            metrics=metrics,
        )
    logger.info("Model: %d parameters.", model.count_params())

    history = fit_and_save(
        model,
        config,
        paths,
        strategy,
        train,
        validation,
        schedule=schedule,
        steps_per_epoch=steps_per_epoch,
        start=start,
        saved_model=model.to_plain,
        extra_callbacks=extra_callbacks,
    )
    return TrainingResult(history=history, model=model, paths=paths)
