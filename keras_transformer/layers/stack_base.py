"""Shared arguments and construction of the `Encoder` and `Decoder` stacks."""

from __future__ import annotations

import keras

from keras_transformer.layers.embedding import TransformerEmbedding
from keras_transformer.layers.layer_normalization import LayerNormalization
from keras_transformer.validation import check_architecture


class StackBase(keras.layers.Layer):
    """Base of `Encoder` and `Decoder`; not public: see the subclasses for the arguments."""

    layer_class: type[keras.layers.Layer]

    def __init__(
        self,
        vocabulary_size: int,
        num_layers: int = 6,
        d_model: int = 512,
        num_heads: int = 8,
        d_ff: int = 2048,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        ffn_dropout: float | None = None,
        activation="relu",
        max_length: int = 512,
        norm_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        pad_id: int = 0,
        embedding: TransformerEmbedding | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        checked = check_architecture(
            vocabulary_size=vocabulary_size,
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            d_ff=d_ff,
            dropout=dropout,
            attention_dropout=attention_dropout,
            ffn_dropout=ffn_dropout,
            max_length=max_length,
            layer_norm_epsilon=layer_norm_epsilon,
            pad_id=pad_id,
        )
        for name, value in checked.items():
            setattr(self, name, value)
        self.activation = keras.activations.get(activation)
        self.norm_first = bool(norm_first)
        if embedding is not None and (
            embedding.vocabulary_size != vocabulary_size or embedding.d_model != d_model
        ):
            raise ValueError(
                "Received an `embedding` that does not match this stack, expected "
                f"vocabulary_size={vocabulary_size} and d_model={d_model}. Received: "
                f"vocabulary_size={embedding.vocabulary_size}, d_model={embedding.d_model}"
            )
        self.embedding = embedding

    def _ties_embedding_weights(self) -> bool:
        """Whether an embedding created here has no separate output projection."""
        return True

    def _layer_kwargs(self) -> dict:
        """Arguments of each layer beyond the shared ones (a subclass' own)."""
        return {}

    def _build_stack(self, token_ids_shape) -> None:
        if self.embedding is None:
            self.embedding = TransformerEmbedding(
                self.vocabulary_size,
                self.d_model,
                max_length=self.max_length,
                dropout=self.dropout,
                tie_weights=self._ties_embedding_weights(),
                dtype=self.dtype_policy,
                name="embedding",
            )
        if not self.embedding.built:
            self.embedding.build(token_ids_shape)
        hidden_shape = (*token_ids_shape, self.d_model)
        self.layers_ = []
        for i in range(self.num_layers):
            layer = self.layer_class(
                num_heads=self.num_heads,
                d_ff=self.d_ff,
                dropout=self.dropout,
                attention_dropout=self.attention_dropout,
                ffn_dropout=self.ffn_dropout,
                activation=self.activation,
                norm_first=self.norm_first,
                layer_norm_epsilon=self.layer_norm_epsilon,
                dtype=self.dtype_policy,
                name=f"layer_{i}",
                **self._layer_kwargs(),
            )
            layer.build(hidden_shape)
            self.layers_.append(layer)
        self.final_norm = None
        if self.norm_first:
            self.final_norm = LayerNormalization(
                epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="final_norm"
            )
            self.final_norm.build(hidden_shape)
        self.built = True

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "num_layers": self.num_layers,
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "d_ff": self.d_ff,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "ffn_dropout": self.ffn_dropout,
                "activation": keras.activations.serialize(self.activation),
                "max_length": self.max_length,
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "pad_id": self.pad_id,
            }
        )
        return config
