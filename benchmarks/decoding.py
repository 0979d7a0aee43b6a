"""Decoding latency and throughput: uncached (naive) vs cached greedy, and cached beam 4,
each with and without XLA.

A 4-layer, d_model=128 Transformer with random weights decodes `--tokens` (64) target tokens
per sentence from random 32-token sources, at each of `--batch-sizes` (1 and 32). EOS is
forbidden until the last token, so every run takes exactly `--tokens` steps:

- naive greedy: the encoder runs once (`model.encode`, a `tf.function`), then a Python loop
  re-runs the whole decoder stack (`model.decoder` on the encoder output) on the growing
  prefix at every step, without a key/value cache, projects the last position to logits and
  takes the argmax (PAD, BOS and EOS forbidden, as the cached search forbids them). The step
  is one `tf.function` over a dynamic prefix length; with XLA it is compiled once per prefix
  length, all during the first call. What it emits is checked against cached greedy.
- cached greedy and beam 4: `keras_transformer.decoding.BatchDecoder`, the whole search as
  one `tf.while_loop` with the key/value cache, as a plain `tf.function` and XLA-compiled.

Each row's first call traces (and compiles) and is reported apart ("1st call s"); the
latency is the median over the later calls, with the fastest and slowest in brackets;
tokens/s and sentences/s are from the median. "others" is the number of cores other
processes kept busy during the timed calls of that row: the machine's busy CPU seconds
(/proc/stat, in 10 ms ticks: coarse for a row timed over well under a second) less this
process' own (`resource.getrusage`), over the wall time; a row over 0.25 cores gets a WARNING
line. The ratios compare like with like: cached vs naive greedy at
the same XLA setting, beam 4 vs greedy at the same XLA setting, and XLA vs no XLA for the same
search. `--no-repeat-ngram-size N` adds the cached rows again with repeated n-gram blocking
("+ban N", `no_repeat_ngram_size=N`) and the ratio of their times to the same search's
without it. Run:

    python benchmarks/decoding.py [--repeats 5] [--naive-repeats 2] [--no-repeat-ngram-size 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import _machine  # noqa: F401, E402  (first: sets the package's oneDNN default before TF)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _machine import OtherLoad, commit, cpu_model  # noqa: E402

from keras_transformer import Transformer  # noqa: E402
from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from keras_transformer.decoding import BatchDecoder  # noqa: E402

VOCAB = 8000
SOURCE_LENGTH = 32
BUSY_LIMIT = 0.25  # cores other processes may take before a row is flagged


@dataclasses.dataclass
class Row:
    """One measured configuration."""

    name: str
    batch_size: int
    xla: bool
    first_s: float
    times_s: list[float]
    others: float

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)


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


def timed(fn, repeats: int) -> tuple[float, list[float], float]:
    """(first call seconds, seconds of each of `repeats` later calls, cores other processes
    kept busy during those calls)."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    load = OtherLoad()
    load.start()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return first, times, load.cores()


