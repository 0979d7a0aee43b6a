"""The run's tokenizers between workers: the chief trains and publishes them, others wait.

Under multi-worker training every worker needs the same SentencePiece models, and only the
chief trains them. The handshake goes through the shared run directory, which may be a
local or network folder or a bucket (`gs://...`: any path `keras_transformer.storage`
reads), so it relies only on what every such file system gives:

1. the chief saves `tokenizers/source/spm.model` and `tokenizers/target/spm.model` (and
   their `.vocab` files);
2. then, last, it writes the marker `tokenizers/READY`;
3. the other workers poll for the marker (`storage.wait_for`), then load the models.

A worker never reads a model the chief is still writing, on a local disk (where a file is
visible while it is written) as on an object store (where a file appears whole when its
writer closes it, but two files never appear together). Runs written before the marker
existed have both model files and no marker: the chief reuses them and writes the marker.

Beside the models, `tokenizers/settings.json` records what they were trained from and with
(`tokenizer_settings`: the task, the training data's origin, the `data` keys that choose the
texts and size the vocabulary, the task section's `tokenizer_keys`). A run directory's
tokenizers are reused only for the same settings: `train` checks them (`check_reusable`)
before it writes anything, so a config that asks for another vocabulary or other data in an
existing run directory is an error, not a run on the old tokenizers under the new config's
name. Tokenizers saved before the file existed are reused unchecked.

The test (`tests/test_storage.py`) runs the chief and a waiting worker as two threads of
one process on a `ram://` run directory: `ram://` is the memory of one process, so two
worker processes cannot share it; `tests/test_training_multiworker.py` runs two worker
processes on a local folder.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from keras_transformer import storage
from keras_transformer.run_dir import RunPaths
from keras_transformer.training.strategies import is_chief

logger = logging.getLogger(__name__)

READY_FILENAME = "READY"
SETTINGS_FILENAME = "settings.json"
WAIT_TIMEOUT_S = 3600.0
# The `data` keys that choose the tokenizers' texts and how they are trained.
DATA_TOKENIZER_KEYS = (
    "source",
    "train_split",
    "max_train_examples",
    "validation_holdout",
    "vocab_size",
    "tokenizer_model_type",
    "tokenizer_max_sentences",
)


def ready_marker(paths: RunPaths) -> str:
    """The marker the chief writes once both tokenizers are saved."""
    return os.path.join(paths.root, "tokenizers", READY_FILENAME)


def settings_file(paths: RunPaths) -> str:
    """The record of what the run's tokenizers were trained from and with."""
    return os.path.join(paths.root, "tokenizers", SETTINGS_FILENAME)


def tokenizer_settings(
    config: Any, origin: str, *, shared: bool, given: bool = False
) -> dict[str, Any]:
    """What a run's tokenizers are trained from and with, as `settings.json` records it.

    Args:
        config: the `ExperimentConfig`.
        origin: where the training data came from (`TaskData.origin`).
        shared: one tokenizer for both sides.
        given: the data was given to `train` (`train_data`), not the config's.

    Returns:
        `{"task": ..., "origin": ..., "given_data": ..., "shared_vocab": ...,
        "data.vocab_size": ..., ...}`: the `data` keys of `DATA_TOKENIZER_KEYS` and the task
        section's `tokenizer_keys`, by their dotted names.
    """
    section = config.section
    settings: dict[str, Any] = {
        "task": config.task,
        "origin": origin,
        "given_data": given,
        "shared_vocab": shared,
    }
    settings.update({f"data.{key}": getattr(config.data, key) for key in DATA_TOKENIZER_KEYS})
    settings.update(
        {f"{config.task}.{key}": getattr(section, key) for key in section.tokenizer_keys}
    )
    return settings


def trained_on_given_data(paths: RunPaths) -> bool:
    """Whether the run trained on data given to `train` (`train_data`) rather than on its
    config's `data.source`, as its `settings.json` records (runs saved before the record:
    the origin `train_data` of a given dataset; a run without the file: False)."""
    path = settings_file(paths)
    if not storage.exists(path):
        return False
    saved = json.loads(storage.read_text(path))
    # Before the record, a dataset given as `train(train_data=...)` had the origin
    # "train_data" (`runner.train`).
    return bool(saved.get("given_data", saved.get("origin") == "train_data"))


