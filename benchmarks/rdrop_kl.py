"""R-Drop's KL term alone: autodiff through log-softmax against the hand-written kernel.

Forward and backward through the symmetric KL divergence between two passes' logits (default
(6400, 8000): two passes of the recipe's ~3,100 real target positions a batch, padded to a
multiple of 128 rows, over its 8,000-id vocabulary), in an uncompiled `tf.function` as `fit`
runs it on CPU, 10 passes per timed call. "autodiff" is the term as the package computed it
before the kernel (the two halves sliced outside an XLA-compiled float32 log-softmax
formula whose gradient TensorFlow derived); "kernel" is
`rdrop.consistency_loss`'s kernel now. The two interleave for `--repeats` calls each; prints
the largest difference of the terms and gradients, the median ms per pass with the fastest
and slowest, and the ratio.

    python benchmarks/rdrop_kl.py [--repeats 5] [--rows 6400] [--vocab 8000]
        [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import time

import _machine  # noqa: F401  (first: sets the package's oneDNN default before TF)
import tensorflow as tf
from _interleave import interleaved, two_way_table
from _machine import commit, cpu_model

from keras_transformer.training.rdrop import _symmetric_kl

PASSES = 10


@tf.function(jit_compile=True)
def _autodiff_kl(logits_p, logits_q):
    log_p = tf.nn.log_softmax(tf.cast(logits_p, tf.float32), axis=-1)
    log_q = tf.nn.log_softmax(tf.cast(logits_q, tf.float32), axis=-1)
    return 0.5 * tf.reduce_sum((tf.exp(log_p) - tf.exp(log_q)) * (log_p - log_q), axis=-1)


def autodiff(logits):
    half = tf.shape(logits)[0] // 2
    return _autodiff_kl(logits[:half], logits[half:])


TERMS = {"autodiff": autodiff, "kernel": lambda logits: _symmetric_kl(logits, compiled=True)}


def value_and_gradient(fn):
    @tf.function
    def run(logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            term = tf.reduce_sum(fn(logits))
        return term, tape.gradient(term, logits)

    return run


def timed(run, logits):
    def call():
        start = time.perf_counter()
        for _ in range(PASSES):
            _, gradient = run(logits)
        gradient[0, 0].numpy()
        return (time.perf_counter() - start) / PASSES * 1000

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=6400, help="both passes' rows (even)")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = parser.parse_args()
    if args.rows < 2 or args.rows % 2:
        parser.error(f"--rows expects an even number of rows, at least 2; got {args.rows}")
    print(f"{cpu_model()}, commit {commit()}; logits ({args.rows}, {args.vocab}) {args.dtype}")
    logits = tf.random.stateless_normal([args.rows, args.vocab], seed=[1, 2]) * 3.0
    logits = tf.cast(logits, args.dtype)
    runs = {name: value_and_gradient(fn) for name, fn in TERMS.items()}
    (term_a, grad_a), (term_b, grad_b) = (run(logits) for run in runs.values())
    difference = tf.reduce_max(tf.abs(tf.cast(grad_a, tf.float32) - tf.cast(grad_b, tf.float32)))
    print(
        f"term relative difference {abs(float(term_a - term_b)) / abs(float(term_a)):.1e}, "
        f"gradient max difference {float(difference):.1e}"
    )
    calls = {name: timed(run, logits) for name, run in runs.items()}
    times = interleaved(calls, args.repeats)
    print(two_way_table(times, "autodiff", "kernel"))


if __name__ == "__main__":
    main()
