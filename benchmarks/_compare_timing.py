"""Timing of `train_compare.py`: training steps, FLOPs, matmul throughput, the CPU other
processes take meanwhile, and the tables.
"""

from __future__ import annotations

import dataclasses
import math
import os
import resource
import time
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf
from _compare_data import Batch, real_tokens
from _compare_models import Arch


def _busy_and_own_seconds() -> tuple[float, float] | None:
    """(CPU seconds all processes have been busy, CPU seconds of this process), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    own = resource.getrusage(resource.RUSAGE_SELF)
    return busy, own.ru_utime + own.ru_stime


class OtherLoad:
    """Measures how many cores other processes keep busy between `start()` and `cores()`."""

    def start(self) -> None:
        self.wall = time.perf_counter()
        self.counters = _busy_and_own_seconds()

    def cores(self) -> float:
        """Cores used by other processes since `start()` (NaN where /proc/stat is missing)."""
        now = _busy_and_own_seconds()
        if now is None or self.counters is None:
            return math.nan
        busy, own = now[0] - self.counters[0], now[1] - self.counters[1]
        return max(0.0, busy - own) / (time.perf_counter() - self.wall)


def training_flops(arch: Arch, batch: Batch) -> float:
    """Matmul FLOPs of one training step on `batch` (see train_compare.py's docstring)."""
    (source, target_in), _ = batch
    b, s = source.shape
    t = target_in.shape[1]
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
    forward = arch.encoder_layers * encoder + arch.decoder_layers * decoder + 2 * b * t * d * v
    return 3.0 * forward


def matmul_gflops(framework: str, size: int, repeats: int) -> float:
    """Best fp32 GFLOP/s of a (size, size) x (size, size) matmul with TF or PyTorch."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    if framework == "tf":
        a, b = tf.constant(a), tf.constant(b)

        def run():
            return tf.linalg.matmul(a, b).numpy()

    else:
        import torch

        a, b = torch.from_numpy(a), torch.from_numpy(b)

        def run():
            return torch.matmul(a, b)

    run()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


@dataclasses.dataclass
class Timing:
    """The warm-up and measured steps of one implementation."""

    name: str
    warmup_s: float
    step_s: list[float]
    tokens: list[int]
    flops: list[float]
    losses: list[float]
    other_cores: float = math.nan

    @property
    def total_s(self) -> float:
        return sum(self.step_s)

    @property
    def tokens_per_s(self) -> float:
        return sum(self.tokens) / self.total_s

    @property
    def flops_per_s(self) -> float:
        return sum(self.flops) / self.total_s


def keras_step(model: keras.Model) -> Callable[[Batch], float]:
    def step(batch: Batch) -> float:
        (source, target_in), target_out = batch
        logs = model.train_on_batch((source, target_in), target_out, return_dict=True)
        return float(logs["loss"])

    return step


def torch_step(parts) -> Callable[[Batch], float]:
    import torch

    model, optimizer, schedule, loss_fn = parts
    model.train()

    def step(batch: Batch) -> float:
        (source, target_in), target_out = batch
        source = torch.from_numpy(source)
        target_in = torch.from_numpy(target_in)
        labels = torch.from_numpy(target_out).long()
        optimizer.zero_grad(set_to_none=True)
        logits = model(source, target_in)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        optimizer.step()
        schedule.step()
        with torch.no_grad():  # the token accuracy, as the Keras models' metric computes it
            mask = labels != 0
            correct = ((logits.argmax(-1) == labels) & mask).sum()
            (correct / mask.sum()).item()
        return float(loss.item())

    return step


def run_steps(
    name: str,
    step: Callable[[Batch], float],
    batches: list[Batch],
    warmup: int,
    arch: Arch,
    before_step: Callable[[], None] | None = None,
) -> Timing:
    """Runs `warmup` untimed steps, then one timed step per remaining batch."""
    start = time.perf_counter()
    for batch in batches[:warmup]:
        step(batch)
    warmup_s = time.perf_counter() - start
    timing = Timing(name, warmup_s, [], [], [], [])
    load = OtherLoad()
    load.start()
    for batch in batches[warmup:]:
        if before_step is not None:
            before_step()
        start = time.perf_counter()
        loss = step(batch)
        timing.step_s.append(time.perf_counter() - start)
        timing.tokens.append(real_tokens(batch))
        timing.flops.append(training_flops(arch, batch))
        timing.losses.append(loss)
    timing.other_cores = load.cores()
    return timing


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """Prints `rows` under `headers`: the first column left-aligned, the others right."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        cells = [c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells))


def verdict(value: float, target: float, strict: bool = False) -> str:
    met = value > target if strict else value >= target
    return "met" if met else "MISSED"