def check_reusable(paths: RunPaths, settings: dict[str, Any]) -> None:
    """Refuses a run directory whose tokenizers were trained from other `settings`.

    Nothing to check when the directory has no `settings.json` (no tokenizers yet, or
    tokenizers saved before the file existed).

    Raises:
        ValueError: naming each setting that differs, with the tokenizers' value.
    """
    path = settings_file(paths)
    if not storage.exists(path):
        return
    saved = json.loads(storage.read_text(path))
    changed = [key for key in settings if saved.get(key, settings[key]) != settings[key]]
    if changed:
        received = ", ".join(
            f"{key}={settings[key]!r} (the tokenizers': {saved[key]!r})" for key in changed
        )
        trained = any(storage.exists(p) for p in (paths.model, paths.checkpoints, paths.backup))
        remedy = (
            "a new run directory"
            if trained
            else f"a new run directory, or the folder {storage.parent(path)} deleted (no "
            "model was trained there yet)"
        )
        data = (
            " (with the same `train_data` given to `train`: it trained on given data)"
            if saved.get("given_data") and not settings.get("given_data")
            else ""
        )
        raise ValueError(
            f"Received a config whose tokenizer settings differ from those of the run "
            f"directory {paths.root}: {received}. Expected the settings its tokenizers were "
            f"trained with, to resume or retrain that run{data}, or {remedy}."
        )


def _model_files(paths: RunPaths) -> tuple[str, str]:
    from keras_transformer.tokenization import MODEL_FILENAME

    return (
        os.path.join(paths.source_tokenizer, MODEL_FILENAME),
        os.path.join(paths.target_tokenizer, MODEL_FILENAME),
    )


def publish_tokenizers(
    paths: RunPaths, source: Any, target: Any, settings: dict[str, Any] | None = None
) -> None:
    """Saves both tokenizers into the run directory, their `settings` (`settings.json`),
    then the `READY` marker last.

    Args:
        paths: the run directory.
        source: the source `SubwordTokenizer`.
        target: the target `SubwordTokenizer` (the same one for a shared vocabulary).
        settings: what they were trained from and with (`tokenizer_settings`; None: no
            record).
    """
    source.save(paths.source_tokenizer)
    target.save(paths.target_tokenizer)
    if settings is not None:
        storage.write_text(settings_file(paths), json.dumps(settings, indent=2) + "\n")
    storage.write_text(ready_marker(paths), "source/spm.model target/spm.model\n")


def wait_for_tokenizers(
    paths: RunPaths, timeout_s: float = WAIT_TIMEOUT_S, poll_s: float = 2.0
) -> None:
    """Waits until the chief's `READY` marker exists (both tokenizers are complete).

    Args:
        paths: the shared run directory.
        timeout_s: seconds to wait at most.
        poll_s: seconds between looks.

    Raises:
        TimeoutError: when the chief did not publish the tokenizers in time.
    """
    storage.wait_for(ready_marker(paths), timeout_s, poll_s, what=f"the tokenizers of {paths.root}")


def load_tokenizers(paths: RunPaths) -> tuple[Any, Any]:
    """`(source, target)` `SubwordTokenizer`s of the run directory."""
    from keras_transformer.tokenization import SubwordTokenizer

    return (
        SubwordTokenizer.load(paths.source_tokenizer),
        SubwordTokenizer.load(paths.target_tokenizer),
    )


def load_or_train_tokenizers(
    config: Any,
    paths: RunPaths,
    train_pairs: Any,
    strategy: Any,
    *,
    shared: bool,
    settings: dict[str, Any] | None = None,
    **train_kwargs: Any,
) -> tuple[Any, Any]:
    """Loads the run's tokenizers, or trains them on `train_pairs` and publishes them.

    Under multi-worker training the chief trains and publishes them; the other workers
    wait for the `READY` marker (the run directory must be shared: a network folder or a
    bucket).

    Args:
        config: the `ExperimentConfig` (its `data` section sizes the vocabulary).
        train_pairs: a dataset of `(source, target)` strings.
        shared: one tokenizer for both sides (saved as both of the run's tokenizers).
        paths: the run directory.
        strategy: the run's strategy (who is the chief).
        settings: what the tokenizers are trained from and with (`tokenizer_settings`):
            tokenizers the directory holds are reused only for the same settings
            (`check_reusable`), new ones are saved with them. None: no check, no record.
        **train_kwargs: passed to `train_sentencepiece`.

    Returns:
        `(source, target)` `SubwordTokenizer`s.
    """
    from keras_transformer.tokenization import train_tokenizers

    marker = ready_marker(paths)
    if not is_chief(strategy):
        if not storage.exists(marker):
            logger.info("Waiting for the chief's tokenizers in %s.", paths.root)
            wait_for_tokenizers(paths)
        return load_tokenizers(paths)
    if storage.exists(marker) or all(storage.exists(f) for f in _model_files(paths)):
        if settings is not None:
            check_reusable(paths, settings)
        logger.info("Reusing the tokenizers of %s.", paths.root)
        if not storage.exists(marker):  # a run from before the marker
            storage.write_text(marker, "source/spm.model target/spm.model\n")
        return load_tokenizers(paths)
    d = config.data
    logger.info("Training the tokenizers (vocab_size=%d).", d.vocab_size)
    source, target = train_tokenizers(
        train_pairs,
        d.vocab_size,
        shared=shared,
        model_type=d.tokenizer_model_type,
        max_sentences=d.tokenizer_max_sentences,
        seed=config.training.seed,
        **train_kwargs,
    )
    publish_tokenizers(paths, source, target, settings)
    return load_tokenizers(paths)
