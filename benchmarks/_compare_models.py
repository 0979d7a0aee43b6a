"""The three implementations `train_compare.py` trains: ours, KerasHub and PyTorch, built
from one `Arch`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any

import keras
import numpy as np

from keras_transformer.config import ExperimentConfig
from keras_transformer.layers.positional_encoding import sinusoidal_table
from keras_transformer.training import (
    MaskedSparseCategoricalAccuracy,
    MaskedSparseCategoricalCrossentropy,
    TransformerSchedule,
    compile_model,
)

EXTRA_HINT = 'install the benchmark extra: pip install -e ".[bench]"'


def import_optional(name: str, skip_missing: bool) -> Any:
    """Imports `torch` or `keras_hub`; exits with one line (or returns None to skip the row)."""
    try:
        return __import__(name)
    except ImportError:
        label = {"torch": "PyTorch (torch)", "keras_hub": "KerasHub (keras-hub)"}[name]
        if skip_missing:
            print(f"note: {label} is not installed; skipping its row ({EXTRA_HINT}).")
            return None
        sys.exit(
            f"train_compare.py: {label} is not installed; {EXTRA_HINT} "
            "(or pass --skip-missing to skip its row)."
        )


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
    activation: str
    norm_first: bool
    epsilon: float
    max_length: int

    @classmethod
    def from_config(cls, config: ExperimentConfig, vocab: int) -> Arch:
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
            activation=m.activation,
            norm_first=m.norm_first,
            epsilon=m.layer_norm_epsilon,
            max_length=m.max_length,
        )


def build_ours(config: ExperimentConfig, vocab: int, remat: bool | None = None) -> keras.Model:
    """The package's model, built and compiled as `keras_transformer.runner.train` does."""
    from types import SimpleNamespace

    from keras_transformer.tasks import get_task

    keras.utils.set_random_seed(config.training.seed)
    tokenizer = SimpleNamespace(vocab_size=vocab)  # what the model reads of a tokenizer
    model = get_task(config).build_model((tokenizer, tokenizer), None, remat=remat)
    t = config.training
    compile_model(
        model,
        label_smoothing=t.label_smoothing,
        warmup_steps=t.warmup_steps,
        learning_rate_scale=t.learning_rate_scale,
        beta_1=t.beta_1,
        beta_2=t.beta_2,
        epsilon=t.epsilon,
        clipnorm=t.clipnorm,
        global_clipnorm=t.global_clipnorm,
        jit_compile=t.jit_compile,
        steps_per_execution=t.steps_per_execution,
    )
    return model


class HubTransformer(keras.Model):
    """The same encoder-decoder assembled from KerasHub layers."""

    def __init__(self, arch: Arch, **kwargs):
        super().__init__(**kwargs)
        import keras_hub

        self.arch = arch
        self.embedding = keras_hub.layers.ReversibleEmbedding(
            arch.vocab,
            arch.d_model,
            tie_weights=True,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=arch.d_model**-0.5),
            name="shared_embedding",
        )
        self.position = keras_hub.layers.SinePositionEncoding(name="position")
        self.source_dropout = keras.layers.Dropout(arch.dropout)
        self.target_dropout = keras.layers.Dropout(arch.dropout)
        common = {
            "intermediate_dim": arch.d_ff,
            "num_heads": arch.num_heads,
            "dropout": arch.dropout,
            "activation": arch.activation,
            "layer_norm_epsilon": arch.epsilon,
            "normalize_first": arch.norm_first,
        }
        self.encoder_layers = [
            keras_hub.layers.TransformerEncoder(**common, name=f"encoder_{i}")
            for i in range(arch.encoder_layers)
        ]
        self.decoder_layers = [
            keras_hub.layers.TransformerDecoder(**common, name=f"decoder_{i}")
            for i in range(arch.decoder_layers)
        ]
        # KerasHub's pre-norm layers leave the residual stream unnormalized, as ours do
        # before their stacks' final LayerNorm.
        self.encoder_norm = self.decoder_norm = None
        if arch.norm_first:
            self.encoder_norm = keras.layers.LayerNormalization(epsilon=arch.epsilon)
            self.decoder_norm = keras.layers.LayerNormalization(epsilon=arch.epsilon)

    def _embed(self, ids, dropout, training):
        x = self.embedding(ids) * math.sqrt(self.arch.d_model)
        return dropout(x + self.position(x), training=training)

    def call(self, inputs, training=None):
        source, target = inputs
        source_mask = keras.ops.not_equal(source, 0)
        target_mask = keras.ops.not_equal(target, 0)
        x = self._embed(source, self.source_dropout, training)
        for layer in self.encoder_layers:
            x = layer(x, padding_mask=source_mask, training=training)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        y = self._embed(target, self.target_dropout, training)
        for layer in self.decoder_layers:
            y = layer(
                y,
                x,
                decoder_padding_mask=target_mask,
                encoder_padding_mask=source_mask,
                training=training,
            )
        if self.decoder_norm is not None:
            y = self.decoder_norm(y)
        return keras.ops.cast(self.embedding(y, reverse=True), "float32")

    def attention_layers(self) -> list[keras.layers.Layer]:
        found = [layer._self_attention_layer for layer in self.encoder_layers]
        for layer in self.decoder_layers:
            found += [layer._self_attention_layer, layer._cross_attention_layer]
        return found


