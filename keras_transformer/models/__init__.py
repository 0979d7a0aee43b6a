"""Models assembled from `keras_transformer.layers`: encoder-decoder, encoder-only and
decoder-only."""

from keras_transformer.models.decoder_model import TransformerDecoderModel
from keras_transformer.models.encoder_model import TransformerEncoderModel
from keras_transformer.models.presets import PRESETS
from keras_transformer.models.transformer import Transformer

__all__ = ["PRESETS", "Transformer", "TransformerDecoderModel", "TransformerEncoderModel"]
