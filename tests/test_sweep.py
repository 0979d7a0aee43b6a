"""`benchmarks/sweep.py`: the sweep file's checks, each variant's overrides, the looping
check and the table (the training itself is what `keras-transformer train` does, tested in
tests/test_training_*.py)."""

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks"))

import sweep  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write(tmp_path, text: str) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_packaged_screen_loads_and_keeps_the_recipes_peak():
    loaded = sweep.load_sweep(os.path.join(ROOT, "benchmarks", "sweeps", "multi30k_screen.yaml"))
    assert loaded["config"] == "multi30k_de_en" and "baseline" in loaded["variants"]
    common = loaded["common"]
    # The screen's shorter warm-up keeps the recipe's peak rate: scale / sqrt(warmup).
    peak = common["training.learning_rate_scale"] / common["training.warmup_steps"] ** 0.5
    assert peak == pytest.approx(0.5 / 400**0.5, rel=1e-4)


@pytest.mark.parametrize("name", sorted(os.listdir(os.path.join(ROOT, "benchmarks", "sweeps"))))
def test_every_packaged_variant_is_a_valid_config(name):
    from keras_transformer.config import load_config

    loaded = sweep.load_sweep(os.path.join(ROOT, "benchmarks", "sweeps", name))
    for variant in loaded["variants"]:
        config = load_config(loaded["config"], sweep.variant_overrides(loaded, variant))
        config.validate()  # a misspelt key or a bad value fails here, not an hour in


def test_overrides_are_the_budget_then_common_then_the_variants_own(tmp_path):
    path = write(
        tmp_path,
        "config: multi30k_de_en\nbudget_minutes: 7.5\n"
        "common: {training.warmup_steps: 200, data.bucket_step: 8}\n"
        "variants:\n  base: {}\n  fine: {data.bucket_step: 2, training.dtype_policy: "
        "mixed_bfloat16}\n",
    )
    loaded = sweep.load_sweep(path)
    assert sweep.variant_overrides(loaded, "base") == [
        "training.max_minutes=7.5",
        "training.warmup_steps=200",
        "data.bucket_step=8",
    ]
    assert sweep.variant_overrides(loaded, "fine") == [
        "training.max_minutes=7.5",
        "training.warmup_steps=200",
        "data.bucket_step=2",
        'training.dtype_policy="mixed_bfloat16"',
    ]


