"""Training a `Transformer` from an `ExperimentConfig`: data, tokenizers, `model.fit`.

`train(config)` does a whole run and writes the run directory
(`keras_transformer.run_dir.RunPaths`): `config.yaml`, the tokenizers (trained from the
training split on the first run, reused after), `checkpoints/`, `backup/` (mid-epoch
resume), `logs/` (TensorBoard) and, at the end, `model.keras` (a plain `Transformer`).

The pieces are usable alone: `build_model`, `compile_model`, `make_datasets`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import storage
from keras_transformer.config import ExperimentConfig, save_config
from keras_transformer.model_config import TransformerConfig
from keras_transformer.models.transformer import Transformer
from keras_transformer.run_dir import RunPaths
from keras_transformer.training.bleu import BleuCallback
from keras_transformer.training.distributed import DistributedTrainingMixin
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedSparseCategoricalAccuracy
from keras_transformer.training.run_loop import fit_and_save
from keras_transformer.training.schedules import TransformerSchedule
from keras_transformer.training.strategies import (
    is_chief,
    make_strategy,
    resolve_jit_compile,
)
from keras_transformer.training.tokenizer_files import load_or_train_tokenizers

logger = logging.getLogger(__name__)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TrainingTransformer(DistributedTrainingMixin, Transformer):
    """A `Transformer` whose `fit` works under every `tf.distribute` strategy.

    Same arguments and call as `Transformer`; `DistributedTrainingMixin` fixes Keras 3's
    `fit` under `MultiWorkerMirroredStrategy` and with `jit_compile=True` under
    `MirroredStrategy`, and logs the learning rate. `to_transformer()` returns a plain
    `Transformer` with the same weights (what `train` saves as `model.keras`).

    Example:
    >>> model = TrainingTransformer.from_preset("tiny", source_vocab_size=100,
    ...                                         target_vocab_size=100)
    """

    def to_transformer(self) -> Transformer:
        """A plain `Transformer` (no training overrides) holding a copy of the weights."""
        model = Transformer.from_config(self.get_config())
        _build(model)
        model.set_weights(self.get_weights())
        return model


def _build(model: keras.Model) -> None:
    """Builds the model eagerly on a tiny batch.

    Building it inside `fit`'s symbolic build (which Keras does under a strategy) would
    leave `PositionalEncoding`'s table a tensor of a discarded graph.
    """
    dummy = np.full((1, 2), 4, "int32")
    model((dummy, dummy), training=False)


def build_model(
    config: ExperimentConfig | TransformerConfig,
    source_vocab_size: int | None = None,
    target_vocab_size: int | None = None,
    *,
    remat: bool | None = None,
    dtype_policy: str | None = None,
) -> TrainingTransformer:
    """Creates and builds a `TrainingTransformer`, under the current strategy scope.

    Args:
        config: an `ExperimentConfig` (its `model` section, plus `training.dtype_policy`)
            or a full `TransformerConfig`.
        source_vocab_size: needed with an `ExperimentConfig`.
        target_vocab_size: needed with an `ExperimentConfig`.
        remat: recompute encoder/decoder layer activations in the backward pass
            (`keras.RematScope`); defaults to `config.model.remat`.
        dtype_policy: e.g. `"mixed_float16"`; defaults to `config.training.dtype_policy`.
            Set on the model only (no global Keras state changes).

    Returns:
        The built model.
    """
    if isinstance(config, ExperimentConfig):
        if source_vocab_size is None or target_vocab_size is None:
            raise ValueError(
                "Expected `source_vocab_size` and `target_vocab_size` with an "
                "ExperimentConfig. Received: "
                f"source_vocab_size={source_vocab_size}, target_vocab_size={target_vocab_size}"
            )
        remat = config.model.remat if remat is None else remat
        dtype_policy = dtype_policy or config.training.dtype_policy
        config = config.model.to_transformer_config(source_vocab_size, target_vocab_size)
    dtype_policy = dtype_policy or "float32"
    kwargs: dict[str, Any] = {"dtype": dtype_policy}
    if remat:
        layers = max(config.num_encoder_layers, config.num_decoder_layers)
        names = [f"layer_{i}" for i in range(layers)]
        with keras.RematScope(mode="list_of_layers", layer_names=names):
            model = TrainingTransformer.from_transformer_config(config, **kwargs)
            _build(model)
    else:
        model = TrainingTransformer.from_transformer_config(config, **kwargs)
        _build(model)
    return model


def compile_model(
    model: keras.Model,
    *,
    label_smoothing: float = 0.1,
    learning_rate: TransformerSchedule | None = None,
    warmup_steps: int = 4000,
    learning_rate_scale: float = 1.0,
    lr_decay: str = "inverse_sqrt",
    total_steps: int | None = None,
    use_ema: bool = False,
    ema_momentum: float = 0.999,
    beta_1: float = 0.9,
    beta_2: float = 0.98,
    epsilon: float = 1e-9,
    clipnorm: float | None = None,
    global_clipnorm: float | None = None,
    jit_compile: bool | str = "auto",
    steps_per_execution: int = 1,
    strategy: tf.distribute.Strategy | None = None,
    loss: keras.losses.Loss | None = None,
    metrics: list[keras.metrics.Metric] | None = None,
) -> keras.Model:
    """Compiles `model` the paper's way: Adam + `TransformerSchedule` + smoothed masked CE.

    Metrics: `accuracy` (`MaskedSparseCategoricalAccuracy`); `TrainingTransformer` adds
    `learning_rate` to the training logs. Call it under the strategy's scope. Other tasks
    (`keras_transformer.tasks`) pass their own `loss` and `metrics`.

    Args:
        model: the model (a `TrainingTransformer` for distributed training).
        label_smoothing: the loss' smoothing rate.
        learning_rate: the schedule; by default a `TransformerSchedule` from the next four
            arguments.
        warmup_steps: the schedule's warmup.
        learning_rate_scale: factor on the schedule.
        lr_decay: the schedule's decay after the warmup (`TransformerSchedule`).
        total_steps: where `"linear"` and `"cosine"` decays reach zero.
        use_ema: keep an exponential moving average of the weights (Keras' `use_ema`).
        ema_momentum: its momentum.
        beta_1: Adam's beta_1.
        beta_2: Adam's beta_2.
        epsilon: Adam's epsilon.
        clipnorm: per-gradient norm clipping.
        global_clipnorm: global norm clipping.
        jit_compile: `True`, `False` or `"auto"` (see `resolve_jit_compile`).
        steps_per_execution: steps per compiled call.
        strategy: the strategy (for `"auto"`); the current one if None.
        loss: the loss; by default the label-smoothed masked cross-entropy above.
        metrics: the metrics; by default the masked token accuracy above.

    Returns:
        `model`, compiled.
    """
    schedule = learning_rate or TransformerSchedule(
        model.d_model, warmup_steps, learning_rate_scale, decay=lr_decay, total_steps=total_steps
    )
    optimizer = keras.optimizers.Adam(
        schedule,
        beta_1=beta_1,
        beta_2=beta_2,
        epsilon=epsilon,
        clipnorm=clipnorm,
        global_clipnorm=global_clipnorm,
        use_ema=use_ema,
        ema_momentum=ema_momentum,
    )
    if loss is None:
        loss = MaskedSparseCategoricalCrossentropy(
            label_smoothing=label_smoothing, pad_id=model.pad_id
        )
    if metrics is None:
        metrics = [MaskedSparseCategoricalAccuracy(pad_id=model.pad_id, name="accuracy")]
    model.compile(
        optimizer=optimizer,
        loss=loss,
        metrics=metrics,
        jit_compile=resolve_jit_compile(jit_compile, strategy),
        steps_per_execution=steps_per_execution,
    )
    return model


def load_pairs(config: ExperimentConfig, split: str, validation: bool = False):
    """The `(source_text, target_text)` pairs of a split, as the `data` section says."""
    from keras_transformer.data import MULTI30K_ENV_VAR, load_parallel_dataset

    d = config.data
    source, target_path = d.source, d.target_path
    if validation and d.validation_source is not None:
        source, target_path = d.validation_source, d.validation_target_path
    local_dir = d.local_dir or os.environ.get(MULTI30K_ENV_VAR) or None
    pairs = load_parallel_dataset(
        source,
        split=split,
        source_lang=d.source_lang,
        target_lang=d.target_lang,
        target_path=target_path,
        data_dir=d.data_dir,
        local_dir=local_dir,
        download=d.download,
    )
    limit = d.max_validation_examples if validation else d.max_train_examples
    return pairs.take(limit) if limit else pairs


def make_datasets(config: ExperimentConfig, train_pairs, validation_pairs, tokenizers):
    """Batched training (repeated when `steps_per_epoch` is set) and validation datasets."""
    from keras_transformer.data import default_bucket_lengths, make_batches

    d, t = config.data, config.training
    longest = max(d.max_source_length, d.max_target_length)
    common = {
        "bucket_lengths": default_bucket_lengths(longest, d.bucket_step),
        "batch_size": d.batch_size,
        "tokens_per_batch": d.tokens_per_batch,
        "max_source_length": d.max_source_length,
        "max_target_length": d.max_target_length,
        "pad_to_bucket": d.pad_to_bucket,
        "source_eos": d.source_eos,
    }
    train = make_batches(
        train_pairs,
        *tokenizers,
        shuffle=True,
        shuffle_buffer_size=d.shuffle_buffer_size,
        seed=t.seed,
        **common,
    )
    if t.steps_per_epoch:
        train = train.repeat()
    validation = None
    if validation_pairs is not None:
        validation = make_batches(validation_pairs, *tokenizers, shuffle=False, **common)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train = train.with_options(options)
    if validation is not None:
        validation = validation.with_options(options)
    return train, validation


@dataclasses.dataclass
class TrainingResult:
    """What `train` returns: the History, the trained model and the run's paths."""

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
    """Runs (or resumes) a training experiment and writes its run directory.

    A config whose `task` is not translation is trained by
    `keras_transformer.tasks.training.train_task`.

    Args:
        config: the experiment.
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
    if config.task != "translation":  # tagging, classification, language modelling
        from keras_transformer.tasks.training import train_task

        return train_task(config, run_dir, strategy=strategy, extra_callbacks=extra_callbacks)
    start = time.monotonic()
    config.validate()
    t = config.training
    paths = RunPaths(run_dir or t.run_dir)
    storage.makedirs(paths.root)
    keras.utils.set_random_seed(t.seed)
    if strategy is None:
        strategy = make_strategy(t.strategy, t.devices)
    chief = is_chief(strategy)
    if chief:
        save_config(config, paths.config)

    train_pairs = load_pairs(config, config.data.train_split)
    validation_pairs = None
    if config.data.validation_split or config.data.validation_source:
        validation_pairs = load_pairs(config, config.data.validation_split or "", validation=True)
    tokenizers = load_or_train_tokenizers(config, paths, train_pairs, strategy)
    train_data, validation_data = make_datasets(config, train_pairs, validation_pairs, tokenizers)
    steps_per_epoch = t.steps_per_epoch
    if steps_per_epoch is None:
        from keras_transformer.data import count_batches

        steps_per_epoch = count_batches(train_data)
        if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            # A known length: Keras' progress bar shows the total and an estimate.
            train_data = train_data.apply(tf.data.experimental.assert_cardinality(steps_per_epoch))
        logger.info("An epoch is %d steps.", steps_per_epoch)

    with strategy.scope():
        model = build_model(config, tokenizers[0].vocab_size, tokenizers[1].vocab_size)
        schedule = TransformerSchedule(
            model.d_model,
            t.warmup_steps,
            t.learning_rate_scale,
            decay=t.lr_decay,
            total_steps=t.epochs * steps_per_epoch,
        )
        compile_model(
            model,
            label_smoothing=t.label_smoothing,
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
        )
    logger.info(
        "Model: %d parameters; jit_compile=%s (per replica: %s).",
        model.count_params(),
        model.jit_compile,
        model.per_replica_jit_compile,
    )

    bleu = None
    if t.bleu_every and validation_pairs is not None:
        bleu = _bleu_callback(config, validation_pairs, tokenizers, paths, start, chief)
    history = fit_and_save(
        model,
        config,
        paths,
        strategy,
        train_data,
        validation_data,
        schedule=schedule,
        steps_per_epoch=steps_per_epoch,
        start=start,
        saved_model=model.to_transformer,
        bleu=bleu,
        extra_callbacks=extra_callbacks,
    )
    return TrainingResult(history=history, model=model, paths=paths)


def _bleu_callback(config, validation_pairs, tokenizers, paths, start, chief):
    """The run's `BleuCallback` over the validation pairs (the first `bleu_max_sentences`)."""
    t = config.training
    pairs = (
        validation_pairs.take(t.bleu_max_sentences) if t.bleu_max_sentences else validation_pairs
    )
    sources, references = [], []
    for source, reference in pairs.as_numpy_iterator():
        sources.append(source.decode("utf-8"))
        references.append(reference.decode("utf-8"))
    return BleuCallback(
        sources,
        references,
        *tokenizers,
        every=t.bleu_every,
        beam_size=t.bleu_beam_size,
        source_eos=config.data.source_eos,
        best_weights_path=os.path.join(paths.checkpoints, "best_bleu.weights.h5")
        if chief
        else None,
        log_path=paths.bleu_log if chief else None,
        start=start,
    )
