"""`bash benchmarks/gpu.sh`, the one-command GPU benchmark, runs on a CPU split into two
logical devices (what it does on a machine without GPUs) and prints its tables."""

import os
import re
import subprocess
import sys

import pytest
import tensorflow as tf
from multi30k_files import MULTI30K_DIR

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu.sh")
# A tiny model on short sentences: two length buckets, a few steps.
TINY = [
    "model.num_encoder_layers=1",
    "model.num_decoder_layers=1",
    "model.d_model=32",
    "model.num_heads=2",
    "model.d_ff=64",
    "data.tokens_per_batch=256",
    "data.max_train_examples=2000",
    "data.vocab_size=1000",
    "translation.max_source_length=16",
    "translation.max_target_length=16",
]


def run_script(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "KERAS_TRANSFORMER_MULTI30K_DIR": MULTI30K_DIR, "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", SCRIPT, *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def number(cell: str) -> float:
    """The first number of a table cell ("1,234", "20.9 (13.5-23.1)", "4.0%", "1.49x ...")."""
    return float(re.match(r"[\d,.]+", cell).group().replace(",", ""))


def table_row(output: str, name: str) -> list[str]:
    """The cells (split on runs of 2+ spaces) of the table row that starts with `name`."""
    lines = [line for line in output.splitlines() if re.match(rf"{re.escape(name)}\s{{2}}", line)]
    assert len(lines) == 1, f"expected one {name!r} row in:\n{output}"
    return re.split(r"\s{2,}", lines[0].strip())


def test_help_and_bad_arguments():
    result = run_script("--help")
    assert result.returncode == 0, result.stderr
    for option in ("--cpu-logical-devices", "--peak-tflops", "--dtype-policy", "--set"):
        assert option in result.stdout
    result = run_script("--steps", "0")
    assert result.returncode == 2
    assert "--steps must be a positive integer" in result.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_two_cpu_logical_devices(tmp_path):
    args = ["--cpu-logical-devices", "2", "--steps", "3", "--warmup", "2"]
    args += ["--decode-sentences", "8", "--decode-repeats", "1"]
    args += ["--peak-sizes", "256,512", "--peak-repeats", "2"]
    args += ["--work-dir", str(tmp_path / "work")]
    for override in TINY:
        args += ["--set", override]
    result = run_script(*args, timeout=300)
    out = result.stdout
    assert result.returncode == 0, f"{out}\n{result.stderr[-3000:]}"

    assert f"TensorFlow {tf.__version__}, Keras " in out
    assert re.search(r"^gpu benchmark: multi30k_de_en, commit (\w+(-dirty)?|unknown)$", out, re.M)
    devices = re.search(r"^devices: (.*)$", out, re.M).group(1)
    assert devices.startswith("2 CPU logical devices")
    assert re.findall(r"/device:CPU:\d", devices) == ["/device:CPU:0", "/device:CPU:1"]
    assert "mixed_bfloat16, XLA per replica; batch: 256 tokens per replica" in out
    peak = re.search(r"^peak: ([\d.]+) TFLOP/s per device, measured \(bfloat16", out, re.M)
    assert peak and float(peak.group(1)) > 0

    one, two = table_row(out, "1 device"), table_row(out, "2 devices")
    assert len(one) == len(two) == 10
    tokens = {}
    for n, row in ((1, one), (2, two)):
        assert row[1] == f"{256 * n} tokens"  # the global batch: 256 tokens per replica
        step_tokens, shapes, warmup, per_s, step_ms, tflops, mfu = map(number, row[2:9])
        assert 0 < step_tokens <= 256 * n  # the real target tokens of a full global batch
        assert shapes >= 1 and warmup > 0 and per_s > 0 and tflops > 0
        median, fastest, slowest = map(float, re.findall(r"[\d.]+", row[6]))
        assert step_ms == median and 0 < fastest <= median <= slowest
        assert 0 < mfu < 100
        tokens[n] = (step_tokens, per_s)
    # Weak scaling: the global batch holds about twice the tokens on two devices.
    assert 1.5 < tokens[2][0] / tokens[1][0] < 2.5
    assert one[9] == "-"
    assert number(two[9]) == pytest.approx(tokens[2][1] / tokens[1][1], abs=0.01)

    assert "decoding: 8 validation sentences on /cpu:0, batches of 32, XLA" in out
    for name in ("greedy", "beam 4"):
        sentences_per_s, _, out_tokens, first = map(number, table_row(out, name)[1:5])
        assert sentences_per_s > 0 and out_tokens > 0 and first > 0
