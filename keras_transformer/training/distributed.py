"""Keras 3 / `tf.distribute` fixes for `fit`, scoped to the models that use them.

The private Keras hooks it needs go through `keras_transformer.compat`. Nothing here
patches Keras: `DistributedTrainingMixin` overrides methods of our own model class
(`keras_transformer.training.TrainingTransformer`), so other Keras models are untouched.

Problems solved (Keras 3.15, TensorFlow 2.21):

1. `fit` under `MultiWorkerMirroredStrategy` fails in the symbolic build
   (keras-team/keras#20585): `_maybe_symbolic_build` reduces the first distributed batch
   with `strategy.reduce("MEAN", batch, axis=None)`, which under MWMS raises
   `ValueError: Attempt to convert a value (PerReplica:{...}) with an unsupported type
   (<class '...PerReplica'>) to a Tensor.` (it would also average int ids). Only the
   batch's shapes and dtypes matter there, so the mixin builds from the first local
   replica's batch.
2. Then every step fails in `reduce_per_replica` (keras-team/keras#20329): under MWMS it
   calls `strategy.reduce("MEAN", v, axis=0)` on the scalar logs, giving `ValueError:
   Invalid reduction dimension 0 for input with 0 dimensions`. The mixin's `train_step` /
   `test_step` return their scalars as shape-(1,) tensors under MWMS only, so that
   reduction is the plain mean across replicas and yields a scalar again.
3. `jit_compile=True` under `MirroredStrategy` fails because Keras compiles the function
   that calls `strategy.run` over all devices with XLA: `Trying to access resource
   .../replica_1/... located in device .../device:CPU:1 from device .../device:CPU:0`.
   With `compile(jit_compile=True)` under a (non-default) strategy, the mixin compiles
   Keras' outer step function without XLA and instead XLA-compiles, per replica, the
   forward pass, loss and gradients (one device each); the cross-replica gradient
   all-reduce and the optimizer update run outside XLA.

The mixin also reports the optimizer's current learning rate as `learning_rate` in the
training logs (so the progress bar and History show it), and skips padding when it can
(`real_label_positions`): a quarter of the positions of the recipe's length-bucketed
batches are padding, which the loss masks out. The model then computes the logits of the
real target positions only (the projection onto the vocabulary and the loss over it were
24% of a training step's op time on CPU) and, with `skip_padding`, the position-wise parts
of its layers on the real positions only (`keras_transformer.packing`). Without a strategy
it builds the optimizer's and metrics' state before `fit`'s first step, as Keras does under
one: built in that step's first trace instead, they make TensorFlow trace it twice.

Compiled with `rdrop_alpha > 0`, its training steps (each of the paths above) run each batch
twice, the loss adding R-Drop's consistency term (`keras_transformer.training.rdrop`); with
`rdrop_start_epoch`, `fit` trains its first epochs without it (`rdrop.RDropStart`).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from typing import NamedTuple

import keras
import tensorflow as tf

from keras_transformer import compat
from keras_transformer.compat import in_multi_worker_mode
from keras_transformer.training import rdrop
from keras_transformer.training.budget import TimeBudget
from keras_transformer.training.losses import (
    LOGIT_ROWS_MULTIPLE,
    MaskedSparseCategoricalCrossentropy,
    scale_for_replicas,
)
from keras_transformer.validation import check_rdrop

logger = logging.getLogger(__name__)


def is_distributed(strategy: tf.distribute.Strategy | None) -> bool:
    """Whether `strategy` is a strategy made by the user, not TensorFlow's default one."""
    return strategy is not None and not compat.is_default_strategy(strategy)


