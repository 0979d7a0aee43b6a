"""The measurements of `gpu.py`: training steps under a `MirroredStrategy`, the matmul peak
and XLA decoding. Imported only after `gpu.py` has configured TensorFlow's devices.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import time
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from _compare_spec import Arch
from _compare_timing import training_flops
from train_throughput import _accuracy_metric

from keras_transformer.predictors import Translator
from keras_transformer.runner import build_and_compile


@dataclasses.dataclass
class TrainResult:
    """One training row: the measured steps of one strategy."""

    model: keras.Model
    step_ms: list[float]
    tokens_per_s: float
    global_tokens: float  # real target tokens per measured step, all replicas
    flops_per_token: float  # training FLOPs per real target token (padding included)
    shapes: int  # the distinct batch shapes warmed up
    warmup_s: float  # the steps before the measured ones, XLA compilation included


class StepMeter(keras.callbacks.Callback):
    """The time and the real target tokens so far (the accuracy metric's count, summed over
    the replicas) at the end of every step; reading the count waits for the step."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[tuple[float, float]] = []

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        count = float(_accuracy_metric(self.model.metrics).count.numpy())
        self.marks.append((time.perf_counter(), count))


def fixed_shape_batches(task: Any, data: Any, tokenizers: tuple[Any, Any]) -> tf.data.Dataset:
    """The task's training batches with full batches only, so every batch has one of a
    fixed set of shapes (with `data.pad_to_bucket`)."""
    return task.make_batches(data, tokenizers, shuffle=True, drop_remainder=True)


def survey(batches: tf.data.Dataset, arch: Arch) -> tuple[list[Any], float]:
    """One epoch of `batches`: one batch of each distinct shape, and the training FLOPs per
    real target token."""
    by_shape: dict[tuple, Any] = {}
    flops = tokens = 0.0
    for batch in batches.as_numpy_iterator():
        (source, target_in), target_out = batch
        by_shape.setdefault((source.shape, target_in.shape), batch)
        flops += training_flops(arch, batch)[0]  # real tokens only (MFU)
        tokens += np.count_nonzero(target_out)
    if not by_shape:
        raise SystemExit("gpu.py: the training data makes no full batch; lower the batch size.")
    return list(by_shape.values()), flops / tokens


def train_row(
    task: Any,
    data: Any,
    tokenizers: tuple[Any, Any],
    strategy: tf.distribute.Strategy,
    steps: int,
    warmup: int,
) -> TrainResult:
    """Trains the task's model under `strategy` (XLA per replica) and times the last `steps`
    of `len(shapes) + warmup + steps` steps; `task.config` holds the global batch."""
    config = task.config
    t = config.training
    arch = Arch.from_config(config, tokenizers[1].vocab_size)
    batches = fixed_shape_batches(task, data, tokenizers)
    shapes, flops_per_token = survey(batches, arch)
    warm = functools.reduce(
        lambda a, b: a.concatenate(b), [tf.data.Dataset.from_tensors(b) for b in shapes]
    )
    stream = warm.concatenate(batches.repeat())
    total = len(shapes) + warmup + steps
    keras.utils.set_random_seed(t.seed)
    # The rate does not change the step time; a linear decay needs an end past warmup.
    model, _ = build_and_compile(
        task, tokenizers, None, strategy, max(total, t.warmup_steps + 1), jit_compile=True
    )
    meter = StepMeter()
    start = time.perf_counter()
    model.fit(stream, epochs=1, steps_per_epoch=total, callbacks=[meter], verbose=0, shuffle=False)
    marks = meter.marks[-(steps + 1) :]
    times = [b[0] - a[0] for a, b in zip(marks, marks[1:])]
    tokens = marks[-1][1] - marks[0][1]
    return TrainResult(
        model=model,
        step_ms=[1e3 * s for s in times],
        tokens_per_s=tokens / sum(times),
        global_tokens=tokens / steps,
        flops_per_token=flops_per_token,
        shapes=len(shapes),
        warmup_s=marks[0][0] - start,
    )


def matmul_peak(device: str, dtype: str, sizes: Sequence[int], repeats: int) -> tuple[float, int]:
    """The best FLOP/s of an XLA-compiled (n, n) x (n, n) matmul on `device` over `sizes`
    and `repeats` timings (each enough back-to-back calls for ~0.2 s, after a warm-up),
    and the size it was reached at."""
    matmul = tf.function(tf.linalg.matmul, jit_compile=True)
    best, best_size = 0.0, sizes[0]
    for n in sizes:
        with tf.device(device):
            a = tf.cast(tf.random.normal((n, n), seed=1), dtype)
            b = tf.cast(tf.random.normal((n, n), seed=2), dtype)

            def run(calls: int, a: tf.Tensor = a, b: tf.Tensor = b) -> float:
                start = time.perf_counter()
                for _ in range(calls):
                    c = matmul(a, b)
                c[0, 0].numpy()  # waits for the queued calls
                return (time.perf_counter() - start) / calls

            run(2)  # compiles, allocates
            calls = max(1, min(100, math.ceil(0.2 / run(1))))
            seconds = min(run(calls) for _ in range(repeats))
        if 2 * n**3 / seconds > best:
            best, best_size = 2 * n**3 / seconds, n
    return best, best_size


def decode_rows(
    model: keras.Model,
    tokenizers: tuple[Any, Any],
    sentences: list[str],
    device: str,
    decodings: Sequence[tuple[str, dict]],
    batch_size: int,
    repeats: int,
) -> list[list[str]]:
    """Decoding rows on `device`: the plain copy of `model`, through a `Translator` (XLA,
    its length limits) on the sentences' ids, timed over `repeats` passes after one."""
    rows = []
    with tf.device(device):
        plain = model.to_plain()
        for name, options in decodings:
            translator = Translator(
                plain, *tokenizers, batch_size=batch_size, jit_compile=True, **options
            )
            ids = translator.encode_sources(sentences)
            start = time.perf_counter()
            tokens, _ = translator.decode_ids(ids)
            first = time.perf_counter() - start
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                tokens, _ = translator.decode_ids(ids)
                times.append(time.perf_counter() - start)
            median = statistics.median(times)
            decoded = statistics.mean(int(np.count_nonzero(t[0])) for t in tokens)
            rows.append(
                [
                    name,
                    f"{len(sentences) / median:,.1f}",
                    f"{median:.3f} ({min(times):.3f}-{max(times):.3f})",
                    f"{decoded:.1f}",
                    f"{first:.1f}",
                ]
            )
    return rows
