"""One encoder block: self-attention and feed-forward, each with residual and LayerNorm."""

from __future__ import annotations

import keras

from keras_transformer import masks
from keras_transformer.layers.block_base import BlockBase
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.validation import check_architecture


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(BlockBase):
    """Transformer encoder layer (section 3.1).

    Post-norm (the paper, `norm_first=False`): `x = LayerNorm(x + Dropout(Sublayer(x)))`.
    Pre-norm (`norm_first=True`, more stable for deep stacks):
    `x = x + Dropout(Sublayer(LayerNorm(x)))`.

    Args:
        num_heads: attention heads (h); d_model (taken from the input) must divide by it.
        d_ff: feed-forward inner size (d_ff).
        dropout: residual dropout (P_drop), also applied inside the feed-forward network
            unless `ffn_dropout` is given.
        attention_dropout: dropout on the attention weights.
        ffn_dropout: dropout on the feed-forward network's inner activations; None (the
            default) uses `dropout`. The paper drops sublayer outputs only (0.0).
        activation: feed-forward activation.
        norm_first: pre-norm (True) or post-norm (False, the paper).
        layer_norm_epsilon: LayerNorm epsilon.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: (B, S, d_model).
        padding_mask: optional bool (B, S), True at real tokens.
        return_attention_scores: also return the self-attention weights (B, H, S, S).
        packing: the `keras_transformer.packing.Packing` of packed `inputs` (N, d_model),
            the real positions of the (B, S) batch; the output is then packed too.
        training: whether dropout is active.

    Returns:
        (B, S, d_model) (or (N, d_model) packed), and the weights if requested.

    Example:
    >>> layer = EncoderLayer(num_heads=2, d_ff=32)
    >>> tuple(layer(keras.ops.ones((2, 7, 16))).shape)
    (2, 7, 16)
    """

    def build(self, inputs_shape):
        d_model = inputs_shape[-1]
        check_architecture(d_model=d_model, num_heads=self.num_heads)
        policy = self.dtype_policy
        self.self_attention = MultiHeadAttention(
            self.num_heads,
            d_model // self.num_heads,
            dropout=self.attention_dropout,
            dtype=policy,
            name="self_attention",
        )
        self.self_attention.build(inputs_shape, inputs_shape)
        self._build_norm_and_dropout("self_attention", inputs_shape)
        self.feed_forward = FeedForward(
            self.d_ff, self.activation, self.ffn_rate, dtype=policy, name="feed_forward"
        )
        self.feed_forward.build(inputs_shape)
        self._build_norm_and_dropout("feed_forward", inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        padding_mask=None,
        return_attention_scores: bool = False,
        packing=None,
        training=None,
    ):
        attention_mask = masks.self_attention_mask(padding_mask)  # (B, 1, S) or None

        x, (weights,) = self._residual(
            "self_attention",
            inputs,  # (B, S, D), or (N, D) packed
            lambda h: self.self_attention(
                h,
                h,
                attention_mask=attention_mask,
                return_attention_scores=True,
                query_packing=packing,
                value_packing=packing,
                training=training,
            ),  # (B, S, D) or (N, D), (B, H, S, S)
            training,
        )
        x, _ = self._residual(
            "feed_forward", x, lambda h: self.feed_forward(h, training=training), training
        )

        if return_attention_scores:
            return x, weights
        return x

    def compute_output_shape(self, inputs_shape):
        return inputs_shape
