"""The parent of `train_compare.py`: starts one worker process per side, warms each up, takes
the common matmul peak, runs the interleaved timed rounds and the memory children, then
hands the results to `_compare_report.py`. Imports neither TensorFlow nor PyTorch."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import time

import numpy as np
from _compare_data import load_saved, real_tokens
from _compare_report import PEAK_KEY, describe_machine, print_peaks, print_results
from _compare_spec import Prepared
from _compare_timing import Repetition, Side, training_flops

FIXED = "ours/fp32 fixed sentences"
RETRIES = 2


class Worker:
    """One side's process; `ask` sends a command and returns its JSON answer."""

    def __init__(self, side: str, command: list[str], log_path: str):
        self.side, self.log_path = side, log_path
        self.log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True
        )

    def read(self) -> dict:
        for line in self.process.stdout:
            if line.startswith("MSG "):
                message = json.loads(line[4:])
                if message.get("event") == "error":
                    break
                return message
        self.process.kill()
        with open(self.log_path, encoding="utf-8") as f:
            tail = f.read()[-3000:]
        sys.exit(f"train_compare.py: the {self.side} worker failed:\n{tail}")

    def ask(self, command: str) -> dict:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
            self.process.wait(timeout=60)
        self.log.close()


def _versions() -> str:
    found = []
    for name, label in (
        ("tensorflow", "TensorFlow"),
        ("keras", "Keras"),
        ("keras-hub", "KerasHub"),
        ("torch", "PyTorch"),
    ):
        try:
            found.append(f"{label} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return ", ".join(found)


def _timed(worker: Worker, command: str, max_others: float) -> tuple[Repetition, int]:
    """One timed pass, run again (at most RETRIES times) while others took > max_others."""
    attempt = 0
    while True:
        answer = worker.ask(command)
        repetition = Repetition(answer["step_s"], answer["losses"], answer["other_cores"])
        if not repetition.other_cores > max_others or attempt == RETRIES:
            return repetition, attempt
        attempt += 1


def run_comparison(args: argparse.Namespace, sides: list[str], prepared: Prepared, child):
    describe_machine(_versions(), args.torch_threads)
    for line in prepared.description:
        print(line)
    data = np.load(prepared.path("batches.npz"))
    measured = load_saved(data, "b")[prepared.warmup :]
    fixed = load_saved(data, "f")

    def side_record(name: str, batches, skips_padding: bool = False) -> Side:
        flops = [training_flops(prepared.arch, b, skips_padding) for b in batches]
        return Side(
            name,
            name.split("/")[1].split()[0],
            sum(real_tokens(b) for b in batches),
            sum(f[0] for f in flops),
            sum(f[1] for f in flops),
        )

    records = {side: side_record(side, measured) for side in sides}
    if not args.no_fixed:
        records[FIXED] = side_record(FIXED, fixed)
    workers: dict[str, Worker] = {}
    try:
        for side in sides:
            flags = ["--worker", side, "--folder", prepared.folder]
            flags += ["--torch-dynamic", args.torch_dynamic, "--torch-threads"]
            flags += [str(args.torch_threads)]
            log = prepared.path(side.replace("/", "_") + ".log")
            workers[side] = Worker(side, child(*flags, args=args), log)
        for side, worker in workers.items():
            built = worker.read()
            if built["skips_padding"]:  # its hardware FLOPs leave the padding out
                records[side] = side_record(side, measured, skips_padding=True)
                if side == "ours/fp32" and FIXED in records:
                    records[FIXED] = side_record(FIXED, fixed, skips_padding=True)
            records[side].check = f"{built['check']:.1e}"
            print(f"built {side}: max |logits - ours| on batch 1 {built['check']:.1e}", end="")
            print(f" (max |logit| {built['scale']:.1f})")

        print("\nwarm-up passes (untimed, one side at a time):")
        for side, worker in workers.items():
            records[side].warmup_s = worker.ask("warmup")["seconds"]
            print(f"  {side}: {records[side].warmup_s:.1f} s", flush=True)
        if FIXED in records:
            records[FIXED].warmup_s = workers["ours/fp32"].ask("warmup-fixed")["seconds"]
            print(f"  {FIXED}: {records[FIXED].warmup_s:.1f} s", flush=True)

        peaks = {}
        frameworks = ["tf"] + (["torch"] if any(s.startswith("torch") for s in sides) else [])
        dtypes = ",".join(sorted({PEAK_KEY[r.precision] for r in records.values()}))
        for framework in frameworks:
            done = subprocess.run(
                child("--peak", framework, "--peak-dtypes", dtypes,
                      "--peak-seconds", str(args.peak_seconds),
                      "--peak-warmup", str(args.peak_warmup),
                      "--torch-threads", str(args.torch_threads), args=args),
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            answers = [x for x in done.stdout.splitlines() if x.startswith("MSG ")]
            if done.returncode or not answers:
                sys.exit(f"train_compare.py: the {framework} peak failed:\n{done.stderr[-3000:]}")
            peaks[framework] = json.loads(answers[-1][4:])
        common = print_peaks(peaks, args)

        order = list(records)
        print(f"\ntimed rounds ({args.repeats}, each side in turn, order rotating):", flush=True)
        for round_index in range(args.repeats):
            start = time.perf_counter()
            shift = round_index % len(order)
            for name in order[shift:] + order[:shift]:
                worker = workers["ours/fp32" if name == FIXED else name]
                repetition, retries = _timed(
                    worker, "run-fixed" if name == FIXED else "run", args.max_others
                )
                records[name].repetitions.append(repetition)
                if retries:
                    print(f"  {name}: {retries} pass(es) discarded (other processes busy)")
            print(f"  round {round_index + 1}: {time.perf_counter() - start:.0f} s", flush=True)
    finally:
        for worker in workers.values():
            worker.close()
    print_results(records, common, args.max_others, FIXED)

    if args.memory_steps:
        from _compare_memory import measure_memory, print_memory

        batches = measured[: args.memory_steps]
        print(
            f"\npeak RSS of ours (fp32), a fresh process each, {len(batches)} training steps "
            "(train_on_batch) on the first measured batches, as the recipe batches them:"
        )
        if not print_memory(measure_memory(args, batches, prepared.arch.vocab, eager=False)):
            print("the same in eager mode (run_eagerly=True), where remat runs:")
            print_memory(measure_memory(args, batches, prepared.arch.vocab, eager=True))
    print(f"\n(worker logs were in {os.path.basename(prepared.folder)}, now removed)")
