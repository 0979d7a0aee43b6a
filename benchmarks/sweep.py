"""Trains a list of recipe variants under one time budget and prints validation BLEU for each.

A sweep file (YAML) names a packaged config (or a config file), the budget in minutes
(or null: no time budget, the config's `training.epochs`, for variants compared step for
step),
overrides every variant shares, and the variants, each a set of `--set` overrides:

```yaml
config: multi30k_de_en
budget_minutes: 12
common: {training.warmup_steps: 200}
variants:
  baseline: {}
  bf16: {training.dtype_policy: mixed_bfloat16}
```

Each variant trains in its own process (`keras-transformer train`, a fresh run directory
`WORK_DIR/NAME`, `training.max_minutes` set to the budget, so the learning rate reaches zero
when it ends), one after the other. Then this process translates the whole validation split
(greedy, and beam search with `--beam-size`) and scores it with sacreBLEU (cased, 13a). The
test split is never read here: choices are made on validation. Each variant's row is saved
as `WORK_DIR/NAME/sweep.json` (a variant that has one is not trained again, so an interrupted
sweep goes on where it stopped), and the table is printed at the end: steps, minutes, the
validation BLEU curve the run logged while training (`bleu.jsonl`: greedy, the recipe's
`bleu_max_sentences`), BLEU on the whole split, the beam outputs' length ratio, outputs that
loop (a word 3-gram three times or more), the cores other processes kept busy, and the
cores the hypervisor took (steal: on a shared host a run gets fewer steps for its minutes
with nothing else running here), the seconds the training process sat idle (stalls:
stretches of 8 s or more under 0.3 cores, sampled every second from /proc), and TensorFlow's
float32 matmul GFLOP/s just before and just after the training (`_compare_peak.speed_probe`:
a host that runs slower on some days, with no steal to show it, shows there).
`--average-last N` (repeatable) adds a row `NAME+avgN` for each variant: the same run scored
with the mean of its last N epochs' weights (checkpoint averaging; the recipe keeps 5), so
the two rows compare averaging alone, at no training cost. `--no-repeat-ngram N`
(repeatable) likewise adds `NAME+norepeatN`: the same weights decoded with repeated n-gram
blocking (`no_repeat_ngram_size=N`, greedy and beam), the guard against looping output.

    python benchmarks/sweep.py benchmarks/sweeps/multi30k_screen.yaml --work-dir runs/sweep
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter

import yaml
from _compare_peak import speed_probe
from _machine import (
    DEFAULT_MULTI30K_DIR,
    CpuSampler,
    cpu_model,
    idle_stretches,
    machine_cpu_seconds,
    machine_steal_seconds,
)

ROW_FILE = "sweep.json"
TRAINED_FILE = "sweep_train.json"  # written when training ends: scoring alone can be redone
SWEEP_KEYS = {"config", "budget_minutes", "common", "variants"}


def load_sweep(path: str) -> dict:
    """Reads and checks a sweep file; returns its fields with `common` defaulted to {}."""
    with open(path, encoding="utf-8") as f:
        sweep = yaml.safe_load(f)
    if not isinstance(sweep, dict) or not {"config", "budget_minutes", "variants"} <= set(sweep):
        raise ValueError(
            f"Received an invalid sweep file {path}: expected a mapping with the keys "
            f"{sorted(SWEEP_KEYS)} ('common' optional). Received: {sweep!r:.200}"
        )
    unknown = set(sweep) - SWEEP_KEYS
    if unknown:
        raise ValueError(
            f"Received unknown keys {sorted(unknown)} in the sweep file {path}, expected only "
            f"{sorted(SWEEP_KEYS)}"
        )
    budget = sweep["budget_minutes"]
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0
    ):
        raise ValueError(
            "Received an invalid value for `budget_minutes`, expected a positive number of "
            f"minutes or null (the config's epochs). Received: budget_minutes={budget!r}"
        )
    sweep.setdefault("common", {})
    variants = sweep["variants"]
    if not isinstance(variants, dict) or not variants:
        raise ValueError(
            "Received an invalid value for `variants`, expected a mapping of names to "
            f"overrides, at least one. Received: variants={variants!r:.200}"
        )
    for name, overrides in [("common", sweep["common"]), *variants.items()]:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(name)):
            raise ValueError(
                "Received an invalid variant name, expected letters, digits, '_', '.' or '-' "
                f"(it names a folder). Received: {name!r}"
            )
        if overrides is not None and not isinstance(overrides, dict):
            raise ValueError(
                f"Received invalid overrides for {name!r}, expected a mapping of config keys "
                f"to values. Received: {overrides!r}"
            )
    return sweep


def variant_overrides(sweep: dict, name: str) -> list[str]:
    """The `--set` overrides of a variant: the budget (null: none), then `common`, then its
    own."""
    merged = {"training.max_minutes": sweep["budget_minutes"], **(sweep["common"] or {})}
    merged.update(sweep["variants"][name] or {})
    return [f"{key}={json.dumps(value)}" for key, value in merged.items()]


def loops(sentence: str) -> bool:
    """Whether a word 3-gram occurs three times or more in the sentence."""
    words = sentence.split()
    counts = Counter(tuple(words[i : i + 3]) for i in range(len(words) - 2))
    return bool(counts) and max(counts.values()) >= 3


def train_variant(sweep: dict, name: str, run_dir: str, multi30k: str) -> dict:
    """Trains one variant in its own process; returns its minutes and the others' cores."""
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)  # a half-trained run would resume on another clock
    command = [
        sys.executable,
        "-m",
        "keras_transformer.cli",
        "train",
        "--config",
        sweep["config"],
        "--run-dir",
        run_dir,
        "--set",
        f"translation.local_dir={multi30k}",
    ]
    for override in variant_overrides(sweep, name):
        command += ["--set", override]
    probe_before = speed_probe()  # before the clocks below start
    busy_before, steal_before = machine_cpu_seconds()[0], machine_steal_seconds()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "sweep_train.log"), "w", encoding="utf-8") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        sampler = CpuSampler(process.pid).start()
        code = process.wait()
    wall = time.perf_counter() - start
    stalls = idle_stretches(sampler.stop())
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_seconds = (children.ru_utime - children_before.ru_utime) + (
        children.ru_stime - children_before.ru_stime
    )
    if code:
        raise RuntimeError(
            f"Training the variant {name!r} failed (exit status {code}); its log: "
            f"{os.path.join(run_dir, 'sweep_train.log')}"
        )
    others = max(0.0, machine_cpu_seconds()[0] - busy_before - child_seconds) / wall
    steal = (machine_steal_seconds() - steal_before) / wall
    return {
        "wall_minutes": wall / 60,
        "others_cores": others,
        "steal_cores": steal,
        "stalled_seconds": sum(seconds for _, seconds in stalls),
        "matmul_gflops": [probe_before, speed_probe()],
    }


