"""keras_transformer: the encoder-decoder Transformer for machine translation in Keras 3, and
the encoder-only and decoder-only models built from the same layers."""

import importlib

from keras_transformer import layers, masks
from keras_transformer.model_config import TransformerConfig
from keras_transformer.models import (
    PRESETS,
    Transformer,
    TransformerDecoderModel,
    TransformerEncoderModel,
)

__version__ = "0.1.0"

# Imported on first use: they pull in tensorflow-datasets / tensorflow-text.
_LAZY_MODULES = (
    "config",
    "data",
    "decoding",
    "evaluation",
    "export",
    "plotting",
    "predictors",
    "runner",
    "serving",
    "tasks",
    "tokenization",
    "training",
)


def __getattr__(name: str):
    if name in _LAZY_MODULES:
        return importlib.import_module(f"keras_transformer.{name}")
    raise AttributeError(f"module 'keras_transformer' has no attribute {name!r}")


__all__ = [
    "PRESETS",
    "Transformer",
    "TransformerConfig",
    "TransformerDecoderModel",
    "TransformerEncoderModel",
    "__version__",
    "layers",
    "masks",
]
