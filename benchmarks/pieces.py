"""Two pieces of the training step alone, ours against what autodiff gave: LayerNorm and the
packed/padded layout changes.

- LayerNorm: Keras' `LayerNormalization` (TensorFlow differentiates its ops) against
  `layers.LayerNormalization` (the closed-form gradient), forward and backward over a
  (`--rows`, `--width`) tensor (default (4400, 256): the recipe's packed source positions),
  in float32 and under `mixed_bfloat16`.
- Layout: a padded (B, T, D) tensor's real positions packed and unpacked again, forward and
  backward, with `ScatterNd`/`take` and autodiff's gradients (`UnsortedSegmentSum`,
  `GatherNd`) against `packing.pack`/`unpack` (row gathers both ways), B = 160 sentences of
  20-34 positions, D = `--width`.

Each is 20 passes in one `tf.function` per timed call, the two sides interleaved for
`--repeats` calls; prints the largest difference of the outputs and gradients, the median ms
per pass with the fastest and slowest, and the ratio.

    python benchmarks/pieces.py [--repeats 5] [--rows 4400] [--width 256]
"""

from __future__ import annotations

import argparse
import time

import _machine  # noqa: F401  (first: sets the package's oneDNN default before TF)
import keras
import numpy as np
import tensorflow as tf
from _interleave import cell, interleaved, ratio
from _machine import commit, cpu_model
from keras import ops

from keras_transformer.layers import LayerNormalization
from keras_transformer.packing import pack, packing_of, unpack

PASSES = 20


def timed(step, *inputs):
    """A call timing `PASSES` runs of `step(*inputs, i)` (each returns its gradients) in one
    `tf.function`, and the first run's gradients."""

    @tf.function
    def passes():
        total = tf.constant(0.0)
        for i in range(PASSES):
            grads = step(*inputs, i)
            total += tf.add_n([tf.cast(tf.reshape(g, [-1])[0], tf.float32) for g in grads])
        return total

    passes()  # trace

    def call():
        start = time.perf_counter()
        passes().numpy()
        return (time.perf_counter() - start) / PASSES * 1000

    return call, tf.function(lambda: step(*inputs, 0))()


def norm_step(layer):
    def step(x, upstream, i):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x + tf.cast(i, x.dtype))
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        return tape.gradient(loss, [x, *layer.trainable_variables])

    return step


def scatter_unpack(x, packing):
    positions, batch, length, _ = packing
    flat = ops.scatter(ops.expand_dims(positions, -1), x, (batch * length, x.shape[-1]))
    return ops.reshape(flat, (batch, length, x.shape[-1]))


def take_pack(x, packing):
    positions, batch, length, _ = packing
    return ops.take(ops.reshape(x, (batch * length, x.shape[-1])), positions, axis=0)


def layout_step(pack_fn, unpack_fn):
    def step(x, mask, i):
        packing = packing_of(mask)
        with tf.GradientTape() as tape:
            tape.watch(x)
            packed = pack_fn(x + tf.cast(i, x.dtype), packing)  # (N, D)
            padded = unpack_fn(packed * 2.0, packing)  # (B, T, D)
            loss = tf.reduce_sum(padded * x)
        return [tape.gradient(loss, x)]

    return step


def difference(a, b) -> float:
    return max(
        float(tf.reduce_max(tf.abs(tf.cast(p, tf.float32) - tf.cast(q, tf.float32))))
        for p, q in zip(a, b)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=4400)
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()
    print(f"{cpu_model()}, commit {commit()}")
    print("| piece | autodiff ms | ours ms | ratio | largest difference |")
    print("| --- | --- | --- | --- | --- |")
    for policy in ("float32", "mixed_bfloat16"):
        shape = (args.rows, args.width)
        layers = [
            cls(epsilon=1e-6, dtype=policy)
            for cls in (keras.layers.LayerNormalization, LayerNormalization)
        ]
        dtype = layers[0].compute_dtype
        x = tf.cast(tf.random.stateless_normal(shape, [1, 2]), dtype)
        upstream = tf.random.stateless_normal(shape, [3, 4])
        for layer in layers:
            layer.build(shape)
        calls = [timed(norm_step(layer), x, upstream) for layer in layers]
        times = interleaved({"keras": calls[0][0], "ours": calls[1][0]}, args.repeats)
        print(
            f"| LayerNorm, {policy} | {cell(times['keras'])} | {cell(times['ours'])} "
            f"| {ratio(times['keras'], times['ours'])} "
            f"| {difference(calls[0][1], calls[1][1]):.1e} |"
        )
    rng = np.random.default_rng(0)
    lengths = rng.integers(20, 35, 160)
    mask = tf.constant(np.arange(34)[None] < lengths[:, None])  # (160, 34)
    x = tf.random.stateless_normal((160, 34, args.width), [5, 6])
    calls = [
        timed(layout_step(take_pack, scatter_unpack), x, mask),
        timed(layout_step(pack, unpack), x, mask),
    ]
    times = interleaved({"autodiff": calls[0][0], "ours": calls[1][0]}, args.repeats)
    print(
        f"| pack and unpack, float32 | {cell(times['autodiff'])} | {cell(times['ours'])} "
        f"| {ratio(times['autodiff'], times['ours'])} "
        f"| {difference(calls[0][1], calls[1][1]):.1e} |"
    )


if __name__ == "__main__":
    main()
