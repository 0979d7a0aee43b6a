"""The machine's sustained matmul throughput, one framework per process (`train_compare.py
--peak tf|torch`): after a warm-up of `warmup_s` seconds of matmuls, square matmuls of each
size and dtype run back to back for `seconds` each; the figure is their FLOPs over that time.
The common peak of the MFU is the best over both frameworks and all sizes, per dtype.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

SIZES = (1024, 2048, 4096)
DTYPES = ("float32", "bfloat16")
PROBE_SIZE = 2048
PROBE_SECONDS = 5.0
PROBE_WARMUP_S = 2.0


def _matmul(framework: str, size: int, dtype: str) -> Callable[[], None]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    if framework == "tf":
        import tensorflow as tf

        x, y = tf.cast(tf.constant(a), dtype), tf.cast(tf.constant(b), dtype)
        return lambda: tf.linalg.matmul(x, y).numpy()
    import torch

    x = torch.from_numpy(a).to(getattr(torch, dtype))
    y = torch.from_numpy(b).to(getattr(torch, dtype))
    return lambda: torch.matmul(x, y)


def _sustained(run: Callable[[], None], size: int, seconds: float) -> float:
    """GFLOP/s of `run` called back to back for at least `seconds`."""
    run()
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or count < 3:
        run()
        count += 1
    return 2 * size**3 * count / elapsed / 1e9


def measure(
    framework: str, seconds: float, warmup_s: float, dtypes: tuple[str, ...] = DTYPES
) -> dict[str, dict[int, float]]:
    """{dtype: {size: sustained GFLOP/s}} of `framework` ("tf" or "torch") for `dtypes` (only
    the precisions of the sides measured: on a CPU without bfloat16 instructions its matmuls
    took minutes a size)."""
    warm = _matmul(framework, SIZES[1], DTYPES[0])
    _sustained(warm, SIZES[1], warmup_s)
    return {
        dtype: {size: _sustained(_matmul(framework, size, dtype), size, seconds) for size in SIZES}
        for dtype in dtypes
    }


def speed_probe(seconds: float = PROBE_SECONDS, warmup_s: float = PROBE_WARMUP_S) -> float:
    """TensorFlow's float32 GFLOP/s on PROBE_SIZE^2 matmuls run back to back for `seconds`,
    after `warmup_s` of the same (a fresh process' first seconds of matmuls ran 5-10% slower).

    `sweep.py` measures it before and after each variant's training: a host that runs slower
    on some days (the same CPU type, nothing else running, no steal: one session's Intel Xeon
    trained 1.45x slower than the session before) shows here, so runs of different sessions
    can be told apart. A probe, not a peak: one size, a short warm-up.
    """
    run = _matmul("tf", PROBE_SIZE, "float32")
    _sustained(run, PROBE_SIZE, warmup_s)
    return _sustained(run, PROBE_SIZE, seconds)
