"""What a benchmark prints about the machine, with the standard library only (a benchmark's
parent process, which never imports TensorFlow, uses it too): where its Multi30k copy lies,
the checkout's commit, the CPU model, the busy CPU time of the whole machine, and from it
the cores other processes keep busy (`OtherLoad`), the CPU time the hypervisor took (steal),
and the stretches in which a process sat idle (`CpuSampler`, `idle_stretches`). Imported, it
also sets the package's oneDNN default (`_use_onednn_by_default`), so a benchmark imports it
before TensorFlow."""

from __future__ import annotations

import importlib.util
import math
import os
import platform
import resource
import subprocess
import threading
import time

# The offline Multi30k copy: $KERAS_TRANSFORMER_MULTI30K_DIR (the name is
# `keras_transformer.constants.MULTI30K_DIR_ENV_VAR`'s, not imported: importing the package
# loads TensorFlow; `tests/test_sweep.py` checks the two agree), else
# ../shared/data/multi30k beside the project.
MULTI30K_DIR_ENV_VAR = "KERAS_TRANSFORMER_MULTI30K_DIR"
DEFAULT_MULTI30K_DIR = os.environ.get(
    MULTI30K_DIR_ENV_VAR,
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
    + "/multi30k",
)


def _package_module(name: str):
    """The package's standard-library module `keras_transformer/NAME.py`, loaded from its
    file (importing the package would import TensorFlow); None for a copy of this module
    outside the checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "keras_transformer", f"{name}.py")
    if not os.path.isfile(path):
        return None
    spec = importlib.util.spec_from_file_location(f"_keras_transformer_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _use_onednn_by_default() -> None:
    """The package's oneDNN default (`keras_transformer/onednn.py`) in benchmark processes,
    set before they import TensorFlow, and inherited by the processes they start, so that
    every TensorFlow side runs as the package's users' do."""
    onednn = _package_module("onednn")
    if onednn is not None:
        onednn.use_onednn_by_default()


_use_onednn_by_default()


def commit() -> str:
    """The checkout's short commit (`-dirty` when tracked files differ from it), or
    "unknown" outside a git checkout."""
    here = os.path.dirname(os.path.abspath(__file__))

    def git(*command: str) -> str:
        try:
            done = subprocess.run(["git", *command], cwd=here, capture_output=True, text=True)
        except OSError:
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


# The vector extensions that decide a CPU's matmul speed, widest first: a model name such as
# "AMD EPYC" is the same for an AVX2-only host and one with AVX512_BF16.
VECTOR_FLAGS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")
# The CPU facts the package itself acts on (`training.dtype_policy: auto`).
_hardware = _package_module("hardware")


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name with the vector extensions of `VECTOR_FLAGS` it has ("AMD EPYC
    (AVX512_BF16, AVX512F, AVX2)", "AMD EPYC (AVX2)"), else what `platform` knows."""
    name, flags = _hardware.cpuinfo_fields(cpuinfo)
    name = name or platform.processor() or platform.machine()
    found = [flag.upper() for flag in VECTOR_FLAGS if flag in (flags or ())]
    return f"{name} ({', '.join(found)})" if found else name


def native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool | None:
    """Whether the CPU has bf16 instructions (`keras_transformer.hardware.BF16_CPU_FLAGS`);
    None where its flags are unknown (no `/proc/cpuinfo`, or one without a flags line)."""
    return _hardware.native_bf16_cpu(cpuinfo)


def _cpu_fields() -> list[int]:
    """The first 8 counters of /proc/stat's `cpu` line, in clock ticks: user, nice, system,
    idle, iowait, irq, softirq, steal (guest time is left out, as the kernel already counts
    it in user time)."""
    with open("/proc/stat", encoding="ascii") as f:
        return [int(v) for v in f.readline().split()[1:9]]


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of all cores since boot (/proc/stat): busy is the time
    processes (and the kernel for them) ran; iowait counts as idle, and steal (the time the
    hypervisor ran someone else's machine) is in the total only (`machine_steal_seconds`)."""
    fields = _cpu_fields()
    ticks = os.sysconf("SC_CLK_TCK")
    busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6]
    return busy / ticks, sum(fields) / ticks


def machine_steal_seconds() -> float:
    """CPU seconds since boot that the hypervisor gave to other virtual machines while this
    one's cores wanted to run (/proc/stat's steal): a busy host slows every step without
    any process here being busy."""
    return _cpu_fields()[7] / os.sysconf("SC_CLK_TCK")


def _busy_and_own_seconds() -> tuple[float, float] | None:
    """(busy CPU seconds of the machine, CPU seconds of this process), or None without
    /proc/stat."""
    try:
        busy = machine_cpu_seconds()[0]
    except (OSError, ValueError, IndexError):
        return None
    own = resource.getrusage(resource.RUSAGE_SELF)  # all of this process' threads
    return busy, own.ru_utime + own.ru_stime


class OtherLoad:
    """Measures how many cores other processes keep busy between `start()` and `cores()`:
    the machine's busy CPU seconds less this process' own, over the wall time."""

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


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process `pid`, all its threads (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_stretches(
    samples: list[tuple[float, float]], *, below_cores: float = 0.3, min_seconds: float = 8.0
) -> list[tuple[float, float]]:
    """`(start, seconds)` of each stretch of at least `min_seconds` in which a process used
    fewer than `below_cores` cores, from `(wall seconds, CPU seconds)` samples in time
    order (`CpuSampler`): a process that should keep its cores busy (training) but waits."""
    stretches, start = [], None
    for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
        if (c1 - c0) / (t1 - t0) < below_cores:
            start = t0 if start is None else start
            continue
        if start is not None and t0 - start >= min_seconds:
            stretches.append((start, t0 - start))
        start = None
    if start is not None and samples[-1][0] - start >= min_seconds:
        stretches.append((start, samples[-1][0] - start))
    return stretches


class CpuSampler:
    """Samples a process' CPU seconds every `interval` seconds, in a thread, from `start()`
    until `stop()` or the process' end; `stop()` returns the `(wall, CPU)` samples."""

    def __init__(self, pid: int, interval: float = 1.0):
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, float]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._done.is_set():
            try:
                self.samples.append((time.monotonic(), process_cpu_seconds(self.pid)))
            except (OSError, ValueError, IndexError):  # the process has ended
                return
            self._done.wait(self.interval)

    def stop(self) -> list[tuple[float, float]]:
        self._done.set()
        self._thread.join()
        return self.samples
