"""Training speed of the package against KerasHub and PyTorch, on identical Multi30k batches.

One run trains three implementations of the `multi30k_de_en` architecture (3+3 layers,
d_model 256, 4 heads, d_ff 1024, dropout 0.1, post-norm, one embedding shared by source,
target and the pre-softmax projection; `--set model.x=...` changes it for all three):

- ours: `keras_transformer.training.build_model` + `compile_model`, built and compiled as
  `keras_transformer.training.train` does (Adam 0.9/0.98/1e-9 on `TransformerSchedule`,
  `MaskedSparseCategoricalCrossentropy` with label smoothing, the accuracy metric,
  `jit_compile` resolved from the config: off on CPU), stepped with `train_on_batch`;
- KerasHub: `keras_hub.layers.TransformerEncoder` / `TransformerDecoder` (`normalize_first`
  = `model.norm_first`) over a shared `keras_hub.layers.ReversibleEmbedding` (x sqrt(d_model),
  `SinePositionEncoding`, dropout; its transpose is the output projection), the same loss,
  optimizer, schedule and metric, `jit_compile` as ours, stepped with `train_on_batch`;
- PyTorch: `torch.nn.TransformerEncoder` / `TransformerDecoder` layers (batch_first,
  `norm_first` as the config, ReLU) over a shared `nn.Embedding` (x sqrt(d_model) +
  sinusoidal table, tied output projection), `CrossEntropyLoss(label_smoothing, ignore_index=0)`,
  `Adam(betas=(0.9, 0.98), eps=1e-9)` with the same schedule (`LambdaLR`), the same token
  accuracy computed under `no_grad`; `torch.set_num_threads(--torch-threads)`, by default
  `os.cpu_count()`.

Before timing, the weights of ours are copied into the other two and the logits of one batch
(dropout off) are compared, and the parameter counts are printed. Then the three models
train on one list of batches: the package's tf.data pipeline (`make_datasets`: length
buckets of `data.batch_size` sentences or `data.tokens_per_batch` tokens, shuffled)
materialized once as numpy `((source_ids, target_in), target_out)` int32, 0 = pad. The
first `--warmup` batches are warm-up (tracing, allocation), timed apart; the next
`--steps` are measured: target tokens/s (real, non-pad tokens of `target_out`), ms/step
(mean and median), and the ratios ours/PyTorch (target: >= 1.3x) and ours/KerasHub (target: > 1x).

Model FLOP utilization. The matmul throughput of this machine is measured in fp32 with
`--matmul-size`^2 square matmuls (`tf.linalg.matmul`, and `torch.matmul` for the PyTorch
row; best of `--matmul-repeats`). The training FLOPs of a batch of B sentences with padded
source length S and target length T are counted analytically from the matmuls only:

    forward = N_enc * (8 B S D^2 + 4 B S^2 D + 4 B S D F)              # QKVO, QK^T and AV, FFN
            + N_dec * (8 B T D^2 + 4 B T^2 D                           # self-attention
                       + 4 B T D^2 + 4 B S D^2 + 4 B T S D             # cross: Q,O; K,V; attention
                       + 4 B T D F)                                    # FFN
            + 2 B T D V                                                # tied output projection
    training = 3 * forward                                             # backward = 2 x forward

(D = d_model, F = d_ff, V = target vocabulary; a matmul of (m, k) by (k, n) is 2mkn FLOPs.
Embedding lookups are gathers and count 0; LayerNorm, softmax, dropout, biases, the loss and
the optimizer are not matmuls and are not counted. Padded positions are counted: it is the
work the hardware does.) MFU = (sum of the measured steps' FLOPs / their time) / the
measured matmul FLOP/s (target: >= 50%).

Bucketed versus fixed-length batches: ours on the first `--fixed-steps` measured batches as
bucketed (their ms/step from the main run) and padded to `data.max_source_length` x
`data.max_target_length` (the same sentences, so the same real tokens).

Memory: ours in a fresh subprocess each with `model.remat=false` and `model.remat=true`
(`keras.RematScope` over the encoder/decoder layers), `--memory-steps` training steps
(`train_on_batch`) on fixed-length (longest-shape) batches; prints peak RSS (`ru_maxrss`)
after build and after the steps, the increase during training, and the ratios remat/no-remat.
Both run inside `tf.function`, as `fit` does (`BlockBase.rematerialized_call`); should a
variant's training step fail, the error is printed and both variants are measured again with
`run_eagerly=True`.

Contention: the "others" columns give the cores that other processes kept busy during each
measurement (from /proc/stat minus this process' CPU time); above 0.25 a warning says the
ratios are unreliable (PyTorch's OpenMP threads suffer most when a core is taken).

Run (needs the `bench` extra: `pip install -e ".[bench]"`; 4-5 minutes with the defaults on
an idle 2-core CPU):

    python benchmarks/train_compare.py [--steps 30] [--warmup 3] [--skip-missing] \
        [--set key=value ...]

Needs the Multi30k copy (`--multi30k-dir`, default `../shared/data/multi30k` beside the
repository, or `$KERAS_TRANSFORMER_MULTI30K_DIR`). Tokenizers are trained once into
`--work-dir` and reused.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer.config import ExperimentConfig, load_config  # noqa: E402
from keras_transformer.layers.positional_encoding import sinusoidal_table  # noqa: E402
from keras_transformer.training import (  # noqa: E402
    MaskedSparseCategoricalAccuracy,
    MaskedSparseCategoricalCrossentropy,
    TransformerSchedule,
    build_model,
    compile_model,
)

HERE = os.path.dirname(os.path.abspath(__file__))
EXTRA_HINT = 'install the benchmark extra: pip install -e ".[bench]"'
Batch = tuple[tuple[np.ndarray, np.ndarray], np.ndarray]


def batching(data) -> str:
    """The batch size as the config states it."""
    if data.batch_size:
        return f"{data.batch_size} sentences"
    return f"~{data.tokens_per_batch} target tokens"


# Optional dependencies.


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


# Data.


def load_batches(config: ExperimentConfig, work_dir: str, count: int) -> tuple[list[Batch], int]:
    """The first `count` batches of the package's training pipeline as numpy, and the vocab."""
    from keras_transformer.run_dir import RunPaths
    from keras_transformer.training import make_datasets
    from keras_transformer.training.trainer import load_or_train_tokenizers, load_pairs

    pairs = load_pairs(config, config.data.train_split)
    paths = RunPaths(work_dir)
    os.makedirs(paths.root, exist_ok=True)
    tokenizers = load_or_train_tokenizers(config, paths, pairs, tf.distribute.get_strategy())
    config.training.steps_per_epoch = count  # repeat the data, as training with it does
    train, _ = make_datasets(config, pairs, None, tokenizers)
    batches = []
    for (source, target_in), target_out in train.take(count).as_numpy_iterator():
        batches.append(
            ((source.astype(np.int32), target_in.astype(np.int32)), target_out.astype(np.int32))
        )
    if tokenizers[0].vocab_size != tokenizers[1].vocab_size:
        sys.exit("train_compare.py needs one shared vocabulary (data.shared_vocab: true).")
    return batches, tokenizers[1].vocab_size


