"""The recipe on GPUs in one command: `bash benchmarks/gpu.sh` (this file is its logic).

Trains the packaged `multi30k_de_en` model under `tf.distribute.MirroredStrategy` with XLA
(each replica's forward pass, loss and gradients XLA-compiled, as
`keras_transformer.training.distributed` does for `jit_compile=True` under a strategy) and
mixed precision (`--dtype-policy`, `mixed_bfloat16` by default), first on one device, then
on all of them, and decodes with XLA on one device. It prints the machine (device names and
count, TensorFlow and Keras versions, the commit) and two tables:

- training, one row for 1 device and one for all devices: real target tokens/s (non-pad
  tokens of `target_out`, the accuracy metric's count summed over the replicas), ms/step
  (median and fastest-slowest of the `--steps` measured steps), model TFLOP/s, MFU and the
  scaling ratio, all devices' tokens/s over one device's;
- decoding, greedy and beam 4, batches of 32, XLA (`predictors.Translator` and its
  `decoding.BatchDecoder`): sentences/s over the first `--decode-sentences` validation
  sentences and the tokens each one decoded (a briefly trained model stops late: its
  sentences run to the length limit more often than a trained one's).

The batch is the recipe's `data.tokens_per_batch` (or `data.batch_size`) per replica: the
global batch is it times the number of devices (weak scaling, as data-parallel throughput is
usually reported), and Keras splits each global batch over the replicas. Batches are padded
to their length bucket (`data.pad_to_bucket=true`, overridable) and only full batches are
kept (`bucket_batches(..., drop_remainder=True)`), so the shapes come from a fixed set; one
pass over the training data finds that set, and the warm-up trains one batch of each shape
(XLA compiles every shape there) and then `--warmup` more steps before the measured steps.

MFU is model FLOP/s over the devices' peak. The FLOPs of a batch are
`_compare_timing.training_flops` (the matmuls of forward and backward over each sentence's
real length, as `train_compare.py`'s MFU); the pass over the data gives the FLOPs per real target
token, which times the measured tokens/s gives FLOP/s. The peak per device is
`--peak-tflops`, else measured on one device: square matmuls of `--peak-sizes` (4096 and
8192) in the policy's compute type (bfloat16, float16 or float32), XLA-compiled, the best of
`--peak-repeats` timings after a warm-up. The output says which.

Each step ends with a read of the token count, which waits for the step, so no step is
queued while the one before runs: the host's work per step (Keras' step function, the
per-replica XLA calls, the optimizer update and the gradient all-reduce outside XLA, the
input pipeline) is part of ms/step, which matters with a model as small as the recipe's on
a fast GPU.

Without GPUs it runs on the CPU: `--cpu-logical-devices N` splits the CPU into N logical
devices (`/cpu:0` ... `/cpu:N-1`, sharing the same cores, so its scaling says nothing about
hardware) before anything else touches TensorFlow's devices; without it, the CPU is one
device. `--set key=value` overrides the config (a test shrinks the model with them).

    bash benchmarks/gpu.sh [--steps 100] [--warmup 10] [--dtype-policy mixed_float16]
        [--peak-tflops N] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Any

from _machine import DEFAULT_MULTI30K_DIR

CONFIG = "multi30k_de_en"
COMPUTE_DTYPES = {"mixed_bfloat16": "bfloat16", "mixed_float16": "float16", "float32": "float32"}
DECODE_BATCH = 32
DECODINGS = (("greedy", {"method": "greedy", "beam_size": 1}), ("beam 4", {"method": "beam"}))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (parsed before TensorFlow is imported, so `--help` is quick)."""
    parser = argparse.ArgumentParser(
        prog="bash benchmarks/gpu.sh",
        description="Training and decoding throughput of the multi30k_de_en recipe on one "
        "device and on all of them (MirroredStrategy, XLA, mixed precision); see "
        "benchmarks/gpu.py's docstring.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--steps", type=int, default=100, help="Measured training steps.")
    parser.add_argument(
        "--warmup", type=int, default=10, help="Steps after the one-per-shape warm-up."
    )
    parser.add_argument(
        "--dtype-policy",
        choices=sorted(COMPUTE_DTYPES),
        default="mixed_bfloat16",
        help="The model's Keras dtype policy (the peak's matmuls use its compute type).",
    )
    parser.add_argument(
        "--peak-tflops", type=float, help="Peak TFLOP/s per device (default: measured)."
    )
    parser.add_argument("--peak-sizes", default="4096,8192", help="Matmul sizes for the peak.")
    parser.add_argument("--peak-repeats", type=int, default=5, help="Timings per size.")
    parser.add_argument(
        "--decode-sentences", type=int, default=1000, help="Validation sentences decoded."
    )
    parser.add_argument("--decode-repeats", type=int, default=3, help="Timed decoding passes.")
    parser.add_argument(
        "--cpu-logical-devices",
        type=int,
        help="Without GPUs: split the CPU into N logical devices and mirror over them.",
    )
    parser.add_argument(
        "--multi30k-dir",
        default=DEFAULT_MULTI30K_DIR,
        help="The offline Multi30k copy ($KERAS_TRANSFORMER_MULTI30K_DIR).",
    )
    parser.add_argument(
        "--work-dir",
        default="/tmp/keras_transformer_gpu_benchmark",
        help="Prepared data and tokenizers (trained on the first run, reused after).",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A config override (repeatable), e.g. --set model.d_model=512.",
    )
    args = parser.parse_args(argv)
    for name in ("steps", "warmup", "peak_repeats", "decode_sentences", "decode_repeats"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            parser.error(f"--{name.replace('_', '-')} must be a positive integer")
    if args.cpu_logical_devices is not None and args.cpu_logical_devices < 1:
        parser.error("--cpu-logical-devices must be a positive integer")
    if args.peak_tflops is not None and args.peak_tflops <= 0:
        parser.error("--peak-tflops must be positive")
    try:
        args.peak_sizes = [int(s) for s in args.peak_sizes.split(",")]
    except ValueError:
        parser.error(f"--peak-sizes expects integers such as 4096,8192, got {args.peak_sizes!r}")
    if not args.peak_sizes or min(args.peak_sizes) < 1:
        parser.error("--peak-sizes expects positive integers")
    if not os.path.isdir(args.multi30k_dir):
        parser.error(f"no Multi30k copy at {args.multi30k_dir} (pass --multi30k-dir)")
    return args


def configure_devices(cpu_logical_devices: int | None) -> tuple[list[str], str]:
    """The mirrored devices and their description; first to touch TensorFlow's devices.

    With `cpu_logical_devices`, the CPU is split into that many logical devices
    (`tf.config.set_logical_device_configuration`, which must run before TensorFlow
    initializes its devices); else all GPUs, or the CPU as one device without GPUs.
    """
    import tensorflow as tf
    from _machine import cpu_model

    gpus = tf.config.list_physical_devices("GPU")
    if cpu_logical_devices is not None:
        if gpus:
            sys.exit("gpu.py: --cpu-logical-devices is for machines without GPUs; drop it.")
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * cpu_logical_devices
        )
        names = [d.name for d in tf.config.list_logical_devices("CPU")]
        return (
            [f"/cpu:{i}" for i in range(len(names))],
            f"{len(names)} CPU logical devices ({cpu_model()}, {os.cpu_count()} cores shared): "
            + ", ".join(names),
        )
    if gpus:
        models = [
            tf.config.experimental.get_device_details(g).get("device_name", "?") for g in gpus
        ]
        names = [d.name for d in tf.config.list_logical_devices("GPU")]
        listing = ", ".join(f"{n} ({m})" for n, m in zip(names, models))
        return [f"/gpu:{i}" for i in range(len(names))], f"{len(names)} GPU(s): {listing}"
    return ["/cpu:0"], (
        f"no GPU: 1 CPU device ({cpu_model()}, {os.cpu_count()} cores; "
        "--cpu-logical-devices N mirrors over N logical CPU devices)"
    )


