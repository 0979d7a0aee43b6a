"""Repeated n-gram blocking (`no_repeat_ngram_size`) in greedy search, beam search and
sampling, for the translation model and the decoder-only model, against a naive loop."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from multi30k_files import read_lines

from keras_transformer import Transformer, TransformerDecoderModel
from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.decoding import BatchDecoder
from keras_transformer.decoding.ngrams import ban_repeated_ngrams
from keras_transformer.export import export_predictor
from keras_transformer.predictors import Translator
from keras_transformer.serving.ops import graph_ops, load_allowed_ops
from keras_transformer.tokenization import train_sentencepiece

V = 24  # a small vocabulary: a random model repeats itself within a few tokens
STEPS = 14


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(11)
    model = Transformer.from_preset("tiny", V, V)
    model((np.ones((1, 3), "int32"), np.ones((1, 2), "int32")))
    return model


@pytest.fixture(scope="module")
def lm():
    keras.utils.set_random_seed(5)
    model = TransformerDecoderModel.from_preset("tiny", vocabulary_size=V)
    model.build((None, None))
    return model


def sources(batch_size=6, length=7, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(4, V, size=(batch_size, length)).astype("int32")


def banned_after(sequence, size):
    """The tokens that would repeat an n-gram of `sequence` (a list), by brute force."""
    if size <= 0 or len(sequence) < size:
        return set()
    tail = sequence[len(sequence) - size + 1 :]
    return {
        sequence[j + size - 1]
        for j in range(len(sequence) - size + 1)
        if sequence[j : j + size - 1] == tail
    }


def repeats(tokens, size):
    """Whether a row of output tokens (EOS and padding cut) holds an n-gram twice."""
    tokens = list(tokens)
    if EOS_ID in tokens:
        tokens = tokens[: tokens.index(EOS_ID)]
    tokens = [t for t in tokens if t != PAD_ID]
    ngrams = [tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)]
    return len(ngrams) != len(set(ngrams))


def naive_greedy(model, source, steps, size):
    """Greedy search re-running the whole model at each step, banning by brute force."""
    outputs = []
    for row in source:
        sequence = [BOS_ID]
        for _ in range(steps):
            logits = np.array(model((row[None], np.array([sequence], "int32"))))[0, -1]
            logits[[PAD_ID, BOS_ID]] = -np.inf
            logits[list(banned_after(sequence, size))] = -np.inf
            sequence.append(int(logits.argmax()))
            if sequence[-1] == EOS_ID:
                break
        outputs.append(sequence[1:] + [PAD_ID] * (steps + 1 - len(sequence)))
    return np.array(outputs, "int32")


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_ban_matches_brute_force(size):
    rng = np.random.default_rng(size)
    sequences = rng.integers(2, 6, size=(8, 12)).astype("int32")  # 4 tokens: many repeats
    sequences[:, 0] = BOS_ID
    log_probs = tf.zeros([8, 6])
    for step in range(12):
        out = ban_repeated_ngrams(log_probs, tf.constant(sequences), step, size).numpy()
        for r in range(8):
            expected = banned_after(sequences[r, : step + 1].tolist(), size)
            assert set(np.flatnonzero(np.isinf(out[r]))) == expected, (size, step, r)


def test_ban_never_leaves_a_hypothesis_without_a_token():
    sequences = tf.constant([[BOS_ID, 7, 8, 7, 0]])
    log_probs = tf.constant([[-np.inf] * 8 + [0.0] + [-np.inf]])  # only 8 allowed ...
    out = ban_repeated_ngrams(log_probs, sequences, 3, 2)  # ... and "7 8" would repeat
    np.testing.assert_array_equal(out, log_probs)


@pytest.mark.parametrize("size", [2, 3])
def test_greedy_equals_the_naive_loop(model, size):
    source = sources()
    plain = BatchDecoder(model, method="greedy", max_length=STEPS, jit_compile=False)
    # The random model repeats n-grams unless told not to: the test is not vacuous.
    assert any(repeats(row, size) for row in plain(source).tokens[:, 0])
    blocked = BatchDecoder(
        model, method="greedy", max_length=STEPS, no_repeat_ngram_size=size, jit_compile=False
    )
    tokens = blocked(source).tokens[:, 0]
    assert not any(repeats(row, size) for row in tokens)
    expected = naive_greedy(model, source, STEPS, size)
    np.testing.assert_array_equal(tokens[:, : expected.shape[1]], expected)


def test_beam_and_sampling_never_repeat_and_score_the_model(model):
    source = sources(seed=1)
    for method in ("beam", "sample"):
        decoder = BatchDecoder(
            model,
            method=method,
            beam_size=3,
            length_penalty=0.0,
            max_length=STEPS,
            no_repeat_ngram_size=2,
            jit_compile=False,
        )
        output = decoder(source)
        for k in range(output.tokens.shape[1]):
            tokens = output.tokens[:, k]
            assert not any(repeats(row, 2) for row in tokens), method
            # The scores stay the model's log-probabilities of the tokens emitted.
            inputs = np.concatenate([np.full((len(tokens), 1), BOS_ID), tokens[:, :-1]], 1)
            log_probs = tf.nn.log_softmax(model((source, inputs.astype("int32"))), -1)
            picked = np.take_along_axis(np.asarray(log_probs), tokens[..., None], -1)[..., 0]
            expected = (picked * (tokens != PAD_ID)).sum(1)
            np.testing.assert_allclose(output.scores[:, k], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_xla_equals_plain_tf_function(model, method):
    source = sources(seed=2)
    common = {"method": method, "beam_size": 3, "max_length": STEPS, "no_repeat_ngram_size": 2}
    plain = BatchDecoder(model, jit_compile=False, **common)(source)
    xla = BatchDecoder(model, jit_compile=True, **common)(source)
    np.testing.assert_array_equal(xla.tokens, plain.tokens)


def test_language_model_reads_a_repeating_prompt_then_does_not_repeat(lm):
    prompt = np.array([[5, 6, 5, 6, 5, 6], [7, 7, 7, 0, 0, 0]], "int32")  # bigrams repeat
    decoder = BatchDecoder(
        lm, method="greedy", max_length_b=8, no_repeat_ngram_size=2, jit_compile=False
    )
    tokens = decoder(prompt).tokens[:, 0]
    for row, ids in zip(tokens, prompt):
        n = int((ids != PAD_ID).sum())
        np.testing.assert_array_equal(row[:n], ids[:n])  # the prompt, as it was
        continuation = [t for t in row[n:] if t not in (PAD_ID, EOS_ID)]
        whole = ids[:n].tolist() + continuation
        # No bigram of the continuation repeats one of the prompt or of itself.
        seen = {tuple(ids[i : i + 2]) for i in range(n - 1)}
        for i in range(n - 1, len(whole) - 1):
            assert tuple(whole[i : i + 2]) not in seen, (row, i)
            seen.add(tuple(whole[i : i + 2]))


@pytest.mark.parametrize("size", [-1, 1.5, True])
def test_invalid_size(model, size):
    with pytest.raises(ValueError, match="expected a non-negative integer. Received: no_repeat"):
        BatchDecoder(model, no_repeat_ngram_size=size)


def test_export_bakes_the_ban_in_with_ops_tf_serving_ships(multi30k_dir, tmp_path):
    """The SavedModel translates as the translator does, records the setting, and its graph
    holds only ops of TF Serving's allow-list."""
    lines = read_lines("train.de.gz", 1500, multi30k_dir)
    tokenizer = train_sentencepiece(lines, vocab_size=400, seed=0)
    keras.utils.set_random_seed(2)
    model = Transformer.from_preset(
        "tiny", tokenizer.vocab_size, tokenizer.vocab_size, max_length=32
    )
    model.build(((None, None), (None, None)))
    common = {"beam_size": 2, "max_length": 16, "jit_compile": False}
    plain = Translator(model, tokenizer, tokenizer, **common)
    blocked = Translator(model, tokenizer, tokenizer, no_repeat_ngram_size=2, **common)
    sentences = tf.constant(lines[:4])
    expected = [t.decode() for t in blocked.translate_strings(sentences)[0].numpy()]
    assert expected != [t.decode() for t in plain.translate_strings(sentences)[0].numpy()]
    path = export_predictor(blocked, str(tmp_path))
    with open(os.path.join(path, "assets.extra", "export_info.json")) as f:
        assert json.load(f)["decoding"]["no_repeat_ngram_size"] == 2
    assert graph_ops(path) <= load_allowed_ops()
    served = tf.saved_model.load(path).signatures["serving_default"](sentences=sentences)
    assert [t.decode() for t in served["translations"].numpy()] == expected
