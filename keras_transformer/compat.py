"""Backend-specific helpers, kept out of the layers.

The package runs on Keras 3's TensorFlow backend. Anything that needs TensorFlow directly
inside a layer (a runtime check in a graph) lives here, and this is the only module that may
import `keras.src`.
"""

from __future__ import annotations

import keras


def check_max_length(length, max_length: int, name: str = "sequence length"):
    """Runtime check that a (possibly symbolic) `length` does not exceed `max_length`.

    Static lengths are checked by the caller with a `ValueError`; this covers lengths only
    known when a traced graph runs (e.g. inside `tf.function` with a `None` dimension).

    Inside `tf.function`, TensorFlow's automatic control dependencies run the assertion
    (it is stateful) before the function returns.
    """
    if keras.backend.backend() != "tensorflow":
        return
    import tensorflow as tf

    if tf.executing_eagerly():
        return
    tf.debugging.assert_less_equal(
        tf.cast(length, tf.int32),
        tf.constant(max_length, tf.int32),
        message=(
            f"Received a {name} longer than `max_length`={max_length}. Truncate the "
            "input or build the model with a larger `max_length`."
        ),
    )
