"""Where a training step's time goes: an op-level profile of the recipe's training step.

Trains the packaged `multi30k_de_en` config (its model, Adam on its schedule, its ~4,096-token
length-bucketed batches, the machine's `jit_compile` choice: no XLA on CPU) for `--skip`
unmeasured steps, then traces `--steps` more with TensorFlow's profiler
(`tf.profiler.experimental`), and prints the ops' self-time grouped by what they compute:
attention (the Q/K/V/output projections apart from the scores, softmax and masks), the
feed-forward matmuls, LayerNorm, dropout, embeddings, the output projection and loss, the
optimizer update, and the tf.data threads. The trace is converted by xprof (the `bench`
extra; TensorBoard's profile tool: its `framework_op_stats`) in a process without
TensorFlow. Op self-times are summed over the executor's threads: on 2 cores they add up to
about twice the step's wall time, so the shares are shares of op time, and the wall time
per step during the trace (the profiler's overhead included) is printed beside them.
XLA-compiled functions (the loss, `smoothed_cross_entropy_from_logits`, outside an XLA step)
are not TensorFlow ops in the trace's op stats: their time is in the wall time only.

    python benchmarks/train_profile.py [--steps 20] [--skip 10] [--set key=value ...]

`--dtype-policy mixed_bfloat16` profiles bf16 training. Needs the Multi30k copy
(`--multi30k-dir`, else `$KERAS_TRANSFORMER_MULTI30K_DIR`); tokenizers are trained once into
`--work-dir` and reused.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# Other processes' cores beyond which the profile is not of this step alone (a warning).
BUSY_CORES = 0.25

from _machine import DEFAULT_MULTI30K_DIR, OtherLoad, commit, cpu_model  # noqa: E402
from _profile_ops import categorize, format_table, op_rows, top_ops  # noqa: E402


def _worker(args: argparse.Namespace) -> None:
    """Trains and traces (the TensorFlow process); writes the trace and `step.json`."""
    import keras
    import tensorflow as tf

    from keras_transformer.config import load_config
    from keras_transformer.data import count_batches
    from keras_transformer.run_dir import RunPaths
    from keras_transformer.runner import build_and_compile, training_data
    from keras_transformer.tasks import get_task

    config = load_config(
        "multi30k_de_en",
        [
            f"translation.local_dir={os.path.abspath(args.multi30k_dir)}",
            f"data.data_dir={os.path.join(args.work_dir, 'tfds')}",
            f"training.run_dir={args.work_dir}",
            f"training.dtype_policy={args.dtype_policy}",
            *args.overrides,
        ],
    )
    keras.utils.set_random_seed(config.training.seed)
    paths = RunPaths(args.work_dir)
    os.makedirs(paths.root, exist_ok=True)
    task = get_task(config)
    pairs, tokenizers = training_data(task, paths)
    batches = task.make_batches(pairs, tokenizers, shuffle=True)
    steps_per_epoch = count_batches(batches)
    strategy = tf.distribute.get_strategy()
    model, _ = build_and_compile(
        task, tokenizers, None, strategy, config.training.epochs * steps_per_epoch
    )
    logdir = os.path.join(args.work_dir, "profile")
    trace = _trace_callback()(logdir, first=args.skip, steps=args.steps)
    # One iterator for warm-up and trace: the shuffle buffer fills before the trace starts.
    model.fit(
        batches.repeat(),
        epochs=1,
        steps_per_epoch=args.skip + args.steps,
        callbacks=[trace],
        verbose=0,
    )
    with open(os.path.join(args.work_dir, "step.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "wall_ms_per_step": 1000 * trace.wall / args.steps,
                "steps": args.steps,
                "other_cores": trace.other_cores,
                "dtype_policy": model.dtype_policy.name,
                "jit_compile": bool(model.jit_compile),
                "tensorflow": tf.__version__,
                "logdir": logdir,
            },
            f,
        )


def _trace_callback():
    """A Keras callback class that traces steps `first` to `first + steps - 1` (imported in
    the worker only: the parent process never imports TensorFlow)."""
    import time

    import keras
    import tensorflow as tf

    class Trace(keras.callbacks.Callback):
        def __init__(self, logdir: str, *, first: int, steps: int):
            super().__init__()
            self.logdir, self.first, self.last = logdir, first, first + steps - 1

        def on_train_batch_begin(self, batch, logs=None):
            if batch == self.first:
                tf.profiler.experimental.start(self.logdir)
                self.others = OtherLoad()
                self.others.start()
                self.started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            if batch == self.last:
                float(logs["loss"])  # the step has run, not only been dispatched
                self.wall = time.perf_counter() - self.started
                self.other_cores = self.others.cores()
                tf.profiler.experimental.stop()

    return Trace


def _newest_trace(logdir: str) -> str:
    runs = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*")))
    if not runs:
        raise SystemExit(f"No profile was written under {logdir}.")
    return glob.glob(os.path.join(runs[-1], "*.xplane.pb"))[0]


def _convert(trace: str) -> list[dict]:
    """`framework_op_stats` of the trace, by xprof (no TensorFlow in this process)."""
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([trace], "framework_op_stats", {})
    return op_rows(json.loads(data))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="Traced steps.")
    parser.add_argument("--skip", type=int, default=10, help="Untraced warm-up steps.")
    parser.add_argument("--dtype-policy", default="float32")
    parser.add_argument(
        "--multi30k-dir",
        default=DEFAULT_MULTI30K_DIR,
    )
    parser.add_argument("--work-dir", default="/tmp/keras_transformer_profile")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return
    if importlib.util.find_spec("xprof") is None:  # checked before minutes of training
        raise SystemExit(
            "The op profile needs xprof (the `bench` extra): pip install -e '.[bench]'."
        )
    worker = [sys.executable, os.path.abspath(__file__), "--worker", *sys.argv[1:]]
    subprocess.run(worker, check=True)
    with open(os.path.join(args.work_dir, "step.json"), encoding="utf-8") as f:
        step = json.load(f)
    rows = _convert(_newest_trace(step["logdir"]))
    print(
        f"Profile of {step['steps']} training steps of multi30k_de_en: "
        f"{step['dtype_policy']}, jit_compile={step['jit_compile']}, TF {step['tensorflow']}, "
        f"commit {commit()}; "
        f"{cpu_model()}, {os.cpu_count()} cores; {step['wall_ms_per_step']:,.0f} ms a step "
        f"(wall, traced); other processes kept {step['other_cores']:.2f} cores busy"
    )
    if step["other_cores"] > BUSY_CORES:
        print(
            f"WARNING: other processes kept {step['other_cores']:.2f} cores busy (more than "
            f"{BUSY_CORES}): op times include waiting for the CPU; profile a quiet machine."
        )
    print(format_table(categorize(rows), steps=step["steps"]))
    print(
        "(XLA-compiled functions, as the loss outside an XLA step, run outside TensorFlow's "
        "op stats: their time is in the wall time a step, not in the op time above; "
        "`benchmarks/loss.py` times the loss alone.)"
    )
    print()
    print(top_ops(rows, steps=step["steps"]))


if __name__ == "__main__":
    main()