def pad_batch(batch: Batch, source_length: int, target_length: int) -> Batch:
    """`batch` padded with 0 to (B, source_length) and (B, target_length)."""
    (source, target_in), target_out = batch

    def pad(x: np.ndarray, length: int) -> np.ndarray:
        return np.pad(x, ((0, 0), (0, length - x.shape[1])))

    return (pad(source, source_length), pad(target_in, target_length)), pad(
        target_out, target_length
    )


def real_tokens(batch: Batch) -> int:
    return int(np.count_nonzero(batch[1]))


# Contention: CPU time other processes use while we measure.


def _busy_and_own_seconds() -> tuple[float, float] | None:
    """(CPU seconds all processes have been busy, CPU seconds of this process), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    own = resource.getrusage(resource.RUSAGE_SELF)
    return busy, own.ru_utime + own.ru_stime


class OtherLoad:
    """Measures how many cores other processes keep busy between `start()` and `cores()`."""

    def start(self) -> None:
        self.wall = time.perf_counter()
        self.counters = _busy_and_own_seconds()

    def cores(self) -> float:
        """Cores used by other processes since `start()` (NaN where /proc/stat is missing)."""
        now = _busy_and_own_seconds()
        if now is None or self.counters is None:
            return math.nan
        busy, own = now[0] - self.counters[0], now[1] - self.counters[1]
        return max(0.0, busy - own) / (time.perf_counter() - self.wall)


# FLOPs.


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


def training_flops(arch: Arch, batch: Batch) -> float:
    """Matmul FLOPs of one training step on `batch` (see the module docstring)."""
    (source, target_in), _ = batch
    b, s = source.shape
    t = target_in.shape[1]
    d, f, v = arch.d_model, arch.d_ff, arch.vocab
    encoder = 8 * b * s * d * d + 4 * b * s * s * d + 4 * b * s * d * f
    decoder = (
        8 * b * t * d * d
        + 4 * b * t * t * d
        + 4 * b * t * d * d
        + 4 * b * s * d * d
        + 4 * b * t * s * d
        + 4 * b * t * d * f
    )
    forward = arch.encoder_layers * encoder + arch.decoder_layers * decoder + 2 * b * t * d * v
    return 3.0 * forward


def matmul_gflops(framework: str, size: int, repeats: int) -> float:
    """Best fp32 GFLOP/s of a (size, size) x (size, size) matmul with TF or PyTorch."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    if framework == "tf":
        a, b = tf.constant(a), tf.constant(b)

        def run():
            return tf.linalg.matmul(a, b).numpy()

    else:
        import torch

        a, b = torch.from_numpy(a), torch.from_numpy(b)

        def run():
            return torch.matmul(a, b)

    run()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


