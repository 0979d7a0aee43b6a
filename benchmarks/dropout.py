"""The dropout mask alone: Keras' float-uniform mask, the same mask as one multiply each way
(`layers.Dropout`'s default), and `model.fast_dropout`'s 16-bit one.

Forward and backward through dropout of one tensor (default (160, 32, 1024): the recipe's
feed-forward inner activations at ~5k tokens a batch), 20 passes in one `tf.function` per
timed call, the three interleaved for `--repeats` calls each, in float32 and bfloat16;
prints the median ms per pass with the fastest and slowest, and Keras' time over each.

    python benchmarks/dropout.py [--repeats 5] [--rate 0.1]
"""

from __future__ import annotations

import argparse
import time

import _machine  # noqa: F401  (first: sets the package's oneDNN default before TF)
import tensorflow as tf
from _interleave import cell, interleaved, ratio
from _machine import commit, cpu_model

from keras_transformer.layers.dropout import scaled_mask_dropout, uint16_dropout

PASSES = 20


def keras_mask(x, rate, seed):
    return tf.nn.experimental.stateless_dropout(x, rate, seed=seed)  # Keras' TF backend


MASKS = {"keras": keras_mask, "multiply": scaled_mask_dropout, "16-bit": uint16_dropout}


def timed(fn, x, rate):
    @tf.function
    def passes(seed):
        total = tf.constant(0.0)
        for i in range(PASSES):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(tf.cast(fn(x, rate, seed + i), tf.float32))
            total += tf.cast(tape.gradient(loss, x)[0, 0, 0], tf.float32)
        return total

    seed = tf.constant([1, 2], tf.int32)
    passes(seed)  # trace

    def call():
        start = time.perf_counter()
        passes(seed).numpy()
        return (time.perf_counter() - start) / PASSES * 1000

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--shape", type=int, nargs="+", default=[160, 32, 1024])
    args = parser.parse_args()
    print(f"{cpu_model()}, commit {commit()}; shape {tuple(args.shape)}, rate {args.rate}")
    print(
        "| dtype | Keras' mask ms | multiplied ms | ratio | 16-bit mask ms | ratio |\n"
        "| --- | --- | --- | --- | --- | --- |"
    )
    for dtype in ("float32", "bfloat16"):
        x = tf.cast(tf.random.normal(args.shape), dtype)
        calls = {name: timed(fn, x, args.rate) for name, fn in MASKS.items()}
        times = interleaved(calls, args.repeats)
        keras_ms = times["keras"]
        print(
            f"| {dtype} | {cell(keras_ms)} | {cell(times['multiply'])} "
            f"| {ratio(keras_ms, times['multiply'])} | {cell(times['16-bit'])} "
            f"| {ratio(keras_ms, times['16-bit'])} |"
        )


if __name__ == "__main__":
    main()
