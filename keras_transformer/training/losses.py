"""The training loss: masked, label-smoothed sparse cross-entropy."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf
from keras import ops

from keras_transformer import compat
from keras_transformer.validation import check_non_negative_int, check_optional, check_rate

# `smoothed_cross_entropy_from_logits` is compiled once per shape of its logits. Training
# steps that project the real target positions only (their number varies from batch to
# batch) pad the rows to a multiple of this, the extra rows weighing 0: a few compilations
# a run instead of one for almost every batch, for at most 127 more rows of logits.
LOGIT_ROWS_MULTIPLE = 128


def masked_label_smoothed_cross_entropy(
    y_true,
    y_pred,
    label_smoothing: float = 0.1,
    pad_id: int | None = 0,
    from_logits: bool = True,
):
    """Per-token label-smoothed cross-entropy, zero at padding.

    The smoothed target puts `1 - label_smoothing + label_smoothing / V` on the true id and
    `label_smoothing / V` on every other id (Szegedy et al. 2016, as Keras' categorical
    losses do), so `loss = (1 - ls) * nll + ls * mean_k(-log p_k)`. Computed in float32.
    From logits it is `smoothed_cross_entropy_from_logits` (one XLA-compiled kernel, no
    (B, T, V) targets in the forward pass).

    Args:
        y_true: int ids (B, T) (or labels of any shape (...)); `pad_id` marks padding.
        y_pred: logits (or probabilities if `from_logits=False`) (B, T, V) (or (..., V)).
        label_smoothing: the smoothing rate, in [0, 1).
        pad_id: the padding id; None: every label is real (sequence classification).
        from_logits: whether `y_pred` holds logits.

    Returns:
        float32 (B, T): the loss of each position, 0 at padding.
    """
    y_true = ops.cast(y_true, "int32")
    y_pred = ops.cast(y_pred, "float32")
    mask = _real_labels(y_true, pad_id)
    if from_logits:
        return smoothed_cross_entropy_from_logits(y_true, y_pred, label_smoothing) * mask
    vocab_size = ops.shape(y_pred)[-1]
    targets = ops.one_hot(y_true, vocab_size, dtype="float32")  # (B, T, V)
    if label_smoothing:
        targets = targets * (1.0 - label_smoothing) + label_smoothing / vocab_size
    y_pred = ops.clip(y_pred, 1e-7, 1.0)
    return ops.categorical_crossentropy(targets, y_pred, from_logits=False) * mask


def smoothed_cross_entropy_from_logits(labels, logits, label_smoothing: float = 0.0):
    """Label-smoothed cross-entropy of each position, from float logits, in float32.

    `loss = logsumexp(z) - (1 - ls) * z[label] - ls * mean_k(z_k)`, which equals the
    cross-entropy against the smoothed one-hot targets of `masked_label_smoothed_cross_entropy`;
    its gradient is `softmax(z) - targets`. One XLA-compiled function (also inside a
    training step that is not compiled; inside one that XLA compiles, its plain body joins
    that step, `compat.in_xla_context`) with a custom gradient: the forward pass reads the
    logits twice and keeps `exp(z - max z)` for the backward pass, which writes the gradient
    in one fused loop; the (B, T, V) one-hot targets are never materialised forward.
    `benchmarks/loss.py` times it against Keras' fused softmax cross-entropy over one-hot
    targets (TensorFlow's `SoftmaxCrossEntropyWithLogits`, this package's loss until then).

    Labels must lie in `[0, V)`: under XLA an out-of-range label is clamped to the nearest
    valid id, not reported (`tf.one_hot` would have given it zero targets, also silently).

    Args:
        labels: int ids (...).
        logits: float logits (..., V), any float dtype (cast to float32).
        label_smoothing: the smoothing rate `ls`, in [0, 1).

    Returns:
        float32 (...): the loss of each position.
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    vocab_size = tf.shape(logits)[-1]
    # Inside a step that XLA compiles, the kernel's plain body joins that computation.
    kernel = _smoothed_cross_entropy if compat.in_xla_context() else _compiled_cross_entropy
    loss = kernel(
        tf.reshape(labels, [-1]),  # (N,)
        tf.reshape(logits, [-1, vocab_size]),  # (N, V)
        tf.constant(label_smoothing, tf.float32),
    )
    return tf.reshape(loss, tf.shape(labels))


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Label-smoothed cross-entropy averaged over real (non-pad) target tokens.

    Keras' `"sum_over_batch_size"` would divide by every position, padding included; this
    loss divides the summed token losses by the number of real tokens instead (times
    `sample_weight` when given), in float32 also under mixed precision.

    Under `tf.distribute` each replica computes the masked mean of its own slice of the
    global batch and divides it by the number of replicas (as Keras' own losses do), so the
    summed gradients are the mean over replicas of the per-replica token means: each
    replica weighs equally, not each token. It equals the global token mean exactly when
    the replicas see the same number of real tokens and differs only slightly otherwise
    (length-bucketed batches); it needs no extra all-reduce of token counts and runs inside
    a per-replica XLA step.

    With `reduction=None`/`"none"` the call returns the (B, T) per-token losses (0 at
    padding), unscaled. With `pad_id=None` no label is padding: labels (B,) of a sequence
    classifier, whose logits are (B, C), are averaged over the batch.

    Args:
        label_smoothing: smoothing rate in [0, 1) (0.1 in the paper).
        pad_id: the padding id of the targets, or None (every label is real).
        from_logits: whether predictions are logits (the `Transformer` returns logits).
        reduction: `"sum_over_batch_size"` (the masked mean above) or `None`/`"none"`.
        name: the loss name.

    Example:
    >>> loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    >>> y_true = keras.ops.array([[5, 3, 0]])
    >>> logits = keras.ops.zeros((1, 3, 10))
    >>> round(float(loss(y_true, logits)), 4)  # log(10): uniform predictions
    2.3026
    """

    def __init__(
        self,
        label_smoothing: float = 0.1,
        pad_id: int = 0,
        from_logits: bool = True,
        reduction: str | None = "sum_over_batch_size",
        name: str = "masked_sparse_categorical_crossentropy",
    ):
        if reduction not in ("sum_over_batch_size", "none", None):
            raise ValueError(
                "Received an invalid value for argument `reduction`, expected one of "
                "('sum_over_batch_size', 'none', None). Received: "
                f"reduction={reduction!r}"
            )
        super().__init__(name=name, reduction=reduction, dtype="float32")
        self.label_smoothing = check_rate("label_smoothing", label_smoothing)
        self.pad_id = check_optional(check_non_negative_int, "pad_id", pad_id)
        self.from_logits = bool(from_logits)

    def call(self, y_true, y_pred):
        return masked_label_smoothed_cross_entropy(
            y_true, y_pred, self.label_smoothing, self.pad_id, self.from_logits
        )

    def __call__(self, y_true, y_pred, sample_weight=None):
        with keras.name_scope(self.name):
            losses = self.call(y_true, y_pred)
            weights = _real_labels(ops.cast(y_true, "int32"), self.pad_id)
            if sample_weight is not None:
                sample_weight = ops.cast(sample_weight, "float32")
                while len(sample_weight.shape) < len(weights.shape):
                    sample_weight = ops.expand_dims(sample_weight, -1)
                weights = weights * sample_weight
                losses = losses * sample_weight
            if self.reduction in (None, "none"):
                return losses
            loss = ops.divide_no_nan(ops.sum(losses), ops.sum(weights))
            return scale_for_replicas(loss)

    def get_config(self) -> dict[str, Any]:
        return {
            "label_smoothing": self.label_smoothing,
            "pad_id": self.pad_id,
            "from_logits": self.from_logits,
            "reduction": self.reduction,
            "name": self.name,
        }


def _real_labels(y_true, pad_id: int | None):
    """float32 weights of `y_true`'s shape: 0 at `pad_id`, 1 elsewhere (all 1 for None)."""
    if pad_id is None:
        return ops.ones_like(y_true, dtype="float32")
    return ops.cast(ops.not_equal(y_true, pad_id), "float32")


def scale_for_replicas(loss):
    """Divides by the replicas in sync, as Keras' built-in losses do under `tf.distribute`."""
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    return loss / float(replicas) if replicas > 1 else loss


def _smoothed_cross_entropy_kernel(labels, logits, label_smoothing):
    """(N,) int32 labels, (N, V) float32 logits, () float32 rate -> (N,) float32 losses."""
    vocab_size = tf.shape(logits)[-1]
    top = tf.reduce_max(logits, axis=-1, keepdims=True)  # (N, 1)
    exp = tf.exp(logits - top)  # (N, V)
    total = tf.reduce_sum(exp, axis=-1, keepdims=True)  # (N, 1)
    log_normaliser = top + tf.math.log(total)  # (N, 1)
    true_logit = tf.gather(logits, labels[:, None], batch_dims=1)  # (N, 1)
    mean_logit = tf.reduce_mean(logits, axis=-1, keepdims=True)  # (N, 1)
    loss = log_normaliser - (1.0 - label_smoothing) * true_logit - label_smoothing * mean_logit

    def gradient(upstream):  # (N,)
        targets = tf.one_hot(labels, vocab_size) * (1.0 - label_smoothing)  # (N, V)
        targets += label_smoothing / tf.cast(vocab_size, tf.float32)
        return None, upstream[:, None] * (exp / total - targets), None

    return loss[:, 0], gradient


_smoothed_cross_entropy = tf.custom_gradient(_smoothed_cross_entropy_kernel)
_compiled_cross_entropy = tf.function(_smoothed_cross_entropy, jit_compile=True)
