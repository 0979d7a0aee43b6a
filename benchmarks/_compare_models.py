"""The Keras implementations `train_compare.py` trains, ours and KerasHub, built from one
`Arch` (the PyTorch one is `_compare_torch.py`).
"""

from __future__ import annotations

import math

import keras
import numpy as np
from _compare_spec import Arch

from keras_transformer.config import ExperimentConfig
from keras_transformer.training import (
    MaskedSparseCategoricalAccuracy,
    MaskedSparseCategoricalCrossentropy,
    TransformerSchedule,
    compile_model,
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


def build_hub(
    arch: Arch, config: ExperimentConfig, jit_compile: bool, dtype_policy: str
) -> HubTransformer:
    """KerasHub's layers as its users run them: its own attention path, `dropout` applied
    where KerasHub applies it (the attention weights included, the feed-forward network's
    inner activations not: it has no such dropout), under `dtype_policy`."""
    keras.utils.set_random_seed(config.training.seed)
    keras.config.set_dtype_policy(dtype_policy)
    model = HubTransformer(arch, name="keras_hub_transformer")
    dummy = np.full((1, 2), 4, "int32")
    model((dummy, dummy), training=False)
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
