"""What a benchmark prints about the machine, with the standard library only (a benchmark's
parent process, which never imports TensorFlow, uses it too): the CPU model and the busy
CPU time of the whole machine, from which other processes' share is read."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of all cores since boot (/proc/stat; iowait counts as idle)."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / ticks, sum(fields) / ticks