def build_hub(arch: Arch, config: ExperimentConfig, jit_compile: bool) -> HubTransformer:
    keras.utils.set_random_seed(config.training.seed)
    model = HubTransformer(arch, name="keras_hub_transformer")
    dummy = np.full((1, 2), 4, "int32")
    model((dummy, dummy), training=False)
    # KerasHub applies `dropout` to the attention weights too; the config's
    # attention_dropout (0 by default) is set on its attention layers before any tracing.
    for attention in model.attention_layers():
        attention._dropout = arch.attention_dropout
    t = config.training
    optimizer = keras.optimizers.Adam(
        TransformerSchedule(arch.d_model, t.warmup_steps, t.learning_rate_scale),
        beta_1=t.beta_1,
        beta_2=t.beta_2,
        epsilon=t.epsilon,
        clipnorm=t.clipnorm,
        global_clipnorm=t.global_clipnorm,
    )
    model.compile(
        optimizer=optimizer,
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=t.label_smoothing, pad_id=0),
        metrics=[MaskedSparseCategoricalAccuracy(pad_id=0, name="accuracy")],
        jit_compile=jit_compile,
    )
    return model


def build_torch(arch: Arch, config: ExperimentConfig, threads: int):
    """The same model as `torch.nn` modules, with its optimizer, schedule and loss."""
    import torch
    from torch import nn

    torch.set_num_threads(threads)
    torch.manual_seed(config.training.seed)

    class TorchTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            d = arch.d_model
            self.embedding = nn.Embedding(arch.vocab, d)
            nn.init.normal_(self.embedding.weight, std=d**-0.5)
            table = torch.from_numpy(sinusoidal_table(arch.max_length, d))
            self.register_buffer("positions", table, persistent=False)
            self.dropout = nn.Dropout(arch.dropout)
            common = {
                "d_model": d,
                "nhead": arch.num_heads,
                "dim_feedforward": arch.d_ff,
                "dropout": arch.dropout,
                "activation": arch.activation,
                "layer_norm_eps": arch.epsilon,
                "batch_first": True,
                "norm_first": arch.norm_first,
            }
            # nn.Transformer always adds a final LayerNorm to both stacks; ours has them
            # only with pre-norm, so the stacks are assembled here.
            self.encoder = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(**common),
                arch.encoder_layers,
                norm=nn.LayerNorm(d, eps=arch.epsilon) if arch.norm_first else None,
                enable_nested_tensor=False,
            )
            self.decoder = nn.TransformerDecoder(
                nn.TransformerDecoderLayer(**common),
                arch.decoder_layers,
                norm=nn.LayerNorm(d, eps=arch.epsilon) if arch.norm_first else None,
            )
            for module in self.modules():
                if isinstance(module, nn.MultiheadAttention):
                    module.dropout = arch.attention_dropout
            self.scale = math.sqrt(d)

        def embed(self, ids):
            x = self.embedding(ids) * self.scale + self.positions[: ids.shape[1]]
            return self.dropout(x)

        def forward(self, source, target):
            source_pad = source == 0
            target_pad = target == 0
            length = target.shape[1]
            causal = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
            memory = self.encoder(self.embed(source), src_key_padding_mask=source_pad)
            hidden = self.decoder(
                self.embed(target),
                memory,
                tgt_mask=causal,
                tgt_key_padding_mask=target_pad,
                memory_key_padding_mask=source_pad,
            )
            return nn.functional.linear(hidden, self.embedding.weight)

    model = TorchTransformer()
    t = config.training
    optimizer = torch.optim.Adam(
        model.parameters(), lr=1.0, betas=(t.beta_1, t.beta_2), eps=t.epsilon
    )
    scale = t.learning_rate_scale * arch.d_model**-0.5
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: scale * min((step + 1) ** -0.5, (step + 1) * t.warmup_steps**-1.5),
    )
    loss_fn = nn.CrossEntropyLoss(label_smoothing=t.label_smoothing, ignore_index=0)
    return model, optimizer, schedule, loss_fn
