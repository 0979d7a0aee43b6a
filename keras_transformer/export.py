"""Export a `Translator` as a string-in/string-out SavedModel for TF Serving.

`export_translator` writes `BASE/NAME/VERSION/` with `keras.export.ExportArchive`:

- into a hidden temporary folder beside the version folders first (TF Serving only picks up
  folders named by an integer), then renamed into place once complete and checked, so a
  server polling the base path never sees half a model, and a failed export leaves nothing
  behind; on an object store (a `scheme://` base path such as `gs://`, where nothing
  renames a folder atomically) into a local temporary folder, then copied file by file
  with `saved_model.pb` last (`publish_saved_model`);
- with the tokenizers' SentencePiece models inside the graph (tracked tf-text resources):
  nothing outside the version folder is needed;
- with only ops that TF Serving's model server ships (`keras_transformer.serving.ops`).

Signatures (named inputs, dict outputs of dense tensors):

| signature | inputs | outputs |
| --- | --- | --- |
| `serving_default` | `sentences` str (N,) | `translations` str (N,), `scores` float32 (N,) |
| `translate_nbest` | `sentences` str (N,) | `translations` str (N, K), `scores` float32 (N, K) |
| `tokenize` | `sentences` str (N,) | `token_ids` int32 (N, S) 0-padded, `lengths` int32 (N,) |
| `detokenize` | `token_ids` int32 (N, T) | `sentences` str (N,) |

`tokenize` uses the source tokenizer and `detokenize` the target one. Decoding uses the
translator's method, beam size (K), length penalty and length limits at export time.
Scores are the decoder's (length-penalized log-probabilities; higher is better).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable

import keras
import tensorflow as tf

from keras_transformer import storage
from keras_transformer.predictors import Translator
from keras_transformer.validation import check_positive_int

logger = logging.getLogger(__name__)

SIGNATURES = ("serving_default", "translate_nbest", "tokenize", "detokenize")
_TMP_PREFIX = ".tmp-export-"
# What a server needs last. TF Serving's file_system_storage_path_source.cc picks up every
# child of the base path whose name parses as a number (`ParseVersionNumber`), whatever is
# in it yet (on GCS `GetChildren` lists every object below, so a version folder exists as
# soon as its first file does); its SavedModel loader (tensorflow/cc/saved_model/loader.cc,
# reader.cc) fails without `saved_model.pb`/`.pbtxt` (`MaybeSavedModelDirectory` checks for
# exactly those two), and TF Serving retries a failed load (retrier.cc,
# `--max_num_load_retries`, `--load_retry_interval_micros`). Once the graph is there it
# loads whatever variables it finds (tensorflow/serving#1086, tensorflow/tensorflow#20635:
# a load that raced a copy served uninitialized variables), so the graph is copied last.
SAVED_MODEL_GRAPH_FILES = ("saved_model.pb", "saved_model.pbtxt")


def _version_dirs(model_dir: str) -> list[int]:
    if not storage.isdir(model_dir):
        return []
    return sorted(int(name) for name in storage.listdir(model_dir) if name.isdigit())


def next_version(model_dir: str) -> int:
    """The next free integer version under `model_dir` (1 when there is none)."""
    versions = _version_dirs(model_dir)
    return versions[-1] + 1 if versions else 1


def _serving_functions(translator: Translator) -> dict[str, tf.types.experimental.GenericFunction]:
    sentences_spec = tf.TensorSpec([None], tf.string, name="sentences")
    model, source, target = (
        translator.model,
        translator.source_tokenizer,
        translator.target_tokenizer,
    )
    pad_id = int(model.pad_id)

    @tf.function(input_signature=[sentences_spec])
    def serving_default(sentences):
        translations, scores = translator.translate_strings(sentences)
        return {"translations": translations, "scores": scores}

    @tf.function(input_signature=[sentences_spec])
    def translate_nbest(sentences):
        translations, scores = translator.translate_strings_nbest(sentences)
        return {"translations": translations, "scores": scores}

    @tf.function(input_signature=[sentences_spec])
    def tokenize(sentences):
        ragged = tf.cast(source.tokenize(sentences), tf.int32)  # (N, None)
        return {
            "token_ids": ragged.to_tensor(default_value=pad_id),  # (N, S)
            "lengths": tf.cast(ragged.row_lengths(), tf.int32),  # (N,)
        }

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="token_ids")])
    def detokenize(token_ids):
        return {"sentences": target.detokenize(token_ids)}

    return {
        "serving_default": serving_default,
        "translate_nbest": translate_nbest,
        "tokenize": tokenize,
        "detokenize": detokenize,
    }


def export_translator(
    translator: Translator,
    base_path: str,
    model_name: str = "transformer",
    version: int | None = None,
    check_ops: bool = True,
    allowed_ops: Iterable[str] | None = None,
) -> str:
    """Writes `translator` as SavedModel `base_path/model_name/version` for TF Serving.

    Args:
        translator: the `Translator` to export (its decoding settings are baked in).
        base_path: TF Serving's model base path's parent: the export lands in
            `base_path/model_name/<version>`.
        model_name: the model's folder (TF Serving's model name).
        version: a positive integer; defaults to the next free one. An existing version is
            never overwritten.
        check_ops: refuse to publish a graph with ops that TF Serving does not ship.
        allowed_ops: the allow-list for that check; defaults to the packaged one.

    Returns:
        The path of the published version folder.

    Raises:
        ValueError: for a bad `version`/`model_name`, an existing version, or ops outside
            the allow-list; nothing is left on disk then.

    Example (not run as a doctest: it needs a trained run directory):

    ```python
    translator = Translator.from_run_dir("runs/de-en", beam_size=4)
    export_translator(translator, "exports")
    # 'exports/transformer/1'
    ```
    """
    tokenizers = [translator.source_tokenizer]
    if translator.target_tokenizer is not translator.source_tokenizer:
        tokenizers.append(translator.target_tokenizer)
    info = {
        "decoding": {
            "method": translator.method,
            "beam_size": translator.beam_size,
            "length_penalty": translator.length_penalty,
            "max_length": translator.decoder.max_length,
            "max_length_a": translator.decoder.max_length_a,
            "max_length_b": translator.decoder.max_length_b,
        },
        "source_eos": translator.source_eos,
        "model": translator.model.transformer_config().to_dict(),
    }
    return publish_saved_model(
        base_path,
        model_name,
        version,
        track=[translator.model, *tokenizers],
        endpoints=_serving_functions(translator),
        info=info,
        check_ops=check_ops,
        allowed_ops=allowed_ops,
    )


def publish_saved_model(
    base_path: str,
    model_name: str,
    version: int | None,
    *,
    track: Iterable,
    endpoints: dict[str, tf.types.experimental.GenericFunction],
    info: dict,
    check_ops: bool = True,
    allowed_ops: Iterable[str] | None = None,
    copy_file: Callable[[str, str], None] = storage.copy_file,
) -> str:
    """Writes a SavedModel of `endpoints` to `base_path/model_name/version`, atomically.

    The steps every export of the package takes (`export_translator`,
    `keras_transformer.export_tasks`): a hidden temporary folder, `keras.export.
    ExportArchive` tracking `track` (models, tokenizers), `assets.extra/export_info.json`
    (`info` plus the versions and signature names), the TF Serving op check, then one
    rename into place; nothing is left behind on failure.

    On an object store (`storage.is_object_store(base_path)`: `gs://`, `ram://`, ...) no
    folder rename is atomic: the export is staged in a local temporary folder, then its
    files are copied into the version folder with `saved_model.pb` last, so a server
    polling the base path finds no graph until every variable is there. A copy that fails
    removes the partial version folder, whose `saved_model.pb` was never written.

    Args:
        base_path: the parent of the model's folder.
        model_name: the model's folder (TF Serving's model name).
        version: a positive integer, or None for the next free one.
        track: the resources the endpoints use.
        endpoints: signature name -> `tf.function` with an input signature.
        info: what `export_info.json` says about the model and its settings.
        check_ops: refuse ops that TF Serving does not ship, and XLA.
        allowed_ops: the allow-list for that check; defaults to the packaged one.
        copy_file: `copy_file(local_file, destination_file)`, what copies each file to an
            object store (`storage.copy_file`); a test may observe the order through it.

    Returns:
        The path of the published version folder.
    """
    if not model_name or os.sep in model_name or model_name.startswith("."):
        raise ValueError(
            "Received an invalid value for argument `model_name`, expected a plain folder "
            f"name. Received: model_name={model_name!r}"
        )
    model_dir = os.path.join(base_path, model_name)
    if version is None:
        version = next_version(model_dir)
    check_positive_int("version", version)
    final_dir = os.path.join(model_dir, str(version))
    if storage.exists(final_dir):
        raise ValueError(
            f"Received version={version}, but {final_dir!r} already exists; expected a new "
            f"version (the next free one is {next_version(model_dir)}). Exports are never "
            "overwritten."
        )

    object_store = storage.is_object_store(model_dir)
    if object_store:
        staging = tempfile.mkdtemp(prefix=_TMP_PREFIX)
        tmp_dir = os.path.join(staging, str(version))
    else:
        storage.makedirs(model_dir)
        staging = tmp_dir = os.path.join(
            model_dir, f"{_TMP_PREFIX}{version}-{uuid.uuid4().hex[:8]}"
        )
    copying = False
    try:
        archive = keras.export.ExportArchive()
        for resource in track:
            archive.track(resource)
        for name, fn in endpoints.items():
            fn.get_concrete_function()  # trace now: a ready tf.function keeps autograph
            archive.add_endpoint(name, fn)
        archive.write_out(tmp_dir, verbose=False)
        _write_export_info(tmp_dir, version, list(endpoints), info)
        if check_ops:
            from keras_transformer.serving.ops import check_serving_ops

            check_serving_ops(
                tmp_dir, allowed=None if allowed_ops is None else frozenset(allowed_ops)
            )
        if object_store:
            copying = True
            storage.copy_tree(tmp_dir, final_dir, last=SAVED_MODEL_GRAPH_FILES, copy=copy_file)
        else:
            os.rename(tmp_dir, final_dir)  # atomic on one file system
    except BaseException:
        if copying:
            storage.rmtree(final_dir)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # always a local folder
    logger.info("Exported version %d of %r to %s", version, model_name, final_dir)
    return final_dir


def _write_export_info(export_dir: str, version: int, signatures: list[str], info: dict) -> None:
    """`assets.extra/export_info.json`: what was exported and how it runs."""
    from keras_transformer import __version__

    info = {
        "keras_transformer_version": __version__,
        "tensorflow_version": tf.__version__,
        "version": version,
        "signatures": signatures,
        **info,
    }
    storage.write_text(
        os.path.join(export_dir, "assets.extra", "export_info.json"), json.dumps(info, indent=2)
    )
