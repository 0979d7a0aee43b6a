"""TensorFlow's oneDNN kernels on every x86-64 Linux CPU, not only the newest.

TensorFlow turns its oneDNN CPU kernels (fused matmuls, LayerNorm, softmax, transposes)
on by default only where the CPU has AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX; elsewhere
(an AVX2-only CPU) it runs Eigen's kernels unless `TF_ENABLE_ONEDNN_OPTS=1` is set. It reads
that variable once, while `tensorflow` is imported. On a 2-core AMD EPYC with AVX2 and no
AVX512, oneDNN made the recipe's training step 1.39x as fast (`benchmarks/train_profile.py`:
2,958 -> 2,135 ms a traced step; 1.45x in an earlier run). Decoding (`benchmarks/decoding.py`)
moved both ways between two runs, cell by cell, and is not the reason for this default; the
exported model served by the stand-in (`benchmarks/serving.py`, random weights, one run each)
answered 1.44x the sentences a second unbatched and 1.23x with batching at concurrency 8.

So the package sets `TF_ENABLE_ONEDNN_OPTS=1` when it is imported before TensorFlow on an
x86-64 Linux machine and the variable is unset: the CLI, the serving stand-in, and scripts
that import `keras_transformer` first. A value the user set is kept (`0` keeps Eigen); a
process that imported TensorFlow first keeps TensorFlow's choice (set the variable yourself
before importing it). On CPUs where TensorFlow already enables oneDNN nothing changes.
"""

from __future__ import annotations

import os
import platform
import sys

ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"
_X86_64 = ("x86_64", "amd64")


def use_onednn_by_default() -> bool:
    """Sets `TF_ENABLE_ONEDNN_OPTS=1` if it is unset, TensorFlow is not imported yet and
    this is x86-64 Linux.

    Returns:
        Whether the variable was set here.

    Example:
    >>> import tensorflow  # imported first: TensorFlow's own choice stands
    >>> use_onednn_by_default()
    False
    """
    if (
        ONEDNN_ENV in os.environ
        or "tensorflow" in sys.modules
        or sys.platform != "linux"
        or platform.machine().lower() not in _X86_64
    ):
        return False
    os.environ[ONEDNN_ENV] = "1"
    return True
