"""One side of `train_compare.py` in its own process (`train_compare.py --worker SIDE`): it
builds its model from the prepared weights, checks its logits against ours', then answers
the parent's commands on stdin, one JSON line each on stdout (prefixed `MSG `):

- `warmup` / `warmup-fixed`: one untimed pass over every batch (all shapes traced or
  compiled), or over the fixed-sentence batches;
- `run` / `run-fixed`: one timed pass over the measured (or fixed-sentence) batches:
  seconds per step, losses and the cores other processes kept busy meanwhile;
- `quit`.

Sides are `FRAMEWORK/PRECISION`: ours, keras_hub, torch-eager or torch-compiled, and fp32
or bf16 (Keras: the `mixed_bfloat16` policy; PyTorch: `torch.autocast` to bfloat16). A
PyTorch worker imports neither TensorFlow nor the package.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from collections.abc import Callable

import numpy as np
from _compare_data import Batch, load_saved
from _compare_spec import Prepared
from _machine import OtherLoad

FRAMEWORKS = ("ours", "keras_hub", "torch-eager", "torch-compiled")
PRECISIONS = {"fp32": "float32", "bf16": "mixed_bfloat16"}


def parse_side(side: str) -> tuple[str, str]:
    framework, _, precision = side.partition("/")
    if framework not in FRAMEWORKS or precision not in PRECISIONS:
        raise ValueError(
            f"Received an invalid side {side!r}, expected FRAMEWORK/PRECISION with FRAMEWORK "
            f"one of {FRAMEWORKS} and PRECISION one of {tuple(PRECISIONS)}."
        )
    return framework, precision


def send(**message) -> None:
    sys.stdout.write("MSG " + json.dumps(message) + "\n")
    sys.stdout.flush()


def _keras_side(prepared: Prepared, framework: str, precision: str, weights: dict):
    import keras
    from _compare_models import build_hub, build_ours
    from _compare_weights import load_hub

    from keras_transformer.config import load_config

    policy = PRECISIONS[precision]
    config = load_config("multi30k_de_en", [*prepared.overrides, f"training.dtype_policy={policy}"])
    if framework == "ours":
        model = build_ours(config, prepared.arch.vocab)
        model.set_weights(weights["ours"])
    else:
        model = build_hub(prepared.arch, config, False, policy)
        load_hub(model, weights["parts"])
    # Whether its training step leaves padding out (ours outside XLA: `skip_padding`).
    real_label_positions = getattr(model, "real_label_positions", None)
    skips_padding = real_label_positions is not None and (
        real_label_positions(np.array([[4, 0]], "int32")) is not None
    )

    def step(batch: Batch) -> float:
        (source, target_in), target_out = batch
        logs = model.train_on_batch((source, target_in), target_out, return_dict=True)
        return float(logs["loss"])

    def logits(batch: Batch) -> np.ndarray:
        (source, target_in), _ = batch
        out = model((source, target_in), training=False)
        return keras.ops.convert_to_numpy(keras.ops.cast(out, "float32"))

    return step, logits, skips_padding


def _torch_side(prepared: Prepared, framework: str, precision: str, weights: dict, options):
    from _compare_torch import build_torch_step

    return build_torch_step(
        prepared.arch,
        prepared.training,
        weights["parts"],
        weights["positions"],
        framework.removeprefix("torch-"),
        precision == "bf16",
        options["torch_threads"],
        options["torch_dynamic"],
    )


def _timed_pass(step: Callable[[Batch], float], batches: list[Batch]) -> dict:
    load = OtherLoad()
    load.start()
    step_s, losses = [], []
    for batch in batches:
        start = time.perf_counter()
        losses.append(step(batch))
        step_s.append(time.perf_counter() - start)
    return {"step_s": step_s, "losses": losses, "other_cores": load.cores()}


def worker_main(folder: str, side: str, options: dict) -> None:
    framework, precision = parse_side(side)
    prepared = Prepared.load(folder)
    with open(prepared.path("weights.pkl"), "rb") as f:
        weights = pickle.load(f)
    data = np.load(prepared.path("batches.npz"))
    batches, fixed = load_saved(data, "b"), load_saved(data, "f")
    measured = batches[prepared.warmup :]
    if framework.startswith("torch"):
        step, logits = _torch_side(prepared, framework, precision, weights, options)
        skips_padding = False
    else:
        step, logits, skips_padding = _keras_side(prepared, framework, precision, weights)

    # The equivalence check: eval-mode logits of batch 0 against ours', real tokens only.
    real = batches[0][1] != 0
    reference = data["reference_logits"][real]
    difference = float(np.abs(logits(batches[0])[real] - reference).max())
    scale = float(np.abs(reference).max())
    send(
        event="built",
        check=difference,
        scale=scale,
        skips_padding=skips_padding,
        pid=os.getpid(),
    )

    for line in sys.stdin:
        command = line.strip()
        if command in ("warmup", "warmup-fixed"):
            start = time.perf_counter()
            for batch in batches if command == "warmup" else fixed:
                step(batch)
            send(event="warm", seconds=time.perf_counter() - start)
        elif command in ("run", "run-fixed"):
            send(event="timed", **_timed_pass(step, measured if command == "run" else fixed))
        elif command == "quit":
            return
        else:
            send(event="error", message=f"unknown command {command!r}")