def batch_overrides(config: Any, replicas: int) -> list[str]:
    """The override that makes the config's batch per replica a global batch."""
    d = config.data
    if d.tokens_per_batch:
        return [f"data.tokens_per_batch={d.tokens_per_batch * replicas}"]
    return [f"data.batch_size={d.batch_size * replicas}"]


def batch_text(config: Any, replicas: int = 1) -> str:
    """The config's batch times `replicas`, in its unit."""
    d = config.data
    if d.tokens_per_batch:
        return f"{d.tokens_per_batch * replicas} tokens"
    return f"{d.batch_size * replicas} sentences"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    devices, device_text = configure_devices(args.cpu_logical_devices)

    import keras
    import tensorflow as tf
    from _compare_timing import print_table
    from _gpu_measure import decode_rows, matmul_peak, train_row

    from keras_transformer.config import load_config
    from keras_transformer.run_dir import RunPaths
    from keras_transformer.runner import training_data
    from keras_transformer.tasks import get_task
    from keras_transformer.training import make_strategy

    base = [
        f"translation.local_dir={os.path.abspath(args.multi30k_dir)}",
        f"data.data_dir={os.path.join(args.work_dir, 'tfds')}",
        f"training.run_dir={args.work_dir}",
        "training.strategy=mirrored",
        "training.jit_compile=true",
        f"training.dtype_policy={args.dtype_policy}",
        "data.pad_to_bucket=true",
        *args.overrides,
    ]
    try:
        config = load_config(CONFIG, base)
    except ValueError as e:
        sys.exit(f"gpu.py: {e}")
    if config.task != "translation":
        sys.exit("gpu.py: the benchmark trains the translation recipe; keep task=translation.")
    per_replica_tokens = config.data.tokens_per_batch
    if per_replica_tokens and per_replica_tokens < config.section.longest:
        sys.exit(
            f"gpu.py: data.tokens_per_batch={per_replica_tokens} is under the longest example "
            f"({config.section.longest} tokens); every replica needs one example a batch."
        )
    m = config.model
    from _machine import commit

    print(f"gpu benchmark: {CONFIG}, commit {commit()}")
    print(
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, Python {sys.version.split()[0]}"
    )
    print(f"devices: {device_text}")

    paths = RunPaths(args.work_dir)
    os.makedirs(paths.root, exist_ok=True)
    task = get_task(config)
    train_data, tokenizers = training_data(task, paths)
    print(
        f"model: {m.num_encoder_layers}+{m.num_decoder_layers} layers, d_model {m.d_model}, "
        f"d_ff {m.d_ff}, {m.num_heads} heads, vocab {tokenizers[1].vocab_size}, "
        f"{args.dtype_policy}, XLA per replica; batch: {batch_text(config)} per replica "
        f"(global = that x devices), padded to length buckets "
        f"{'on' if config.data.pad_to_bucket else 'off'}, full batches only"
    )

    compute_dtype = COMPUTE_DTYPES[args.dtype_policy]
    if args.peak_tflops is not None:
        peak = args.peak_tflops * 1e12
        print(f"peak: {args.peak_tflops:g} TFLOP/s per device, given (--peak-tflops)")
    else:
        peak, size = matmul_peak(devices[0], compute_dtype, args.peak_sizes, args.peak_repeats)
        print(
            f"peak: {peak / 1e12:.2f} TFLOP/s per device, measured ({compute_dtype} matmul on "
            f"{devices[0]}, sizes {', '.join(map(str, args.peak_sizes))}, XLA, best of "
            f"{args.peak_repeats} after a warm-up; best at {size})"
        )

    counts = [1] if len(devices) == 1 else [1, len(devices)]
    rows, results, trained = [], {}, None
    for n in counts:
        row_config = load_config(CONFIG, [*base, *batch_overrides(config, n)])
        strategy = make_strategy("mirrored", devices[:n])
        result = train_row(
            get_task(row_config), train_data, tokenizers, strategy, args.steps, args.warmup
        )
        results[n] = result
        if trained is None:
            trained = result.model  # the 1-device model decodes
        flops_per_s = result.tokens_per_s * result.flops_per_token
        scaling = result.tokens_per_s / results[1].tokens_per_s
        ms = result.step_ms
        rows.append(
            [
                f"{n} device{'s' if n > 1 else ''}",
                batch_text(config, n),
                f"{result.global_tokens:,.0f}",
                f"{result.shapes}",
                f"{result.warmup_s:.1f}",
                f"{result.tokens_per_s:,.0f}",
                f"{statistics.median(ms):.1f} ({min(ms):.1f}-{max(ms):.1f})",
                f"{flops_per_s / 1e12:.3g}",
                f"{100 * flops_per_s / (peak * n):.1f}%",
                "-" if n == 1 else f"{scaling:.2f}x ({100 * scaling / n:.0f}% of {n}x)",
            ]
        )
    print()
    print(
        f"training: {args.steps} measured steps after {args.warmup} warm-up steps and one step "
        "per batch shape (XLA compiles there)"
    )
    print_table(
        [
            "devices",
            "global batch",
            "tgt tokens/step",
            "shapes",
            "warm-up s",
            "tgt tokens/s",
            "ms/step median (min-max)",
            "TFLOP/s",
            "MFU",
            "scaling",
        ],
        rows,
    )
    if len(counts) == 1:
        print("one device only: no scaling row")

    print()
    validation = task.load_split(config.data.validation_split, limit=args.decode_sentences)
    sentences = [s.decode("utf-8") for s, _ in validation.dataset.as_numpy_iterator()]
    print(
        f"decoding: {len(sentences)} validation sentences on {devices[0]}, batches of "
        f"{DECODE_BATCH}, XLA, the Translator's length limits; median (fastest-slowest) of "
        f"{args.decode_repeats} passes after a first one that compiles every shape"
    )
    print_table(
        [
            "decoding",
            "sentences/s",
            "s/pass median (min-max)",
            "out tokens/sentence",
            "1st pass s",
        ],
        decode_rows(
            trained, tokenizers, sentences, devices[0], DECODINGS, DECODE_BATCH, args.decode_repeats
        ),
    )


if __name__ == "__main__":
    main()
