"""`benchmarks/train_compare.py`'s sides: the bf16 ones leave the default on a CPU that
emulates bf16, and run when named."""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks"))

import train_compare  # noqa: E402

FP32 = ["ours/fp32", "keras_hub/fp32", "torch-compiled/fp32", "torch-eager/fp32"]
BF16 = ["ours/bf16", "keras_hub/bf16", "torch-compiled/bf16", "torch-eager/bf16"]


def test_the_default_is_every_side():
    assert train_compare.DEFAULT_SIDES.split(",") == FP32 + BF16


def test_default_bf16_sides_run_only_on_a_cpu_with_bf16(capsys):
    choose = train_compare._bf16_sides_for_this_cpu
    assert choose(FP32 + BF16, asked=False, native=True) == FP32 + BF16
    assert capsys.readouterr().out == ""
    assert choose(FP32 + BF16, asked=False, native=None) == FP32 + BF16  # flags unknown
    assert choose(FP32 + BF16, asked=False, native=False) == FP32
    assert "leave out the bf16 ones" in capsys.readouterr().out
    # Named in --sides, they run on any CPU, with a note where they are emulated.
    asked = ["ours/fp32", "ours/bf16"]
    assert choose(asked, asked=True, native=False) == asked
    assert "time emulated bf16" in capsys.readouterr().out
    assert choose(FP32, asked=False, native=False) == FP32
    assert capsys.readouterr().out == ""


def test_sides_reads_the_option_and_this_cpu(monkeypatch):
    args = argparse.Namespace(sides=None, skip_missing=True)
    for native in (True, False):
        monkeypatch.setattr(train_compare, "native_bf16", lambda native=native: native)
        kept = train_compare._sides(args)
        assert all(side in FP32 + BF16 for side in kept) and "ours/fp32" in kept
        assert any(side.endswith("/bf16") for side in kept) is native
    args.sides = "ours/fp32,ours/bf16"
    assert train_compare._sides(args) == ["ours/fp32", "ours/bf16"]
