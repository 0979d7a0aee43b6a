"""The encoder-decoder Transformer as a subclassed `keras.Model`."""

from __future__ import annotations

from typing import Any

import keras

from keras_transformer import masks
from keras_transformer.layers.decoder import Decoder
from keras_transformer.layers.embedding import TransformerEmbedding
from keras_transformer.layers.encoder import Encoder
from keras_transformer.model_config import TransformerConfig
from keras_transformer.models.presets import preset_config
from keras_transformer.validation import check_architecture


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """The Transformer of "Attention Is All You Need" (Vaswani et al. 2017).

    `call((source_ids, target_ids))` returns float32 logits (B, T, V) over the target
    vocabulary for teacher-forced targets. Padding masks are derived from `pad_id` inside
    the model; the decoder's self-attention is causal.

    The arguments match `TransformerConfig`'s fields one to one; `from_preset` builds the
    paper's `base` and `big` models (or `tiny`, for tests).

    Args:
        source_vocab_size: source vocabulary size.
        target_vocab_size: target vocabulary size.
        num_encoder_layers: encoder layers (the paper's N).
        num_decoder_layers: decoder layers (N).
        d_model: model size (d_model); must divide by `num_heads`.
        num_heads: attention heads (h).
        d_ff: feed-forward inner size (d_ff).
        dropout: dropout on embeddings and residuals (P_drop), in [0, 1).
        attention_dropout: dropout on attention weights, in [0, 1).
        ffn_dropout: dropout on the feed-forward networks' inner activations, in [0, 1);
            None (the default) uses `dropout`.
        activation: feed-forward activation (ReLU in the paper).
        max_length: longest source or target sequence (positional table size).
        norm_first: pre-norm (True) or post-norm (False, the paper).
        layer_norm_epsilon: LayerNorm epsilon.
        share_embeddings: one embedding matrix for source and target (the paper's shared
            BPE vocabulary); needs `source_vocab_size == target_vocab_size`.
        tie_output_embeddings: the pre-softmax projection is the transposed target
            embedding matrix (the paper) instead of a separate matrix.
        pad_id: padding id of both vocabularies.
        source_eos: whether the sources it was trained on end with EOS, saved with the
            model so that a `Translator` encodes sources as in training (None: unknown,
            the models saved before this argument existed).
        **kwargs: base model arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: a tuple `(source_ids, target_ids)`, int (B, S) and (B, T).
        return_attention_scores: also return `{"encoder_self_attention": [...],
            "decoder_self_attention": [...], "cross_attention": [...]}`, per-layer
            weights (B, H, S, S), (B, H, T, T) and (B, H, T, S).
        training: whether dropout is active.
        logit_positions: optional int (N,) indices into the B * T target positions
            (row-major): only their logits are computed, (N, target_vocab_size). Training
            passes the real (non-pad) positions (`training.DistributedTrainingMixin`).
        skip_padding: run the position-wise parts of every layer on the real source and
            target positions only (`keras_transformer.packing`): the same logits at real
            positions, less time on padded batches (training passes True); not under XLA.

    Returns:
        Logits (B, T, target_vocab_size) in float32 (also under mixed precision), or
        (N, target_vocab_size) with `logit_positions`; and the attention dict if requested.

    Example:
    >>> model = Transformer.from_preset("tiny", source_vocab_size=100, target_vocab_size=90)
    >>> source = keras.ops.ones((2, 7), "int32")
    >>> target = keras.ops.ones((2, 5), "int32")
    >>> tuple(model((source, target)).shape)
    (2, 5, 90)
    """

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
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
        share_embeddings: bool = False,
        tie_output_embeddings: bool = True,
        pad_id: int = 0,
        source_eos: bool | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        checked = check_architecture(
            source_vocab_size=source_vocab_size,
            target_vocab_size=target_vocab_size,
            num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers,
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
        self.share_embeddings = bool(share_embeddings)
        self.tie_output_embeddings = bool(tie_output_embeddings)
        self.source_eos = None if source_eos is None else bool(source_eos)
        if share_embeddings and source_vocab_size != target_vocab_size:
            raise ValueError(
                "Received an invalid value for argument `share_embeddings`: sharing needs "
                "one vocabulary, expected source_vocab_size == target_vocab_size. Received: "
                f"source_vocab_size={source_vocab_size}, target_vocab_size={target_vocab_size}"
            )

        common = {
            "d_model": d_model,
            "num_heads": num_heads,
            "d_ff": d_ff,
            "dropout": dropout,
            "attention_dropout": attention_dropout,
            "ffn_dropout": ffn_dropout,
            "activation": activation,
            "max_length": max_length,
            "norm_first": norm_first,
            "layer_norm_epsilon": layer_norm_epsilon,
            "pad_id": pad_id,
            "dtype": self.dtype_policy,
        }
        shared = None
        if share_embeddings:
            shared = TransformerEmbedding(
                target_vocab_size,
                d_model,
                max_length=max_length,
                dropout=dropout,
                tie_weights=tie_output_embeddings,
                dtype=self.dtype_policy,
                name="shared_embedding",
            )
        self.encoder = Encoder(
            source_vocab_size,
            num_layers=num_encoder_layers,
            embedding=shared,
            name="encoder",
            **common,
        )
        self.decoder = Decoder(
            target_vocab_size,
            num_layers=num_decoder_layers,
            tie_weights=tie_output_embeddings,
            embedding=shared,
            name="decoder",
            **common,
        )

    @classmethod
    def from_preset(
        cls, preset: str, source_vocab_size: int, target_vocab_size: int, **overrides: Any
    ) -> Transformer:
        """Builds a preset architecture (`"base"`, `"big"`, `"tiny"`), optionally overridden.
        Its weights are random: a preset is an architecture, not a pretrained model.

        Example:
        >>> model = Transformer.from_preset(
        ...     "base", source_vocab_size=37000, target_vocab_size=37000,
        ...     share_embeddings=True)
        """
        arguments = preset_config(preset)
        arguments.update(overrides)
        return cls(
            source_vocab_size=source_vocab_size, target_vocab_size=target_vocab_size, **arguments
        )

    @classmethod
    def from_transformer_config(cls, config: TransformerConfig, **kwargs: Any) -> Transformer:
        """Builds the model of a `TransformerConfig`."""
        return cls(**config.to_dict(), **kwargs)

    def transformer_config(self) -> TransformerConfig:
        """This model's architecture as a `TransformerConfig`."""
        return TransformerConfig(
            **{k: getattr(self, k) for k in TransformerConfig.__dataclass_fields__}
        )

    def build(self, input_shape):
        source_shape, target_shape = input_shape
        self.encoder.build(source_shape)
        self.decoder.build(target_shape, (*source_shape, self.d_model))
        self.built = True

    def call(
        self,
        inputs,
        return_attention_scores: bool = False,
        training=None,
        logit_positions=None,
        skip_padding: bool = False,
    ):
        source_ids, target_ids = inputs
        source_mask = masks.padding_mask(source_ids, self.pad_id)  # (B, S)
        encoded = self.encoder(
            source_ids,
            padding_mask=source_mask,
            return_attention_scores=return_attention_scores,
            skip_padding=skip_padding,
            training=training,
        )  # (B, S, D)[, list of (B, H, S, S)]
        encoder_weights = None
        if return_attention_scores:
            encoded, encoder_weights = encoded
        decoded = self.decoder(
            target_ids,
            encoded,
            encoder_padding_mask=source_mask,
            return_attention_scores=return_attention_scores,
            skip_padding=skip_padding,
            training=training,
        )  # (B, T, D)[, dict]
        if not return_attention_scores:
            return self.decoder.logits(decoded, logit_positions)  # (B, T, V) or (N, V)
        hidden, decoder_weights = decoded
        attention = {
            "encoder_self_attention": encoder_weights,
            "decoder_self_attention": decoder_weights["self_attention"],
            "cross_attention": decoder_weights["cross_attention"],
        }
        return self.decoder.logits(hidden, logit_positions), attention

    # Pieces for incremental decoding (`keras_transformer.decoding`).

    def encode(self, source_ids, training=False):
        """Runs the encoder: returns `(encoder_output (B, S, D), source_padding_mask (B, S))`."""
        source_mask = masks.padding_mask(source_ids, self.pad_id)
        return self.encoder(source_ids, padding_mask=source_mask, training=training), source_mask

    def init_decoding_cache(self, encoder_output, max_length: int):
        """Caches for decoding up to `max_length` target tokens.

        Returns:
            `(self_attention_cache, cross_attention_cache)`: tuples of N per-layer
            `(keys, values)` pairs, zeros (B, H, T_max, D) and the projected encoder
            keys/values (B, H, S, D).
            Both are nests that `tf.nest.map_structure` can reorder (beam search).
        """
        batch_size = keras.ops.shape(encoder_output)[0]
        return (
            self.decoder.init_cache(batch_size, max_length),
            self.decoder.compute_cross_attention_cache(encoder_output),
        )

    def decode_step(
        self, token_ids, source_padding_mask, cache, cross_attention_cache, cache_update_index
    ):
        """Decodes new tokens given the caches.

        Args:
            token_ids: int (B, T_new), the tokens at positions
                `cache_update_index .. cache_update_index + T_new - 1`.
            source_padding_mask: bool (B, S).
            cache: self-attention cache, N x `(keys, values)` of (B, H, T_max, D).
            cross_attention_cache: N x `(keys, values)` of (B, H, S, D).
            cache_update_index: int or scalar int tensor.

        Returns:
            `(logits (B, T_new, V) float32, updated cache)`.
        """
        hidden, cache = self.decoder(
            token_ids,
            None,
            encoder_padding_mask=source_padding_mask,
            cache=cache,
            cache_update_index=cache_update_index,
            cross_attention_cache=cross_attention_cache,
            training=False,
        )
        return self.decoder.logits(hidden), cache

    def get_config(self):
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.saving.serialize_keras_object(self.dtype_policy),
        }
        config.update(self.transformer_config().to_dict())
        config["source_eos"] = self.source_eos
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.saving.deserialize_keras_object(config["dtype"])
        return cls(**config)
