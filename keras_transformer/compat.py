"""Every use of a private Keras, TensorFlow or tensorflow-text API, in one place.

The package runs on Keras 3's TensorFlow backend. Where it needs something those libraries
do not make public (a hook of `fit`, a tf-text resource class, the op registry), it goes
through a function here, and `PRIVATE_SYMBOLS` lists each symbol so that
`check_private_apis()` (run by the test suite, `tests/test_compat.py`) fails with a message
naming the symbol when an upgrade moves or removes it. The versions this was written and
tested against are `TESTED_VERSIONS`. No other module imports `keras.src`,
`tensorflow.python` or `tensorflow_text.python`, or touches a private attribute of their
objects.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

import keras

TESTED_VERSIONS = {"keras": "3.15", "tensorflow": "2.21", "tensorflow_text": "2.21"}

# (module, attribute path) of every private symbol used below.
PRIVATE_SYMBOLS: tuple[tuple[str, str], ...] = (
    ("keras.src.backend.tensorflow.trainer", "_collective_all_reduce_multi_worker"),
    ("keras.src.losses.loss", "unscale_loss_for_distribution"),
    ("keras", "Model._maybe_symbolic_build"),  # overridden by training.distributed
    ("keras", "Model._symbolic_build"),
    ("keras", "Model._compute_loss"),
    ("keras", "Model._loss_tracker"),  # an attribute of compiled models
    ("keras", "Model._initial_epoch"),  # an attribute of models
    ("keras", "Model._distribute_strategy"),  # an attribute of models
    ("tensorflow.python.distribute.distribute_lib", "_DefaultDistributionStrategy"),
    ("keras", "callbacks.BackupAndRestore._save_model"),  # overridden by training.callbacks
    ("keras", "callbacks.BackupAndRestore._weights_path"),  # attributes of the callback
    ("keras", "callbacks.BackupAndRestore._training_metadata_path"),
    ("keras", "callbacks.BackupAndRestore._current_epoch"),
    ("keras", "callbacks.SwapEMAWeights._finalize_ema_values"),
    ("tensorflow_text.python.ops.sentencepiece_tokenizer", "_SentencepieceModelResource"),
    ("tensorflow_text", "SentencepieceTokenizer._model_resource"),  # an attribute
    ("tensorflow_text.python.ops.sentencepiece_tokenizer", "gen_sentencepiece_tokenizer"),
    ("tensorflow.python.util.deprecation", "silence"),
    ("tensorflow.python.client.pywrap_tf_session", "TF_GetAllOpList"),
    ("tensorflow.python.framework.kernels", "get_registered_kernels_for_op"),
    ("tensorflow.python.saved_model.fingerprinting_utils", "write_fingerprint"),
    ("tensorflow.python.ops.control_flow_util", "GraphOrParentsInXlaContext"),
    ("tensorflow.python.saved_model.loader_impl", "SavedModelLoader"),
)
# Attributes that exist on instances only, checked on a compiled model by the test.
_INSTANCE_ATTRIBUTES = {
    "Model._loss_tracker",
    "Model._initial_epoch",
    "Model._distribute_strategy",
    "callbacks.BackupAndRestore._weights_path",
    "callbacks.BackupAndRestore._training_metadata_path",
    "callbacks.BackupAndRestore._current_epoch",
    "SentencepieceTokenizer._model_resource",
}


def check_private_apis() -> None:
    """Imports every symbol of `PRIVATE_SYMBOLS`; raises naming the first one missing.

    Raises:
        ImportError: "`module.path` is gone (written for keras 3.15, ...)".
    """
    for module_name, path in PRIVATE_SYMBOLS:
        if path in _INSTANCE_ATTRIBUTES:
            continue
        try:
            target: Any = importlib.import_module(module_name)
            for part in path.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError) as e:
            raise ImportError(
                f"The private API `{module_name}.{path}` that keras_transformer.compat uses is "
                f"gone (written for {_versions()}); update keras_transformer/compat.py. "
                f"The error was: {e}"
            ) from e


def _versions() -> str:
    return ", ".join(f"{name} {version}" for name, version in TESTED_VERSIONS.items())


# Graph checks.


def checked_length(length, end, max_length: int, name: str = "sequence length"):
    """Returns `length`, guarded by a runtime check that `end <= max_length`.

    Static lengths are checked by the caller with a `ValueError`; this covers lengths only
    known when a traced graph runs (e.g. inside `tf.function` with a `None` dimension).
    Whatever consumes the returned length runs after the check, so the error the user
    sees is this one, not a failing slice.
    """
    if keras.backend.backend() != "tensorflow":
        return length
    import tensorflow as tf

    check = tf.debugging.assert_less_equal(
        tf.cast(end, tf.int32),
        tf.constant(max_length, tf.int32),
        message=(
            f"Received a {name} longer than `max_length`={max_length}. Truncate the "
            "input or build the model with a larger `max_length`."
        ),
    )
    with tf.control_dependencies([check] if check is not None else []):
        return tf.identity(length)


# Keras `fit` and `tf.distribute` internals (training.distributed, training.callbacks).


def in_multi_worker_mode(strategy) -> bool:
    """Whether Keras treats `strategy` as a multi-worker collective strategy."""
    from keras.src.backend.tensorflow import trainer

    return bool(trainer._collective_all_reduce_multi_worker(strategy))


def is_default_strategy(strategy) -> bool:
    """Whether `strategy` is TensorFlow's default strategy (the one in force outside any
    `strategy.scope()`), which TF does not expose as a public class
    (`tensorflow.python.distribute.distribute_lib._DefaultDistributionStrategy`)."""
    from tensorflow.python.distribute import distribute_lib

    return isinstance(strategy, distribute_lib._DefaultDistributionStrategy)


def model_strategy(model: keras.Model):
    """The strategy a model was built (or is being fit) under, `None` when it was none.

    Keras' public `distribute_strategy` falls back to the default strategy, so it cannot
    tell "none" from "the default"; the model's `_distribute_strategy` (set by Keras'
    TensorFlow trainer in `__init__` and at the start of `fit`) can, and Keras' own
    `_maybe_symbolic_build` reads it for that reason.
    """
    return getattr(model, "_distribute_strategy", None)


def symbolic_build(model: keras.Model, data_batch) -> None:
    """Keras' build of a model's (and its metrics') state from one batch."""
    model._symbolic_build(data_batch=data_batch)


def compute_loss(model: keras.Model, x, y, y_pred, sample_weight, training: bool):
    """The compiled loss (with regularization losses), as `train_step` computes it."""
    return model._compute_loss(
        x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training
    )


def track_loss(model: keras.Model, loss, batch_size) -> None:
    """Adds a replica's loss to the `loss` that `fit` logs (as `train_step` does)."""
    from keras.src.losses import loss as loss_module

    model._loss_tracker.update_state(
        loss_module.unscale_loss_for_distribution(loss), sample_weight=batch_size
    )


def set_initial_epoch(model: keras.Model, epoch: int) -> None:
    """Makes `fit` start at `epoch` (what `BackupAndRestore` does after a restore)."""
    model._initial_epoch = epoch


def backup_files(callback: keras.callbacks.BackupAndRestore) -> tuple[str, str]:
    """The two files `BackupAndRestore._save_model` writes: the weights and the training
    metadata (its `_weights_path` and `_training_metadata_path`)."""
    return callback._weights_path, callback._training_metadata_path


def set_backup_files(
    callback: keras.callbacks.BackupAndRestore, weights: str, metadata: str
) -> None:
    """Sets the two files `BackupAndRestore._save_model` writes (its `_weights_path` and
    `_training_metadata_path`)."""
    callback._weights_path, callback._training_metadata_path = weights, metadata


def backup_epoch(callback: keras.callbacks.BackupAndRestore) -> int:
    """The epoch `BackupAndRestore._save_model` records (its `_current_epoch`)."""
    return callback._current_epoch


def set_backup_epoch(callback: keras.callbacks.BackupAndRestore, epoch: int) -> None:
    """Sets the epoch `BackupAndRestore._save_model` records (its `_current_epoch`, which
    Keras itself updates only at the end of an epoch)."""
    callback._current_epoch = epoch


def finalize_ema_values(callback) -> None:
    """Writes the model's current weights (the EMA, once `callback` swapped them in) into
    the optimizer's EMA slots, as Keras' `SwapEMAWeights` does at the end of the last
    planned epoch (`SwapEMAWeights._finalize_ema_values`), so `fit`'s final
    `finalize_variable_values` keeps the EMA in the model."""
    callback._finalize_ema_values()


# tensorflow-text (tokenization).


def share_sentencepiece_resource(tokenizer, model_proto: bytes, shared_name: str) -> None:
    """Gives a `tf_text.SentencepieceTokenizer` a model resource with a `shared_name`.

    tf-text's resource is private to the kernel that creates it, so clearing the eager
    kernel cache (`tf.random.set_seed` does) deletes it and the tokenizer fails with
    "Resource ... does not exist". A `shared_name` keeps it in the resource manager. Uses
    tf-text's `_SentencepieceModelResource`, its `_model` and the tokenizer's
    `_model_resource`.
    """
    import tensorflow as tf
    from tensorflow_text.python.ops import sentencepiece_tokenizer as private

    class SharedResource(private._SentencepieceModelResource):
        def _create_resource(self):
            with tf.name_scope("SentenceTokenizerInitializer"):
                return private.gen_sentencepiece_tokenizer.sentencepiece_op(
                    model=self._model, shared_name=shared_name
                )

    tokenizer._model_resource = SharedResource(model_proto, "SentenceTokenizerInitializer")


# TensorFlow.


def silence_tf_deprecation():
    """A context that hides TF's deprecation warnings (the TF1 loader TF Serving uses)."""
    try:
        from tensorflow.python.util import deprecation

        return deprecation.silence()
    except (ImportError, AttributeError):  # pragma: no cover - checked by the tests
        return contextlib.nullcontext()


def saved_model_loader(export_dir: str) -> Any:
    """The TF1 SavedModel loader's steps, one by one (``load_graph``, ``restore_variables``,
    ``run_init_ops``, ``get_meta_graph_def_from_tags``), where
    ``tf.compat.v1.saved_model.loader.load`` runs them all: the serving stand-in skips the
    restore when TF Serving's C++ loader does (``loader.cc``, ``RunRestore``)."""
    from tensorflow.python.saved_model import loader_impl

    return loader_impl.SavedModelLoader(export_dir)


def write_saved_model_fingerprint(export_dir: str) -> None:
    """Rewrites a SavedModel's `fingerprint.pb` from its `saved_model.pb` (what
    `tf.saved_model.save` does last, `fingerprinting_utils.write_fingerprint`; TF has no
    public API for it), after an edit of `saved_model.pb` left the old checksums stale."""
    from tensorflow.python.saved_model import fingerprinting_utils

    fingerprinting_utils.write_fingerprint(export_dir)


def registered_op_names() -> set[str]:
    """The names of every op registered in this process (TF's C API `TF_GetAllOpList`)."""
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session as c_api

    op_list = op_def_pb2.OpList()
    op_list.ParseFromString(c_api.TF_GetBuffer(c_api.TF_GetAllOpList()))
    return {op.name for op in op_list.op}


def kernel_devices(op_name: str) -> set[str]:
    """The device types (`CPU`, `GPU`, ...) with a kernel registered for `op_name`."""
    from tensorflow.python.framework import kernels

    return {k.device_type for k in kernels.get_registered_kernels_for_op(op_name).kernel}


def in_xla_context() -> bool:
    """Whether the graph being built is (inside) a function that XLA compiles.

    A `jit_compile` function called there is inlined into the enclosing computation; this
    lets a caller use its plain body instead (TensorFlow recompiled an enclosing XLA train
    step on every call when it held a nested `jit_compile` function with a custom gradient).
    """
    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util

    if tf.executing_eagerly():
        return False
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))
