"""A decoder-only Transformer: a causal language model with the package's cached decoding."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_transformer import masks
from keras_transformer.layers.decoder import Decoder
from keras_transformer.models.presets import stack_preset_config
from keras_transformer.validation import check_architecture


def force_prompt_tokens(logits, prompt_ids, prompt_padding_mask, start_index):
    """Replaces the logits of positions still inside the prompt by a certain prompt token.

    Sequences are `[BOS, prompt..., continuation...]`; the logits at position `p` predict
    the token at `p + 1`, which is the prompt's token `p` (0-based) while `p < L` (the
    prompt's length, from its padding mask). There the returned logits are 0 for that token
    and -inf elsewhere: every search (`keras_transformer.decoding`) then picks it, with a
    log-probability of 0, so it adds nothing to the score.

    Args:
        logits: float32 (B, T, V), for positions `start_index .. start_index + T - 1`.
        prompt_ids: int (B, P) right-padded prompts.
        prompt_padding_mask: bool (B, P'), True at real prompt tokens (any P' >= L).
        start_index: int or scalar int tensor, the position of `logits[:, 0]`.

    Returns:
        float32 (B, T, V).
    """
    lengths = ops.sum(ops.cast(prompt_padding_mask, "int32"), axis=1)  # (B,)
    steps = ops.shape(logits)[1]
    positions = ops.arange(steps, dtype="int32") + ops.cast(start_index, "int32")  # (T,)
    forced = positions[None, :] < lengths[:, None]  # (B, T)
    last = ops.shape(prompt_ids)[1] - 1
    columns = ops.minimum(positions, last)  # (T,), clipped past the prompt (never forced)
    tokens = ops.take(ops.cast(prompt_ids, "int32"), columns, axis=1)  # (B, T)
    is_token = ops.one_hot(tokens, ops.shape(logits)[-1], dtype="bool")  # (B, T, V)
    certain = ops.where(is_token, 0.0, float("-inf"))  # (B, T, V)
    return ops.where(forced[:, :, None], certain, logits)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerDecoderModel(keras.Model):
    """A decoder-only causal language model built from the translation model's layers.

    `TransformerEmbedding`, then `num_layers` `DecoderLayer`s without cross-attention
    (causal self-attention and feed-forward), then the embedding's reverse projection onto
    the vocabulary (the transposed embedding matrix with `tie_output_embeddings`).
    `call(token_ids)` returns float32 logits (B, T, V): position t predicts token t + 1.
    Sequences are right-padded with `pad_id`; training inputs are `[BOS] + tokens` and the
    labels `tokens + [EOS]`.

    Generation uses `keras_transformer.decoding` unchanged (greedy, beam and sampling,
    cached, with or without XLA): the model offers the same `encode` /
    `init_decoding_cache` / `decode_step` interface as `Transformer`, with the *prompt* in
    place of the source. `encode` passes the prompt ids through; the search feeds BOS at
    position 0 and one token per step, and `decode_step` makes the prompt's tokens certain
    at the positions they occupy (`force_prompt_tokens`), so each row runs through its own
    prompt, whatever its length, then continues it. Every output is therefore
    `prompt + continuation` (strip the prompt's length); the scores are the
    continuation's log-probabilities. A search's length limit
    `min(max_length, a * prompt_length + b)` with `a = 1` makes `b` the number of new
    tokens, and `min_length` counts prompt tokens too. The prompt is read one token per
    step (no parallel prefill): the same cost per token as the continuation.

    Args:
        vocabulary_size: the number of token ids (V).
        num_layers: decoder layers (N).
        d_model: model size; must divide by `num_heads`.
        num_heads: attention heads (h).
        d_ff: feed-forward inner size.
        dropout: dropout on embeddings and residuals, in [0, 1).
        attention_dropout: dropout on attention weights, in [0, 1).
        ffn_dropout: dropout on the feed-forward networks' inner activations, in [0, 1);
            None (the default) uses `dropout`.
        activation: feed-forward activation.
        max_length: the longest sequence, BOS included (positional table size).
        norm_first: pre-norm (True) or post-norm (False, the paper).
        layer_norm_epsilon: LayerNorm epsilon.
        tie_output_embeddings: the output projection is the transposed embedding matrix.
        pad_id: the padding id.
        **kwargs: base model arguments (`name`, `dtype`, ...).

    Call arguments:
        token_ids: int (B, T), right-padded with `pad_id`.
        return_attention_scores: also return the per-layer self-attention weights, a list
            of (B, H, T, T).
        training: whether dropout is active.
        logit_positions: optional int (N,) indices into the B * T positions (row-major):
            only their logits are computed, (N, vocabulary_size). Training passes the real
            (non-pad) positions (`training.DistributedTrainingMixin`).
        skip_padding: run the position-wise parts of every layer on the real positions
            only (`keras_transformer.packing`): the same logits at real positions, less
            time on padded batches (training passes True); not under XLA.

    Returns:
        Logits (B, T, vocabulary_size) in float32, or (N, vocabulary_size) with
        `logit_positions`; then the list of weights if requested.

    Example:
    >>> lm = TransformerDecoderModel.from_preset("tiny", vocabulary_size=100)
    >>> tuple(lm(keras.ops.ones((2, 9), "int32")).shape)
    (2, 9, 100)
    >>> from keras_transformer.decoding import BatchDecoder
    >>> prompts = [[5, 6, 7], [8, 0, 0]]  # right-padded prompt ids
    >>> output = BatchDecoder(lm, method="greedy", max_length_b=4, jit_compile=False)(prompts)
    >>> output.tokens[0, 0, :3].tolist(), output.tokens[1, 0, :1].tolist()  # the prompts
    ([5, 6, 7], [8])
    """

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
        activation: str = "relu",
        max_length: int = 512,
        norm_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        tie_output_embeddings: bool = True,
        pad_id: int = 0,
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
        self.activation = activation
        self.norm_first = bool(norm_first)
        self.tie_output_embeddings = bool(tie_output_embeddings)
        self.decoder = Decoder(
            vocabulary_size,
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            d_ff=d_ff,
            dropout=dropout,
            attention_dropout=attention_dropout,
            ffn_dropout=ffn_dropout,
            activation=activation,
            max_length=max_length,
            norm_first=norm_first,
            layer_norm_epsilon=layer_norm_epsilon,
            pad_id=pad_id,
            tie_weights=tie_output_embeddings,
            use_cross_attention=False,
            dtype=self.dtype_policy,
            name="decoder",
        )

    @classmethod
    def from_preset(
        cls, preset: str, vocabulary_size: int, **overrides: Any
    ) -> TransformerDecoderModel:
        """A preset (`"tiny"`, `"base"`, `"big"`) with the preset's decoder layer count.
        Its weights are random: a preset is an architecture, not a pretrained model.

        Example:
        >>> TransformerDecoderModel.from_preset("big", vocabulary_size=32000).d_model
        1024
        """
        arguments = stack_preset_config(preset, "decoder")
        arguments.update(overrides)
        return cls(vocabulary_size=vocabulary_size, **arguments)

    def build(self, token_ids_shape):
        if not self.decoder.built:
            self.decoder.build(token_ids_shape)
        self.built = True

    def call(
        self,
        token_ids,
        return_attention_scores: bool = False,
        training=None,
        logit_positions=None,
        skip_padding: bool = False,
    ):
        decoded = self.decoder(
            token_ids,
            return_attention_scores=return_attention_scores,
            skip_padding=skip_padding,
            training=training,
        )  # (B, T, D)[, {"self_attention": list of (B, H, T, T)}]
        if not return_attention_scores:
            return self.decoder.logits(decoded, logit_positions)  # (B, T, V) or (N, V)
        hidden, weights = decoded
        return self.decoder.logits(hidden, logit_positions), weights["self_attention"]

    # Pieces for incremental decoding (`keras_transformer.decoding`), the prompt standing
    # where a translation model's source does.

    def encode(self, prompt_ids, training=False):
        """Returns `(prompt_ids (B, P) int32, prompt_padding_mask (B, P))`: nothing to run
        before decoding (the prompt is read by `decode_step`)."""
        prompt_ids = ops.cast(prompt_ids, "int32")
        return prompt_ids, masks.padding_mask(prompt_ids, self.pad_id)

    def init_decoding_cache(self, prompt_ids, max_length: int):
        """Caches for decoding up to `max_length` positions.

        Returns:
            `(self_attention_cache, prompt_ids)`: N per-layer zero `(keys, values)` of
            (B, H, T_max, D), and the prompt ids (B, P + 1) (one padding column added, so a prompt
            of width 0 can be read too), which `decode_step` takes as its
            `cross_attention_cache` argument.
        """
        batch_size = ops.shape(prompt_ids)[0]
        padding = ops.full((batch_size, 1), self.pad_id, "int32")
        return (
            self.decoder.init_cache(batch_size, max_length),
            ops.concatenate([ops.cast(prompt_ids, "int32"), padding], axis=1),
        )

    def decode_step(self, token_ids, prompt_padding_mask, cache, prompt_ids, cache_update_index):
        """Decodes new tokens given the cache; positions inside the prompt are forced.

        Args:
            token_ids: int (B, T_new), the tokens at positions
                `cache_update_index .. cache_update_index + T_new - 1`.
            prompt_padding_mask: bool (B, P), True at real prompt tokens.
            cache: self-attention cache, N x `(keys, values)` of (B, H, T_max, D).
            prompt_ids: int (B, P + 1), from `init_decoding_cache`.
            cache_update_index: int or scalar int tensor.

        Returns:
            `(logits (B, T_new, V) float32, updated cache)`.
        """
        hidden, cache = self.decoder(
            token_ids, cache=cache, cache_update_index=cache_update_index, training=False
        )
        logits = self.decoder.logits(hidden)  # (B, T_new, V)
        return (
            force_prompt_tokens(logits, prompt_ids, prompt_padding_mask, cache_update_index),
            cache,
        )

    def compute_output_shape(self, token_ids_shape):
        return (*token_ids_shape, self.vocabulary_size)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.saving.serialize_keras_object(self.dtype_policy),
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "d_ff": self.d_ff,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "ffn_dropout": self.ffn_dropout,
            "activation": self.activation,
            "max_length": self.max_length,
            "norm_first": self.norm_first,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "tie_output_embeddings": self.tie_output_embeddings,
            "pad_id": self.pad_id,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.saving.deserialize_keras_object(config["dtype"])
        return cls(**config)
