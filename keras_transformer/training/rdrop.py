"""R-Drop (Liang et al. 2021, "R-Drop: Regularized Dropout for Neural Networks"): every
training batch goes through the model twice, each pass with its own dropout masks, and the
loss adds the symmetric KL divergence between the two passes' predictions.

With `alpha` the weight, the loss of a step is

    mean over both passes' 2N predictions of the task loss
    + alpha / 2 * mean over the N labels of (KL(p || q) + KL(q || p)) / 2,

p and q the two passes' softmax distributions at a label. That is fairseq's criterion
(`label_smoothed_cross_entropy` with `rdrop_alpha`: both passes' token losses summed, the
KL term added at `alpha`, all divided by the N tokens of one pass) halved, so `alpha`
means what it means there and in the paper (5 for IWSLT'14 German->English). Validation
computes the task loss alone, on one pass.

The training models (`training.distributed.DistributedTrainingMixin`) apply it when
compiled with `rdrop_alpha > 0`: `twice` doubles the batch along its first axis (the second
copy's dropout masks differ from the first's), `consistency_loss` reads the first and
second halves of the predictions, and the metrics see the first pass only (`first_pass`).
Compiled with `rdrop_start_epoch` too, `fit` trains its first epochs without it
(`RDropStart`), each of their steps at half the cost: in the recipe's first R-Drop run its
validation BLEU matched the plain recipe's epoch for epoch over the first eight epochs.
"""

from __future__ import annotations

import logging
import time

import keras
import tensorflow as tf

from keras_transformer import compat

logger = logging.getLogger(__name__)

# A step with R-Drop runs its batch through the model twice: about twice a plain step's time
# (measured 1.57x in bf16 on an AMD EPYC with AVX512_BF16, 2.05x on an Intel Xeon with AMX).
RDROP_STEP_COST = 2.0


def twice(data):
    """The batch `(x, y[, sample_weight])` concatenated with itself along its first axis:
    every tensor (B, ...) -> (2B, ...), the first pass's rows then the second's."""
    return tf.nest.map_structure(lambda t: None if t is None else tf.concat([t, t], axis=0), data)


