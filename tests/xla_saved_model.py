"""A SavedModel that needs XLA compilation, for the tests of TF Serving's XLA rule."""

import os

import keras
import tensorflow as tf


def save_xla_model(path: str | os.PathLike[str]) -> str:
    """Writes a SavedModel whose `serving_default` (`x` float32 (N,) -> `y`) calls a
    `jit_compile=True` function that uses `keras.ops.slice_update` (Keras' TF backend:
    `XlaDynamicUpdateSlice`): `y` is `x` with positions 1 and 2 set to 1."""

    class UsesXla(tf.Module):
        @tf.function(jit_compile=True)
        def update(self, x):
            return keras.ops.slice_update(x, [1], tf.ones([2], x.dtype))

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def serve(self, x):
            return {"y": self.update(x)}

    module = UsesXla()
    tf.saved_model.save(module, os.fspath(path), signatures={"serving_default": module.serve})
    return os.fspath(path)
