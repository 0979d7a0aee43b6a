"""The learning-rate schedule of "Attention Is All You Need" (section 5.3), and its variants
that decay to zero over a known number of steps (for training within a budget)."""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from keras_transformer.constants import LR_DECAYS
from keras_transformer.validation import (
    check_decay_horizon,
    check_positive_float,
    check_positive_int,
)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup then decay: the paper's inverse square root (Vaswani et al. 2017, eq. 3),
    or a linear or cosine decay to zero at `total_steps`.

    The warmup and the peak are the paper's whatever the decay:
    `lr(step) = scale * d_model^-0.5 * step * warmup_steps^-1.5` up to the peak
    `scale * (d_model * warmup_steps)^-0.5` at step `warmup_steps`. After it:

    - `"inverse_sqrt"` (the paper): `scale * d_model^-0.5 * step^-0.5`;
    - `"linear"`: the peak times `(total_steps - step) / (total_steps - warmup_steps)`;
    - `"cosine"`: the peak times `(1 + cos(pi * progress)) / 2`, progress from 0 to 1;

    both of the latter reach 0 at `total_steps` and stay there. Their horizon is a variable:
    `set_horizon(steps)` moves the end of the decay during training (`budget.BudgetHorizon`
    ends it when a time budget runs out). The optimizer passes its
    `iterations` (0 before the first update) as `step`; the schedule uses `step + 1`, so the
    first update gets a small positive rate (the paper counts steps from 1).

    Args:
        d_model: the model size.
        warmup_steps: steps of linear warmup (4000 in the paper).
        scale: a factor applied to the whole schedule (1.0 in the paper).
        decay: `"inverse_sqrt"`, `"linear"` or `"cosine"`.
        total_steps: the step at which `"linear"` and `"cosine"` reach zero; more than
            `warmup_steps`. Not used by `"inverse_sqrt"`.

    Example:
    >>> schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    >>> optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    >>> round(float(schedule(3999)), 6)  # the peak
    0.000699
    >>> linear = TransformerSchedule(512, 4000, decay="linear", total_steps=10000)
    >>> round(float(linear(6999)), 6)  # half way down from the peak
    0.000349
    """

    def __init__(
        self,
        d_model: int,
        warmup_steps: int = 4000,
        scale: float = 1.0,
        decay: str = "inverse_sqrt",
        total_steps: int | None = None,
    ):
        self.d_model = check_positive_int("d_model", d_model)
        self.warmup_steps = check_positive_int("warmup_steps", warmup_steps)
        self.scale = check_positive_float("scale", scale)
        if decay not in LR_DECAYS:
            raise ValueError(
                f"Received an invalid value for argument `decay`, expected one of {LR_DECAYS}. "
                f"Received: decay={decay!r}"
            )
        self.decay = decay
        check_decay_horizon(decay, total_steps, warmup_steps)
        self.total_steps = total_steps
        self.horizon = None
        if decay != "inverse_sqrt":
            self.horizon = keras.Variable(
                float(total_steps), dtype="float32", trainable=False, name="lr_horizon"
            )

    def set_horizon(self, steps: float) -> None:
        """Moves the step at which the linear/cosine decay reaches zero (at least the end of
        the warmup plus one step)."""
        if self.horizon is None:
            raise ValueError(
                "Received `set_horizon` on an inverse square root schedule, which has no "
                "horizon; expected decay='linear' or 'cosine'."
            )
        self.horizon.assign(float(max(steps, self.warmup_steps + 1)))

    @property
    def peak(self) -> float:
        """The largest rate, reached at step `warmup_steps`."""
        return self.scale * (float(self.d_model) * float(self.warmup_steps)) ** -0.5

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        warmup = step * (self.scale * float(self.d_model) ** -0.5 * self.warmup_steps**-1.5)
        if self.decay == "inverse_sqrt":
            decayed = (self.scale * float(self.d_model) ** -0.5) * ops.rsqrt(step)
        else:
            span = ops.cast(self.horizon, "float32") - float(self.warmup_steps)  # >= 1
            progress = ops.clip((step - self.warmup_steps) / span, 0.0, 1.0)
            if self.decay == "linear":
                decayed = self.peak * (1.0 - progress)
            else:
                decayed = self.peak * 0.5 * (1.0 + ops.cos(math.pi * progress))
        return ops.minimum(warmup, decayed)

    def get_config(self) -> dict[str, Any]:
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
            "decay": self.decay,
            "total_steps": None if self.horizon is None else int(self.horizon.numpy()),
        }