def test_common_may_be_left_out(tmp_path):
    loaded = sweep.load_sweep(write(tmp_path, "config: c\nbudget_minutes: 1\nvariants: {a: {}}\n"))
    assert loaded["common"] == {}
    assert sweep.variant_overrides(loaded, "a") == ["training.max_minutes=1"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("budget_minutes: 1\nvariants: {a: {}}\n", "expected a mapping with the keys"),
        ("config: c\nbudget_minutes: 0\nvariants: {a: {}}\n", "budget_minutes=0"),
        ("config: c\nbudget_minutes: true\nvariants: {a: {}}\n", "budget_minutes=True"),
        ("config: c\nbudget_minutes: 1\nvariants: {}\n", "at least one"),
        ("config: c\nbudget_minutes: 1\nvariants: {a/b: {}}\n", "'a/b'"),
        ("config: c\nbudget_minutes: 1\nvariants: {a: [x]}\n", "invalid overrides for 'a'"),
        ("config: c\nbudget_minutes: 1\nvariants: {a: {}}\nbudget: 2\n", "unknown keys"),
    ],
)
def test_invalid_sweep_files_are_refused_with_what_was_wrong(tmp_path, text, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        sweep.load_sweep(write(tmp_path, text))


def test_loops_finds_a_three_times_repeated_trigram_only():
    assert sweep.loops("a man in a red shirt a man in a red shirt a man in a red shirt")
    assert not sweep.loops("a man in a red shirt and a man in a blue shirt .")
    assert not sweep.loops("")


def test_table_has_a_row_per_variant_with_and_without_beam():
    base = {
        "variant": "base",
        "overrides": {},
        "steps": 420,
        "epochs": 3,
        "wall_minutes": 12.04,
        "curve": [(6.1, 20.13), (12.0, 28.49)],
        "val_greedy": 29.87,
        "val_greedy_loops": 2,
        "others_cores": 0.04,
    }
    beam = {**base, "variant": "fine", "overrides": {"data.bucket_step": 2}}
    beam.update(val_beam=31.2, val_beam_ratio=0.987, val_beam_loops=1, steal_cores=0.291)
    beam["stalled_seconds"] = 37.6
    beam["matmul_gflops"] = [281.4, 276.6]
    lines = sweep.table([base, beam]).splitlines()
    assert len(lines) == 4
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|") == 14
    assert lines[2] == (  # a row saved before steal, stalls and the probe has none of them
        "| base | (none) | 420 (3) | 12.0 | 6: 20.1, 12: 28.5 | 29.87 | - | - | 2 | 0.04 | - | - "
        "| - |"
    )
    assert lines[3].startswith("| fine | data.bucket_step=2 |")
    assert lines[3].endswith("| 31.20 | 0.987 | 1 | 0.04 | 0.29 | 38 | 281, 277 |")


def test_the_speed_probe_measures_the_matmuls_it_ran(monkeypatch):
    """The probe's figure is its matmuls' FLOPs over the time they took."""
    import _compare_peak

    clock = iter(range(0, 100))  # perf_counter: one second a call
    monkeypatch.setattr(_compare_peak.time, "perf_counter", lambda: float(next(clock)))
    calls = []
    monkeypatch.setattr(
        _compare_peak, "_matmul", lambda *a: calls.append(a) or (lambda: calls.append("run"))
    )
    gflops = _compare_peak.speed_probe(seconds=3.5, warmup_s=0.0)
    # One matmul, run once untimed and three times (at least) for the warm-up, then once
    # untimed and until 3.5 s have passed: 3 runs over 4 clock seconds.
    assert calls == [("tf", _compare_peak.PROBE_SIZE, "float32")] + ["run"] * 8
    assert gflops == pytest.approx(2 * _compare_peak.PROBE_SIZE**3 * 3 / 4.0 / 1e9)
    monkeypatch.undo()
    assert 0 < _compare_peak.speed_probe(seconds=0.05, warmup_s=0.05) < 1e6  # real matmuls


def test_steal_is_counted_apart_from_busy_time(monkeypatch):
    import _machine

    # user, nice, system, idle, iowait, irq, softirq, steal (clock ticks)
    monkeypatch.setattr(_machine, "_cpu_fields", lambda: [100, 20, 50, 700, 10, 5, 5, 110])
    ticks = os.sysconf("SC_CLK_TCK")
    busy, total = _machine.machine_cpu_seconds()
    assert busy == pytest.approx(180 / ticks) and total == pytest.approx(1000 / ticks)
    assert _machine.machine_steal_seconds() == pytest.approx(110 / ticks)


def test_commit_is_the_checkouts_and_unknown_outside_one(tmp_path):
    import shutil
    import subprocess

    import _machine

    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    assert re.fullmatch(re.escape(head) + r"(-dirty)?", _machine.commit())
    # A copy of the module outside any git checkout says so.
    shutil.copy(_machine.__file__, tmp_path / "machine_copy.py")
    code = "import machine_copy; print(machine_copy.commit())"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.strip() == "unknown"


def test_cpu_model_names_the_vector_extensions(tmp_path):
    from _machine import cpu_model

    # Two hosts that /proc/cpuinfo both calls "AMD EPYC": the extensions tell them apart.
    entry = "processor\t: {0}\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 {1}\n\n"
    wide, narrow = tmp_path / "wide", tmp_path / "narrow"
    wide.write_text("".join(entry.format(i, "avx2 avx512f avx512_bf16") for i in range(2)))
    narrow.write_text(entry.format(0, "avx avx2 fma"))
    assert cpu_model(str(wide)) == "AMD EPYC (AVX512_BF16, AVX512F, AVX2)"
    assert cpu_model(str(narrow)) == "AMD EPYC (AVX2)"
    (tmp_path / "bare").write_text("processor\t: 0\nmodel name\t: Some CPU\n")
    assert cpu_model(str(tmp_path / "bare")) == "Some CPU"
    assert cpu_model(str(tmp_path / "absent"))  # what `platform` knows


def test_native_bf16_reads_the_flags(tmp_path):
    from _machine import native_bf16

    from keras_transformer.hardware import native_bf16_cpu

    entry = "processor\t: 0\nmodel name\t: A CPU\nflags\t\t: fpu sse2 {0}\n\n"
    for name, flags, expected in [
        ("zen4", "avx2 avx512f avx512_bf16", True),
        ("sapphire", "avx2 avx512f amx_bf16 amx_tile", True),
        ("skylake", "avx2 avx512f", False),
        ("zen3", "avx avx2 fma", False),
    ]:
        (tmp_path / name).write_text(entry.format(flags))
        # The package's check (`training.dtype_policy: auto`), and the benchmarks' reading of it.
        assert native_bf16_cpu(str(tmp_path / name)) is expected, name
        assert native_bf16(str(tmp_path / name)) is expected, name
    (tmp_path / "bare").write_text("processor\t: 0\nmodel name\t: Some CPU\n")
    assert native_bf16(str(tmp_path / "bare")) is None  # no flags line: unknown
    assert native_bf16(str(tmp_path / "absent")) is None


def test_idle_stretches_are_the_long_runs_under_the_threshold():
    from _machine import idle_stretches

    # (wall, CPU) each second: busy (2 cores), idle for 10 s from t=3, busy, idle 3 s, busy,
    # and idle again until the end (9 s).
    rates = [2.0] * 3 + [0.1] * 10 + [2.0] * 4 + [0.0] * 3 + [1.5] * 2 + [0.2] * 9
    samples, cpu = [(0.0, 0.0)], 0.0
    for second, rate in enumerate(rates, start=1):
        cpu += rate
        samples.append((float(second), cpu))
    assert idle_stretches(samples) == [(3.0, 10.0), (22.0, 9.0)]  # the 3-s one is too short
    assert idle_stretches(samples, min_seconds=2.0)[1] == (17.0, 3.0)
    assert idle_stretches(samples, below_cores=0.05, min_seconds=2.0) == [(17.0, 3.0)]


def test_cpu_sampler_sees_a_sleeping_process_idle_and_stops_at_its_end():
    import subprocess

    from _machine import CpuSampler, idle_stretches

    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2.5)"])
    sampler = CpuSampler(process.pid, interval=0.2).start()
    process.wait()
    samples = sampler.stop()
    assert len(samples) >= 5 and samples == sorted(samples)
    stretches = idle_stretches(samples, min_seconds=1.0)
    assert len(stretches) == 1 and stretches[0][1] >= 1.0


def test_averaging_more_epochs_than_a_run_kept_is_refused(tmp_path):
    checkpoints = tmp_path / "run" / "checkpoints"
    checkpoints.mkdir(parents=True)
    for epoch in (19, 20):
        (checkpoints / f"epoch-{epoch:03d}.weights.h5").write_bytes(b"")
    with pytest.raises(ValueError, match=r"--average-last 3.*kept the weights of 2 epoch"):
        sweep.score_variant(str(tmp_path / "run"), str(tmp_path), None, average_last=3)


def test_benchmarks_read_the_packages_multi30k_variable():
    import _machine

    from keras_transformer.constants import MULTI30K_DIR_ENV_VAR

    assert _machine.MULTI30K_DIR_ENV_VAR == MULTI30K_DIR_ENV_VAR
