"""Training speed of the package against KerasHub and PyTorch at their best, on identical
Multi30k batches, each side in its own process, in fp32 and bf16.

The architecture is the `multi30k_de_en` recipe's (3+3 layers, d_model 256, 4 heads, d_ff
1024, dropout 0.1, post-norm, one embedding shared by source, target and the pre-softmax
projection; `--set model.x=...` changes it for every side). Sides (`--sides`), each a fresh
process (`_compare_worker.py`):

- `ours/...`: `keras_transformer`'s model built and compiled as `keras-transformer train`
  does (`training.dtype_policy` float32 or mixed_bfloat16, `jit_compile` resolved from the
  config: off on CPU), stepped with `train_on_batch`;
- `keras_hub/...`: the same architecture from `keras_hub.layers.TransformerEncoder` /
  `TransformerDecoder` over a tied `ReversibleEmbedding`, as KerasHub's users run it: its
  default attention path, `dropout` where KerasHub puts it (its attention weights included),
  the Keras dtype policy for bf16; same loss, optimizer, schedule and metric as ours;
- `torch-compiled/...` and `torch-eager/...`: a PyTorch model written for speed
  (`_compare_torch.py`: fused QKV, `scaled_dot_product_attention` with `is_causal` and a
  boolean padding mask, fused Adam, the accuracy counted without a host read), with and
  without `torch.compile` (`--torch-dynamic`), bf16 through `torch.autocast`.

All sides start from ours' initial weights (copied) and train on one list of batches: the
package's tf.data pipeline (`make_batches`: length buckets of ~`data.tokens_per_batch`
target tokens, shuffled) materialised once as numpy. Before timing, each side's eval-mode
logits on batch 1 are compared with ours'.

Measurement. Every side first makes one untimed pass over all batches (each shape traced or
compiled), one side at a time. Then `--repeats` rounds: in each, every side in turn (the
order rotates between rounds) makes one timed pass over the `--steps` measured batches.
Each side reports the cores other processes kept busy during its pass; a pass above
`--max-others` is discarded and run again (twice at most), then the row is marked refused.
Rows print the median over rounds with the fastest-slowest round.

MFU. One peak per precision for every side: the machine's sustained matmul FLOP/s, the best
of TF and PyTorch over square sizes 1024-4096 (`_compare_peak.py`: each framework in its own
process, after `--peak-warmup` seconds of matmuls, `--peak-seconds` per size), taken after
the sides' warm-up passes, i.e. after minutes of load. Training FLOPs count the matmuls only:

    forward = N_enc * (8 B S D^2 + 4 B S^2 D + 4 B S D F)              # QKVO, QK^T and AV, FFN
            + N_dec * (8 B T D^2 + 4 B T^2 D                           # self-attention
                       + 4 B T D^2 + 4 B S D^2 + 4 B T S D             # cross: Q,O; K,V; attention
                       + 4 B T D F)                                    # FFN
            + 2 B T D V                                                # tied output projection
    training = 3 * forward                                             # backward = 2 x forward

MFU sums it per sentence over its real (unpadded) lengths; HFU over what the side computes:
the padded batch shape, except for a side whose step skips padding (ours outside XLA:
`skip_padding` and the logits of the real positions), whose projections, feed-forward and
output projection count the real positions (attention's QK^T and AV, and the
cross-attention's K/V projections of the padded encoder output, stay padded).

Baselines: ours (fp32) on the same sentences batched as a user without length buckets would,
shuffled into as many batches, each padded to its own longest; and ours' peak RSS with and
without remat (`model.remat`) on the recipe's own batches, a fresh process each.

On a CPU without bf16 instructions (AVX512_BF16 or AMX) the default sides are the fp32 ones
(bf16 would be emulated); bf16 sides named in `--sides` still run.

Run (needs the `bench` extra: `pip install -e ".[bench]"`; about 28 minutes on an idle
2-core CPU with the defaults):

    python benchmarks/train_compare.py [--steps 20] [--repeats 3] [--sides ...] \
        [--set key=value ...]

Needs the Multi30k copy (`--multi30k-dir`, default `../shared/data/multi30k` beside the
repository, or `$KERAS_TRANSFORMER_MULTI30K_DIR`). Tokenizers are trained once into
`--work-dir` and reused.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

from _compare_spec import Prepared
from _machine import DEFAULT_MULTI30K_DIR, cpu_model, native_bf16

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.abspath(__file__)
DEFAULT_SIDES = (
    "ours/fp32,keras_hub/fp32,torch-compiled/fp32,torch-eager/fp32,"
    "ours/bf16,keras_hub/bf16,torch-compiled/bf16,torch-eager/bf16"
)
EXTRA_HINT = 'install the benchmark extra: pip install -e ".[bench]"'
PACKAGES = {"keras_hub": ("keras_hub", "KerasHub (keras-hub)"), "torch": ("torch", "PyTorch")}


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="Measured steps per pass.")
    parser.add_argument("--repeats", type=int, default=3, help="Timed rounds (>= 1).")
    parser.add_argument(
        "--warmup", type=int, default=2, help="Extra batches in the untimed warm-up pass."
    )
    parser.add_argument(
        "--sides",
        help="Comma-separated sides (default: ours, keras_hub, torch-compiled and "
        "torch-eager, each /fp32 and /bf16; the bf16 ones only on a CPU with bf16 "
        "instructions).",
    )
    parser.add_argument(
        "--torch-dynamic",
        choices=("default", "true", "false"),
        default="default",
        help="torch.compile's dynamic= (default: None, PyTorch's automatic dynamic shapes).",
    )
    parser.add_argument(
        "--torch-threads", type=int, default=os.cpu_count() or 1, help="torch.set_num_threads."
    )
    parser.add_argument("--max-others", type=float, default=0.25)
    parser.add_argument("--peak-seconds", type=float, default=3.0)
    parser.add_argument("--peak-warmup", type=float, default=20.0)
    parser.add_argument("--no-fixed", action="store_true", help="Skip the fixed-sentence row.")
    parser.add_argument("--memory-steps", type=int, default=3, help="0: skip the remat rows.")
    parser.add_argument(
        "--skip-missing",
        action="store_true",
        help="Drop the PyTorch or KerasHub sides when that package is missing.",
    )
    parser.add_argument(
        "--multi30k-dir",
        default=DEFAULT_MULTI30K_DIR,
    )
    parser.add_argument("--work-dir", default="/tmp/keras_transformer_compare")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    for hidden in ("--prepare", "--worker", "--peak", "--memory-child"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--peak-dtypes", default="float32,bfloat16", help=argparse.SUPPRESS)
    parser.add_argument("--memory-eager", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def _sides(args: argparse.Namespace) -> list[str]:
    """The requested sides whose packages are installed (or an exit that says which is not)."""
    from _compare_worker import parse_side

    sides = [s.strip() for s in (args.sides or DEFAULT_SIDES).split(",") if s.strip()]
    for side in sides:
        parse_side(side)
    sides = _bf16_sides_for_this_cpu(sides, asked=args.sides is not None, native=native_bf16())
    kept = []
    for side in sides:
        key = "torch" if side.startswith("torch") else side.split("/")[0]
        if key in PACKAGES and importlib.util.find_spec(PACKAGES[key][0]) is None:
            label = PACKAGES[key][1]
            if not args.skip_missing:
                sys.exit(
                    f"train_compare.py: {label} is not installed; {EXTRA_HINT} "
                    "(or pass --skip-missing to drop its sides)."
                )
            print(f"note: {label} is not installed; dropping {side} ({EXTRA_HINT}).")
            continue
        kept.append(side)
    if "ours/fp32" not in kept:
        sys.exit("train_compare.py: --sides must include ours/fp32 (every ratio is against it).")
    return kept


def _bf16_sides_for_this_cpu(sides: list[str], asked: bool, native: bool | None) -> list[str]:
    """`sides` less the bf16 ones when they are the default and the CPU emulates bf16.

    Without bf16 instructions (`keras_transformer.hardware.BF16_CPU_FLAGS`) a bf16 side
    times TensorFlow's and PyTorch's emulation, slower than float32 and not what a user of
    the CPU would run (on a 2-core AVX2 EPYC, KerasHub's bf16 warm-up pass alone took 247 s,
    PyTorch compiled's more than 7 minutes). Named in `--sides`, they run, with a note.
    """
    bf16 = [side for side in sides if side.endswith("/bf16")]
    if native is not False or not bf16:
        return sides
    if asked:
        print(
            f"note: this CPU ({cpu_model()}) has no bf16 instructions: the bf16 sides time "
            "emulated bf16, slower than float32 here."
        )
        return sides
    print(
        f"note: this CPU ({cpu_model()}) has no bf16 instructions, so the default sides "
        "leave out the bf16 ones (they would time emulated bf16); name them in --sides "
        "to run them."
    )
    return [side for side in sides if side not in bf16]


def _child(*flags: str, args: argparse.Namespace) -> list[str]:
    command = [sys.executable, SCRIPT, *flags]
    for override in args.overrides:
        command += ["--set", override]
    return command


def main() -> None:
    args = _arguments()
    if args.prepare:
        from _compare_prepare import prepare

        prepare(args)
        return
    if args.worker:
        from _compare_worker import worker_main

        options = {
            "torch_threads": args.torch_threads,
            "torch_dynamic": {"default": None, "true": True, "false": False}[args.torch_dynamic],
        }
        worker_main(args.folder, args.worker, options)
        return
    if args.peak:
        from _compare_peak import measure

        if args.peak == "torch":
            import torch

            torch.set_num_threads(args.torch_threads)
        dtypes = tuple(args.peak_dtypes.split(","))
        peaks = measure(args.peak, args.peak_seconds, args.peak_warmup, dtypes)
        print("MSG " + json.dumps(peaks))
        return
    if args.memory_child:
        from _compare_memory import memory_child

        memory_child(args)
        return
    if args.steps < 1 or args.repeats < 1 or args.warmup < 0:
        sys.exit("train_compare.py: --steps and --repeats must be >= 1, --warmup >= 0.")

    from _compare_rounds import run_comparison

    sides = _sides(args)
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            _child("--prepare", folder, *_prepare_flags(args), args=args),
            check=False,
            stdout=subprocess.PIPE,
            text=True,
        )
        if done.returncode:
            sys.exit(f"train_compare.py: preparing the batches failed (exit {done.returncode}).")
        run_comparison(args, sides, Prepared.load(folder), _child)


def _prepare_flags(args: argparse.Namespace) -> list[str]:
    return [
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--multi30k-dir",
        args.multi30k_dir,
        "--work-dir",
        args.work_dir,
    ]


if __name__ == "__main__":
    main()
