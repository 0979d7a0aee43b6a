"""The preparing process of `train_compare.py` (`--prepare FOLDER`): the package's batches,
the fixed-sentence batches of the same sentences, ours' initial weights and its logits on
batch 1, written to FOLDER for the workers (`_compare_spec.Prepared`)."""

from __future__ import annotations

import argparse
import os
import pickle
import statistics

import keras
import numpy as np
from _compare_data import batching, fixed_sentence_batches, load_batches, save_batches
from _compare_models import build_ours
from _compare_spec import Arch, Prepared, Training
from _compare_weights import ours_parts

from keras_transformer.config import load_config
from keras_transformer.layers.positional_encoding import sinusoidal_table


def _padding(batches) -> str:
    """Real tokens over padded slots, source and target together."""
    real = sum(int(np.count_nonzero(b[0][0])) + int(np.count_nonzero(b[1])) for b in batches)
    slots = sum(b[0][0].size + b[1].size for b in batches)
    return f"{100 * real / slots:.0f}% real"


def prepare(args: argparse.Namespace) -> None:
    folder = args.prepare
    overrides = [
        f"translation.local_dir={os.path.abspath(args.multi30k_dir)}",
        f"data.data_dir={os.path.join(args.work_dir, 'tfds')}",
        f"training.run_dir={args.work_dir}",
        # The weights and reference logits in float32 (each side's precision is its own).
        "training.dtype_policy=float32",
        *args.overrides,
    ]
    config = load_config("multi30k_de_en", overrides)
    batches, vocab = load_batches(config, args.work_dir, args.warmup + args.steps)
    measured = batches[args.warmup :]
    fixed = fixed_sentence_batches(measured, config.training.seed)
    arch = Arch.from_config(config, vocab)

    ours = build_ours(config, vocab)
    (source, target_in), _ = batches[0]
    reference = keras.ops.convert_to_numpy(ours((source, target_in), training=False))
    weights = {
        "ours": ours.get_weights(),
        "parts": ours_parts(ours),
        "positions": sinusoidal_table(arch.max_length, arch.d_model),
    }
    with open(os.path.join(folder, "weights.pkl"), "wb") as f:
        pickle.dump(weights, f)
    save_batches(
        os.path.join(folder, "batches.npz"),
        {"b": batches, "f": fixed},
        reference_logits=reference,
    )

    shapes = [(b[0][0].shape[1], b[0][1].shape[1]) for b in measured]
    fixed_shapes = [(b[0][0].shape[1], b[0][1].shape[1]) for b in fixed]
    sentences = statistics.mean(b[1].shape[0] for b in measured)
    description = [
        f"model: {arch.encoder_layers}+{arch.decoder_layers} layers, d_model {arch.d_model}, "
        f"d_ff {arch.d_ff}, {arch.num_heads} heads, dropout {arch.dropout} (attention "
        f"{arch.attention_dropout}, feed-forward inner {arch.ffn_rate}), "
        f"{'pre' if arch.norm_first else 'post'}-norm, shared vocab {vocab}, "
        f"{ours.count_params():,} parameters",
        f"batches: {batching(config.data)}, length-bucketed; {args.warmup} warm-up + "
        f"{args.steps} measured, S {min(s for s, _ in shapes)}-{max(s for s, _ in shapes)}, "
        f"T {min(t for _, t in shapes)}-{max(t for _, t in shapes)}, "
        f"{statistics.mean(int(np.count_nonzero(b[1])) for b in measured):.0f} real target "
        f"tokens and {sentences:.0f} sentences per batch, {_padding(measured)}",
        f"fixed-sentence batches: the measured sentences shuffled into {len(fixed)} batches of "
        f"~{sentences:.0f}, each padded to its longest: S up to "
        f"{max(s for s, _ in fixed_shapes)}, T up to {max(t for _, t in fixed_shapes)}, "
        f"{_padding(fixed)}",
    ]
    Prepared(
        folder=folder,
        arch=arch,
        training=Training.from_config(config),
        overrides=overrides,
        warmup=args.warmup,
        steps=args.steps,
        fixed=len(fixed),
        description=description,
    ).save()
