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

The test (`tests/test_storage.py`) runs the chief and a waiting worker as two threads of
one process on a `ram://` run directory: `ram://` is the memory of one process, so two
worker processes cannot share it; `tests/test_training_multiworker.py` runs two worker
processes on a local folder.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from keras_transformer import storage
from keras_transformer.run_dir import RunPaths
from keras_transformer.training.strategies import is_chief

logger = logging.getLogger(__name__)

READY_FILENAME = "READY"
WAIT_TIMEOUT_S = 3600.0


def ready_marker(paths: RunPaths) -> str:
    """The marker the chief writes once both tokenizers are saved."""
    return os.path.join(paths.root, "tokenizers", READY_FILENAME)


def _model_files(paths: RunPaths) -> tuple[str, str]:
    from keras_transformer.tokenization import MODEL_FILENAME

    return (
        os.path.join(paths.source_tokenizer, MODEL_FILENAME),
        os.path.join(paths.target_tokenizer, MODEL_FILENAME),
    )


def publish_tokenizers(paths: RunPaths, source: Any, target: Any) -> None:
    """Saves both tokenizers into the run directory, then the `READY` marker last.

    Args:
        paths: the run directory.
        source: the source `SubwordTokenizer`.
        target: the target `SubwordTokenizer` (the same one for a shared vocabulary).
    """
    source.save(paths.source_tokenizer)
    target.save(paths.target_tokenizer)
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
    publish_tokenizers(paths, source, target)
    return load_tokenizers(paths)
