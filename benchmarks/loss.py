"""The training loss alone: one-hot softmax cross-entropy against the fused XLA kernel.

Forward and backward through the label-smoothed cross-entropy of one batch of logits
(default (128, 32, 8000): the recipe's ~4k-token batches over its 8,000-id vocabulary), in
an uncompiled `tf.function` as `fit` runs it on CPU, 10 passes per timed call. "one-hot" is
Keras' fused softmax cross-entropy over smoothed one-hot targets (TensorFlow's
`SoftmaxCrossEntropyWithLogits`, the package's loss before the fused kernel); "fused" is
`smoothed_cross_entropy_from_logits`. The two interleave for `--repeats` calls each; prints
the largest difference of losses and gradients, the median ms per pass with the fastest and
slowest, and the ratio.

    python benchmarks/loss.py [--repeats 5] [--smoothing 0.1] [--shape 128 32 8000]
"""

from __future__ import annotations

import argparse
import time

import _machine  # noqa: F401  (first: sets the package's oneDNN default before TF)
import keras
import tensorflow as tf
from _interleave import interleaved, two_way_table
from _machine import commit, cpu_model

from keras_transformer.training.losses import smoothed_cross_entropy_from_logits

PASSES = 10


def one_hot_loss(labels, logits, smoothing):
    vocab_size = keras.ops.shape(logits)[-1]
    targets = keras.ops.one_hot(labels, vocab_size) * (1.0 - smoothing) + smoothing / vocab_size
    return keras.ops.categorical_crossentropy(targets, logits, from_logits=True)


LOSSES = {"one-hot": one_hot_loss, "fused": smoothed_cross_entropy_from_logits}


def value_and_gradient(fn, smoothing):
    @tf.function
    def run(labels, logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = tf.reduce_sum(fn(labels, logits, smoothing))
        return loss, tape.gradient(loss, logits)

    return run


def timed(run, labels, logits):
    def call():
        start = time.perf_counter()
        for _ in range(PASSES):
            _, gradient = run(labels, logits)
        gradient[0, 0, 0].numpy()
        return (time.perf_counter() - start) / PASSES * 1000

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoothing", type=float, default=0.1)
    parser.add_argument("--shape", type=int, nargs=3, default=[128, 32, 8000])
    args = parser.parse_args()
    print(f"{cpu_model()}, commit {commit()}; logits {tuple(args.shape)} float32")
    logits = tf.random.stateless_normal(args.shape, seed=[1, 2]) * 3.0
    labels = tf.random.stateless_uniform(
        args.shape[:2], seed=[3, 4], maxval=args.shape[2], dtype=tf.int32
    )
    runs = {name: value_and_gradient(fn, args.smoothing) for name, fn in LOSSES.items()}
    (loss_a, grad_a), (loss_b, grad_b) = (run(labels, logits) for run in runs.values())
    print(
        f"loss relative difference {abs(float(loss_a - loss_b)) / abs(float(loss_a)):.1e}, "
        f"gradient max difference {float(tf.reduce_max(tf.abs(grad_a - grad_b))):.1e}"
    )
    calls = {name: timed(run, labels, logits) for name, run in runs.items()}
    times = interleaved(calls, args.repeats)
    print(two_way_table(times, "one-hot", "fused"))


if __name__ == "__main__":
    main()
