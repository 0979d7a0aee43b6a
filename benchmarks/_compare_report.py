"""The tables of `train_compare.py`: the machine, the matmul peaks, the sides' rounds with
their spreads, the ratios against the targets, and the bucketing baseline."""

from __future__ import annotations

import argparse
import math
import os
import statistics

from _compare_peak import DTYPES, SIZES
from _compare_timing import Side, print_table, spread, verdict
from _machine import commit, cpu_model

PEAK_KEY = {"fp32": "float32", "bf16": "bfloat16"}
TARGETS = {"torch": 1.3, "keras_hub": 1.15, "mfu": 0.5}


def describe_machine(versions: str, torch_threads: int) -> None:
    print(
        f"{cpu_model()}, {os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}); "
        f"{versions}; PyTorch threads {torch_threads}; commit {commit()}"
    )


def print_peaks(peaks: dict[str, dict], args: argparse.Namespace) -> dict[str, float]:
    """Prints the sustained matmul GFLOP/s; returns the common peak per precision."""
    print(
        f"\nsustained matmul GFLOP/s ({args.peak_seconds:g} s per size after "
        f"{args.peak_warmup:g} s of matmuls, each framework in its own process):"
    )
    rows = []
    for framework, by_dtype in peaks.items():
        for dtype in (d for d in DTYPES if d in by_dtype):
            values = by_dtype[dtype]
            rows.append([f"{framework} {dtype}", *(f"{values[str(n)]:.0f}" for n in SIZES)])
    print_table(["matmul", *(f"{n}^2" for n in SIZES)], rows)
    common = {
        precision: max(max(by[dtype].values()) for by in peaks.values())
        for precision, dtype in PEAK_KEY.items()
        if all(dtype in by for by in peaks.values())
    }
    print(
        "common peak (best of both frameworks and all sizes): "
        + ", ".join(f"{p} {v:.0f} GFLOP/s" for p, v in common.items())
    )
    return common


def _row(side: Side, peak: float, max_others: float) -> list[str]:
    others = max(r.other_cores for r in side.repetitions)
    refused = others > max_others
    mfu = [100 * f / 1e9 / peak for f in side.flops_per_s()]
    hfu = [100 * f / 1e9 / peak for f in side.flops_per_s(hardware=True)]
    last = side.repetitions[-1].losses
    return [
        side.name + (" REFUSED" if refused else ""),
        f"{side.warmup_s:.0f}",
        spread(side.median_steps_ms()),
        spread(side.tokens_per_s()),
        spread(mfu, 1) + "%",
        spread(hfu, 1) + "%",
        f"{last[0]:.3f} -> {last[-1]:.3f}",
        f"{others:.2f}",
        side.check,
    ]


def _ratio(ours: Side, other: Side, target: float) -> str:
    tokens = statistics_median(ours.tokens_per_s()) / statistics_median(other.tokens_per_s())
    steps = statistics_median(other.median_steps_ms()) / statistics_median(ours.median_steps_ms())
    apart = max(ours.median_steps_ms()) < min(other.median_steps_ms())
    return (
        f"ours / {other.name}: {tokens:.2f}x tokens/s, {steps:.2f}x by the median step "
        f"(target >= {target}x: {verdict(steps, target)}; rounds' median steps "
        f"{'do not overlap' if apart else 'OVERLAP'})"
    )


def statistics_median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def print_results(
    records: dict[str, Side], common: dict[str, float], max_others: float, fixed: str
) -> None:
    print(
        f"\ntraining: median over rounds (fastest-slowest round); ms/step: the median step of "
        f"a round; MFU: real-token matmul FLOP/s over the common peak of the row's precision "
        f"(HFU: what the side computes: the padded shapes, real positions where it skips "
        f"padding); others: the most cores other processes kept busy in a round "
        f"(REFUSED above {max_others})"
    )
    headers = ["side", "warm-up s", "ms/step", "tgt tokens/s", "MFU", "HFU", "loss (last round)"]
    rows = [_row(s, common[s.precision], max_others) for s in records.values()]
    print_table([*headers, "others", "logits diff"], rows)

    for precision in ("fp32", "bf16"):
        ours = records.get(f"ours/{precision}")
        if ours is None:
            continue
        print(f"\n{precision}:")
        hub = records.get(f"keras_hub/{precision}")
        if hub is not None:
            print("  " + _ratio(ours, hub, TARGETS["keras_hub"]))
        torches = [s for n, s in records.items() if n.startswith("torch") and precision in n]
        if torches:
            fastest = max(torches, key=lambda s: statistics_median(s.tokens_per_s()))
            print("  " + _ratio(ours, fastest, TARGETS["torch"]) + " (the fastest PyTorch)")
        mfu = statistics_median(ours.flops_per_s()) / 1e9 / common[precision]
        print(f"  MFU of ours: {100 * mfu:.1f}% (target >= 50%: {verdict(mfu, TARGETS['mfu'])})")
    if "ours/bf16" in records:
        gain = statistics_median(records["ours/bf16"].tokens_per_s()) / statistics_median(
            records["ours/fp32"].tokens_per_s()
        )
        print(f"\nours bf16 / fp32: {gain:.2f}x tokens/s")
    if fixed in records:
        bucketed = statistics_median(records["ours/fp32"].tokens_per_s())
        plain = statistics_median(records[fixed].tokens_per_s())
        print(
            f"bucketed / fixed-sentence batches (ours fp32, same sentences): "
            f"{bucketed / plain:.2f}x tokens/s"
        )
