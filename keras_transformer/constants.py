"""Fixed ids and the names that configs and arguments accept, stated once.

Every module that needs one of these imports it from here.
"""

from __future__ import annotations

# Learning-rate decays after the warmup (`training.schedules.TransformerSchedule`).
LR_DECAYS = ("inverse_sqrt", "linear", "cosine")