def first_pass(*tensors):
    """The first half (along the first axis) of each tensor (None stays None)."""
    return tuple(None if t is None else t[: tf.shape(t)[0] // 2] for t in tensors)


def consistency_loss(y, y_pred, sample_weight=None, pad_id: int | None = None):
    """The mean symmetric KL divergence between the two passes' predictions.

    Args:
        y: the labels of both passes (2M, ...) (the second half repeats the first).
        y_pred: logits (2M, ..., V): rows [:M] the first pass's, [M:] the second's.
        sample_weight: None, or weights (2M,) or (2M, ...) of the labels.
        pad_id: labels equal to it do not count (None: every label counts).

    Returns:
        float32 scalar: `(KL(p || q) + KL(q || p)) / 2` averaged over the first pass's
        counted labels (weighted by `sample_weight`), 0 when none counts.
    """
    (labels, weights) = first_pass(y, sample_weight)
    # Inside a step that XLA compiles, the kernel's plain body joins that computation.
    kl = _symmetric_kl(y_pred, compiled=not compat.in_xla_context())  # (M, ...)
    counted = tf.ones_like(kl)
    if pad_id is not None:
        counted = tf.cast(tf.not_equal(labels, pad_id), tf.float32)
    if weights is not None:
        weights = tf.cast(weights, tf.float32)
        while weights.shape.rank < counted.shape.rank:
            weights = weights[..., None]  # (M,) -> (M, 1)
        counted = counted * weights
    return tf.math.divide_no_nan(tf.reduce_sum(kl * counted), tf.reduce_sum(counted))


def _symmetric_kl_kernel(logits):
    """(2N, V) logits of two passes, rows [:N] and [N:] -> (N,) float32
    `(KL(p || q) + KL(q || p)) / 2` = `sum_v (p_v - q_v) (log p_v - log q_v) / 2`, p the
    first pass's softmax and q the second's, with its gradient written by hand.

    With `d = log p - log q`, `KL(p || q) = sum_v p_v d_v` and `KL(q || p) = -sum_v q_v d_v`;
    the gradient is `(p * (d - KL(p || q) + 1) - q) / 2` for the first pass's logits and
    `(q * (-d - KL(q || p) + 1) - p) / 2` for the second's. The forward pass keeps only the
    (N, 1) normalisers and KLs; the backward pass recomputes p, q and d from the logits and
    writes both passes' gradient as one (2N, V) tensor in the logits' dtype (autodiff through
    log-softmax, with the halves sliced and cast outside the kernel, kept (N, V) float32
    tensors for the backward pass and took 2.3x this kernel's time over bfloat16 logits of the
    recipe's size, 2.0x over float32 ones: `benchmarks/rdrop_kl.py`, README, Benchmarks)."""
    half = tf.shape(logits)[0] // 2
    first = tf.cast(logits[:half], tf.float32)  # (N, V)
    second = tf.cast(logits[half:], tf.float32)  # (N, V)
    log_normaliser_p = tf.reduce_logsumexp(first, axis=-1, keepdims=True)  # (N, 1)
    log_normaliser_q = tf.reduce_logsumexp(second, axis=-1, keepdims=True)  # (N, 1)

    def probabilities():
        log_p = first - log_normaliser_p  # (N, V)
        log_q = second - log_normaliser_q  # (N, V)
        return tf.exp(log_p), tf.exp(log_q), log_p - log_q

    p, q, d = probabilities()
    kl_pq = tf.reduce_sum(p * d, axis=-1, keepdims=True)  # (N, 1)
    kl_qp = -tf.reduce_sum(q * d, axis=-1, keepdims=True)  # (N, 1)

    def gradient(upstream):  # (N,)
        p, q, d = probabilities()
        scale = 0.5 * upstream[:, None]  # (N, 1)
        grad_first = scale * (p * (d - kl_pq + 1.0) - q)  # (N, V)
        grad_second = scale * (q * (-d - kl_qp + 1.0) - p)  # (N, V)
        return tf.cast(tf.concat([grad_first, grad_second], axis=0), logits.dtype)  # (2N, V)

    return 0.5 * (kl_pq + kl_qp)[:, 0], gradient


_symmetric_kl_of_passes = tf.custom_gradient(_symmetric_kl_kernel)
# Compiled once per shape, like the loss kernel (the training steps pad their rows of logits
# to a multiple of `losses.LOGIT_ROWS_MULTIPLE`, each pass's alike).
_compiled_symmetric_kl_of_passes = tf.function(_symmetric_kl_of_passes, jit_compile=True)


def _symmetric_kl(y_pred, compiled: bool = False):
    """(2M, ..., V) logits of two passes -> (M, ...) float32 `(KL(p || q) + KL(q || p)) / 2`
    between the first half's and the second half's predictions; `compiled`: in its own XLA
    function (outside a step that XLA compiles)."""
    kernel = _compiled_symmetric_kl_of_passes if compiled else _symmetric_kl_of_passes
    shape = tf.shape(y_pred)  # (2M, ..., V)
    kl = kernel(tf.reshape(y_pred, [-1, shape[-1]]))  # (N,)
    return tf.reshape(kl, tf.concat([[shape[0] // 2], shape[1:-1]], axis=0))  # (M, ...)


class RDropStart(keras.callbacks.Callback):
    """Applies R-Drop from epoch `start_epoch` of `fit` on (counted from 0, as `fit` and
    `initial_epoch` count), plain steps before it; after `fit` the model applies it again,
    as compiled. The training models' `fit` appends it when compiled with
    `rdrop_start_epoch > 0`; a resumed run (`initial_epoch`) is in the right mode from its
    first step.

    With `min_epochs`, R-Drop starts only if at least that many of its epochs fit in the
    run: in the `epochs` left and, with a `budget`, in the time it has left. An R-Drop epoch
    is estimated from this `fit`'s plain epochs: `RDROP_STEP_COST` times their training
    time a step (the first epoch left out when there are more: it traces the step) times
    the steps of an epoch, plus their mean time outside training (validation, BLEU,
    saving), which R-Drop does not double. Where they do not fit, the run trains plain to
    its end: a time budget too short for R-Drop to pay for its doubled steps buys more plain
    ones instead. The check runs once, at the first epoch from `start_epoch` on that follows
    a plain epoch of this `fit`, and is logged; its answer is kept on the model
    (`rdrop_decision`), which the run's backups save, so that a resumed run keeps it (a run
    resumed past `start_epoch` without one trains its first epoch plain to time it).

    Args:
        start_epoch: the first epoch with R-Drop.
        min_epochs: the R-Drop epochs that must fit for it to start (None: it starts
            regardless).
        epochs: `fit`'s `epochs` (the last epoch is `epochs - 1`).
        budget: the run's time budget (`budget.TimeBudget`, or any object with a
            `remaining_seconds()` method); None: only `epochs` counts.

    Example:

    ```python
    model.compile(optimizer="adam", loss=loss, rdrop_alpha=5.0, rdrop_start_epoch=6)
    model.fit(batches, epochs=30)  # epochs 0-5 plain, 6-29 with R-Drop
    ```
    """

    def __init__(
        self,
        start_epoch: int,
        min_epochs: int | None = None,
        epochs: int | None = None,
        budget=None,
    ):
        super().__init__()
        self.start_epoch = start_epoch
        self.min_epochs = min_epochs
        self.epochs = epochs
        self.budget = budget
        self._plain: list[_PlainEpoch] = []  # this fit's plain epochs, timed

    def on_train_begin(self, logs=None):
        self._plain = []

    def on_epoch_begin(self, epoch, logs=None):
        now = time.monotonic()
        if self._plain:
            self._plain[-1].end = now
        on = epoch >= self.start_epoch
        if self.min_epochs is not None:
            if not on:  # before the start: no decision belongs to this run yet
                self.model.rdrop_decision = None
            else:
                if self.model.rdrop_decision is None:
                    self.model.rdrop_decision = self._fits(epoch)
                on = bool(self.model.rdrop_decision)
        if not on:
            self._plain.append(_PlainEpoch(begin=now))
        self.model.set_rdrop_on(on)

    def on_train_batch_end(self, batch, logs=None):
        if self._plain and self._plain[-1].end is None:
            self._plain[-1].steps = batch + 1

    def on_test_begin(self, logs=None):
        if self._plain and self._plain[-1].end is None and self._plain[-1].trained is None:
            self._plain[-1].trained = time.monotonic()

    def on_train_end(self, logs=None):
        self.model.set_rdrop_on(True)

    def _fits(self, epoch: int) -> bool | None:
        """Whether `min_epochs` R-Drop epochs fit from `epoch` on; None: no plain epoch of
        this `fit` timed yet."""
        epochs_left = (self.epochs - epoch) if self.epochs is not None else None
        if self.budget is None:
            fit = epochs_left is None or epochs_left >= self.min_epochs
            logger.info(
                "R-Drop from epoch %d: %s epochs left, at least %d asked: %s.",
                epoch + 1,
                epochs_left,
                self.min_epochs,
                "R-Drop on" if fit else "the run trains without it to its end",
            )
            return fit
        timed = [e for e in self._plain if e.end is not None and e.steps]
        if not timed:
            return None
        timed = timed[1:] or timed
        seconds_per_step = sum(e.training for e in timed) / sum(e.steps for e in timed)
        steps = (self.params or {}).get("steps") or max(e.steps for e in timed)
        rest = sum(e.rest for e in timed) / len(timed)
        plain = seconds_per_step * steps + rest
        doubled = RDROP_STEP_COST * seconds_per_step * steps + rest
        remaining = self.budget.remaining_seconds()
        affordable = max(0, int(remaining / doubled))
        if epochs_left is not None:
            affordable = min(affordable, epochs_left)
        fit = affordable >= self.min_epochs
        logger.info(
            "R-Drop from epoch %d: the %.1f minutes left hold %d epochs of it (%.2f minutes "
            "each: a plain epoch's %.2f, its %d steps at %.1fx), at least %d asked: %s.",
            epoch + 1,
            max(remaining, 0.0) / 60.0,
            affordable,
            doubled / 60.0,
            plain / 60.0,
            steps,
            RDROP_STEP_COST,
            self.min_epochs,
            "R-Drop on" if fit else "the run trains without it to its end",
        )
        return fit


class _PlainEpoch:
    """The times of one plain epoch of `fit`: its begin, the end of its training steps
    (validation's begin) and its end (the next epoch's begin), and its steps."""

    def __init__(self, begin: float):
        self.begin = begin
        self.trained: float | None = None
        self.end: float | None = None
        self.steps = 0

    @property
    def training(self) -> float:
        return (self.trained or self.end) - self.begin

    @property
    def rest(self) -> float:
        return self.end - (self.trained or self.end)
