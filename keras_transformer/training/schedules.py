"""The learning-rate schedule of "Attention Is All You Need" (section 5.3)."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_transformer.validation import check_positive_float, check_positive_int


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup then inverse square-root decay (Vaswani et al. 2017, eq. 3).

    `lr(step) = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`

    The optimizer passes its `iterations` (0 before the first update) as `step`; the
    schedule uses `step + 1`, so the first update gets a small positive rate (the paper
    counts steps from 1). The peak, `scale * (d_model * warmup_steps)^-0.5`, is reached at
    step `warmup_steps`.

    Args:
        d_model: the model size.
        warmup_steps: steps of linear warmup (4000 in the paper).
        scale: a factor applied to the whole schedule (1.0 in the paper).

    Example:
    >>> schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    >>> optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    >>> round(float(schedule(3999)), 6)  # the peak
    0.000699
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        self.d_model = check_positive_int("d_model", d_model)
        self.warmup_steps = check_positive_int("warmup_steps", warmup_steps)
        self.scale = check_positive_float("scale", scale)

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        decay = ops.rsqrt(step)
        warmup = step * (float(self.warmup_steps) ** -1.5)
        return (self.scale * float(self.d_model) ** -0.5) * ops.minimum(decay, warmup)

    def get_config(self) -> dict[str, Any]:
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}
