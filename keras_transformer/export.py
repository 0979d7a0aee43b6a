"""The one export: a trained run of any task as a string-in SavedModel for TF Serving.

`export_run(run_dir, base_path)` (or `export_predictor(predictor, base_path)`) writes
`BASE/NAME/VERSION/` with `keras.export.ExportArchive` (`publish_saved_model`):

- into a hidden temporary folder beside the version folders first (TF Serving only picks up
  folders named by an integer), then renamed into place once complete and checked, so a
  server polling the base path never sees half a model, and a failed export leaves nothing
  behind; on an object store (a `scheme://` base path such as `gs://`, where nothing
  renames a folder atomically) into a local temporary folder, then copied file by file
  with `saved_model.pb` last (`publish_saved_model`);
- with the tokenizers' SentencePiece models inside the graph (tracked tf-text resources):
  nothing outside the version folder is needed;
- with only ops that TF Serving's model server ships (`keras_transformer.serving.ops`).

The signatures are the task's (`keras_transformer.tasks.Task.serving_endpoints`, listed in
each task module's docstring: `tasks/translation.py` for a translator's `serving_default`,
`translate_nbest`, `tokenize`, `detokenize`); `assets.extra/export_info.json` records them
with the task's settings (`Task.export_info`: decoding, labels, the architecture). TF2 writes
every signature with method name `tensorflow/serving/predict`; the ones a task names
otherwise (`Task.signature_methods`: the classifier's `classification`, for TF Serving's
Classify API) are rewritten after the save with TF's `MethodNameUpdater`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import keras
import tensorflow as tf

from keras_transformer import storage
from keras_transformer.validation import check_positive_int

logger = logging.getLogger(__name__)

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


def export_predictor(
    predictor: Any,
    base_path: str,
    model_name: str | None = None,
    version: int | None = None,
    check_ops: bool = True,
    allowed_ops: Iterable[str] | None = None,
) -> str:
    """Writes a predictor of any task as SavedModel `base_path/model_name/version` for TF
    Serving, with its task's signatures (`Task.serving_endpoints`).

    Build the predictor with `jit_compile=False` where it decodes: TF Serving does not
    compile XLA (the op check refuses it).

    Args:
        predictor: a `Translator`, `TextTagger`, `TextClassifier` or `TextGenerator`
            (`keras_transformer.predictors`; its decoding settings are baked in).
        base_path: TF Serving's model base path's parent: the export lands in
            `base_path/model_name/<version>`.
        model_name: the model's folder (TF Serving's model name); by default the task's
            (`transformer`, `tagger`, `classifier`, `generator`).
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
    translator = Translator.from_run_dir("runs/de-en", beam_size=4, jit_compile=False)
    export_predictor(translator, "exports")
    # 'exports/transformer/1'
    ```
    """
    from keras_transformer.tasks import task_class

    task = task_class(predictor.task)
    return publish_saved_model(
        base_path,
        model_name or task.model_name,
        version,
        track=task.export_track(predictor),
        endpoints=task.serving_endpoints(predictor),
        method_names=task.signature_methods(),
        # The weight type (`keras_transformer.quantization`; null: as trained).
        info={"task": task.name, **task.export_info(predictor), "quantize": predictor.quantize},
        check_ops=check_ops,
        allowed_ops=allowed_ops,
    )


def export_run(
    run_dir: str,
    base_path: str,
    model_name: str | None = None,
    version: int | None = None,
    check_ops: bool = True,
    **options: Any,
) -> str:
    """Exports a run directory of any task (its predictor built with `options`, e.g. the
    decoding settings, and without XLA).

    Args:
        run_dir: the run directory.
        base_path: the parent of the model's folder.
        model_name: TF Serving's model name (default: the task's).
        version: a positive integer (default: the next free one).
        check_ops: refuse ops that TF Serving does not ship, and XLA.
        **options: the predictor's arguments (`quantize` and `batch_size` for every task;
            `Translator`, `TextGenerator`: decoding too); one it does not take raises the
            predictor's `TypeError` (the CLI refuses it first, `predictor_options`).

    Returns:
        The path of the published version folder.

    Example (not run as a doctest: it needs trained run directories):

    ```python
    export_run("runs/sentiment", "exports")  # 'exports/classifier/1'
    export_run("runs/lm", "exports", method="sample", top_p=0.9, max_new_tokens=40)
    ```
    """
    from keras_transformer.run_dir import run_task
    from keras_transformer.tasks import task_class

    task = task_class(run_task(run_dir))
    if task.decodes:
        options.setdefault("jit_compile", False)  # TF Serving does not compile XLA
    predictor = task.load_predictor(run_dir, **options)
    return export_predictor(predictor, base_path, model_name, version, check_ops)


def publish_saved_model(
    base_path: str,
    model_name: str,
    version: int | None,
    *,
    track: Iterable,
    endpoints: dict[str, tf.types.experimental.GenericFunction],
    info: dict,
    method_names: Mapping[str, str] | None = None,
    check_ops: bool = True,
    allowed_ops: Iterable[str] | None = None,
    copy_file: Callable[[str, str], None] = storage.copy_file,
) -> str:
    """Writes a SavedModel of `endpoints` to `base_path/model_name/version`, atomically.

    The steps every export of the package takes (`export_predictor`): a hidden temporary
    folder, `keras.export.ExportArchive` tracking `track` (models, tokenizers),
    `assets.extra/export_info.json`
    (`info` plus the versions and signature names), the TF Serving op check, then one
    rename into place; nothing is left behind on failure.

    On an object store (`storage.is_object_store(base_path)`: `gs://`, `ram://`, ...) no
    folder rename is atomic: the export is staged in a local temporary folder, then its
    files are copied into the version folder with `saved_model.pb` last, so a server
    polling the base path finds no graph until every variable is there. A copy that fails
    removes the files it copied (never another export's, should one have published the same
    version meanwhile) and the folders they leave empty: no version is left behind.

    Args:
        base_path: the parent of the model's folder.
        model_name: the model's folder (TF Serving's model name).
        version: a positive integer, or None for the next free one.
        track: the resources the endpoints use.
        endpoints: signature name -> `tf.function` with an input signature.
        info: what `export_info.json` says about the model and its settings.
        method_names: signature name -> SignatureDef method name, for the endpoints that
            are not `tensorflow/serving/predict` (`Task.signature_methods`).
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
    unknown = sorted(set(method_names or {}) - set(endpoints))
    if unknown:
        raise ValueError(
            f"Received method names for signatures {unknown}, which are not endpoints; "
            f"expected some of {sorted(endpoints)}."
        )
    _check_new_version(version, final_dir, model_dir)

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
    copied: list[str] = []  # the files this export copied into `final_dir` (object store)

    def copy_and_record(source: str, destination: str) -> None:
        copy_file(source, destination)  # never over an existing file
        copied.append(destination)

    try:
        archive = keras.export.ExportArchive()
        for resource in track:
            archive.track(resource)
        for name, fn in endpoints.items():
            fn.get_concrete_function()  # trace now: a ready tf.function keeps autograph
            archive.add_endpoint(name, fn)
        archive.write_out(tmp_dir, verbose=False)
        if method_names:
            _set_method_names(tmp_dir, method_names)
        _write_export_info(tmp_dir, version, list(endpoints), info)
        if check_ops:
            from keras_transformer.serving.ops import check_serving_ops

            check_serving_ops(
                tmp_dir, allowed=None if allowed_ops is None else frozenset(allowed_ops)
            )
        # Checked again: another export of the same model may have published this version
        # while this one was written and checked.
        _check_new_version(version, final_dir, model_dir)
        if object_store:
            copying = True
            storage.copy_tree(
                tmp_dir, final_dir, last=SAVED_MODEL_GRAPH_FILES, copy=copy_and_record
            )
        else:
            os.rename(tmp_dir, final_dir)  # atomic on one file system
    except BaseException:
        if copying:  # only what this export copied: the folder may be another export's too
            for path in reversed(copied):
                storage.remove(path)
            storage.remove_if_no_files(final_dir)  # no numbered folder left behind
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # always a local folder
    logger.info("Exported version %d of %r to %s", version, model_name, final_dir)
    return final_dir


def _check_new_version(version: int, final_dir: str, model_dir: str) -> None:
    if storage.exists(final_dir):
        raise ValueError(
            f"Received version={version}, but {final_dir!r} already exists; expected a new "
            f"version (the next free one is {next_version(model_dir)}). Exports are never "
            "overwritten."
        )


def _set_method_names(export_dir: str, method_names: Mapping[str, str]) -> None:
    """Sets signatures' `method_name` in a written SavedModel (`tf.saved_model.save` writes
    `tensorflow/serving/predict` for all, tensorflow/tensorflow#38081), then rewrites its
    `fingerprint.pb`, whose checksums cover `saved_model.pb`."""
    from keras_transformer.compat import write_saved_model_fingerprint

    updater = tf.compat.v1.saved_model.signature_def_utils.MethodNameUpdater(export_dir)
    for name, method_name in method_names.items():
        updater.replace_method_name(signature_key=name, method_name=method_name)
    updater.save()
    write_saved_model_fingerprint(export_dir)


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
