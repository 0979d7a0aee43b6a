"""What every process of `train_compare.py` shares, with the standard library only (the
PyTorch workers never import TensorFlow or the package): the architecture, the training
settings, and the files the preparing process writes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any


@dataclasses.dataclass
class Arch:
    """The architecture the three implementations share."""

    vocab: int
    d_model: int
    num_heads: int
    d_ff: int
    encoder_layers: int
    decoder_layers: int
    dropout: float
    attention_dropout: float
    ffn_dropout: float | None
    activation: str
    norm_first: bool
    epsilon: float
    max_length: int

    @property
    def ffn_rate(self) -> float:
        """The feed-forward networks' inner dropout rate (`model.ffn_dropout`, else `dropout`)."""
        return self.dropout if self.ffn_dropout is None else self.ffn_dropout

    @classmethod
    def from_config(cls, config: Any, vocab: int) -> Arch:
        m = config.model
        return cls(
            vocab=vocab,
            d_model=m.d_model,
            num_heads=m.num_heads,
            d_ff=m.d_ff,
            encoder_layers=m.num_encoder_layers,
            decoder_layers=m.num_decoder_layers,
            dropout=m.dropout,
            attention_dropout=m.attention_dropout,
            ffn_dropout=m.ffn_dropout,
            activation=m.activation,
            norm_first=m.norm_first,
            epsilon=m.layer_norm_epsilon,
            max_length=m.max_length,
        )


@dataclasses.dataclass
class Training:
    """The loss, optimizer and schedule settings of the config's `training` section."""

    seed: int
    label_smoothing: float
    warmup_steps: int
    learning_rate_scale: float
    beta_1: float
    beta_2: float
    epsilon: float

    @classmethod
    def from_config(cls, config: Any) -> Training:
        return cls(**{f.name: getattr(config.training, f.name) for f in dataclasses.fields(cls)})


@dataclasses.dataclass
class Prepared:
    """The preparing process' files in `folder`: `spec.json` (this), `batches.npz` (the
    bucketed batches `b{i}_*`, the fixed-sentence batches `f{i}_*`, the positional table and
    ours' logits on batch 0) and `weights.pkl` (ours' initial weights: `get_weights()` and
    the per-layer parts the other implementations load)."""

    folder: str
    arch: Arch
    training: Training
    overrides: list[str]
    warmup: int
    steps: int
    fixed: int
    description: list[str]

    def save(self) -> None:
        with open(os.path.join(self.folder, "spec.json"), "w", encoding="utf-8") as f:
            json.dump(dataclasses.asdict(self), f)

    @classmethod
    def load(cls, folder: str) -> Prepared:
        with open(os.path.join(folder, "spec.json"), encoding="utf-8") as f:
            raw = json.load(f)
        raw["arch"], raw["training"] = Arch(**raw["arch"]), Training(**raw["training"])
        return cls(**raw)

    def path(self, name: str) -> str:
        return os.path.join(self.folder, name)
