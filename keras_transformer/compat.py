"""Backend-specific helpers, kept out of the layers.

The package runs on Keras 3's TensorFlow backend. Anything that needs TensorFlow directly
inside a layer (a runtime check in a graph) lives here, and this is the only module that may
import `keras.src`.
"""

from __future__ import annotations

import keras


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


def finalize_ema_values(callback) -> None:
    """Writes the model's current weights (the EMA, once `callback` swapped them in) into
    the optimizer's EMA slots, as Keras' `SwapEMAWeights` does at the end of the last
    planned epoch (private in Keras 3.15: `SwapEMAWeights._finalize_ema_values`), so
    `fit`'s final `finalize_variable_values` keeps the EMA in the model."""
    callback._finalize_ema_values()


def silence_tf_deprecation():
    """A context in which TensorFlow's deprecation warnings are silent (the TF1 SavedModel
    loader is deprecated in TF2 but is the path TF Serving's C++ server takes). Private in
    TF 2.21: `tensorflow.python.util.deprecation.silence`; a null context if it moved."""
    import contextlib

    try:
        from tensorflow.python.util import deprecation

        return deprecation.silence()
    except (ImportError, AttributeError):  # pragma: no cover - private API moved
        return contextlib.nullcontext()
