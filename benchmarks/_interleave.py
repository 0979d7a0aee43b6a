"""Timing alternatives side by side: each one's call in turn, for several rounds."""

from __future__ import annotations

import statistics
from collections.abc import Callable


def interleaved(calls: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """`repeats` rounds of every call in turn; each call returns its own time (ms)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            times[name].append(call())
    return times


def cell(times: list[float]) -> str:
    """`median (fastest-slowest)`, one decimal."""
    return f"{statistics.median(times):.1f} ({min(times):.1f}-{max(times):.1f})"


def ratio(slower: list[float], faster: list[float]) -> str:
    """The ratio of the medians, `1.23x`."""
    return f"{statistics.median(slower) / statistics.median(faster):.2f}x"


def two_way_table(times: dict[str, list[float]], before: str, after: str) -> str:
    """The Markdown table `| BEFORE ms | AFTER ms | ratio |` of two interleaved sides."""
    return (
        f"| {before} ms | {after} ms | ratio |\n| --- | --- | --- |\n"
        f"| {cell(times[before])} | {cell(times[after])} | {ratio(times[before], times[after])} |"
    )
