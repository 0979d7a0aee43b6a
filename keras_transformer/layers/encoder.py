"""The encoder stack: embedding + N encoder layers (+ final LayerNorm when pre-norm)."""

from __future__ import annotations

import keras

from keras_transformer import masks
from keras_transformer.layers.encoder_layer import EncoderLayer
from keras_transformer.layers.stack_base import StackBase
from keras_transformer.packing import pack, packing_of, unpack


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(StackBase):
    """Transformer encoder: `TransformerEmbedding` then `num_layers` `EncoderLayer`s.

    With `norm_first=True` a final LayerNorm normalizes the output (pre-norm stacks leave
    the residual stream unnormalized otherwise).

    Args:
        vocabulary_size: source vocabulary size.
        num_layers: number of layers (the paper's N).
        d_model: model size (d_model).
        num_heads: attention heads (h).
        d_ff: feed-forward inner size (d_ff).
        dropout: dropout (P_drop) on embeddings and residuals.
        attention_dropout: dropout on attention weights.
        ffn_dropout: dropout on the feed-forward networks' inner activations; None (the
            default) uses `dropout`.
        activation: feed-forward activation.
        max_length: longest sequence accepted.
        norm_first: pre-norm (True) or post-norm (False, the paper).
        layer_norm_epsilon: LayerNorm epsilon.
        pad_id: padding id, used to derive the padding mask when none is passed.
        embedding: optional `TransformerEmbedding` to use instead of creating one (for
            sharing it with the decoder); not part of the config.
        **kwargs: base layer arguments.

    Call arguments:
        token_ids: int (B, S).
        padding_mask: optional bool (B, S); defaults to `token_ids != pad_id`.
        return_attention_scores: also return the list of per-layer weights (B, H, S, S).
        skip_padding: run the layers' position-wise parts on the real positions only
            (`keras_transformer.packing`): the same output at real positions, zeros at
            padding, less time on padded batches; not under XLA (dynamic shapes).
        training: whether dropout is active.

    Returns:
        (B, S, d_model), and the list of weights if requested.

    Example:
    >>> encoder = Encoder(100, num_layers=2, d_model=16, num_heads=2, d_ff=32)
    >>> tuple(encoder(keras.ops.ones((2, 7), "int32")).shape)
    (2, 7, 16)
    """

    layer_class = EncoderLayer

    def build(self, token_ids_shape):
        self._build_stack(token_ids_shape)

    def call(
        self,
        token_ids,
        padding_mask=None,
        return_attention_scores=False,
        skip_padding: bool = False,
        training=None,
    ):
        if padding_mask is None:
            padding_mask = masks.padding_mask(token_ids, self.pad_id)  # (B, S)
        x = self.embedding(token_ids, training=training)  # (B, S, D)
        packing = packing_of(padding_mask) if skip_padding else None
        if packing is not None:
            x = pack(x, packing)  # (N, D)
        all_weights = []
        for layer in self.layers_:
            x, weights = layer(
                x,
                padding_mask=padding_mask,
                return_attention_scores=True,
                packing=packing,
                training=training,
            )  # (B, S, D) or (N, D), (B, H, S, S)
            all_weights.append(weights)
        if self.final_norm is not None:
            x = self.final_norm(x)
        if packing is not None:
            x = unpack(x, packing)  # (B, S, D), zeros at padding
        return (x, all_weights) if return_attention_scores else x

    def compute_output_shape(self, token_ids_shape):
        return (*token_ids_shape, self.d_model)
