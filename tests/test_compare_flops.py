"""`benchmarks/_compare_timing.training_flops`: the model FLOPs of the real tokens, and the
hardware FLOPs of what a side computes (padded, or the real positions where it skips
padding)."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks"))

from _compare_spec import Arch  # noqa: E402
from _compare_timing import training_flops  # noqa: E402

ARCH = Arch(
    vocab=100,
    d_model=8,
    num_heads=2,
    d_ff=16,
    encoder_layers=2,
    decoder_layers=3,
    dropout=0.0,
    attention_dropout=0.0,
    ffn_dropout=None,
    activation="relu",
    norm_first=False,
    epsilon=1e-6,
    max_length=16,
)


def _batch(source_lengths, target_lengths, s, t):
    source = np.zeros((len(source_lengths), s), "int32")
    target = np.zeros((len(target_lengths), t), "int32")
    for row, (ls, lt) in enumerate(zip(source_lengths, target_lengths)):
        source[row, :ls], target[row, :lt] = 5, 6
    return (source, target), target


def test_without_padding_every_count_is_the_same():
    batch = _batch([4, 4], [3, 3], 4, 3)
    real, padded = training_flops(ARCH, batch)
    assert real == padded == training_flops(ARCH, batch, skips_padding=True)[1]


def test_skipping_padding_leaves_only_attention_and_cross_keys_padded():
    d = ARCH.d_model
    batch = _batch([2, 4], [1, 3], 4, 3)  # 2 + 0 source and 2 + 0 target pad positions
    real, padded = training_flops(ARCH, batch)
    _, skipping = training_flops(ARCH, batch, skips_padding=True)
    assert real < skipping < padded
    # What stays padded: QK^T and AV of every layer, and the cross-attention's K/V
    # projections of the encoder output (4 B S D^2 a decoder layer), forward and backward.
    b, s, t = 2, 4, 3
    attention_padded = ARCH.encoder_layers * 4 * b * s * s * d + ARCH.decoder_layers * (
        4 * b * t * t * d + 4 * b * t * s * d + 4 * b * s * d * d
    )
    sentences = [(2, 1), (4, 3)]
    attention_real = sum(
        ARCH.encoder_layers * 4 * ls * ls * d
        + ARCH.decoder_layers * (4 * lt * lt * d + 4 * lt * ls * d + 4 * ls * d * d)
        for ls, lt in sentences
    )
    assert skipping - real == 3 * (attention_padded - attention_real)
