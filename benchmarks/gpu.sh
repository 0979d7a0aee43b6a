#!/usr/bin/env bash
# The recipe's GPU benchmark in one command: training tokens/s, ms/step, MFU and scaling on
# one device and on all of them (MirroredStrategy, XLA, mixed precision), then XLA decoding.
# Run from anywhere:  bash benchmarks/gpu.sh [--peak-tflops N] [--set key=value ...]
# (`--help` lists the options; without GPUs, `--cpu-logical-devices N` runs it on the CPU).
# The logic is benchmarks/gpu.py; this wrapper puts the checkout first on the import path
# and runs it, unbuffered, with $PYTHON (default: python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${root}${PYTHONPATH:+:${PYTHONPATH}}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "${PYTHON:-python3}" -u "${root}/benchmarks/gpu.py" "$@"