def score_variant(
    run_dir: str,
    multi30k: str,
    beam_size: int | None,
    average_last: int | None = None,
    no_repeat_ngram_size: int = 0,
) -> dict:
    """BLEU of the whole validation split, greedy and (with `beam_size`) beam search; with
    `average_last`, of the mean of the weights saved at the end of the run's last N epochs
    (checkpoint averaging, `keras-transformer average`) instead of its final weights; with
    `no_repeat_ngram_size`, decoded with repeated n-gram blocking."""
    from recipe import SETS, read

    from keras_transformer.evaluation import score_corpus
    from keras_transformer.predictors import Translator
    from keras_transformer.run_dir import RunPaths
    from keras_transformer.training.averaging import average_weights
    from keras_transformer.training.budget import epoch_weight_files

    files = epoch_weight_files(RunPaths(run_dir).checkpoints)
    if average_last and len(files) < average_last:
        raise ValueError(
            f"Received --average-last {average_last}, but {run_dir} kept the weights of "
            f"{len(files)} epoch(s). Expected at most {len(files)} (more are kept with "
            "training.average_last)."
        )
    sources, references = (read(multi30k, name) for name in SETS["val"])
    row = {}
    for method, beam in (("greedy", 1), ("beam", beam_size)):
        if not beam:
            continue
        translator = Translator.from_run_dir(
            run_dir, batch_size=128, beam_size=beam, no_repeat_ngram_size=no_repeat_ngram_size
        )
        if average_last:
            average_weights(translator.model, files[-average_last:])
        hypotheses = translator.translate(sources)
        result = score_corpus(hypotheses, references, metrics=("bleu",))
        ratio = re.search(r"ratio = ([0-9.]+)", result.details["bleu"])
        row[f"val_{method}"] = round(result.scores["bleu"], 2)
        row[f"val_{method}_ratio"] = float(ratio.group(1)) if ratio else None
        row[f"val_{method}_loops"] = sum(loops(h) for h in hypotheses)
        row["signature"] = result.signatures["bleu"]
    return row


