"""The decoder stack: embedding + N decoder layers (+ final LayerNorm when pre-norm), with or
without cross-attention."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer import masks
from keras_transformer.layers.decoder_layer import DecoderLayer
from keras_transformer.layers.stack_base import StackBase
from keras_transformer.packing import pack, packing_of, unpack


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(StackBase):
    """Transformer decoder: `TransformerEmbedding` then `num_layers` `DecoderLayer`s.

    Returns hidden states; `logits()` projects them onto the vocabulary through the
    embedding's reverse projection (the transposed embedding matrix when `tie_weights`).
    With `use_cross_attention=False` its layers attend over the target only (a decoder-only
    language model's stack), and every encoder argument must be left out.

    Args:
        vocabulary_size: target vocabulary size.
        num_layers: number of layers (the paper's N).
        d_model: model size (d_model).
        num_heads: attention heads (h).
        d_ff: feed-forward inner size (d_ff).
        dropout: dropout (P_drop) on embeddings and residuals.
        attention_dropout: dropout on attention weights.
        ffn_dropout: dropout on the feed-forward networks' inner activations; None (the
            default) uses `dropout`.
        activation: feed-forward activation.
        max_length: longest target sequence accepted.
        norm_first: pre-norm (True) or post-norm (False, the paper).
        layer_norm_epsilon: LayerNorm epsilon.
        pad_id: padding id, used to derive the padding mask when none is passed.
        tie_weights: project to logits with the transposed embedding matrix (True, as in
            the paper) or a separate (d_model, V) matrix (False).
        use_cross_attention: layers attend over an encoder output (True, the paper) or not
            (False: a decoder-only stack).
        embedding: optional `TransformerEmbedding` to use instead of creating one (for
            sharing it with the encoder); not part of the config.
        **kwargs: base layer arguments.

    Call arguments:
        token_ids: int (B, T).
        encoder_output: (B, S, d_model); may be `None` with `cross_attention_cache`, and
            must be `None` without cross-attention.
        padding_mask: optional bool (B, T); defaults to `token_ids != pad_id`.
        encoder_padding_mask: optional bool (B, S), True at real source tokens.
        cache: optional self-attention cache (`init_cache`): a tuple of N per-layer
            `(keys, values)` pairs of (B, H, T_max, D) tensors; then `cache_update_index`
            is the position of `token_ids[:, 0]`.
        cache_update_index: int or scalar tensor.
        cross_attention_cache: optional precomputed encoder keys/values
            (`compute_cross_attention_cache`): a tuple of N `(keys, values)` pairs of
            (B, H, S, D) tensors.
        return_attention_scores: also return `{"self_attention": [...],
            "cross_attention": [...]}`, per-layer weights (B, H, T, T) and (B, H, T, S)
            (no `"cross_attention"` key without cross-attention).
        skip_padding: run the layers' position-wise parts on the real positions only
            (`keras_transformer.packing`): the same output at real positions, zeros at
            padding, less time on padded batches; not with a cache, not under XLA.
        training: whether dropout is active.

    Returns:
        Hidden states (B, T, d_model); then the attention dict if requested; then the
        updated cache if one was given; as a tuple when there is more than one.

    Example:
    >>> decoder = Decoder(100, num_layers=2, d_model=16, num_heads=2, d_ff=32)
    >>> hidden = decoder(keras.ops.ones((2, 5), "int32"), keras.ops.ones((2, 7, 16)))
    >>> tuple(decoder.logits(hidden).shape)
    (2, 5, 100)
    >>> causal = Decoder(100, num_layers=2, d_model=16, num_heads=2, d_ff=32,
    ...                  use_cross_attention=False)
    >>> tuple(causal(keras.ops.ones((2, 5), "int32")).shape)
    (2, 5, 16)
    """

    layer_class = DecoderLayer

    def __init__(self, *args, tie_weights: bool = True, use_cross_attention: bool = True, **kwargs):
        self.tie_weights = bool(tie_weights)
        self.use_cross_attention = bool(use_cross_attention)
        super().__init__(*args, **kwargs)

    def _ties_embedding_weights(self) -> bool:
        return self.tie_weights

    def _layer_kwargs(self) -> dict:
        return {"use_cross_attention": self.use_cross_attention}

    def build(self, token_ids_shape, encoder_output_shape=None):
        self._build_stack(token_ids_shape)

    def call(
        self,
        token_ids,
        encoder_output=None,
        padding_mask=None,
        encoder_padding_mask=None,
        cache=None,
        cache_update_index=None,
        cross_attention_cache=None,
        return_attention_scores: bool = False,
        skip_padding: bool = False,
        training=None,
    ):
        if cache is not None and skip_padding:
            raise ValueError(
                "Received `skip_padding=True` with a `cache`; incremental decoding runs on "
                "padded inputs. Pass skip_padding=False."
            )
        if cache is not None and cache_update_index is None:
            raise ValueError(
                "Received `cache` without `cache_update_index`; pass the position of the "
                "first token of `token_ids`."
            )
        for name, value in (("cache", cache), ("cross_attention_cache", cross_attention_cache)):
            if value is not None and len(value) != self.num_layers:
                raise ValueError(
                    f"Received an invalid value for argument `{name}`, expected a tuple of "
                    f"{self.num_layers} per-layer (keys, values) pairs. Received: {len(value)} "
                    "entries"
                )
        if not self.use_cross_attention:
            given = [
                name
                for name, value in (
                    ("encoder_output", encoder_output),
                    ("encoder_padding_mask", encoder_padding_mask),
                    ("cross_attention_cache", cross_attention_cache),
                )
                if value is not None
            ]
            if given:
                raise ValueError(
                    "Received encoder inputs for a `Decoder` without cross-attention "
                    f"(use_cross_attention=False): {given}. Pass none of them."
                )
        if padding_mask is None and cache is None:
            padding_mask = masks.padding_mask(token_ids, self.pad_id)  # (B, T)
        start_index = 0 if cache is None else cache_update_index
        x = self.embedding(token_ids, start_index=start_index, training=training)  # (B, T, D)
        packing = packing_of(padding_mask) if skip_padding else None
        if packing is not None:
            x = pack(x, packing)  # (N, D)
        self_weights, cross_weights, new_caches = [], [], []
        for i, layer in enumerate(self.layers_):
            # Without cross-attention the encoder arguments are left out, not passed as
            # None: a rematerialized layer passes its positional arguments to
            # `tf.recompute_grad`, which takes tensors only.
            encoder_arguments = (
                {
                    "encoder_padding_mask": encoder_padding_mask,
                    "cross_attention_cache": (
                        None if cross_attention_cache is None else cross_attention_cache[i]
                    ),
                }
                if self.use_cross_attention
                else {}
            )
            outputs = layer(
                x,
                *((encoder_output,) if self.use_cross_attention else ()),
                decoder_padding_mask=padding_mask,
                self_attention_cache=None if cache is None else cache[i],
                self_attention_cache_update_index=cache_update_index,
                return_attention_scores=True,
                packing=packing,
                training=training,
                **encoder_arguments,
            )  # (B, T, D) or (N, D), (B, H, T, T)[, (B, H, T, S)][, 2 x (B, H, T_max, D)]
            x, layer_self_weights = outputs[:2]
            self_weights.append(layer_self_weights)
            if self.use_cross_attention:
                cross_weights.append(outputs[2])
            if cache is not None:
                new_caches.append(outputs[-1])
        if self.final_norm is not None:
            x = self.final_norm(x)
        if packing is not None:
            x = unpack(x, packing)  # (B, T, D), zeros at padding

        results = (x,)
        if return_attention_scores:
            weights = {"self_attention": self_weights}
            if self.use_cross_attention:
                weights["cross_attention"] = cross_weights
            results += (weights,)
        if cache is not None:
            # Per-layer tensors, not one stacked tensor: stacking would copy every layer's
            # cache at every decoding step.
            results += (tuple(new_caches),)  # N x 2 x (B, H, T_max, D)
        return results[0] if len(results) == 1 else results

    def logits(self, hidden, positions=None):
        """Projects hidden states (B, T, d_model) to float32 logits (B, T, V).

        With `positions`, int (N,) indices into the B * T positions in row-major order,
        only those are projected: logits (N, V). Training needs the logits of the real
        (non-pad) target positions only, and the projection onto the vocabulary is the
        step's largest matrix product after the feed-forward layers.
        """
        if positions is not None:
            hidden = ops.reshape(hidden, (-1, self.d_model))  # (B * T, D)
            hidden = ops.take(hidden, positions, axis=0)  # (N, D)
        return ops.cast(self.embedding.reverse(hidden), "float32")

    def init_cache(self, batch_size, max_length: int) -> tuple:
        """A zero self-attention cache: N per-layer `(keys, values)`, each (B, H, T_max, D)."""
        head_dim = self.d_model // self.num_heads
        shape = (batch_size, self.num_heads, max_length, head_dim)
        return tuple(
            (ops.zeros(shape, dtype=self.compute_dtype), ops.zeros(shape, dtype=self.compute_dtype))
            for _ in self.layers_
        )

    def compute_cross_attention_cache(self, encoder_output) -> tuple:
        """Projects the encoder output once for all decoding steps: N per-layer
        `(keys, values)`, each (B, H, S, D)."""
        if not self.use_cross_attention:
            raise ValueError(
                "Received a call to `compute_cross_attention_cache` on a `Decoder` without "
                "cross-attention (use_cross_attention=False); it has no encoder to attend."
            )
        return tuple(layer.cross_attention.compute_cache(encoder_output) for layer in self.layers_)

    def compute_output_shape(self, token_ids_shape, encoder_output_shape=None):
        return (*token_ids_shape, self.d_model)

    def get_config(self):
        config = super().get_config()
        config["tie_weights"] = self.tie_weights
        config["use_cross_attention"] = self.use_cross_attention
        return config
