"""`compile_model`: the paper's optimizer (Adam with the `TransformerSchedule`) and a task's
loss and metrics, with XLA resolved per strategy."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.training.distributed import DistributedTrainingMixin
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedSparseCategoricalAccuracy
from keras_transformer.training.schedules import TransformerSchedule
from keras_transformer.training.strategies import resolve_jit_compile


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
    rdrop_alpha: float = 0.0,
    rdrop_start_epoch: int = 0,
    rdrop_min_epochs: int | None = None,
    jit_compile: bool | str = "auto",
    steps_per_execution: int = 1,
    strategy: tf.distribute.Strategy | None = None,
    loss: keras.losses.Loss | None = None,
    metrics: list[keras.metrics.Metric] | None = None,
) -> keras.Model:
    """Compiles `model` the paper's way: Adam + `TransformerSchedule` + smoothed masked CE.

    Metrics: `accuracy` (`MaskedSparseCategoricalAccuracy`); the training models
    (`training.models`) add `learning_rate` to the training logs. Call it under the
    strategy's scope. Tasks pass their own `loss` and `metrics`
    (`keras_transformer.tasks.Task.loss_and_metrics`).

    Args:
        model: the model (a `training.models` model for distributed training).
        label_smoothing: the default loss' smoothing rate.
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
        rdrop_alpha: R-Drop's weight (`training.rdrop`: each batch trained twice, the two
            passes' predictions pulled together); 0: off. Needs a training model
            (`training.models`).
        rdrop_start_epoch: the first epoch of `fit` (counted from 0) with R-Drop; the
            epochs before it train without.
        rdrop_min_epochs: R-Drop starts only if at least this many of its epochs fit in the
            time budget left (`rdrop.RDropStart`); None: regardless.
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
    options = {}
    if isinstance(model, DistributedTrainingMixin):
        options["rdrop_alpha"] = rdrop_alpha
        options["rdrop_start_epoch"] = rdrop_start_epoch
        options["rdrop_min_epochs"] = rdrop_min_epochs
    elif rdrop_alpha:
        raise ValueError(
            "Received R-Drop for a model without R-Drop's training step, expected a "
            "training model (`keras_transformer.training.models`) or rdrop_alpha=0. "
            f"Received: rdrop_alpha={rdrop_alpha}, model={type(model).__name__}"
        )
    model.compile(
        optimizer=optimizer,
        loss=loss,
        metrics=metrics,
        jit_compile=resolve_jit_compile(jit_compile, strategy),
        steps_per_execution=steps_per_execution,
        **options,
    )
    return model
