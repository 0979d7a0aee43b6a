"""A Transformer's architecture as dataclasses whose fields match `Transformer`'s arguments.

`TransformerConfig(**config)` and `Transformer.from_transformer_config(config)` go one way,
`model.transformer_config()` the other. The experiment config (`keras_transformer.config`)
builds its `model` section on `ArchitectureConfig`. The rules the values must follow are
`validation.check_architecture`'s, the same for the layers, the model and both configs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from keras_transformer.validation import check_architecture


@dataclass
class ArchitectureConfig:
    """A Transformer's architecture apart from its vocabulary sizes (paper names in brackets).

    Attributes:
        num_encoder_layers: encoder layers (N).
        num_decoder_layers: decoder layers (N).
        d_model: model size (d_model).
        num_heads: attention heads (h).
        d_ff: feed-forward inner size (d_ff).
        dropout: dropout on embeddings and residuals (P_drop).
        attention_dropout: dropout on attention weights.
        ffn_dropout: dropout on the feed-forward networks' inner activations; None uses
            `dropout` (tensor2tensor's and OpenNMT-tf's base models drop there too); 0.0
            drops sublayer outputs and embeddings only, as the paper describes and as
            fairseq's and KerasHub's layers do.
        activation: feed-forward activation.
        max_length: longest source/target sequence (positional table size).
        norm_first: pre-norm (True) or post-norm (False, the paper).
        layer_norm_epsilon: LayerNorm epsilon.
        share_embeddings: one embedding matrix for source and target (needs equal
            vocabulary sizes, i.e. a shared vocabulary).
        tie_output_embeddings: pre-softmax projection = transposed target embedding.
        pad_id: padding id of both vocabularies.
    """

    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    ffn_dropout: float | None = None
    activation: str = "relu"
    max_length: int = 512
    norm_first: bool = False
    layer_norm_epsilon: float = 1e-6
    share_embeddings: bool = False
    tie_output_embeddings: bool = True
    pad_id: int = 0


@dataclass(kw_only=True)
class TransformerConfig(ArchitectureConfig):
    """Everything `Transformer(...)` takes: the architecture plus the vocabulary sizes.

    Attributes:
        source_vocab_size: source vocabulary size (keyword-only).
        target_vocab_size: target vocabulary size (keyword-only).
    """

    source_vocab_size: int
    target_vocab_size: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """Builds a config, raising `ValueError` on unknown keys."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(
                f"Received unknown `TransformerConfig` keys {unknown}, expected a subset of "
                f"{sorted(names)}."
            )
        return cls(**values)

    def validate(self) -> TransformerConfig:
        """Checks the values (`validation.check_architecture`); returns `self`."""
        check_architecture(**self.to_dict())
        return self