def naive_decoder(model: Transformer, tokens: int, jit: bool):
    """Greedy decoding without a cache: encode once, re-run the decoder on the prefix."""
    forbidden = np.zeros((VOCAB,), np.float32)
    forbidden[[PAD_ID, BOS_ID, EOS_ID]] = -np.inf
    forbidden = tf.constant(forbidden)

    @tf.function(jit_compile=jit, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def encode(source):
        return model.encode(source, training=False)  # (B, S, D), (B, S)

    @tf.function(
        jit_compile=jit,
        input_signature=[
            tf.TensorSpec([None, None, model.d_model], model.compute_dtype),
            tf.TensorSpec([None, None], tf.bool),
            tf.TensorSpec([None, None], tf.int32),
        ],
    )
    def extend(encoded, source_mask, prefix):
        hidden = model.decoder(
            prefix, encoded, encoder_padding_mask=source_mask, training=False
        )  # (B, T, D)
        logits = model.decoder.logits(hidden[:, -1:, :])[:, 0, :]  # (B, V)
        next_ids = tf.argmax(logits + forbidden, axis=-1, output_type=tf.int32)
        return tf.concat([prefix, next_ids[:, None]], axis=1)

    def run(source):
        encoded, source_mask = encode(source)
        prefix = tf.fill([source.shape[0], 1], BOS_ID)
        for _ in range(tokens):
            prefix = extend(encoded, source_mask, prefix)
        return prefix[:, 1:].numpy()

    return run


def cached_decoder(
    model: Transformer, method: str, tokens: int, jit: bool, ban: int = 0
) -> BatchDecoder:
    return BatchDecoder(
        model,
        method=method,
        beam_size=4 if method == "beam" else 1,
        length_penalty=0.6,
        max_length=tokens,
        max_length_a=0.0,
        max_length_b=tokens,
        min_length=tokens,
        no_repeat_ngram_size=ban,
        jit_compile=jit,
    )


NAME_WIDTH, LATENCY_WIDTH = 22, 24
HEADER = (
    f"{'decoding':<{NAME_WIDTH}}{'batch':>6}{'XLA':>5}{'1st call s':>12}"
    f"{'latency ms (min-max)':>{LATENCY_WIDTH}}{'ms/token':>10}{'tokens/s':>10}"
    f"{'sent/s':>9}{'others':>8}"
)


def format_row(row: Row, tokens: int) -> str:
    median, fastest, slowest = (1e3 * t for t in (row.median_s, min(row.times_s), max(row.times_s)))
    latency = f"{median:.1f} ({fastest:.1f}-{slowest:.1f})"
    return (
        f"{row.name:<{NAME_WIDTH}}{row.batch_size:>6}{'yes' if row.xla else 'no':>5}"
        f"{row.first_s:>12.2f}{latency:>{LATENCY_WIDTH}}{median / tokens:>10.2f}"
        f"{row.batch_size * tokens / row.median_s:>10.0f}"
        f"{row.batch_size / row.median_s:>9.1f}{row.others:>8.2f}"
    )


def cached_name(method: str, ban: int) -> str:
    return ("cached greedy" if method == "greedy" else "cached beam 4") + (
        f" +ban {ban}" if ban else ""
    )


def print_ratios(rows: list[Row], batch_sizes: list[int], ban: int) -> None:
    median = {(r.name, r.batch_size, r.xla): r.median_s for r in rows}

    def ratio(slow: tuple, fast: tuple) -> float | None:
        return median[slow] / median[fast] if slow in median and fast in median else None

    print("Cached vs naive greedy, same XLA setting (naive time / cached time):")
    for batch_size in batch_sizes:
        for xla in (False, True):
            r = ratio(("naive greedy", batch_size, xla), ("cached greedy", batch_size, xla))
            if r is not None:
                print(
                    f"  {'XLA' if xla else 'no XLA'}, batch {batch_size}: naive greedy takes "
                    f"{r:.2f}x the time of cached greedy (target >= 10x)"
                )
    print("Beam 4 vs greedy, both cached, same XLA setting (beam time / greedy time):")
    for batch_size in batch_sizes:
        for xla in (False, True):
            r = ratio(("cached beam 4", batch_size, xla), ("cached greedy", batch_size, xla))
            print(
                f"  {'XLA' if xla else 'no XLA'}, batch {batch_size}: beam 4 takes {r:.2f}x "
                "the time of greedy (target <= 3x)"
            )
    print("XLA vs no XLA, same search (no-XLA time / XLA time):")
    for name in ("cached greedy", "cached beam 4", "naive greedy"):
        for batch_size in batch_sizes:
            r = ratio((name, batch_size, False), (name, batch_size, True))
            if r is not None:
                print(f"  {name}, batch {batch_size}: no XLA takes {r:.2f}x the time of XLA")
    if ban:
        print(f"Repeated {ban}-gram blocking, same search and XLA setting (with / without):")
        for method in ("greedy", "beam"):
            for batch_size in batch_sizes:
                for xla in (False, True):
                    r = ratio(
                        (cached_name(method, ban), batch_size, xla),
                        (cached_name(method, 0), batch_size, xla),
                    )
                    print(
                        f"  {cached_name(method, 0)}, {'XLA' if xla else 'no XLA'}, batch "
                        f"{batch_size}: blocking takes {r:.2f}x the time"
                    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed calls of a cached row")
    parser.add_argument("--naive-repeats", type=int, default=2, help="timed calls, naive")
    parser.add_argument("--tokens", type=int, default=64, help="target tokens per sentence")
    parser.add_argument("--batch-sizes", default="1,32", help="comma-separated")
    parser.add_argument(
        "--naive-xla", choices=("yes", "no"), default="yes", help="also time naive with XLA"
    )
    parser.add_argument(
        "--no-repeat-ngram-size",
        type=int,
        default=0,
        help="also time the cached searches with repeated n-gram blocking of this size",
    )
    args = parser.parse_args()
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    if not 1 <= args.tokens <= 128 or min(args.repeats, args.naive_repeats) < 1:
        parser.error("--tokens must be in [1, 128] and the repeats at least 1")
    if args.no_repeat_ngram_size < 0:
        parser.error("--no-repeat-ngram-size must be at least 0 (0: no blocking rows)")

    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    print(
        f"CPU: {cpu_model()}, {os.cpu_count()} cores"
        + (f" ({affinity} usable by this process)" if affinity != os.cpu_count() else "")
        + f"; TF {tf.__version__}, Keras {keras.__version__}; commit {commit()}"
    )
    print(
        f"4-layer d_model=128 Transformer, random weights, V={VOCAB}, source {SOURCE_LENGTH} "
        f"tokens, {args.tokens} target tokens per sentence; 'others': cores other processes "
        "kept busy during a row's timed calls"
    )
    print(HEADER)
    print("-" * len(HEADER))
    model = build_model()
    rng = np.random.default_rng(0)
    rows: list[Row] = []
    agreement = {}

    def add(name, batch_size, xla, fn, repeats):
        first, times, others = timed(fn, repeats)
        rows.append(Row(name, batch_size, xla, first, times, others))
        print(format_row(rows[-1], args.tokens), flush=True)

    naive_xla = (False, True) if args.naive_xla == "yes" else (False,)
    # One decoder per search and XLA setting, shared by the batch sizes (one trace each).
    naives = {xla: naive_decoder(model, args.tokens, xla) for xla in naive_xla}
    bans = sorted({0, args.no_repeat_ngram_size})
    cached = {
        (method, xla, ban): cached_decoder(model, method, args.tokens, xla, ban)
        for ban in bans
        for method in ("greedy", "beam")
        for xla in (False, True)
    }
    for batch_size in batch_sizes:
        source = rng.integers(4, VOCAB, size=(batch_size, SOURCE_LENGTH)).astype(np.int32)
        naive_tokens = {}
        for xla, naive in naives.items():
            add("naive greedy", batch_size, xla, lambda n=naive, s=source: n(s), args.naive_repeats)
            naive_tokens[xla] = naive(source)
        for (method, xla, ban), decoder in cached.items():
            name = cached_name(method, ban)
            add(name, batch_size, xla, lambda d=decoder, s=source: d(s), args.repeats)
            tokens = decoder(source).tokens[:, 0]  # (B, T)
            if (tokens != PAD_ID).sum(-1).min() != args.tokens:
                raise RuntimeError(f"Expected every sentence to decode {args.tokens} tokens.")
            if method == "greedy" and not ban and xla in naive_tokens:
                agreement[(batch_size, xla)] = float(np.mean(naive_tokens[xla] == tokens))

    print()
    for row in rows:
        if row.others > BUSY_LIMIT:
            print(
                f"WARNING: other processes kept {row.others:.2f} cores busy (> {BUSY_LIMIT}) "
                f"during '{row.name}', batch {row.batch_size}, XLA {'yes' if row.xla else 'no'}:"
                " its times are not those of a quiet machine"
            )
    for (batch_size, xla), share in agreement.items():
        print(
            f"naive and cached greedy emit the same token at {share:.1%} of positions "
            f"(batch {batch_size}, {'XLA' if xla else 'no XLA'})"
        )
    print_ratios(rows, batch_sizes, args.no_repeat_ngram_size)


if __name__ == "__main__":
    main()
