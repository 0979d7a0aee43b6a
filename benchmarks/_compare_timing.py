"""Counting and summarising for `train_compare.py`, with numpy and the standard library only
(every process uses it): the CPU other processes take, the matmul FLOPs of a step (padded
and real), the repetitions' statistics and the tables.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

import numpy as np
from _compare_data import Batch
from _compare_spec import Arch


def _forward_flops(arch: Arch, b, s, t):
    """Matmul FLOPs of a forward pass over B sentences of source length S, target T (numpy
    arrays or ints); see train_compare.py's docstring."""
    d, f, v = arch.d_model, arch.d_ff, arch.vocab
    encoder = 8 * b * s * d * d + 4 * b * s * s * d + 4 * b * s * d * f
    decoder = (
        8 * b * t * d * d
        + 4 * b * t * t * d
        + 4 * b * t * d * d
        + 4 * b * s * d * d
        + 4 * b * t * s * d
        + 4 * b * t * d * f
    )
    return arch.encoder_layers * encoder + arch.decoder_layers * decoder + 2 * b * t * d * v


def _position_wise_flops(arch: Arch, b, s, t):
    """The part of `_forward_flops` that a model skipping padding computes on real positions
    only: every projection and feed-forward matmul but attention's QK^T and AV, and but the
    cross-attention's K/V projections (of the padded encoder output)."""
    d, f, v = arch.d_model, arch.d_ff, arch.vocab
    encoder = 8 * b * s * d * d + 4 * b * s * d * f
    decoder = 8 * b * t * d * d + 4 * b * t * d * d + 4 * b * t * d * f
    return arch.encoder_layers * encoder + arch.decoder_layers * decoder + 2 * b * t * d * v


def training_flops(arch: Arch, batch: Batch, skips_padding: bool = False) -> tuple[float, float]:
    """(model FLOPs: real tokens only, hardware FLOPs: what the side computes) of one training
    step, 3x the forward's matmuls (the backward is twice the forward). The hardware FLOPs
    are the padded shape's; for a side that skips padding (ours, `skip_padding`), its
    position-wise matmuls count the real positions only."""
    (source, target_in), target_out = batch
    shape = (source.shape[0], source.shape[1], target_in.shape[1])
    s = np.count_nonzero(source, axis=1).astype(np.float64)  # (B,) real source tokens
    t = np.count_nonzero(target_out, axis=1).astype(np.float64)  # (B,) real target tokens
    real = float(np.sum(_forward_flops(arch, 1, s, t)))
    hardware = float(_forward_flops(arch, *shape))
    if skips_padding:
        hardware -= _position_wise_flops(arch, *shape)
        hardware += float(np.sum(_position_wise_flops(arch, 1, s, t)))
    return 3.0 * real, 3.0 * hardware


@dataclasses.dataclass
class Repetition:
    """One timed pass of one side over the measured batches."""

    step_s: list[float]
    losses: list[float]
    other_cores: float

    @property
    def total_s(self) -> float:
        return sum(self.step_s)


@dataclasses.dataclass
class Side:
    """A framework and precision: its repetitions over the same batches."""

    name: str
    precision: str
    tokens: int  # real target tokens of one pass
    model_flops: float  # of one pass
    hardware_flops: float
    repetitions: list[Repetition] = dataclasses.field(default_factory=list)
    warmup_s: float = math.nan
    check: str = ""

    def tokens_per_s(self) -> list[float]:
        return [self.tokens / r.total_s for r in self.repetitions]

    def median_steps_ms(self) -> list[float]:
        return [1000 * statistics.median(r.step_s) for r in self.repetitions]

    def flops_per_s(self, hardware: bool = False) -> list[float]:
        flops = self.hardware_flops if hardware else self.model_flops
        return [flops / r.total_s for r in self.repetitions]


def spread(values: list[float], digits: int = 0) -> str:
    """'median (fastest-slowest)' of `values`, e.g. '1,374 (1,360-1,401)'."""
    fmt = f"{{:,.{digits}f}}"
    if not values:
        return "-"
    median = fmt.format(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """Prints `rows` under `headers`: the first column left-aligned, the others right."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        cells = [c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells))


def verdict(value: float, target: float) -> str:
    return "met" if value >= target else "MISSED"
