"""Checkpoint averaging: the mean of the weights saved at the end of the last N epochs.

Averaging the last few checkpoints of a run (Vaswani et al. 2017, section 6.1; OpenNMT-tf's
`average_checkpoints`) smooths out the noise of the last updates and usually gains a
little BLEU for free.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import keras
import numpy as np

logger = logging.getLogger(__name__)


def average_weights(model: keras.Model, paths: Sequence[str]) -> keras.Model:
    """Sets `model`'s weights to the mean of the weight files `paths` (`.weights.h5`).

    Floating-point variables are averaged; the others (random-seed states, counters) are
    taken from the last file. The model must be built with the architecture of the files.

    Args:
        model: the model to load into.
        paths: weight files saved by `model.save_weights`, oldest first.

    Returns:
        `model`, holding the averaged weights.

    Example (not run as a doctest: it needs a model and its checkpoints):

    ```python
    average_weights(model, epoch_weight_files("runs/x/checkpoints")[-5:])
    ```
    """
    if not paths:
        raise ValueError("Received no weight files to average, expected at least one path.")
    total: list[np.ndarray] | None = None
    for path in paths:
        model.load_weights(path)
        values = [np.asarray(v) for v in model.get_weights()]
        if total is None:
            total = [v.astype(np.float64) if _is_float(v) else v for v in values]
        else:
            total = [t + v if _is_float(v) else v for t, v in zip(total, values)]
    mean = [
        (t / len(paths)).astype(v.dtype) if _is_float(v) else v
        for t, v in zip(total, model.get_weights())
    ]
    model.set_weights(mean)
    logger.info("Averaged the weights of %d checkpoint(s).", len(paths))
    return model


def _is_float(value: np.ndarray) -> bool:
    return np.issubdtype(value.dtype, np.floating)
