"""keras_transformer: the encoder-decoder Transformer for machine translation in Keras 3."""

from keras_transformer import data, layers, masks, tokenization
from keras_transformer.config import TransformerConfig
from keras_transformer.models import PRESETS, Transformer

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "Transformer",
    "TransformerConfig",
    "__version__",
    "data",
    "layers",
    "masks",
    "tokenization",
]