# The three models.


def build_ours(config: ExperimentConfig, vocab: int, remat: bool | None = None) -> keras.Model:
    """The package's model, built and compiled as `keras_transformer.training.train` does."""
    keras.utils.set_random_seed(config.training.seed)
    model = build_model(config, vocab, vocab, remat=remat)
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


def copy_weights_from_ours(ours: keras.Model, hub: HubTransformer | None, torch_model) -> None:
    """Gives the KerasHub and PyTorch models the weights of ours (for the equivalence check)."""

    def numpy(variable) -> np.ndarray:
        return keras.ops.convert_to_numpy(variable)

    def attention_weights(layer) -> list[np.ndarray]:
        return [
            numpy(w)
            for dense in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense)
            for w in (dense.kernel, dense.bias)
        ]

    def ours_layer(layer, kind: str) -> dict[str, Any]:
        parts = {"self": attention_weights(layer.self_attention)}
        if kind == "decoder":
            parts["cross"] = attention_weights(layer.cross_attention)
        ff = layer.feed_forward
        parts["ff"] = [
            numpy(w)
            for w in (ff.inner_dense.kernel, ff.inner_dense.bias)
            + (ff.output_dense.kernel, ff.output_dense.bias)
        ]
        names = ["self_attention", "cross_attention", "feed_forward"]
        if kind == "encoder":
            names.remove("cross_attention")
        parts["norms"] = [
            (numpy(getattr(layer, f"{n}_norm").gamma), numpy(getattr(layer, f"{n}_norm").beta))
            for n in names
        ]
        return parts

    embedding = numpy(ours.encoder.embedding.token_embedding.embeddings)
    encoder = [ours_layer(layer, "encoder") for layer in ours.encoder.layers_]
    decoder = [ours_layer(layer, "decoder") for layer in ours.decoder.layers_]
    final_norms = [
        (numpy(stack.final_norm.gamma), numpy(stack.final_norm.beta))
        for stack in (ours.encoder, ours.decoder)
        if stack.final_norm is not None
    ]
    heads = ours.num_heads
    d = ours.d_model

    if hub is not None:

        def set_hub_attention(mha, w):
            qk, qb, kk, kb, vk, vb, ok, ob = w
            for dense, kernel, bias in (
                (mha._query_dense, qk, qb),
                (mha._key_dense, kk, kb),
                (mha._value_dense, vk, vb),
            ):
                dense.kernel.assign(kernel.reshape(d, heads, d // heads))
                dense.bias.assign(bias.reshape(heads, d // heads))
            mha._output_dense.kernel.assign(ok.reshape(heads, d // heads, d))
            mha._output_dense.bias.assign(ob)

        def set_norm(norm, values):
            norm.gamma.assign(values[0])
            norm.beta.assign(values[1])

        hub.embedding.embeddings.assign(embedding)
        for layers, parts_list, kind in (
            (hub.encoder_layers, encoder, "encoder"),
            (hub.decoder_layers, decoder, "decoder"),
        ):
            for layer, parts in zip(layers, parts_list):
                set_hub_attention(layer._self_attention_layer, parts["self"])
                norms = [layer._self_attention_layer_norm]
                if kind == "decoder":
                    set_hub_attention(layer._cross_attention_layer, parts["cross"])
                    norms.append(layer._cross_attention_layer_norm)
                norms.append(layer._feedforward_layer_norm)
                w1, b1, w2, b2 = parts["ff"]
                layer._feedforward_intermediate_dense.kernel.assign(w1)
                layer._feedforward_intermediate_dense.bias.assign(b1)
                layer._feedforward_output_dense.kernel.assign(w2)
                layer._feedforward_output_dense.bias.assign(b2)
                for norm, values in zip(norms, parts["norms"]):
                    set_norm(norm, values)
        for norm, values in zip((hub.encoder_norm, hub.decoder_norm), final_norms):
            set_norm(norm, values)

    if torch_model is not None:
        import torch

        def tensor(x: np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(x))

        def set_torch_attention(mha, w):
            qk, qb, kk, kb, vk, vb, ok, ob = w
            mha.in_proj_weight.copy_(tensor(np.concatenate([qk.T, kk.T, vk.T])))
            mha.in_proj_bias.copy_(tensor(np.concatenate([qb, kb, vb])))
            mha.out_proj.weight.copy_(tensor(ok.T))
            mha.out_proj.bias.copy_(tensor(ob))

        with torch.no_grad():
            torch_model.embedding.weight.copy_(tensor(embedding))
            for layers, parts_list, kind in (
                (torch_model.encoder.layers, encoder, "encoder"),
                (torch_model.decoder.layers, decoder, "decoder"),
            ):
                for layer, parts in zip(layers, parts_list):
                    set_torch_attention(layer.self_attn, parts["self"])
                    norms = [layer.norm1, layer.norm2]
                    if kind == "decoder":
                        set_torch_attention(layer.multihead_attn, parts["cross"])
                        norms.append(layer.norm3)
                    w1, b1, w2, b2 = parts["ff"]
                    layer.linear1.weight.copy_(tensor(w1.T))
                    layer.linear1.bias.copy_(tensor(b1))
                    layer.linear2.weight.copy_(tensor(w2.T))
                    layer.linear2.bias.copy_(tensor(b2))
                    for norm, (gamma, beta) in zip(norms, parts["norms"]):
                        norm.weight.copy_(tensor(gamma))
                        norm.bias.copy_(tensor(beta))
            stacks = (torch_model.encoder.norm, torch_model.decoder.norm)
            for norm, (gamma, beta) in zip(stacks, final_norms):
                norm.weight.copy_(tensor(gamma))
                norm.bias.copy_(tensor(beta))


# Training steps and timing.


@dataclasses.dataclass
class Timing:
    """The warm-up and measured steps of one implementation."""

    name: str
    warmup_s: float
    step_s: list[float]
    tokens: list[int]
    flops: list[float]
    losses: list[float]
    other_cores: float = math.nan

    @property
    def total_s(self) -> float:
        return sum(self.step_s)

    @property
    def tokens_per_s(self) -> float:
        return sum(self.tokens) / self.total_s

    @property
    def flops_per_s(self) -> float:
        return sum(self.flops) / self.total_s


def keras_step(model: keras.Model) -> Callable[[Batch], float]:
    def step(batch: Batch) -> float:
        (source, target_in), target_out = batch
        logs = model.train_on_batch((source, target_in), target_out, return_dict=True)
        return float(logs["loss"])

    return step


def torch_step(parts) -> Callable[[Batch], float]:
    import torch

    model, optimizer, schedule, loss_fn = parts
    model.train()

    def step(batch: Batch) -> float:
        (source, target_in), target_out = batch
        source = torch.from_numpy(source)
        target_in = torch.from_numpy(target_in)
        labels = torch.from_numpy(target_out).long()
        optimizer.zero_grad(set_to_none=True)
        logits = model(source, target_in)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        optimizer.step()
        schedule.step()
        with torch.no_grad():  # the token accuracy, as the Keras models' metric computes it
            mask = labels != 0
            correct = ((logits.argmax(-1) == labels) & mask).sum()
            (correct / mask.sum()).item()
        return float(loss.item())

    return step


def run_steps(
    name: str,
    step: Callable[[Batch], float],
    batches: list[Batch],
    warmup: int,
    arch: Arch,
    before_step: Callable[[], None] | None = None,
) -> Timing:
    """Runs `warmup` untimed steps, then one timed step per remaining batch."""
    start = time.perf_counter()
    for batch in batches[:warmup]:
        step(batch)
    warmup_s = time.perf_counter() - start
    timing = Timing(name, warmup_s, [], [], [], [])
    load = OtherLoad()
    load.start()
    for batch in batches[warmup:]:
        if before_step is not None:
            before_step()
        start = time.perf_counter()
        loss = step(batch)
        timing.step_s.append(time.perf_counter() - start)
        timing.tokens.append(real_tokens(batch))
        timing.flops.append(training_flops(arch, batch))
        timing.losses.append(loss)
    timing.other_cores = load.cores()
    return timing


# Memory (run in subprocesses).


def memory_child(args: argparse.Namespace) -> None:
    """Builds ours, trains on the saved batches and prints its peak RSS (or error) as JSON."""
    config = load_config("multi30k_de_en", args.overrides)
    data = np.load(args.memory_child)
    batches = [
        ((data[f"source_{i}"], data[f"target_in_{i}"]), data[f"target_out_{i}"])
        for i in range(int(data["count"]))
    ]
    model = build_ours(config, int(data["vocab"]))
    model.run_eagerly = args.memory_eager
    built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step = keras_step(model)
    try:
        for batch in batches:
            step(batch)
    except Exception as e:  # reported by the parent
        message = " ".join(str(e).replace("\x1b[1m", "").replace("\x1b[0m", "").split())
        print("MEMORY " + json.dumps({"error": f"{type(e).__name__}: {message[:300]}"}))
        return
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("MEMORY " + json.dumps({"built_kib": built, "peak_kib": peak}))


def measure_memory(
    args: argparse.Namespace, batches: list[Batch], vocab: int, eager: bool
) -> dict[str, dict]:
    """{"false"/"true" (model.remat): the child's JSON} from one fresh process per variant."""
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "batches.npz")
        arrays: dict[str, np.ndarray] = {"count": np.array(len(batches)), "vocab": np.array(vocab)}
        for i, ((source, target_in), target_out) in enumerate(batches):
            arrays.update(
                {f"source_{i}": source, f"target_in_{i}": target_in, f"target_out_{i}": target_out}
            )
        np.savez(path, **arrays)
        for remat in ("false", "true"):
            # Linux keeps ru_maxrss across fork + exec, so a child started from this (large)
            # process would report our peak. A shell that forks the child before exiting
            # gives it fresh accounting.
            command = ["/bin/sh", "-c", '"$@"; exit $?', "sh"]
            command += [sys.executable, os.path.abspath(__file__), "--memory-child", path]
            command += ["--memory-eager"] if eager else []
            for override in [*args.overrides, f"model.remat={remat}"]:
                command += ["--set", override]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            lines = [x for x in done.stdout.splitlines() if x.startswith("MEMORY ")]
            if done.returncode or not lines:
                sys.exit(f"The memory subprocess (remat={remat}) failed:\n{done.stderr[-3000:]}")
            results[remat] = json.loads(lines[-1][len("MEMORY ") :])
    return results


def print_memory(memory: dict[str, dict]) -> bool:
    """Prints the memory table; False when a variant failed (its error is printed)."""
    rows, ok = [], True
    for remat in ("false", "true"):
        m = memory[remat]
        if "error" in m:
            print(f"model.remat={remat}: the training step FAILS: {m['error']}")
            ok = False
            continue
        rows.append(
            [
                f"model.remat={remat}",
                f"{m['built_kib'] / 1024:,.0f}",
                f"{m['peak_kib'] / 1024:,.0f}",
                f"{(m['peak_kib'] - m['built_kib']) / 1024:,.0f}",
            ]
        )
    if rows:
        print_table(["variant", "after build MiB", "peak MiB", "training increase MiB"], rows)
    if ok:
        off, on = memory["false"], memory["true"]
        increase_off = off["peak_kib"] - off["built_kib"]
        increase_on = on["peak_kib"] - on["built_kib"]
        print(
            f"remat / no remat: peak {on['peak_kib'] / off['peak_kib']:.2f}x, training increase "
            f"{increase_on / max(increase_off, 1):.2f}x"
        )
    return ok


# Output.


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """Prints `rows` under `headers`: the first column left-aligned, the others right."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        cells = [c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells))


def verdict(value: float, target: float, strict: bool = False) -> str:
    met = value > target if strict else value >= target
    return "met" if met else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="Measured steps per model.")
    parser.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="Untimed warm-up steps; >= 2, since Keras traces again (with relaxed shapes) on the "
        "second batch shape.",
    )
    parser.add_argument(
        "--fixed-steps", type=int, default=5, help="Steps with fixed-length batches (0: skip)."
    )
    parser.add_argument(
        "--memory-steps", type=int, default=2, help="Steps per memory subprocess (0: skip)."
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=os.cpu_count() or 1,
        help="torch.set_num_threads (default: os.cpu_count()).",
    )
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument("--matmul-repeats", type=int, default=5)
    parser.add_argument(
        "--skip-missing",
        action="store_true",
        help="Skip the PyTorch or KerasHub row when that package is missing.",
    )
    parser.add_argument(
        "--multi30k-dir",
        default=os.environ.get(
            "KERAS_TRANSFORMER_MULTI30K_DIR",
            os.path.join(HERE, "..", "..", "shared", "data", "multi30k"),
        ),
    )
    parser.add_argument("--work-dir", default="/tmp/keras_transformer_compare")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    parser.add_argument("--memory-eager", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args)
        return
    if args.steps < 1 or args.warmup < 2:
        sys.exit("train_compare.py: --steps must be >= 1 and --warmup >= 2.")

    torch = import_optional("torch", args.skip_missing)
    keras_hub = import_optional("keras_hub", args.skip_missing)
    config = load_config(
        "multi30k_de_en",
        [
            f"data.local_dir={os.path.abspath(args.multi30k_dir)}",
            f"data.data_dir={os.path.join(args.work_dir, 'tfds')}",
            f"training.run_dir={args.work_dir}",
            *args.overrides,
        ],
    )
    versions = f"TensorFlow {tf.__version__}, Keras {keras.__version__}"
    if keras_hub is not None:
        versions += f", KerasHub {keras_hub.__version__}"
    if torch is not None:
        versions += f", PyTorch {torch.__version__} ({args.torch_threads} threads)"
    print(
        f"{versions}; {os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}), "
        f"GPUs: {len(tf.config.list_physical_devices('GPU'))}"
    )

    start = time.perf_counter()
    batches, vocab = load_batches(config, args.work_dir, args.warmup + args.steps)
    arch = Arch.from_config(config, vocab)
    d = config.data
    print(
        f"model: {arch.encoder_layers}+{arch.decoder_layers} layers, d_model {arch.d_model}, "
        f"d_ff {arch.d_ff}, {arch.num_heads} heads, dropout {arch.dropout} (attention "
        f"{arch.attention_dropout}), {'pre' if arch.norm_first else 'post'}-norm, shared vocab "
        f"{vocab}; batches of {batching(d)}, length-bucketed; {len(batches)} batches "
        f"({args.warmup} warm-up + {args.steps} measured) loaded in "
        f"{time.perf_counter() - start:.1f}s"
    )
    measured = batches[args.warmup :]
    shapes = [(b[0][0].shape[1], b[0][1].shape[1]) for b in measured]
    print(
        f"measured batches: S {min(s for s, _ in shapes)}-{max(s for s, _ in shapes)}, "
        f"T {min(t for _, t in shapes)}-{max(t for _, t in shapes)}, "
        f"{statistics.mean(real_tokens(b) for b in measured):.0f} real target tokens/batch"
    )

    # Models, parameter counts and the equivalence check.
    ours = build_ours(config, vocab)
    hub = build_hub(arch, config, bool(ours.jit_compile)) if keras_hub is not None else None
    torch_parts = build_torch(arch, config, args.torch_threads) if torch is not None else None
    torch_model = torch_parts[0] if torch_parts is not None else None
    params = {"ours": ours.count_params()}
    if hub is not None:
        params["KerasHub"] = hub.count_params()
    if torch_model is not None:
        params["PyTorch"] = sum(p.numel() for p in torch_model.parameters())
    same = ""
    if len(params) > 1:
        same = " (identical)" if len(set(params.values())) == 1 else " (DIFFERENT)"
    print("parameters: " + ", ".join(f"{k} {v:,}" for k, v in params.items()) + same)
    copy_weights_from_ours(ours, hub, torch_model)
    (source, target_in), target_out = batches[0]
    real = target_out != 0
    reference = keras.ops.convert_to_numpy(ours((source, target_in), training=False))[real]
    checks = []
    if hub is not None:
        logits = keras.ops.convert_to_numpy(hub((source, target_in), training=False))[real]
        checks.append(("KerasHub", np.abs(logits - reference).max()))
    if torch_model is not None:
        torch_model.eval()
        logits = torch_model(torch.from_numpy(source), torch.from_numpy(target_in))
        checks.append(("PyTorch", np.abs(logits.detach().numpy()[real] - reference).max()))
    if checks:
        scale = np.abs(reference).max()
        print(
            "same function: with ours' weights and dropout off, max |logits - ours| on batch 1 "
            "(real tokens): "
            + ", ".join(f"{name} {diff:.1e}" for name, diff in checks)
            + f" (max |logit| {scale:.1f})"
            + ("" if all(diff < 1e-3 * max(scale, 1.0) for _, diff in checks) else " MISMATCH")
        )
    if hub is not None or torch_model is not None:
        print(
            "differences: all three train from ours' initial weights (copied). KerasHub's "
            "feed-forward has no dropout between its two Dense layers (ours and PyTorch have one); "
            "KerasHub ties attention-weight dropout to `dropout`, so its attention layers get "
            f"model.attention_dropout={arch.attention_dropout} (private `_dropout`, set before "
            "tracing)."
        )

    t = config.training
    if torch_model is not None and (t.clipnorm or t.global_clipnorm):
        print("note: training.clipnorm / global_clipnorm are not applied in the PyTorch row.")

    # Matmul throughput.
    load = OtherLoad()
    load.start()
    peak = {"tf": matmul_gflops("tf", args.matmul_size, args.matmul_repeats)}
    if torch is not None:
        peak["torch"] = matmul_gflops("torch", args.matmul_size, args.matmul_repeats)
    print(
        f"fp32 matmul {args.matmul_size}^2 (best of {args.matmul_repeats}): "
        + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in peak.items())
        + f" (other processes: {load.cores():.1f} cores busy)"
    )

    # Training.
    timings = [run_steps("ours", keras_step(ours), batches, args.warmup, arch, ours.reset_metrics)]
    if hub is not None:
        timings.append(
            run_steps("KerasHub", keras_step(hub), batches, args.warmup, arch, hub.reset_metrics)
        )
    if torch_parts is not None:
        timings.append(run_steps("PyTorch", torch_step(torch_parts), batches, args.warmup, arch))
    print(
        f"\ntraining, {args.steps} measured steps on identical batches "
        f"(after {args.warmup} warm-up steps):"
    )
    rows = []
    for timing in timings:
        matmul = peak["torch" if timing.name == "PyTorch" else "tf"]
        rows.append(
            [
                timing.name,
                f"{params[timing.name]:,}",
                f"{timing.warmup_s:.1f}",
                f"{1000 * timing.total_s / len(timing.step_s):.0f}",
                f"{1000 * statistics.median(timing.step_s):.0f}",
                f"{timing.tokens_per_s:,.0f}",
                f"{statistics.mean(timing.flops) / 1e9:.1f}",
                f"{timing.flops_per_s / 1e9:.1f}",
                f"{100 * timing.flops_per_s / 1e9 / matmul:.0f}%",
                f"{timing.losses[0]:.3f} -> {timing.losses[-1]:.3f}",
                f"{timing.other_cores:.1f}",
            ]
        )
    print_table(
        [
            "model",
            "params",
            "warm-up s",
            "ms/step",
            "median",
            "tgt tok/s",
            "GFLOP/step",
            "GFLOP/s",
            "MFU",
            "loss first -> last",
            "others",
        ],
        rows,
    )
    print(
        "(median: ms/step; tgt tok/s: real target tokens; MFU: GFLOP/s over the matmul "
        "GFLOP/s above; others: cores other processes kept busy meanwhile)"
    )
    busiest = max(t.other_cores for t in timings)
    if busiest > 0.25:
        print(
            f"WARNING: other processes kept up to {busiest:.1f} of {os.cpu_count()} cores busy "
            "while measuring: the times are contended and the ratios unreliable; PyTorch with "
            f"{args.torch_threads} OpenMP threads slows down sharply when a core is taken "
            "(compare --torch-threads 1)."
        )
    by_name = {t.name: t for t in timings}
    for other, target, strict in (("PyTorch", 1.3, False), ("KerasHub", 1.0, True)):
        if other not in by_name:
            continue
        ratio = by_name["ours"].tokens_per_s / by_name[other].tokens_per_s
        step_ratio = by_name["ours"].total_s / by_name[other].total_s
        print(
            f"ours / {other}: {ratio:.2f}x tokens/s, {step_ratio:.2f}x time "
            f"(target: {'>' if strict else '>='} {target}x tokens/s: "
            f"{verdict(ratio, target, strict)})"
        )
    for timing in timings:
        matmul = peak["torch" if timing.name == "PyTorch" else "tf"]
        mfu = timing.flops_per_s / 1e9 / matmul
        print(f"MFU {timing.name}: {100 * mfu:.0f}% (target >= 50%: {verdict(mfu, 0.5)})")

    # Bucketed versus fixed-length batches.
    if args.fixed_steps:
        count = min(args.fixed_steps, args.steps)
        subset = measured[:count]
        fixed = [pad_batch(b, d.max_source_length, d.max_target_length) for b in subset]
        fixed_timing = run_steps(
            "fixed", keras_step(ours), [fixed[0], *fixed], 1, arch, ours.reset_metrics
        )
        bucketed_s = sum(by_name["ours"].step_s[:count])
        tokens = sum(real_tokens(b) for b in subset)

        def padding(batch_list: list[Batch]) -> str:
            real_count = sum(int(np.count_nonzero(b[0][0])) + real_tokens(b) for b in batch_list)
            slots = sum(b[0][0].size + b[1].size for b in batch_list)
            return f"{100 * real_count / slots:.0f}%"

        print(f"\nbucketed vs fixed-length batches (ours, the first {count} measured batches):")
        print_table(
            ["batches", "S x T", "real tokens", "ms/step", "tgt tok/s", "others"],
            [
                [
                    "bucketed (data pipeline)",
                    f"{statistics.mean(s for s, _ in shapes[:count]):.0f} x "
                    f"{statistics.mean(t for _, t in shapes[:count]):.0f} (mean)",
                    padding(subset),
                    f"{1000 * bucketed_s / count:.0f}",
                    f"{tokens / bucketed_s:,.0f}",
                    f"{by_name['ours'].other_cores:.1f}",
                ],
                [
                    "fixed length",
                    f"{d.max_source_length} x {d.max_target_length}",
                    padding(fixed),
                    f"{1000 * fixed_timing.total_s / count:.0f}",
                    f"{fixed_timing.tokens_per_s:,.0f}",
                    f"{fixed_timing.other_cores:.1f}",
                ],
            ],
        )
        print(
            f"bucketing: {fixed_timing.total_s / bucketed_s:.2f}x the tokens/s of fixed-length "
            f"batches (fixed-length warm-up step {fixed_timing.warmup_s:.1f}s)"
        )

    # Memory with and without remat.
    if args.memory_steps:
        memory_batches = [
            pad_batch(b, d.max_source_length, d.max_target_length)
            for b in measured[: args.memory_steps]
        ]
        print(
            f"\npeak RSS of ours, fresh process each, {args.memory_steps} training steps "
            f"(train_on_batch) on the measured batches of {batching(d)} padded to "
            f"{d.max_source_length} x {d.max_target_length}:"
        )
        if not print_memory(measure_memory(args, memory_batches, vocab, eager=False)):
            print("the same in eager mode (run_eagerly=True), where remat runs:")
            print_memory(measure_memory(args, memory_batches, vocab, eager=True))


if __name__ == "__main__":
    main()
