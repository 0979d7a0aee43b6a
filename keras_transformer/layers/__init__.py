"""The Transformer's Keras layers, one public class per module."""

from keras_transformer.layers.decoder import Decoder
from keras_transformer.layers.decoder_layer import DecoderLayer
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.embedding import TransformerEmbedding
from keras_transformer.layers.encoder import Encoder
from keras_transformer.layers.encoder_layer import EncoderLayer
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.layer_normalization import LayerNormalization
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.positional_encoding import PositionalEncoding

__all__ = [
    "Decoder",
    "DecoderLayer",
    "Dropout",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "LayerNormalization",
    "MultiHeadAttention",
    "PositionalEncoding",
    "TransformerEmbedding",
]