class DistributedTrainingMixin:
    """Makes a `keras.Model`'s `fit`/`evaluate` work under MWMS and XLA + MirroredStrategy.

    Put it before `keras.Model` (or a subclass) in the bases. See the module docstring for
    the problems it solves.

    Example:

    ```python
    class MyModel(DistributedTrainingMixin, keras.Model):
        ...
    ```
    """

    _per_replica_jit_compile = False
    _rdrop_alpha = 0.0
    _rdrop_start_epoch = 0
    _rdrop_min_epochs: int | None = None
    _rdrop_on = True  # False in the epochs of `fit` before `rdrop_start_epoch`
    # `rdrop.RDropStart`'s answer with `rdrop_min_epochs` (None: not checked in this run).
    rdrop_decision: bool | None = None
    _passes = 1  # 2 while a training step runs on a batch doubled for R-Drop

    def compile(
        self,
        *args,
        jit_compile="auto",
        rdrop_alpha: float = 0.0,
        rdrop_start_epoch: int = 0,
        rdrop_min_epochs: int | None = None,
        **kwargs,
    ):
        """Keras' `compile`, and R-Drop (`keras_transformer.training.rdrop`):
        `rdrop_alpha` its weight (0: off), `rdrop_start_epoch` the first epoch of `fit`
        (counted from 0) that applies it (0: every epoch), `rdrop_min_epochs` the epochs of
        it that must fit in the run for it to start (`rdrop.RDropStart`; None: it starts
        regardless)."""
        self._rdrop_alpha, self._rdrop_start_epoch, self._rdrop_min_epochs = check_rdrop(
            rdrop_alpha, rdrop_start_epoch, rdrop_min_epochs
        )
        self._rdrop_on = True
        self.rdrop_decision = None
        strategy = (
            tf.distribute.get_strategy()
            if tf.distribute.has_strategy()
            else compat.model_strategy(self)
        )
        per_replica = jit_compile is True and is_distributed(strategy)
        super().compile(*args, jit_compile=False if per_replica else jit_compile, **kwargs)
        self._per_replica_jit_compile = per_replica

    @property
    def per_replica_jit_compile(self) -> bool:
        """Whether the per-replica training/evaluation steps are XLA-compiled."""
        return self._per_replica_jit_compile

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = compat.model_strategy(self)
        if strategy is None:
            # Keras builds nothing here without a strategy: the first trace of the step
            # function then creates the optimizer's (and metrics') variables, and TensorFlow
            # traces that function a second time, without creating them (a function that
            # created variables is not reused). Built here from the data's shapes and dtypes
            # (no iterator is made, no batch drawn), `fit` traces its step once.
            if iterator is not None:
                data_batch = iterator.data_adapter.get_tf_dataset().element_spec
            if data_batch is not None:
                compat.symbolic_build(self, data_batch)
            return
        if iterator is not None:
            for _, _, it in iterator:
                batch = next(it)
                data_batch = tf.nest.map_structure(
                    lambda v: (
                        strategy.experimental_local_results(v)[0]
                        if isinstance(v, tf.distribute.DistributedValues)
                        else v
                    ),
                    batch,
                )
                break
        with strategy.scope():
            compat.symbolic_build(self, data_batch)

    def real_label_positions(self, y):
        """The flat indices (N,) of the labels the loss counts, or None: every position.

        Training and evaluation then compute the logits of those positions only
        (`logit_positions`, (N, V) instead of (B, T, V); with `skip_padding=True` too when
        the model's `call` takes it), and the loss and metrics receive them with their
        labels (N,), flattened: the loss, a mean over the real labels,
        and the masked metrics are the same. It applies when the compiled loss is a
        `MaskedSparseCategoricalCrossentropy` with a `pad_id`, the model's `call` takes
        `logit_positions`, and the step is not XLA-compiled (the number of real labels
        varies from batch to batch, and XLA needs static shapes). The steps pad N to a
        multiple of `LOGIT_ROWS_MULTIPLE` (rows of label `pad_id` and sample weight 0, which
        neither the loss nor a metric counts): the loss is compiled once per number of rows.
        A metric that needs the (B, T) layout should be given to a model compiled with
        another loss.
        """
        loss = self.loss
        if not isinstance(loss, MaskedSparseCategoricalCrossentropy) or loss.pad_id is None:
            return None
        if self.jit_compile or self._per_replica_jit_compile:
            return None
        if "logit_positions" not in inspect.signature(self.call).parameters:
            return None
        labels = tf.reshape(y, [-1])  # (B * T,)
        return tf.cast(tf.where(tf.not_equal(labels, loss.pad_id))[:, 0], tf.int32)  # (N,)

    @property
    def rdrop_alpha(self) -> float:
        """R-Drop's weight (`training.rdrop`), 0 when off."""
        return self._rdrop_alpha

    @property
    def rdrop_start_epoch(self) -> int:
        """The first epoch of `fit` (counted from 0) that applies R-Drop."""
        return self._rdrop_start_epoch

    @property
    def rdrop_min_epochs(self) -> int | None:
        """The R-Drop epochs that must fit in the run for it to start (None: it starts
        regardless; `rdrop.RDropStart`)."""
        return self._rdrop_min_epochs

    @property
    def rdrop_on(self) -> bool:
        """Whether a training step now applies R-Drop (`rdrop_alpha > 0`, and in `fit`
        from `rdrop_start_epoch` on)."""
        return bool(self._rdrop_alpha) and self._rdrop_on

    def set_rdrop_on(self, on: bool) -> None:
        """Turns R-Drop's doubled batch on or off for the next training steps (a new train
        function, traced at its first call, when that changes what a step does). It is
        `rdrop.RDropStart`'s switch; `compile` turns it on."""
        if bool(on) != self._rdrop_on:
            self._rdrop_on = bool(on)
            if self.train_function is not None:
                self.make_train_function(force=True)

    def fit(self, *args, **kwargs):
        """Keras' `fit`; compiled with `rdrop_start_epoch`, its epochs before that one train
        without R-Drop (`rdrop.RDropStart`, appended to the callbacks; with
        `rdrop_min_epochs`, it reads the time budget left from the `budget.TimeBudget`
        among them, if any)."""
        if self.rdrop_alpha and self._rdrop_start_epoch:
            bound = inspect.signature(super().fit).bind(*args, **kwargs)
            callbacks = bound.arguments.get("callbacks") or []
            is_list = isinstance(callbacks, keras.callbacks.CallbackList)
            given = callbacks.callbacks if is_list else keras.tree.flatten(callbacks)
            budget = next((c for c in given if isinstance(c, TimeBudget)), None)
            multi_worker = in_multi_worker_mode(self.distribute_strategy)
            if budget is not None and self._rdrop_min_epochs and multi_worker:
                # Each worker would time its own epochs and could decide otherwise than
                # the others: they agree on the epochs left.
                logger.info(
                    "R-Drop's check counts the epochs left only under multi-worker training "
                    "(each worker would time its own epochs)."
                )
                budget = None
            start = rdrop.RDropStart(
                self._rdrop_start_epoch,
                min_epochs=self._rdrop_min_epochs,
                epochs=bound.arguments.get("epochs", 1),
                budget=budget,
            )
            if is_list:  # used as given by fit
                start.set_model(self)
                others = [c for c in given if not isinstance(c, rdrop.RDropStart)]
                callbacks.callbacks = [*others, start]
            else:
                callbacks = [*callbacks, start]
            bound.arguments["callbacks"] = callbacks
            return super().fit(*bound.args, **bound.kwargs)
        return super().fit(*args, **kwargs)

    def train_step(self, data):
        passes = 2 if self.rdrop_on else 1
        with self._passes_scope(passes):
            if passes == 2:
                data = rdrop.twice(data)
            if self._per_replica_jit_compile:
                logs = self._xla_train_step(data)
            else:
                logs = self._real_positions_train_step(data)
        logs = dict(logs)
        if self.optimizer is not None:
            logs["learning_rate"] = tf.cast(self.optimizer.learning_rate, "float32")
        return self._logs_for_reduction(logs)

    def test_step(self, data):
        if self._per_replica_jit_compile:
            logs = self._xla_test_step(data)
        else:
            logs = self._real_positions_test_step(data)
        return self._logs_for_reduction(logs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Keras' loss, plus R-Drop's term in a training step on a doubled batch."""
        loss = super().compute_loss(x, y, y_pred, sample_weight, training=training)
        if training and self._passes == 2:
            pad_id = getattr(self.loss, "pad_id", None)
            consistency = rdrop.consistency_loss(y, y_pred, sample_weight, pad_id)
            loss = loss + scale_for_replicas(self._rdrop_alpha / 2.0 * consistency)
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        """Keras' metrics, of the first pass only in a step on a batch doubled for R-Drop."""
        if self._passes == 2:
            y, y_pred, sample_weight = rdrop.first_pass(y, y_pred, sample_weight)
        return super().compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    @contextlib.contextmanager
    def _passes_scope(self, passes: int):
        """Marks the step being traced as one on a batch of `passes` copies."""
        outer, self._passes = self._passes, passes
        try:
            yield
        finally:
            self._passes = outer

    def _real_positions_batch(self, data) -> _RealPositions | None:
        """A batch with its padding left out (`real_label_positions`), or None where it
        cannot be. On a batch doubled for R-Drop, the second pass's rows repeat the first
        pass's (N' each), so that the two passes are the halves of the rows."""
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        y_one, weight_one = (
            rdrop.first_pass(y, sample_weight) if self._passes == 2 else (y, sample_weight)
        )
        positions = self.real_label_positions(y_one)
        if positions is None:
            return None
        real = tf.shape(positions)[0]  # N (of one pass)
        positions, labels, weights = _take_positions(
            y_one, weight_one, positions, self.loss.pad_id
        )  # (N',) each
        if self._passes == 2:
            offset = tf.size(y_one, out_type=positions.dtype)  # the second copy's flat start
            positions = tf.concat([positions, positions + offset], 0)  # (2N',)
            labels = tf.concat([labels, labels], 0)
            weights = tf.concat([weights, weights], 0)
        arguments = {"logit_positions": positions}
        if "skip_padding" in inspect.signature(self.call).parameters:
            arguments["skip_padding"] = True
        return _RealPositions(x, labels, weights, arguments, real, sample_weight is not None)

    def _real_positions_metrics(self, batch: _RealPositions, y_pred):
        """Keras' `compute_metrics` on the real rows only (the first N of the N'; the first
        pass's under R-Drop)."""
        weights = batch.sample_weight[: batch.real] if batch.weighted else None
        with self._passes_scope(1):
            return self.compute_metrics(
                batch.x, batch.y[: batch.real], y_pred[: batch.real], sample_weight=weights
            )

    def _real_positions_train_step(self, data):
        """Keras' `train_step`, on the real label positions where it can be."""
        batch = self._real_positions_batch(data)
        if batch is None:
            return super().train_step(data)
        x, y, sample_weight = batch.x, batch.y, batch.sample_weight
        trainable_weights = list(self.trainable_weights)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True, **batch.arguments)  # (N', V)
            loss = compat.compute_loss(self, x, y, y_pred, sample_weight, training=True)
            compat.track_loss(self, loss, self._batch_size(x))
            scaled_loss = self.optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled_loss, trainable_weights)
        self.optimizer.apply_gradients(zip(gradients, trainable_weights))
        return self._real_positions_metrics(batch, y_pred)

    def _real_positions_test_step(self, data):
        """Keras' `test_step`, on the real label positions where it can be."""
        batch = self._real_positions_batch(data)
        if batch is None:
            return super().test_step(data)
        x, y, sample_weight = batch.x, batch.y, batch.sample_weight
        y_pred = self(x, training=False, **batch.arguments)  # (N', V)
        loss = compat.compute_loss(self, x, y, y_pred, sample_weight, training=False)
        compat.track_loss(self, loss, self._batch_size(x))
        return self._real_positions_metrics(batch, y_pred)

    def _logs_for_reduction(self, logs):
        if not in_multi_worker_mode(self.distribute_strategy):
            return logs
        return tf.nest.map_structure(lambda v: tf.reshape(v, [1]) if v.shape.rank == 0 else v, logs)

    def _batch_size(self, x):
        return tf.shape(next(i for i in tf.nest.flatten(x) if i is not None))[0]

    def _xla_train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        trainable_weights = list(self.trainable_weights)

        def forward_backward(x, y, sample_weight):
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = compat.compute_loss(self, x, y, y_pred, sample_weight, training=True)
                scaled_loss = self.optimizer.scale_loss(loss)
            return y_pred, loss, tape.gradient(scaled_loss, trainable_weights)

        step = tf.function(forward_backward, jit_compile=True, autograph=False)
        y_pred, loss, gradients = step(x, y, sample_weight)
        compat.track_loss(self, loss, self._batch_size(x))
        self.optimizer.apply_gradients(zip(gradients, trainable_weights))
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def _xla_test_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)

        def forward(x, y, sample_weight):
            y_pred = self(x, training=False)
            return y_pred, compat.compute_loss(self, x, y, y_pred, sample_weight, training=False)

        step = tf.function(forward, jit_compile=True, autograph=False)
        y_pred, loss = step(x, y, sample_weight)
        compat.track_loss(self, loss, self._batch_size(x))
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)


