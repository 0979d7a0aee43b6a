"""One decoder block: masked self-attention, cross-attention (optional) and feed-forward."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer import masks
from keras_transformer.layers.block_base import BlockBase
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.validation import check_architecture


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(BlockBase):
    """Transformer decoder layer (section 3.1).

    Masked (causal) self-attention, attention over the encoder output, and a feed-forward
    network, each with residual dropout and LayerNorm (post-norm as in the paper, or
    pre-norm with `norm_first=True`). With `use_cross_attention=False` the block has no
    attention over an encoder (a decoder-only language model's block): the self-attention
    and feed-forward sublayers are the same ones, with the same names and weights.

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
        use_cross_attention: whether the block attends over an encoder output (True, the
            paper's decoder) or not (False: self-attention and feed-forward only).
        **kwargs: base layer arguments.

    Call arguments:
        decoder_sequence: (B, T, d_model).
        encoder_sequence: (B, S, d_model), the encoder output. May be omitted when
            `cross_attention_cache` holds its projected keys/values; must be omitted (as
            must the other cross-attention arguments) with `use_cross_attention=False`.
        decoder_padding_mask: optional bool (B, T), True at real target tokens.
        encoder_padding_mask: optional bool (B, S), True at real source tokens.
        self_attention_cache: optional `(keys, values)` cache for incremental decoding, each
            (B, H, T_max, D); then `self_attention_cache_update_index` (the position of the
            first token of `decoder_sequence`) is required, and the causal mask is offset by
            it.
        self_attention_cache_update_index: int or scalar tensor.
        cross_attention_cache: optional `(keys, values)`, each (B, H, S, D): the encoder's
            precomputed keys/values (`cross_attention.compute_cache(encoder_sequence)`).
        return_attention_scores: also return the self- and cross-attention weights,
            (B, H, T, T_or_T_max) and (B, H, T, S).
        packing: the `keras_transformer.packing.Packing` of a packed `decoder_sequence`
            (N, d_model), the real positions of the (B, T) batch (not with a cache); the
            output is then packed too.
        training: whether dropout is active.

    Returns:
        The output (B, T, d_model) (or (N, d_model) packed); then `self_weights, cross_weights` if
        `return_attention_scores` (only `self_weights` without cross-attention); then the
        updated self-attention cache if one was given; as a tuple when there is more than
        the output.

    Example:
    >>> layer = DecoderLayer(num_heads=2, d_ff=32)
    >>> y = layer(keras.ops.ones((2, 5, 16)), keras.ops.ones((2, 7, 16)))
    >>> tuple(y.shape)
    (2, 5, 16)
    >>> causal_only = DecoderLayer(num_heads=2, d_ff=32, use_cross_attention=False)
    >>> tuple(causal_only(keras.ops.ones((2, 5, 16))).shape)
    (2, 5, 16)
    """

    def __init__(self, *args, use_cross_attention: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.use_cross_attention = bool(use_cross_attention)

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        d_model = decoder_sequence_shape[-1]
        check_architecture(d_model=d_model, num_heads=self.num_heads)
        if encoder_sequence_shape is None:
            encoder_sequence_shape = decoder_sequence_shape
        attentions = [("self_attention", decoder_sequence_shape)]
        if self.use_cross_attention:
            attentions.append(("cross_attention", encoder_sequence_shape))
        else:
            self.cross_attention = None
        for name, value_shape in attentions:
            attention = MultiHeadAttention(
                self.num_heads,
                d_model // self.num_heads,
                dropout=self.attention_dropout,
                dtype=self.dtype_policy,
                name=name,
            )
            attention.build(decoder_sequence_shape, value_shape)
            setattr(self, name, attention)
            self._build_norm_and_dropout(name, decoder_sequence_shape)
        self.feed_forward = FeedForward(
            self.d_ff, self.activation, self.ffn_rate, dtype=self.dtype_policy, name="feed_forward"
        )
        self.feed_forward.build(decoder_sequence_shape)
        self._build_norm_and_dropout("feed_forward", decoder_sequence_shape)
        self.built = True

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        return_attention_scores: bool = False,
        packing=None,
        training=None,
    ):
        self._check_cross_attention_arguments(
            encoder_sequence, encoder_padding_mask, cross_attention_cache
        )
        if self_attention_cache is not None and self_attention_cache_update_index is None:
            raise ValueError(
                "Received `self_attention_cache` without `self_attention_cache_update_index`; "
                "pass the position of the first token of `decoder_sequence`."
            )
        length = ops.shape(decoder_sequence)[1] if packing is None else packing[2]
        if self_attention_cache is None:
            self_mask = masks.merge_masks(
                masks.causal_mask(length),  # (1, T, T)
                None
                if decoder_padding_mask is None
                else masks.key_padding_attention_mask(decoder_padding_mask),  # (B, 1, T)
            )
        else:
            self_mask = masks.causal_mask(
                length, ops.shape(self_attention_cache[0])[2], self_attention_cache_update_index
            )  # (1, T, T_max)

        x, self_extras = self._residual(
            "self_attention",
            decoder_sequence,  # (B, T, D), or (N, D) packed
            lambda h: self.self_attention(
                h,
                h,
                attention_mask=self_mask,
                return_attention_scores=True,
                cache=self_attention_cache,
                cache_update_index=self_attention_cache_update_index,
                query_packing=packing,
                value_packing=packing,
                training=training,
            ),  # (B, T, D), (B, H, T, T_or_T_max)[, cache]
            training,
        )
        if self.use_cross_attention:
            cross_mask = (
                None
                if encoder_padding_mask is None
                else masks.key_padding_attention_mask(encoder_padding_mask)  # (B, 1, S)
            )
            x, (cross_weights,) = self._residual(
                "cross_attention",
                x,
                lambda h: self.cross_attention(
                    h,
                    encoder_sequence if encoder_sequence is not None else h,
                    attention_mask=cross_mask,
                    return_attention_scores=True,
                    cache=cross_attention_cache,
                    query_packing=packing,
                    training=training,
                ),  # (B, T, D) or (N, D), (B, H, T, S)
                training,
            )
        x, _ = self._residual(
            "feed_forward", x, lambda h: self.feed_forward(h, training=training), training
        )

        results = (x,)
        if return_attention_scores:
            results += (self_extras[0],)
            if self.use_cross_attention:
                results += (cross_weights,)
        if self_attention_cache is not None:
            results += (self_extras[1],)
        return results[0] if len(results) == 1 else results

    def _check_cross_attention_arguments(
        self, encoder_sequence, encoder_padding_mask, cross_attention_cache
    ) -> None:
        if not self.use_cross_attention:
            given = [
                name
                for name, value in (
                    ("encoder_sequence", encoder_sequence),
                    ("encoder_padding_mask", encoder_padding_mask),
                    ("cross_attention_cache", cross_attention_cache),
                )
                if value is not None
            ]
            if given:
                raise ValueError(
                    "Received encoder inputs for a `DecoderLayer` without cross-attention "
                    f"(use_cross_attention=False): {given}. Pass none of them, or build the "
                    "layer with use_cross_attention=True."
                )
        elif encoder_sequence is None and cross_attention_cache is None:
            raise ValueError(
                "`DecoderLayer` needs the encoder output: pass `encoder_sequence` or a "
                "precomputed `cross_attention_cache`. Received neither."
            )

    def compute_output_shape(self, decoder_sequence_shape, encoder_sequence_shape=None):
        return decoder_sequence_shape

    def get_config(self):
        config = super().get_config()
        config["use_cross_attention"] = self.use_cross_attention
        return config
