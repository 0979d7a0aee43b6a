"""The tied output projection's three matmuls alone, at the recipe's training shape.

A training step multiplies the decoder's hidden states h (N, D) by the embedding table
E (V, D) three times: the forward product h E^T (N, V), the gradient of h (dZ E, (N, D))
and the gradient of E (dZ^T h, (V, D)), each 2 N D V FLOPs. Default: N = 3,200 rows (the
real target positions of a ~4,096-token batch, padded to a multiple of 128), D = 256,
V = 8,000. Each product is an uncompiled `tf.function` (as `fit` runs them on CPU) whose
result is read back; the three interleave for `--repeats` rounds. Prints the median ms
with the fastest and slowest call and the GFLOP/s of the median.

TensorFlow reads `TF_CPU_ALLOCATOR_USE_BFC` (its CPU allocator) when it first allocates:
run the script with and without it set to compare the two allocators.

    python benchmarks/output_projection.py [--repeats 9] [--rows 3200] [--width 256] [--vocab 8000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import _machine  # noqa: F401  (first: sets the package's oneDNN default before TF)
import tensorflow as tf
from _interleave import cell, interleaved
from _machine import commit, cpu_model


def _timed(fn):
    def call() -> float:
        start = time.perf_counter()
        fn().numpy()
        return (time.perf_counter() - start) * 1e3

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--rows", type=int, default=3200, help="N, the projected positions")
    parser.add_argument("--width", type=int, default=256, help="D, d_model")
    parser.add_argument("--vocab", type=int, default=8000, help="V, the vocabulary")
    args = parser.parse_args()
    if min(args.repeats, args.rows, args.width, args.vocab) < 1:
        parser.error("--repeats, --rows, --width and --vocab must be positive")
    n, d, v = args.rows, args.width, args.vocab
    hidden = tf.random.normal([n, d])  # (N, D)
    table = tf.random.normal([v, d])  # (V, D)
    upstream = tf.random.normal([n, v])  # (N, V): the logits' gradient
    products = {
        "forward h E^T (N, V)": tf.function(lambda: tf.matmul(hidden, table, transpose_b=True)),
        "gradient of h: dZ E (N, D)": tf.function(lambda: tf.matmul(upstream, table)),
        "gradient of E: dZ^T h (V, D)": tf.function(
            lambda: tf.matmul(upstream, hidden, transpose_a=True)
        ),
    }
    calls = {name: _timed(fn) for name, fn in products.items()}
    for call in calls.values():  # trace and warm up
        call()
    times = interleaved(calls, args.repeats)
    allocator = os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "unset")
    print(
        f"CPU: {cpu_model()}, {os.cpu_count()} cores; TF {tf.__version__}; commit {commit()}; "
        f"TF_CPU_ALLOCATOR_USE_BFC={allocator}"
    )
    print(f"N={n}, D={d}, V={v}: {2 * n * d * v / 1e9:.1f} GFLOP per product\n")
    print("| product | ms | GFLOP/s |\n| --- | --- | --- |")
    for name, ms in times.items():
        print(f"| {name} | {cell(ms)} | {2 * n * d * v / statistics.median(ms) / 1e6:.0f} |")


if __name__ == "__main__":
    main()