class _RealPositions(NamedTuple):
    """A batch on its real label positions: the model's inputs, the labels and sample
    weights (N',) of the loss (N real rows, then rows of weight 0 up to a multiple of
    `LOGIT_ROWS_MULTIPLE`), the model's call arguments, N, and whether the batch came
    with sample weights (the metrics get them, on the N real rows, only then)."""

    x: object
    y: tf.Tensor
    sample_weight: tf.Tensor
    arguments: dict
    real: tf.Tensor
    weighted: bool


def _take_positions(y, sample_weight, positions, pad_id: int):
    """`(positions, labels, sample weights)`, each (N',): the labels at the flat `positions`
    (N,) and their sample weights (per example (B,) or per label (B, T), else 1), with
    N' - N extra rows (position 0, label `pad_id`, weight 0) that make N' a multiple of
    `LOGIT_ROWS_MULTIPLE`."""
    count = tf.shape(positions)[0]
    extra = (-count) % LOGIT_ROWS_MULTIPLE
    taken = tf.gather(tf.reshape(y, [-1]), positions)  # (N,)
    if sample_weight is None:
        weights = tf.ones([count], tf.float32)
    else:
        sample_weight = tf.convert_to_tensor(sample_weight)
        while sample_weight.shape.rank < y.shape.rank:
            sample_weight = sample_weight[..., None]  # (B,) -> (B, 1)
        per_label = tf.broadcast_to(sample_weight, tf.shape(y))  # (B, T)
        weights = tf.gather(tf.reshape(per_label, [-1]), positions)  # (N,)
    return (
        tf.concat([positions, tf.zeros([extra], positions.dtype)], 0),
        tf.concat([taken, tf.fill([extra], tf.cast(pad_id, taken.dtype))], 0),
        tf.concat([weights, tf.zeros([extra], weights.dtype)], 0),
    )
