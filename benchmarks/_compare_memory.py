"""Peak memory of ours in `train_compare.py`, with and without remat: one fresh subprocess
(`train_compare.py --memory-child`) per variant.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

import numpy as np
from _compare_data import Batch, load_saved, save_batches
from _compare_timing import print_table

# The memory children run `train_compare.py --memory-child`.
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_compare.py")


def memory_child(args: argparse.Namespace) -> None:
    """Builds ours, trains on the saved batches and prints its peak RSS (or error) as JSON."""
    from _compare_models import build_ours

    from keras_transformer.config import load_config

    config = load_config("multi30k_de_en", ["training.dtype_policy=float32", *args.overrides])
    data = np.load(args.memory_child)
    batches = load_saved(data, "m")
    model = build_ours(config, int(data["vocab"]))
    model.run_eagerly = args.memory_eager
    built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        for (source, target_in), target_out in batches:
            model.train_on_batch((source, target_in), target_out)
    except Exception as e:  # reported by the parent
        message = " ".join(str(e).replace("\x1b[1m", "").replace("\x1b[0m", "").split())
        print("MEMORY " + json.dumps({"error": f"{type(e).__name__}: {message[:300]}"}))
        return
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("MEMORY " + json.dumps({"built_kib": built, "peak_kib": peak}))


def measure_memory(
    args: argparse.Namespace, batches: list[Batch], vocab: int, eager: bool
) -> dict[str, dict]:
    """{"false"/"true" (model.remat): the child's JSON} from one fresh process per variant."""
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "batches.npz")
        save_batches(path, {"m": batches}, vocab=np.array(vocab))
        for remat in ("false", "true"):
            # Linux keeps ru_maxrss across fork + exec, so a child started from this (large)
            # process would report our peak. A shell that forks the child before exiting
            # gives it fresh accounting.
            command = ["/bin/sh", "-c", '"$@"; exit $?', "sh"]
            command += [sys.executable, SCRIPT, "--memory-child", path]
            command += ["--memory-eager"] if eager else []
            for override in [*args.overrides, f"model.remat={remat}"]:
                command += ["--set", override]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            lines = [x for x in done.stdout.splitlines() if x.startswith("MEMORY ")]
            if done.returncode or not lines:
                sys.exit(f"The memory subprocess (remat={remat}) failed:\n{done.stderr[-3000:]}")
            results[remat] = json.loads(lines[-1][len("MEMORY ") :])
    return results


def print_memory(memory: dict[str, dict]) -> bool:
    """Prints the memory table; False when a variant failed (its error is printed)."""
    rows, ok = [], True
    for remat in ("false", "true"):
        m = memory[remat]
        if "error" in m:
            print(f"model.remat={remat}: the training step FAILS: {m['error']}")
            ok = False
            continue
        rows.append(
            [
                f"model.remat={remat}",
                f"{m['built_kib'] / 1024:,.0f}",
                f"{m['peak_kib'] / 1024:,.0f}",
                f"{(m['peak_kib'] - m['built_kib']) / 1024:,.0f}",
            ]
        )
    if rows:
        print_table(["variant", "after build MiB", "peak MiB", "training increase MiB"], rows)
    if ok:
        off, on = memory["false"], memory["true"]
        increase_off = off["peak_kib"] - off["built_kib"]
        increase_on = on["peak_kib"] - on["built_kib"]
        print(
            f"remat / no remat: peak {on['peak_kib'] / off['peak_kib']:.2f}x, training increase "
            f"{increase_on / max(increase_off, 1):.2f}x"
        )
    return ok
