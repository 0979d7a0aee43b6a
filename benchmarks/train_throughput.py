"""Training throughput of the Multi30k de->en config on this machine.

Trains the packaged `multi30k_de_en` config for a fixed number of steps and prints target
tokens per second (real, non-pad tokens of `target_out`), the mean step time (after the
first `--skip` steps, which include tracing/compilation), and the loss and token accuracy
of the last steps. The steps are the recipe's plain ones in float32, as the package's
figures were measured (the recipe trains in bf16 where the hardware computes in it, and with
R-Drop from its 10th epoch when the time left holds enough of it):
`--set training.dtype_policy=mixed_bfloat16` times bf16, and `--set
training.rdrop_start_epoch=0 --set training.rdrop_min_epochs=null` makes every step
R-Drop's (the batch trained twice; the tokens counted once).

    python benchmarks/train_throughput.py --steps 200 [--jit both] [--set key=value ...]

Needs the Multi30k copy (`--multi30k-dir`, default `../shared/data/multi30k` beside the
repository, or `$KERAS_TRANSFORMER_MULTI30K_DIR`). Tokenizers are trained once into
`--work-dir` and reused.
"""

from __future__ import annotations

import argparse
import os
import time

import _machine  # noqa: F401  (first: sets the package's oneDNN default before TF)
import keras
import tensorflow as tf
from _machine import DEFAULT_MULTI30K_DIR

from keras_transformer.config import load_config
from keras_transformer.run_dir import RunPaths
from keras_transformer.runner import training_data
from keras_transformer.tasks import get_task
from keras_transformer.training import MaskedSparseCategoricalAccuracy, compile_model


def _accuracy_metric(metrics):
    for metric in metrics:
        if isinstance(metric, MaskedSparseCategoricalAccuracy):
            return metric
        found = _accuracy_metric(getattr(metric, "metrics", []))
        if found is not None:
            return found
    return None


class Meter(keras.callbacks.Callback):
    """Records time and real target tokens (the accuracy metric's count) per step."""

    def __init__(self, skip):
        super().__init__()
        self.skip = skip
        self.start = None

    def on_train_batch_end(self, batch, logs=None):
        metric = _accuracy_metric(self.model.metrics)
        if batch + 1 == self.skip:
            self.start = (time.perf_counter(), float(metric.count.numpy()))
        self.end = (time.perf_counter(), float(metric.count.numpy()), batch + 1)
        self.logs = logs


def run(task, tokenizers, pairs, steps, skip, jit):
    config = task.config
    # Seeded here, after the data and tokenizers are ready (preparing a TFDS dataset draws
    # from Python's `random`, as `train` says) and for each run of `--jit both`: every run
    # starts from the same weights and batches, whatever ran before it in the process.
    keras.utils.set_random_seed(config.training.seed)
    train = task.make_batches(pairs, tokenizers, shuffle=True).repeat()
    model = task.build_model(tokenizers, None)
    t = config.training
    compile_model(
        model,
        label_smoothing=t.label_smoothing,
        warmup_steps=t.warmup_steps,
        jit_compile=jit,
        # R-Drop's doubled steps when the config asks (from `rdrop_start_epoch`: this one
        # epoch of `fit` is epoch 0).
        rdrop_alpha=t.rdrop_alpha,
        rdrop_start_epoch=t.rdrop_start_epoch,
    )
    meter = Meter(skip)
    started = time.perf_counter()
    model.fit(train, epochs=1, steps_per_epoch=steps, callbacks=[meter], verbose=0)
    total = time.perf_counter() - started
    (t0, n0), (t1, n1, done) = meter.start, meter.end
    step_time = (t1 - t0) / (done - skip)
    print(
        f"jit_compile={jit}: {steps} steps in {total:.1f}s | measured steps {skip + 1}-{done}: "
        f"{(n1 - n0) / (t1 - t0):,.0f} target tokens/s, {step_time * 1000:.1f} ms/step, "
        f"{(n1 - n0) / (done - skip):.0f} tokens/step | loss {float(meter.logs['loss']):.4f}, "
        f"accuracy {float(meter.logs['accuracy']):.4f} "
        f"(epoch means), lr {float(meter.logs['learning_rate']):.2e}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--skip", type=int, default=10, help="Warm-up steps not measured.")
    parser.add_argument("--jit", choices=["off", "on", "both"], default="off")
    parser.add_argument(
        "--multi30k-dir",
        default=DEFAULT_MULTI30K_DIR,
    )
    parser.add_argument("--work-dir", default="/tmp/keras_transformer_benchmark")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()

    config = load_config(
        "multi30k_de_en",
        [
            f"translation.local_dir={os.path.abspath(args.multi30k_dir)}",
            f"data.data_dir={os.path.join(args.work_dir, 'tfds')}",
            f"training.run_dir={args.work_dir}",
            "training.dtype_policy=float32",
            *args.overrides,
        ],
    )
    print(
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, "
        f"{os.cpu_count()} CPUs, GPUs: {len(tf.config.list_physical_devices('GPU'))}"
    )
    paths = RunPaths(args.work_dir)
    os.makedirs(paths.root, exist_ok=True)
    task = get_task(config)
    pairs, tokenizers = training_data(task, paths)
    m = config.model
    print(
        f"model: {m.num_encoder_layers}+{m.num_decoder_layers} layers, d_model {m.d_model}, "
        f"d_ff {m.d_ff}, {m.num_heads} heads, vocab {tokenizers[0].vocab_size}; "
        f"batches of {config.data.batch_size or config.data.tokens_per_batch} "
        f"{'sentences' if config.data.batch_size else 'tokens'}"
    )
    for jit in {"off": [False], "on": [True], "both": [False, True]}[args.jit]:
        run(task, tokenizers, pairs, args.steps, args.skip, jit)


if __name__ == "__main__":
    main()
