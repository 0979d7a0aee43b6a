"""Decoding latency and throughput: naive re-run loop vs cached search, with and without XLA.

A 4-layer, d_model=128 Transformer with random weights decodes 64 target tokens per sentence
(EOS is forbidden until the 64th token, so every run takes exactly 64 steps) from random
32-token sources, at batch 1 and batch 32:

- naive: a Python loop that re-runs the whole model on the growing prefix at every step
  (`model((source, prefix))` inside one `tf.function` with a dynamic length, then argmax);
- cached greedy and beam 4: `keras_transformer.decoding.BatchDecoder`, the whole search as
  one `tf.while_loop` with the key/value cache, as a plain `tf.function` and XLA-compiled.

Times are wall-clock medians over repeats after a first call, which traces (and compiles)
and is reported apart ("1st call s"). Run:

    python benchmarks/decoding.py [--repeats 5] [--naive-repeats 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer import Transformer  # noqa: E402
from keras_transformer.constants import BOS_ID  # noqa: E402
from keras_transformer.decoding import BatchDecoder  # noqa: E402

VOCAB = 8000
SOURCE_LENGTH = 32
TARGET_TOKENS = 64


def build_model() -> Transformer:
    keras.utils.set_random_seed(0)
    model = Transformer(
        VOCAB,
        VOCAB,
        num_encoder_layers=4,
        num_decoder_layers=4,
        d_model=128,
        num_heads=8,
        d_ff=512,
        dropout=0.0,
        max_length=128,
    )
    model((np.ones((1, 4), "int32"), np.ones((1, 4), "int32")))
    return model


def timed(fn, repeats: int) -> tuple[float, float]:
    """(first call seconds, median seconds of `repeats` later calls)."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def naive_decoder(model):
    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.int32),
            tf.TensorSpec([None, None], tf.int32),
        ]
    )
    def next_token(source, prefix):
        logits = model((source, prefix), training=False)[:, -1, :]  # (B, V)
        return tf.argmax(logits[:, 3:], axis=-1, output_type=tf.int32) + 3  # no PAD/BOS

    def run(source):
        prefix = np.full((source.shape[0], 1), BOS_ID, np.int32)
        for _ in range(TARGET_TOKENS):
            next_ids = next_token(source, prefix).numpy()
            prefix = np.concatenate([prefix, next_ids[:, None]], axis=1)
        return prefix[:, 1:]

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--naive-repeats", type=int, default=2)
    args = parser.parse_args()

    model = build_model()
    rng = np.random.default_rng(0)
    rows = []
    results = {}
    for batch_size in (1, 32):
        source = rng.integers(4, VOCAB, size=(batch_size, SOURCE_LENGTH)).astype(np.int32)
        naive = naive_decoder(model)
        first, median = timed(lambda s=source, n=naive: n(s), args.naive_repeats)
        rows.append(("naive greedy", batch_size, "no", first, median))
        results[("naive", batch_size, False)] = median
        for method, beam_size in (("greedy", 1), ("beam", 4)):
            for jit in (False, True):
                decoder = BatchDecoder(
                    model,
                    method=method,
                    beam_size=beam_size,
                    length_penalty=0.6,
                    max_length=TARGET_TOKENS,
                    max_length_a=0.0,
                    max_length_b=TARGET_TOKENS,
                    min_length=TARGET_TOKENS,
                    jit_compile=jit,
                )
                first, median = timed(lambda d=decoder, s=source: d(s), args.repeats)
                if (decoder(source).tokens[:, 0] != 0).sum(-1).min() != TARGET_TOKENS:
                    raise RuntimeError("Expected every sentence to decode 64 tokens.")
                name = "cached greedy" if method == "greedy" else f"cached beam {beam_size}"
                rows.append((name, batch_size, "yes" if jit else "no", first, median))
                results[(method, batch_size, jit)] = median

    print(
        f"4-layer d_model=128 Transformer, V={VOCAB}, source {SOURCE_LENGTH} tokens, "
        f"{TARGET_TOKENS} target tokens per sentence, {os.cpu_count()} CPUs, "
        f"TF {tf.__version__}"
    )
    header = (
        f"{'decoding':<15}{'batch':>6}{'XLA':>5}{'1st call s':>12}{'latency ms':>12}"
        f"{'ms/token':>10}{'tokens/s':>11}{'sent/s':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, batch_size, xla, first, median in rows:
        tokens = batch_size * TARGET_TOKENS
        print(
            f"{name:<15}{batch_size:>6}{xla:>5}{first:>12.2f}{median * 1e3:>12.1f}"
            f"{median * 1e3 / TARGET_TOKENS:>10.2f}{tokens / median:>11.0f}"
            f"{batch_size / median:>9.1f}"
        )
    print()
    for jit in (False, True):
        label = "XLA" if jit else "no XLA"
        print(
            f"cached greedy ({label}) vs naive, batch 1: "
            f"{results[('naive', 1, False)] / results[('greedy', 1, jit)]:.1f}x faster "
            "(target >= 10x)"
        )
    for batch_size in (1, 32):
        for jit in (False, True):
            label = "XLA" if jit else "no XLA"
            ratio = results[("beam", batch_size, jit)] / results[("greedy", batch_size, jit)]
            print(
                f"beam 4 vs greedy ({label}), batch {batch_size}: {ratio:.2f}x the time "
                "(target <= 3x)"
            )
    for batch_size in (1, 32):
        for method in ("greedy", "beam"):
            ratio = results[(method, batch_size, False)] / results[(method, batch_size, True)]
            print(f"XLA speed-up, {method}, batch {batch_size}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
