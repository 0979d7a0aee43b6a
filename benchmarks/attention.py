"""Our einsum attention vs `keras.ops.dot_product_attention`, side by side in one run.

Prints the time of one forward+backward pass of the scaled dot-product core (inputs already
projected to heads) for both paths at a few shapes, the ratio, and the largest difference
between their outputs. `MultiHeadAttention` keeps the einsum path unless the other one
measures faster (see its docstring).

    python benchmarks/attention.py
"""

from __future__ import annotations

import math
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import _machine  # noqa: F401, E402  (first: sets the package's oneDNN default before TF)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import ops  # noqa: E402


def einsum_attention(q, k, v, mask):
    q = q * (1.0 / math.sqrt(q.shape[-1]))
    scores = ops.einsum("bthd,bshd->bhts", q, k)  # (B, H, T, S)
    scores = ops.where(mask[:, None], scores, ops.full_like(scores, -1e9))
    return ops.einsum("bhts,bshd->bthd", ops.softmax(scores, axis=-1), v)  # (B, T, H, D)


def keras_attention(q, k, v, mask):
    return ops.dot_product_attention(q, k, v, mask=mask[:, None])


def timed(fn, *args, repeats: int = 20) -> float:
    @tf.function(jit_compile=False)
    def step(q, k, v, mask):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = fn(q, k, v, mask)
            loss = tf.reduce_sum(out)
        return out, tape.gradient(loss, [q, k, v])

    step(*args)  # trace
    start = time.perf_counter()
    for _ in range(repeats):
        out, _ = step(*args)
    _ = out.numpy()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    rng = np.random.default_rng(0)
    print(
        f"{'B,T,H,D':>16} | {'einsum ms':>10} | {'keras dpa ms':>12} | {'dpa/einsum':>10}"
        " | max |diff|"
    )
    for b, t, h, d in [(32, 32, 8, 32), (64, 64, 4, 32), (16, 128, 8, 64)]:
        q, k, v = (tf.constant(rng.standard_normal((b, t, h, d)), tf.float32) for _ in range(3))
        lengths = rng.integers(t // 2, t + 1, size=b)
        mask = tf.constant(np.arange(t)[None, None, :] < lengths[:, None, None]) & tf.constant(
            np.tril(np.ones((t, t), bool))[None]
        )
        diff = float(
            tf.reduce_max(tf.abs(einsum_attention(q, k, v, mask) - keras_attention(q, k, v, mask)))
        )
        ours = timed(einsum_attention, q, k, v, mask)
        theirs = timed(keras_attention, q, k, v, mask)
        print(
            f"{f'{b},{t},{h},{d}':>16} | {ours * 1e3:10.2f} | {theirs * 1e3:12.2f} | "
            f"{theirs / ours:10.2f} | {diff:.2e}"
        )


if __name__ == "__main__":
    main()
