"""Whether a run directory may be trained (again): a finished run is refused, and an
interrupted one resumes only as the model and optimizer its backup was taken from."""

from __future__ import annotations

from typing import Any

from keras_transformer import storage
from keras_transformer.config import ExperimentConfig, load_config
from keras_transformer.config.sections import TRAINING_ONLY
from keras_transformer.run_dir import RunPaths, read_labels
from keras_transformer.training.callbacks import BackupMismatchError


def check_not_finished(paths: RunPaths) -> None:
    """Refuses a run directory whose run ended: `model.keras` saved and no backup left (an
    interrupted run keeps `backup/` to resume from). Training there again would replace that
    model and mix a new run's per-epoch weights (which checkpoint averaging reads), logs and
    BLEU log with the finished run's.

    Raises:
        ValueError: naming the finished run's model and what to do instead.
    """
    if storage.exists(paths.model) and not storage.exists(paths.backup):
        raise ValueError(
            f"Received a run directory that holds a finished run: {paths.model} exists and "
            f"no backup to resume from ({paths.backup}). Training again would replace that "
            "model and mix the new run's checkpoints, logs and BLEU log with the finished "
            "run's. Expected a new run directory, or this one without model.keras, "
            "checkpoints/, logs/ and bleu.jsonl to train it again from new weights (on its "
            "tokenizers)."
        )


def check_resumable(config: ExperimentConfig, paths: RunPaths) -> None:
    """Refuses to resume an interrupted run (its `backup/`) as another model: the backup
    holds weights trained as the one its `config.yaml` describes (the `model` section but
    its training-only options, `TRAINING_ONLY`, and the task section's `model_keys`). A
    change that also changes the weights' or the optimizer's shapes is refused by the
    restore itself (`fit_and_save`).

    Raises:
        ValueError: naming each architecture key that differs, with the run's value.
    """
    saved = _saved_config(paths) if storage.exists(paths.backup) else None
    if saved is None:
        return
    model_keys = {f"{config.task}.{key}" for key in config.section.model_keys}
    changes = {
        key: values
        for key, values in config.changes_from(saved).items()
        if key in model_keys
        or (key.startswith("model.") and key.split(".", 1)[1] not in TRAINING_ONLY)
    }
    if changes:
        raise ValueError(
            f"Received a config whose model differs from the interrupted run's in "
            f"{paths.root}: {_listed(changes)}. Its backup ({paths.backup}) holds weights "
            f"trained as the run's model. Expected the run's own settings, to resume it "
            f"(`--config {paths.config}`, the config it saved), or a new run directory."
        )


def check_same_labels(paths: RunPaths, labels: tuple[str, ...] | None) -> None:
    """Refuses to resume an interrupted run (its `backup/`) on other label names than its
    `labels.txt`'s: its weights score the classes in that order, so other names, another
    order or another number would give the restored weights' classes the wrong names.

    Raises:
        ValueError: naming the run's `labels.txt` and both lists.
    """
    if labels is None or not storage.exists(paths.backup) or not storage.exists(paths.labels):
        return
    saved = read_labels(paths.root)
    if tuple(labels) != saved:
        raise ValueError(
            f"Received data whose labels {list(labels)} differ from the interrupted run's in "
            f"{paths.root}: {list(saved)} ({paths.labels}). Its backup ({paths.backup}) holds "
            "weights trained on those labels, in that order. Expected the run's labels, to "
            "resume it, or a new run directory."
        )


def backup_mismatch(
    error: BackupMismatchError, config: ExperimentConfig, paths: RunPaths
) -> ValueError:
    """The error for a rerun whose model or optimizer does not fit the interrupted run's
    backup (what `ResumableBackupAndRestore` found), naming how `config` differs from the
    run's `config.yaml`."""
    return ValueError(
        f"Received a config that does not fit the interrupted run in {paths.root}: its "
        f"backup ({paths.backup}) holds the state of another model or optimizer (Keras: "
        f"{error.detail}).{_differences(config, paths)} Expected the run's own settings, to "
        f"resume it (`--config {paths.config}`, the config it saved), or a new run directory."
    )


def _differences(config: ExperimentConfig, paths: RunPaths) -> str:
    """How `config` differs from the run directory's `config.yaml`, as a sentence."""
    saved = _saved_config(paths)
    changes = config.changes_from(saved) if saved is not None else {}
    changes.pop("training.run_dir", None)  # where the run is, not how it trains
    if not changes:
        return ""
    return f" This config differs from the one the run saved in: {_listed(changes)}."


def _saved_config(paths: RunPaths) -> ExperimentConfig | None:
    """The run directory's `config.yaml` (None: none, or one this version cannot read)."""
    if not storage.exists(paths.config):
        return None
    try:
        return load_config(paths.config)
    except ValueError:
        return None


def _listed(changes: dict[str, tuple[Any, Any]]) -> str:
    """`{"model.d_model": (32, 64)}` as "model.d_model=64 (the run's: 32)"."""
    return ", ".join(f"{key}={new!r} (the run's: {old!r})" for key, (old, new) in changes.items())
