"""Training speed of the package against KerasHub and PyTorch, on identical Multi30k batches.

One run trains three implementations of the `multi30k_de_en` architecture (3+3 layers,
d_model 256, 4 heads, d_ff 1024, dropout 0.1, post-norm, one embedding shared by source,
target and the pre-softmax projection; `--set model.x=...` changes it for all three):

- ours: `keras_transformer.training.build_model` + `compile_model`, built and compiled as
  `keras_transformer.runner.train` does (Adam 0.9/0.98/1e-9 on `TransformerSchedule`,
  `MaskedSparseCategoricalCrossentropy` with label smoothing, the accuracy metric,
  `jit_compile` resolved from the config: off on CPU), stepped with `train_on_batch`;
- KerasHub: `keras_hub.layers.TransformerEncoder` / `TransformerDecoder` (`normalize_first`
  = `model.norm_first`) over a shared `keras_hub.layers.ReversibleEmbedding` (x sqrt(d_model),
  `SinePositionEncoding`, dropout; its transpose is the output projection), the same loss,
  optimizer, schedule and metric, `jit_compile` as ours, stepped with `train_on_batch`;
- PyTorch: `torch.nn.TransformerEncoder` / `TransformerDecoder` layers (batch_first,
  `norm_first` as the config, ReLU) over a shared `nn.Embedding` (x sqrt(d_model) +
  sinusoidal table, tied output projection), `CrossEntropyLoss(label_smoothing, ignore_index=0)`,
  `Adam(betas=(0.9, 0.98), eps=1e-9)` with the same schedule (`LambdaLR`), the same token
  accuracy computed under `no_grad`; `torch.set_num_threads(--torch-threads)`, by default
  `os.cpu_count()`.

Before timing, the weights of ours are copied into the other two and the logits of one batch
(dropout off) are compared, and the parameter counts are printed. Then the three models
train on one list of batches: the package's tf.data pipeline (`make_datasets`: length
buckets of `data.batch_size` sentences or `data.tokens_per_batch` tokens, shuffled)
materialized once as numpy `((source_ids, target_in), target_out)` int32, 0 = pad. The
first `--warmup` batches are warm-up (tracing, allocation), timed apart; the next
`--steps` are measured: target tokens/s (real, non-pad tokens of `target_out`), ms/step
(mean and median), and the ratios ours/PyTorch (target: >= 1.3x) and ours/KerasHub (target: > 1x).

Model FLOP utilization. The matmul throughput of this machine is measured in fp32 with
`--matmul-size`^2 square matmuls (`tf.linalg.matmul`, and `torch.matmul` for the PyTorch
row; best of `--matmul-repeats`). The training FLOPs of a batch of B sentences with padded
source length S and target length T are counted analytically from the matmuls only:

    forward = N_enc * (8 B S D^2 + 4 B S^2 D + 4 B S D F)              # QKVO, QK^T and AV, FFN
            + N_dec * (8 B T D^2 + 4 B T^2 D                           # self-attention
                       + 4 B T D^2 + 4 B S D^2 + 4 B T S D             # cross: Q,O; K,V; attention
                       + 4 B T D F)                                    # FFN
            + 2 B T D V                                                # tied output projection
    training = 3 * forward                                             # backward = 2 x forward

(D = d_model, F = d_ff, V = target vocabulary; a matmul of (m, k) by (k, n) is 2mkn FLOPs.
Embedding lookups are gathers and count 0; LayerNorm, softmax, dropout, biases, the loss and
the optimizer are not matmuls and are not counted. Padded positions are counted: it is the
work the hardware does.) MFU = (sum of the measured steps' FLOPs / their time) / the
measured matmul FLOP/s (target: >= 50%).

Bucketed versus fixed-length batches: ours on the first `--fixed-steps` measured batches as
bucketed (their ms/step from the main run) and padded to `translation.max_source_length` x
`translation.max_target_length` (the same sentences, so the same real tokens).

Memory: ours in a fresh subprocess each with `model.remat=false` and `model.remat=true`
(`keras.RematScope` over the encoder/decoder layers), `--memory-steps` training steps
(`train_on_batch`) on fixed-length (longest-shape) batches; prints peak RSS (`ru_maxrss`)
after build and after the steps, the increase during training, and the ratios remat/no-remat.
Both run inside `tf.function`, as `fit` does (`BlockBase.rematerialized_call`); should a
variant's training step fail, the error is printed and both variants are measured again with
`run_eagerly=True`.

Contention: the "others" columns give the cores that other processes kept busy during each
measurement (from /proc/stat minus this process' CPU time); above 0.25 a warning says the
ratios are unreliable (PyTorch's OpenMP threads suffer most when a core is taken).

Run (needs the `bench` extra: `pip install -e ".[bench]"`; 4-5 minutes with the defaults on
an idle 2-core CPU):

    python benchmarks/train_compare.py [--steps 30] [--warmup 3] [--skip-missing] \
        [--set key=value ...]

Needs the Multi30k copy (`--multi30k-dir`, default `../shared/data/multi30k` beside the
repository, or `$KERAS_TRANSFORMER_MULTI30K_DIR`). Tokenizers are trained once into
`--work-dir` and reused.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _compare_data import Batch, batching, load_batches, pad_batch, real_tokens  # noqa: E402
from _compare_memory import measure_memory, memory_child, print_memory  # noqa: E402
from _compare_models import (  # noqa: E402
    Arch,
    build_hub,
    build_ours,
    build_torch,
    import_optional,
)
from _compare_timing import (  # noqa: E402
    OtherLoad,
    keras_step,
    matmul_gflops,
    print_table,
    run_steps,
    torch_step,
    verdict,
)
from _compare_weights import copy_weights_from_ours  # noqa: E402

from keras_transformer.config import load_config  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="Measured steps per model.")
    parser.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="Untimed warm-up steps; >= 2, since Keras traces again (with relaxed shapes) on the "
        "second batch shape.",
    )
    parser.add_argument(
        "--fixed-steps", type=int, default=5, help="Steps with fixed-length batches (0: skip)."
    )
    parser.add_argument(
        "--memory-steps", type=int, default=2, help="Steps per memory subprocess (0: skip)."
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=os.cpu_count() or 1,
        help="torch.set_num_threads (default: os.cpu_count()).",
    )
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument("--matmul-repeats", type=int, default=5)
    parser.add_argument(
        "--skip-missing",
        action="store_true",
        help="Skip the PyTorch or KerasHub row when that package is missing.",
    )
    parser.add_argument(
        "--multi30k-dir",
        default=os.environ.get(
            "KERAS_TRANSFORMER_MULTI30K_DIR",
            os.path.join(HERE, "..", "..", "shared", "data", "multi30k"),
        ),
    )
    parser.add_argument("--work-dir", default="/tmp/keras_transformer_compare")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    parser.add_argument("--memory-eager", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args)
        return
    if args.steps < 1 or args.warmup < 2:
        sys.exit("train_compare.py: --steps must be >= 1 and --warmup >= 2.")

    torch = import_optional("torch", args.skip_missing)
    keras_hub = import_optional("keras_hub", args.skip_missing)
    config = load_config(
        "multi30k_de_en",
        [
            f"translation.local_dir={os.path.abspath(args.multi30k_dir)}",
            f"data.data_dir={os.path.join(args.work_dir, 'tfds')}",
            f"training.run_dir={args.work_dir}",
            *args.overrides,
        ],
    )
    versions = f"TensorFlow {tf.__version__}, Keras {keras.__version__}"
    if keras_hub is not None:
        versions += f", KerasHub {keras_hub.__version__}"
    if torch is not None:
        versions += f", PyTorch {torch.__version__} ({args.torch_threads} threads)"
    print(
        f"{versions}; {os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}), "
        f"GPUs: {len(tf.config.list_physical_devices('GPU'))}"
    )

    start = time.perf_counter()
    batches, vocab = load_batches(config, args.work_dir, args.warmup + args.steps)
    arch = Arch.from_config(config, vocab)
    d, lengths = config.data, config.translation
    print(
        f"model: {arch.encoder_layers}+{arch.decoder_layers} layers, d_model {arch.d_model}, "
        f"d_ff {arch.d_ff}, {arch.num_heads} heads, dropout {arch.dropout} (attention "
        f"{arch.attention_dropout}), {'pre' if arch.norm_first else 'post'}-norm, shared vocab "
        f"{vocab}; batches of {batching(d)}, length-bucketed; {len(batches)} batches "
        f"({args.warmup} warm-up + {args.steps} measured) loaded in "
        f"{time.perf_counter() - start:.1f}s"
    )
    measured = batches[args.warmup :]
    shapes = [(b[0][0].shape[1], b[0][1].shape[1]) for b in measured]
    print(
        f"measured batches: S {min(s for s, _ in shapes)}-{max(s for s, _ in shapes)}, "
        f"T {min(t for _, t in shapes)}-{max(t for _, t in shapes)}, "
        f"{statistics.mean(real_tokens(b) for b in measured):.0f} real target tokens/batch"
    )

    # Models, parameter counts and the equivalence check.
    ours = build_ours(config, vocab)
    hub = build_hub(arch, config, bool(ours.jit_compile)) if keras_hub is not None else None
    torch_parts = build_torch(arch, config, args.torch_threads) if torch is not None else None
    torch_model = torch_parts[0] if torch_parts is not None else None
    params = {"ours": ours.count_params()}
    if hub is not None:
        params["KerasHub"] = hub.count_params()
    if torch_model is not None:
        params["PyTorch"] = sum(p.numel() for p in torch_model.parameters())
    same = ""
    if len(params) > 1:
        same = " (identical)" if len(set(params.values())) == 1 else " (DIFFERENT)"
    print("parameters: " + ", ".join(f"{k} {v:,}" for k, v in params.items()) + same)
    copy_weights_from_ours(ours, hub, torch_model)
    (source, target_in), target_out = batches[0]
    real = target_out != 0
    reference = keras.ops.convert_to_numpy(ours((source, target_in), training=False))[real]
    checks = []
    if hub is not None:
        logits = keras.ops.convert_to_numpy(hub((source, target_in), training=False))[real]
        checks.append(("KerasHub", np.abs(logits - reference).max()))
    if torch_model is not None:
        torch_model.eval()
        logits = torch_model(torch.from_numpy(source), torch.from_numpy(target_in))
        checks.append(("PyTorch", np.abs(logits.detach().numpy()[real] - reference).max()))
    if checks:
        scale = np.abs(reference).max()
        print(
            "same function: with ours' weights and dropout off, max |logits - ours| on batch 1 "
            "(real tokens): "
            + ", ".join(f"{name} {diff:.1e}" for name, diff in checks)
            + f" (max |logit| {scale:.1f})"
            + ("" if all(diff < 1e-3 * max(scale, 1.0) for _, diff in checks) else " MISMATCH")
        )
    if hub is not None or torch_model is not None:
        print(
            "differences: all three train from ours' initial weights (copied). KerasHub's "
            "feed-forward has no dropout between its two Dense layers (ours and PyTorch have one); "
            "KerasHub ties attention-weight dropout to `dropout`, so its attention layers get "
            f"model.attention_dropout={arch.attention_dropout} (private `_dropout`, set before "
            "tracing)."
        )

    t = config.training
    if torch_model is not None and (t.clipnorm or t.global_clipnorm):
        print("note: training.clipnorm / global_clipnorm are not applied in the PyTorch row.")

    # Matmul throughput.
    load = OtherLoad()
    load.start()
    peak = {"tf": matmul_gflops("tf", args.matmul_size, args.matmul_repeats)}
    if torch is not None:
        peak["torch"] = matmul_gflops("torch", args.matmul_size, args.matmul_repeats)
    print(
        f"fp32 matmul {args.matmul_size}^2 (best of {args.matmul_repeats}): "
        + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in peak.items())
        + f" (other processes: {load.cores():.1f} cores busy)"
    )

    # Training.
    timings = [run_steps("ours", keras_step(ours), batches, args.warmup, arch, ours.reset_metrics)]
    if hub is not None:
        timings.append(
            run_steps("KerasHub", keras_step(hub), batches, args.warmup, arch, hub.reset_metrics)
        )
    if torch_parts is not None:
        timings.append(run_steps("PyTorch", torch_step(torch_parts), batches, args.warmup, arch))
    print(
        f"\ntraining, {args.steps} measured steps on identical batches "
        f"(after {args.warmup} warm-up steps):"
    )
    rows = []
    for timing in timings:
        matmul = peak["torch" if timing.name == "PyTorch" else "tf"]
        rows.append(
            [
                timing.name,
                f"{params[timing.name]:,}",
                f"{timing.warmup_s:.1f}",
                f"{1000 * timing.total_s / len(timing.step_s):.0f}",
                f"{1000 * statistics.median(timing.step_s):.0f}",
                f"{timing.tokens_per_s:,.0f}",
                f"{statistics.mean(timing.flops) / 1e9:.1f}",
                f"{timing.flops_per_s / 1e9:.1f}",
                f"{100 * timing.flops_per_s / 1e9 / matmul:.0f}%",
                f"{timing.losses[0]:.3f} -> {timing.losses[-1]:.3f}",
                f"{timing.other_cores:.1f}",
            ]
        )
    print_table(
        [
            "model",
            "params",
            "warm-up s",
            "ms/step",
            "median",
            "tgt tok/s",
            "GFLOP/step",
            "GFLOP/s",
            "MFU",
            "loss first -> last",
            "others",
        ],
        rows,
    )
    print(
        "(median: ms/step; tgt tok/s: real target tokens; MFU: GFLOP/s over the matmul "
        "GFLOP/s above; others: cores other processes kept busy meanwhile)"
    )
    busiest = max(t.other_cores for t in timings)
    if busiest > 0.25:
        print(
            f"WARNING: other processes kept up to {busiest:.1f} of {os.cpu_count()} cores busy "
            "while measuring: the times are contended and the ratios unreliable; PyTorch with "
            f"{args.torch_threads} OpenMP threads slows down sharply when a core is taken "
            "(compare --torch-threads 1)."
        )
    by_name = {t.name: t for t in timings}
    for other, target, strict in (("PyTorch", 1.3, False), ("KerasHub", 1.0, True)):
        if other not in by_name:
            continue
        ratio = by_name["ours"].tokens_per_s / by_name[other].tokens_per_s
        step_ratio = by_name["ours"].total_s / by_name[other].total_s
        print(
            f"ours / {other}: {ratio:.2f}x tokens/s, {step_ratio:.2f}x time "
            f"(target: {'>' if strict else '>='} {target}x tokens/s: "
            f"{verdict(ratio, target, strict)})"
        )
    for timing in timings:
        matmul = peak["torch" if timing.name == "PyTorch" else "tf"]
        mfu = timing.flops_per_s / 1e9 / matmul
        print(f"MFU {timing.name}: {100 * mfu:.0f}% (target >= 50%: {verdict(mfu, 0.5)})")

    # Bucketed versus fixed-length batches.
    if args.fixed_steps:
        count = min(args.fixed_steps, args.steps)
        subset = measured[:count]
        fixed = [pad_batch(b, lengths.max_source_length, lengths.max_target_length) for b in subset]
        fixed_timing = run_steps(
            "fixed", keras_step(ours), [fixed[0], *fixed], 1, arch, ours.reset_metrics
        )
        bucketed_s = sum(by_name["ours"].step_s[:count])
        tokens = sum(real_tokens(b) for b in subset)

        def padding(batch_list: list[Batch]) -> str:
            real_count = sum(int(np.count_nonzero(b[0][0])) + real_tokens(b) for b in batch_list)
            slots = sum(b[0][0].size + b[1].size for b in batch_list)
            return f"{100 * real_count / slots:.0f}%"

        print(f"\nbucketed vs fixed-length batches (ours, the first {count} measured batches):")
        print_table(
            ["batches", "S x T", "real tokens", "ms/step", "tgt tok/s", "others"],
            [
                [
                    "bucketed (data pipeline)",
                    f"{statistics.mean(s for s, _ in shapes[:count]):.0f} x "
                    f"{statistics.mean(t for _, t in shapes[:count]):.0f} (mean)",
                    padding(subset),
                    f"{1000 * bucketed_s / count:.0f}",
                    f"{tokens / bucketed_s:,.0f}",
                    f"{by_name['ours'].other_cores:.1f}",
                ],
                [
                    "fixed length",
                    f"{lengths.max_source_length} x {lengths.max_target_length}",
                    padding(fixed),
                    f"{1000 * fixed_timing.total_s / count:.0f}",
                    f"{fixed_timing.tokens_per_s:,.0f}",
                    f"{fixed_timing.other_cores:.1f}",
                ],
            ],
        )
        print(
            f"bucketing: {fixed_timing.total_s / bucketed_s:.2f}x the tokens/s of fixed-length "
            f"batches (fixed-length warm-up step {fixed_timing.warmup_s:.1f}s)"
        )

    # Memory with and without remat.
    if args.memory_steps:
        memory_batches = [
            pad_batch(b, lengths.max_source_length, lengths.max_target_length)
            for b in measured[: args.memory_steps]
        ]
        print(
            f"\npeak RSS of ours, fresh process each, {args.memory_steps} training steps "
            f"(train_on_batch) on the measured batches of {batching(d)} padded to "
            f"{lengths.max_source_length} x {lengths.max_target_length}:"
        )
        if not print_memory(measure_memory(args, memory_batches, vocab, eager=False)):
            print("the same in eager mode (run_eagerly=True), where remat runs:")
            print_memory(measure_memory(args, memory_batches, vocab, eager=True))


if __name__ == "__main__":
    main()
