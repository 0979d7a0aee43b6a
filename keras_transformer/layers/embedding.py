"""Token embedding scaled by sqrt(d_model) plus sinusoidal positional encoding."""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.positional_encoding import PositionalEncoding
from keras_transformer.validation import check_architecture


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerEmbedding(keras.layers.Layer):
    """Token embedding x sqrt(d_model) + positional encoding, then dropout (section 3.4).

    The token table is a `keras.layers.ReversibleEmbedding`, so the same matrix can also
    serve as the pre-softmax projection (`token_embedding.reverse`, weight tying).

    Args:
        vocabulary_size: number of tokens (V).
        d_model: embedding size (the paper's d_model).
        max_length: the longest sequence accepted (positional table size).
        dropout: dropout rate applied to the sum (the paper's P_drop).
        tie_weights: whether `reverse` projects with the transposed token table (True) or a
            separate (d_model, V) matrix (False).
        embeddings_initializer: initializer of the token table; defaults to
            N(0, d_model^-0.5), so that after the sqrt(d_model) scaling the embeddings have
            unit variance.
        **kwargs: base layer arguments.

    Call arguments:
        token_ids: int tensor (B, T).
        start_index: position of the first token (for cached decoding).
        training: whether dropout is active.

    Returns:
        A tensor (B, T, d_model).

    Example:
    >>> embed = TransformerEmbedding(vocabulary_size=100, d_model=16, max_length=32)
    >>> tuple(embed(keras.ops.ones((2, 5), "int32")).shape)
    (2, 5, 16)
    """

    def __init__(
        self,
        vocabulary_size: int,
        d_model: int,
        max_length: int = 512,
        dropout: float = 0.0,
        tie_weights: bool = True,
        embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        checked = check_architecture(
            vocabulary_size=vocabulary_size, d_model=d_model, max_length=max_length, dropout=dropout
        )
        for name, value in checked.items():
            setattr(self, name, value)
        self.tie_weights = bool(tie_weights)
        if embeddings_initializer is None:
            embeddings_initializer = keras.initializers.RandomNormal(stddev=d_model**-0.5)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, token_ids_shape=None):
        self.token_embedding = keras.layers.ReversibleEmbedding(
            self.vocabulary_size,
            self.d_model,
            tie_weights=self.tie_weights,
            embeddings_initializer=self.embeddings_initializer,
            # The lookup reads the variable-dtype table (Keras's Embedding does not
            # autocast); the projection runs in the compute dtype, so that under
            # mixed_bfloat16 it is a bf16 matmul rather than bf16 x float32 -> float32.
            reverse_dtype=self.compute_dtype,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.token_embedding.build(token_ids_shape)
        self.position_encoding = PositionalEncoding(
            self.max_length, dtype=self.dtype_policy, name="position_encoding"
        )
        self.position_encoding.build((None, None, self.d_model))
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy, name="dropout")
        self.built = True

    def call(self, token_ids, start_index=0, training=None):
        x = self.token_embedding(token_ids)  # (B, T, D)
        x = x * ops.cast(math.sqrt(self.d_model), x.dtype)
        x = x + self.position_encoding(x, start_index=start_index)  # (B, T, D)
        return self.dropout_layer(x, training=training)

    def reverse(self, hidden):
        """Projects (B, T, d_model) hidden states to (B, T, V) logits in the compute dtype."""
        return self.token_embedding(hidden, reverse=True)

    def compute_output_shape(self, token_ids_shape):
        return (*token_ids_shape, self.d_model)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "d_model": self.d_model,
                "max_length": self.max_length,
                "dropout": self.dropout,
                "tie_weights": self.tie_weights,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config
