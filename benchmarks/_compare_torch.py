"""The PyTorch side of `train_compare.py`, written as a PyTorch expert would for speed: one
fused QKV projection per self-attention, `scaled_dot_product_attention` (its fused CPU
kernel; `is_causal=True` in the decoder's self-attention, a boolean key-padding mask in the
encoder and cross-attention), `torch.compile`, fused Adam, and the accuracy counted inside
the step, so the loss is the step's only host read. This module never imports TensorFlow.

With right-padded targets, causal attention alone gives every real query only real keys
(the padding comes after it), so the decoder's self-attention needs no padding mask, as in
ours, which applies only the look-ahead mask there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from _compare_models import Arch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    """Multi-head attention on `scaled_dot_product_attention`."""

    def __init__(self, arch: Arch, cross: bool):
        super().__init__()
        d = arch.d_model
        self.heads, self.cross, self.dropout = arch.num_heads, cross, arch.attention_dropout
        if cross:
            self.q = nn.Linear(d, d)
            self.kv = nn.Linear(d, 2 * d)
        else:
            self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x, memory=None, key_mask=None, causal: bool = False):
        b, t, d = x.shape
        if self.cross:
            q = self.q(x)
            k, v = self.kv(memory).chunk(2, dim=-1)
        else:
            q, k, v = self.qkv(x).chunk(3, dim=-1)

        def heads(y):  # (B, L, D) -> (B, H, L, D/H)
            return y.view(b, -1, self.heads, d // self.heads).transpose(1, 2)

        y = F.scaled_dot_product_attention(
            heads(q),
            heads(k),
            heads(v),
            attn_mask=key_mask,  # (B, 1, 1, S) bool, True = attend, or None
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=causal,
        )  # (B, H, T, D/H)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class Layer(nn.Module):
    """An encoder (`cross=False`) or decoder layer, post- or pre-norm as `arch` says."""

    def __init__(self, arch: Arch, decoder: bool):
        super().__init__()
        d = arch.d_model
        self.norm_first, self.decoder = arch.norm_first, decoder
        self.self_attention = Attention(arch, cross=False)
        self.cross_attention = Attention(arch, cross=True) if decoder else None
        self.ff1, self.ff2 = nn.Linear(d, arch.d_ff), nn.Linear(arch.d_ff, d)
        self.norms = nn.ModuleList(
            nn.LayerNorm(d, eps=arch.epsilon) for _ in range(3 if decoder else 2)
        )
        self.dropout = nn.Dropout(arch.dropout)
        self.ffn_dropout = nn.Dropout(arch.ffn_rate)
        self.activation = {"relu": F.relu, "gelu": F.gelu}[arch.activation]

    def _feed_forward(self, x):
        return self.ff2(self.ffn_dropout(self.activation(self.ff1(x))))

    def forward(self, x, memory, source_mask):
        # The encoder's self-attention masks the source padding; the decoder's is causal.
        self_mask = None if self.decoder else source_mask
        blocks = [lambda y: self.self_attention(y, key_mask=self_mask, causal=self.decoder)]
        if self.decoder:
            blocks.append(lambda y: self.cross_attention(y, memory, key_mask=source_mask))
        blocks.append(self._feed_forward)
        for block, norm in zip(blocks, self.norms):
            if self.norm_first:
                x = x + self.dropout(block(norm(x)))
            else:
                x = norm(x + self.dropout(block(x)))
        return x


class TorchTransformer(nn.Module):
    """The `multi30k_de_en` architecture: shared embedding (x sqrt(d)) + sinusoidal table,
    the encoder and decoder stacks (final LayerNorms with pre-norm only, as ours), and the
    tied output projection."""

    def __init__(self, arch: Arch, positions: np.ndarray):
        super().__init__()
        d = arch.d_model
        self.embedding = nn.Embedding(arch.vocab, d)
        nn.init.normal_(self.embedding.weight, std=d**-0.5)
        # (max_length, D): ours' sinusoidal table, saved by the parent process.
        self.register_buffer("positions", torch.from_numpy(positions), persistent=False)
        self.dropout = nn.Dropout(arch.dropout)
        self.encoder = nn.ModuleList(Layer(arch, False) for _ in range(arch.encoder_layers))
        self.decoder = nn.ModuleList(Layer(arch, True) for _ in range(arch.decoder_layers))
        self.final_norms = nn.ModuleList(
            nn.LayerNorm(d, eps=arch.epsilon) for _ in range(2 if arch.norm_first else 0)
        )
        self.scale = math.sqrt(d)

    def embed(self, ids):
        return self.dropout(self.embedding(ids) * self.scale + self.positions[: ids.shape[1]])

    def forward(self, source, target):
        source_mask = (source != 0)[:, None, None, :]  # (B, 1, 1, S)
        x = self.embed(source)  # (B, S, D)
        for layer in self.encoder:
            x = layer(x, None, source_mask)
        if self.final_norms:
            x = self.final_norms[0](x)
        y = self.embed(target)  # (B, T, D)
        for layer in self.decoder:
            y = layer(y, x, source_mask)
        if self.final_norms:
            y = self.final_norms[1](y)
        return F.linear(y, self.embedding.weight)  # (B, T, V)


def load_ours_weights(model: TorchTransformer, parts: dict[str, Any]) -> None:
    """Sets the weights of ours (`_compare_weights.ours_parts`, as numpy) on `model`."""

    def tensor(x: np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x))

    def set_linear(linear: nn.Linear, kernels, biases):
        linear.weight.copy_(tensor(np.concatenate([k.T for k in kernels])))
        linear.bias.copy_(tensor(np.concatenate(biases)))

    def set_attention(attention: Attention, w):
        qk, qb, kk, kb, vk, vb, ok, ob = w
        if attention.cross:
            set_linear(attention.q, [qk], [qb])
            set_linear(attention.kv, [kk, vk], [kb, vb])
        else:
            set_linear(attention.qkv, [qk, kk, vk], [qb, kb, vb])
        set_linear(attention.out, [ok], [ob])

    with torch.no_grad():
        model.embedding.weight.copy_(tensor(parts["embedding"]))
        for layers, stack in ((model.encoder, parts["encoder"]), (model.decoder, parts["decoder"])):
            for layer, p in zip(layers, stack):
                set_attention(layer.self_attention, p["self"])
                if layer.cross_attention is not None:
                    set_attention(layer.cross_attention, p["cross"])
                w1, b1, w2, b2 = p["ff"]
                set_linear(layer.ff1, [w1], [b1])
                set_linear(layer.ff2, [w2], [b2])
                for norm, (gamma, beta) in zip(layer.norms, p["norms"]):
                    norm.weight.copy_(tensor(gamma))
                    norm.bias.copy_(tensor(beta))
        for norm, (gamma, beta) in zip(model.final_norms, parts["final_norms"]):
            norm.weight.copy_(tensor(gamma))
            norm.bias.copy_(tensor(beta))


def build_torch_step(
    arch: Arch,
    training: Any,
    parts: dict[str, Any],
    positions: np.ndarray,
    mode: str,
    bf16: bool,
    threads: int,
    dynamic: bool | None,
):
    """(step(batch) -> loss, logits(batch)) for `mode` "eager" or "compiled".

    `training` is the config's training section (seed, label smoothing, Adam, schedule).
    "compiled" is `torch.compile(dynamic=dynamic)` of the forward and loss (AOTAutograd
    compiles the backward too). Bucketed batches come in tens of (B, S, T) shapes:
    `dynamic=None` (PyTorch's default) compiles the first shape statically, then once more
    with symbolic sizes; `False` compiles every shape apart (specialised kernels, more
    compile time: the recompile limit is raised so that none falls back to eager); `True`
    is symbolic from the start. `train_compare.py --torch-dynamic` chooses.
    """
    torch.set_num_threads(threads)
    torch.manual_seed(training.seed)
    if dynamic is False:
        config = torch._dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(config, name):
                setattr(config, name, 256)
    model = TorchTransformer(arch, positions)
    load_ours_weights(model, parts)
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=1.0,
        betas=(training.beta_1, training.beta_2),
        eps=training.epsilon,
        fused=True,
    )
    scale = training.learning_rate_scale * arch.d_model**-0.5
    warmup = training.warmup_steps
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: scale * min((step + 1) ** -0.5, (step + 1) * warmup**-1.5)
    )
    smoothing = training.label_smoothing

    def loss_and_correct(source, target_in, labels):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(source, target_in)
        logits = logits.float().reshape(-1, logits.shape[-1])
        labels = labels.reshape(-1)
        loss = F.cross_entropy(logits, labels, label_smoothing=smoothing, ignore_index=0)
        correct = ((logits.argmax(-1) == labels) & (labels != 0)).sum()
        return loss, correct

    forward = loss_and_correct
    if mode == "compiled":
        forward = torch.compile(loss_and_correct, dynamic=dynamic)
    elif mode != "eager":
        raise ValueError(f"Unknown PyTorch mode {mode!r}; expected 'eager' or 'compiled'.")
    model.train()
    counts = {"correct": torch.zeros((), dtype=torch.long)}

    def step(batch) -> float:
        (source, target_in), target_out = batch
        optimizer.zero_grad(set_to_none=True)
        loss, correct = forward(
            torch.from_numpy(source),
            torch.from_numpy(target_in),
            torch.from_numpy(target_out).long(),
        )
        loss.backward()
        optimizer.step()
        schedule.step()
        counts["correct"] += correct.detach()  # the accuracy metric's count, not read back
        return float(loss.item())

    def logits(batch) -> np.ndarray:
        """Eval-mode float32 logits of `batch` (the equivalence check)."""
        (source, target_in), _ = batch
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(torch.from_numpy(source), torch.from_numpy(target_in)).float().numpy()
        model.train()
        return out

    return step, logits
