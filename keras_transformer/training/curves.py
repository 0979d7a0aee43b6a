"""Training curves per epoch, from a Keras `History`, TensorBoard events or `bleu.jsonl`.

A curve is a `Curve(epochs, values)` with 1-based epochs; curves are keyed as Keras keys
its logs: `loss`, `accuracy`, `learning_rate` for training and `val_loss`,
`val_accuracy`, `val_bleu` for validation. Three sources give them:

- `curves_from_history`: a `keras.callbacks.History` (what `fit` and `train` return) or
  its `.history` dict;
- `read_tensorboard_curves`: the event files that `keras.callbacks.TensorBoard` writes
  under `LOG_DIR/train` and `LOG_DIR/validation` (read with TensorBoard's
  `EventAccumulator`; the step of an epoch summary is the 0-based epoch);
- `read_run_curves`: a run directory, its `logs/` plus `bleu.jsonl` for `val_bleu`.

Example:

```python
curves = read_run_curves("runs/de-en")
curves["val_loss"].epochs, curves["val_loss"].values
```
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, NamedTuple

from keras_transformer import storage

logger = logging.getLogger(__name__)

# TensorBoard's sub-folders (as `keras.callbacks.TensorBoard` names them) -> key prefix.
TENSORBOARD_FOLDERS = {"train": "", "validation": "val_"}
# The prefix `keras.callbacks.TensorBoard` gives per-epoch summaries.
EPOCH_TAG_PREFIX = "epoch_"


class Curve(NamedTuple):
    """One quantity over training: `values[i]` was logged at the end of `epochs[i]`."""

    epochs: tuple[int, ...]
    values: tuple[float, ...]


def curves_from_history(history: Any) -> dict[str, Curve]:
    """Curves from a Keras `History` or its `.history` dict (or a dict of `Curve`s).

    A quantity logged at every epoch is placed at epochs 1..E. One logged at fewer epochs
    (`val_bleu` with `training.bleu_every > 1`, validation with `validation_freq`) cannot
    be placed from a `History`: it is left out with a warning (`read_run_curves` places
    BLEU by the epochs in `bleu.jsonl`).

    Args:
        history: a `keras.callbacks.History`, a dict `{name: [value per epoch]}` or a
            dict `{name: Curve}` (returned as is).

    Returns:
        `{name: Curve}`.

    Example:
    >>> curves_from_history({"loss": [2.0, 1.5]})["loss"]
    Curve(epochs=(1, 2), values=(2.0, 1.5))
    """
    logs = getattr(history, "history", history)
    if not isinstance(logs, Mapping):
        raise ValueError(
            "Received an invalid value for argument `history`, expected a keras History or "
            f"a dict of per-epoch lists. Received: {type(history).__name__}"
        )
    if all(isinstance(v, Curve) for v in logs.values()):
        return dict(logs)
    keras_epochs = getattr(history, "epoch", None)
    count = max((len(v) for v in logs.values()), default=0)
    epochs = tuple(int(e) + 1 for e in keras_epochs) if keras_epochs else tuple(range(1, count + 1))
    curves, skipped = {}, []
    for name, values in logs.items():
        if len(values) == len(epochs):
            curves[name] = Curve(epochs, tuple(float(v) for v in values))
        else:
            skipped.append(f"{name} ({len(values)} of {len(epochs)} epochs)")
    if skipped:
        logger.warning(
            "Left out of the curves, logged at fewer epochs than the others (their epochs "
            "are not in a History): %s.",
            ", ".join(skipped),
        )
    return curves


def _scalar_events(accumulator) -> dict[str, dict[int, float]]:
    """`{tag: {step: value}}` from an `EventAccumulator` (v2 tensors and v1 scalars)."""
    from tensorboard.util import tensor_util

    tags = accumulator.Tags()
    found: dict[str, dict[int, float]] = {}
    for tag in tags.get("tensors", []):
        for event in accumulator.Tensors(tag):
            value = tensor_util.make_ndarray(event.tensor_proto)
            if value.size == 1 and value.dtype.kind in "fiub":  # not text (the model config)
                found.setdefault(tag, {})[event.step] = float(value.reshape(()))
    for tag in tags.get("scalars", []):
        for event in accumulator.Scalars(tag):
            found.setdefault(tag, {})[event.step] = float(event.value)
    return found


def read_tensorboard_curves(log_dir: str) -> dict[str, Curve]:
    """Per-epoch curves from the TensorBoard events of a `keras.callbacks.TensorBoard`.

    Reads the `epoch_*` summaries of `log_dir/train` (as `loss`, `accuracy`,
    `learning_rate`, ...) and `log_dir/validation` (as `val_loss`, `val_bleu`, ...). When
    a resumed run logged an epoch twice, the later value wins.

    Args:
        log_dir: the TensorBoard folder (`RunPaths(run_dir).logs`).

    Returns:
        `{name: Curve}`; empty when there are no event files.

    Example (not run as a doctest: it needs a run's logs):

    ```python
    read_tensorboard_curves("runs/de-en/logs")["loss"].values  # (5.91, 4.87, 4.2)
    ```
    """
    from tensorboard.backend.event_processing.event_accumulator import (
        TENSORS,
        EventAccumulator,
    )

    curves: dict[str, Curve] = {}
    for folder, prefix in TENSORBOARD_FOLDERS.items():
        path = os.path.join(log_dir, folder)
        if not storage.isdir(path):
            continue
        accumulator = EventAccumulator(path, size_guidance={TENSORS: 0})
        accumulator.Reload()
        for tag, by_step in _scalar_events(accumulator).items():
            if not tag.startswith(EPOCH_TAG_PREFIX):
                continue
            steps = sorted(by_step)
            name = prefix + tag[len(EPOCH_TAG_PREFIX) :]
            curves[name] = Curve(tuple(s + 1 for s in steps), tuple(by_step[s] for s in steps))
    return curves


def read_run_curves(run_dir: str) -> dict[str, Curve]:
    """The curves of a run directory: its TensorBoard logs, and `val_bleu` from `bleu.jsonl`.

    `bleu.jsonl` (written whenever `training.bleu_every` is set) gives `val_bleu` when the
    TensorBoard logs lack it (`training.tensorboard=false`).

    Args:
        run_dir: the run directory (`keras_transformer.run_dir`).

    Returns:
        `{name: Curve}`; empty when the run has neither logs nor `bleu.jsonl`.

    Example (not run as a doctest: it needs a trained run):

    ```python
    sorted(read_run_curves("runs/de-en"))
    # ['accuracy', 'learning_rate', 'loss', 'val_accuracy', 'val_bleu', 'val_loss']
    ```
    """
    from keras_transformer.run_dir import RunPaths
    from keras_transformer.training.bleu import read_bleu_log

    paths = RunPaths(run_dir)
    curves = read_tensorboard_curves(paths.logs)
    if "val_bleu" not in curves and storage.exists(paths.bleu_log):
        records = read_bleu_log(paths.bleu_log)
        if records:
            curves["val_bleu"] = Curve(
                tuple(int(r["epoch"]) for r in records), tuple(float(r["bleu"]) for r in records)
            )
    return curves