def rescored_row(row: dict, args: argparse.Namespace, suffix: str, **options) -> dict:
    """A trained variant's row scored again (`NAME+SUFFIX`, saved as
    `WORK_DIR/NAME/sweep_SUFFIX.json`) with `score_variant`'s `options`: the same training,
    so the two rows compare the options alone."""
    run_dir = os.path.join(args.work_dir, row["variant"])
    path = os.path.join(run_dir, f"sweep_{suffix}.json")
    if not os.path.exists(path):
        scores = score_variant(run_dir, args.multi30k_dir, args.beam_size, **options)
        write_json(path, {**row, "variant": f"{row['variant']}+{suffix}", **scores})
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def run_variant(sweep: dict, name: str, args: argparse.Namespace) -> dict:
    run_dir = os.path.join(args.work_dir, name)
    row_path = os.path.join(run_dir, ROW_FILE)
    if os.path.exists(row_path):
        with open(row_path, encoding="utf-8") as f:
            return json.load(f)
    row = {"variant": name, "overrides": dict(sweep["variants"][name] or {})}
    trained_path = os.path.join(run_dir, TRAINED_FILE)
    if not os.path.exists(trained_path):
        trained = train_variant(sweep, name, run_dir, args.multi30k_dir)
        write_json(trained_path, trained)
    with open(trained_path, encoding="utf-8") as f:
        row.update(json.load(f))
    with open(os.path.join(run_dir, "bleu.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    row["curve"] = [(r["minutes"], r["bleu"]) for r in records]
    row["epochs"], row["steps"] = records[-1]["epoch"], records[-1]["step"]
    row.update(score_variant(run_dir, args.multi30k_dir, args.beam_size))
    write_json(row_path, row)
    return row


def write_json(path: str, value: dict) -> None:
    """Writes `value` to `path` whole or not at all."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1)
    os.replace(path + ".tmp", path)


def table(rows: list[dict]) -> str:
    """The sweep's Markdown table, one row per variant."""
    lines = [
        "| variant | overrides | steps (epochs) | minutes | val BLEU while training "
        "(minutes: BLEU) | val greedy | val beam | beam ratio | looping | others | steal "
        "| stalled s | fp32 GFLOP/s before, after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        overrides = ", ".join(f"{k}={v}" for k, v in r["overrides"].items()) or "(none)"
        curve = ", ".join(f"{m:.0f}: {b:.1f}" for m, b in r["curve"])
        beam = f"{r['val_beam']:.2f}" if "val_beam" in r else "-"
        ratio = f"{r['val_beam_ratio']:.3f}" if "val_beam" in r else "-"
        looping = r.get("val_beam_loops", r["val_greedy_loops"])
        steal = f"{r['steal_cores']:.2f}" if "steal_cores" in r else "-"  # older rows: none
        stalled = f"{r['stalled_seconds']:.0f}" if "stalled_seconds" in r else "-"
        probe = ", ".join(f"{g:.0f}" for g in r["matmul_gflops"]) if "matmul_gflops" in r else "-"
        lines.append(
            f"| {r['variant']} | {overrides} | {r['steps']} ({r['epochs']}) "
            f"| {r['wall_minutes']:.1f} | {curve} | {r['val_greedy']:.2f} | {beam} | {ratio} "
            f"| {looping} | {r['others_cores']:.2f} | {steal} | {stalled} | {probe} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="the sweep file (YAML)")
    parser.add_argument("--work-dir", required=True, help="one run directory per variant here")
    parser.add_argument("--only", action="append", default=[], help="train only these variants")
    parser.add_argument("--beam-size", type=int, default=None, help="also score beam search")
    parser.add_argument(
        "--average-last",
        type=int,
        action="append",
        default=[],
        help="also score each variant with its last N epochs' weights averaged (repeatable)",
    )
    parser.add_argument(
        "--no-repeat-ngram",
        type=int,
        action="append",
        default=[],
        help="also score each variant decoded with no_repeat_ngram_size=N (repeatable)",
    )
    parser.add_argument("--multi30k-dir", default=DEFAULT_MULTI30K_DIR)
    args = parser.parse_args()
    if any(n < 1 for n in args.average_last):
        parser.error(f"--average-last expects positive numbers of epochs; got {args.average_last}")
    if any(n < 1 for n in args.no_repeat_ngram):
        parser.error(f"--no-repeat-ngram expects positive n-gram sizes; got {args.no_repeat_ngram}")
    args.multi30k_dir = os.path.abspath(args.multi30k_dir)
    sweep = load_sweep(args.sweep)
    names = args.only or list(sweep["variants"])
    missing = [n for n in names if n not in sweep["variants"]]
    if missing:
        parser.error(f"unknown variants {missing}; the sweep has {list(sweep['variants'])}")
    print(
        f"Sweep {args.sweep}: {sweep['config']}, "
        + (
            f"{sweep['budget_minutes']} minutes a variant"
            if sweep["budget_minutes"]
            else "no time budget (the config's epochs)"
        )
        + ", "
        f"common overrides {sweep['common']}; {os.cpu_count()} cores ({cpu_model()})",
        flush=True,
    )
    rows = []
    for name in names:
        trained = run_variant(sweep, name, args)
        extra = [rescored_row(trained, args, f"avg{n}", average_last=n) for n in args.average_last]
        extra += [
            rescored_row(trained, args, f"norepeat{n}", no_repeat_ngram_size=n)
            for n in args.no_repeat_ngram
        ]
        rows += [trained, *extra]
        for row in rows[-1 - len(extra) :]:
            print(f"{row['variant']}: {json.dumps(row)}", flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
