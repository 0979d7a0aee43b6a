"""What the machine's CPU computes natively, read from `/proc/cpuinfo` with the standard
library only (benchmarks' parent processes, which never import TensorFlow, load it too).

A CPU with one of `BF16_CPU_FLAGS` multiplies bf16 matrices in hardware (AVX512_BF16, or
AMX on Intel Xeons since Sapphire Rapids): `benchmarks/train_compare.py`'s peaks put bf16
matmuls at 1.9x float32's on a 2-core AMD EPYC with AVX512_BF16 and 6.5x on a 2-core Xeon
with AMX. Without them TensorFlow and PyTorch emulate bf16, slower than float32.
"""

from __future__ import annotations

CPUINFO = "/proc/cpuinfo"
# The CPU flags (as `/proc/cpuinfo` spells them) of bf16 matrix instructions.
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


def cpuinfo_fields(cpuinfo: str = CPUINFO) -> tuple[str, set[str] | None]:
    """The first model name and flag set in `cpuinfo`.

    Args:
        cpuinfo: the file to read (`/proc/cpuinfo`).

    Returns:
        `(model_name, flags)`: `""` and None where absent (no such file, as on macOS or
        Windows, or one without a flags line).
    """
    name, flags = "", None
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not name:
                    name = value.strip()
                elif key.strip() == "flags" and flags is None:
                    flags = set(value.split())
    except OSError:
        pass
    return name, flags


def native_bf16_cpu(cpuinfo: str = CPUINFO) -> bool | None:
    """Whether the CPU has bf16 matrix instructions (`BF16_CPU_FLAGS`).

    Args:
        cpuinfo: the file to read (`/proc/cpuinfo`).

    Returns:
        True or False; None where the CPU's flags are unknown.

    Example:
    >>> native_bf16_cpu("/nonexistent") is None
    True
    """
    flags = cpuinfo_fields(cpuinfo)[1]
    return None if flags is None else any(flag in flags for flag in BF16_CPU_FLAGS)
