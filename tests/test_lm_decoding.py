"""`keras_transformer.decoding` on the decoder-only language model: the prompt is the
source; cached greedy, beam and sampling against a naive loop, with and without XLA."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerDecoderModel
from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.decoding import BatchDecoder, greedy_search

V = 40
NEW = 7  # new tokens per prompt


@pytest.fixture(scope="module")
def lm():
    keras.utils.set_random_seed(3)
    model = TransformerDecoderModel.from_preset("tiny", vocabulary_size=V)
    model.build((None, None))
    return model


def prompts(seed=0, batch_size=4, width=6):
    """Right-padded prompts of lengths width, ..., 0 (one empty prompt)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, V, size=(batch_size, width)).astype("int32")
    for i, length in enumerate(np.linspace(width, 0, batch_size).astype(int)):
        ids[i, length:] = PAD_ID
    return ids


def real(prompt):
    return [int(t) for t in prompt if t != PAD_ID]


def naive_greedy(model, prompt_ids, new_tokens):
    """Each continuation by re-running the whole model on BOS + prompt + generated."""
    continuations = []
    for prompt in prompt_ids:
        sequence, generated = [BOS_ID, *real(prompt)], []
        for _ in range(new_tokens):
            logits = np.array(model(np.array([sequence], "int32")))[0, -1]
            logits[[PAD_ID, BOS_ID]] = -np.inf
            token = int(logits.argmax())
            generated.append(token)
            sequence.append(token)
            if token == EOS_ID:
                break
        continuations.append(generated + [PAD_ID] * (new_tokens - len(generated)))
    return np.array(continuations, "int32")


def continuations(tokens, prompt_ids, new_tokens):
    """(B, K, T) search outputs -> (B, K, new_tokens): the tokens after each prompt."""
    lengths = (prompt_ids != PAD_ID).sum(1)
    padded = np.pad(tokens, ((0, 0), (0, 0), (0, new_tokens)))
    return np.stack([padded[i, :, n : n + new_tokens] for i, n in enumerate(lengths)])


def continuation_log_probs(model, prompt, continuation):
    """Teacher-forced log-probability of a continuation (up to EOS) after a prompt."""
    tokens = [t for t in continuation if t != PAD_ID]
    sequence = [BOS_ID, *real(prompt), *tokens]
    log_probs = np.asarray(tf.nn.log_softmax(model(np.array([sequence[:-1]], "int32"))))[0]
    start = len(real(prompt))
    return sum(log_probs[start + i, t] for i, t in enumerate(tokens))


@pytest.fixture(scope="module")
def naive(lm):
    """Prompts and their naive greedy continuations."""
    prompt_ids = prompts(seed=1)
    return prompt_ids, naive_greedy(lm, prompt_ids, NEW)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_cached_greedy_equals_naive_loop(lm, naive, jit_compile):
    prompt_ids, expected = naive
    decoder = BatchDecoder(
        lm, method="greedy", max_length_a=1.0, max_length_b=NEW, jit_compile=jit_compile
    )
    output = decoder(prompt_ids)
    assert decoder.uses_xla is jit_compile
    for i, prompt in enumerate(prompt_ids):  # every output starts with its prompt
        assert output.tokens[i, 0, : len(real(prompt))].tolist() == real(prompt)
    np.testing.assert_array_equal(continuations(output.tokens, prompt_ids, NEW)[:, 0], expected)
    # The length limit min(max_length, prompt + NEW) holds for every row.
    emitted = (output.tokens[:, 0] != PAD_ID).sum(1)
    assert (emitted <= (prompt_ids != PAD_ID).sum(1) + NEW).all()


def test_graph_function_with_dynamic_shapes(lm):
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def run(prompt_ids):
        return greedy_search(lm, prompt_ids, num_steps=10)[0]

    prompt_ids = prompts(seed=2, batch_size=3, width=4)
    tokens = run(prompt_ids).numpy()[:, None]
    expected = naive_greedy(lm, prompt_ids, 10)
    for i, prompt in enumerate(prompt_ids):
        n = len(real(prompt))
        np.testing.assert_array_equal(tokens[i, 0, n:], expected[i, : 10 - n])


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_scores_are_the_continuation_log_probs(lm, method):
    prompt_ids = prompts(seed=3)
    decoder = BatchDecoder(
        lm,
        method=method,
        beam_size=3,
        length_penalty=0.0,
        temperature=1.5,
        max_length_b=NEW,
        jit_compile=False,
    )
    output = decoder(prompt_ids)
    found = continuations(output.tokens, prompt_ids, NEW)
    for i in range(len(prompt_ids)):
        for k in range(output.tokens.shape[1]):
            expected = continuation_log_probs(lm, prompt_ids[i], found[i, k])
            np.testing.assert_allclose(output.scores[i, k], expected, rtol=1e-4, atol=1e-4)


def test_beam_search_finds_more_likely_continuations_than_greedy(lm):
    prompt_ids = prompts(seed=4, batch_size=6)
    common = {"length_penalty": 0.0, "max_length_b": NEW, "jit_compile": False}
    greedy = BatchDecoder(lm, method="greedy", **common)(prompt_ids)
    beam = BatchDecoder(lm, method="beam", beam_size=4, **common)(prompt_ids)
    assert (beam.scores[:, 0] >= greedy.scores[:, 0] - 1e-5).all()
    assert (beam.scores[:, 0] > greedy.scores[:, 0] + 1e-3).any()  # the beam does search
    for i, prompt in enumerate(prompt_ids):  # and keeps the prompt in every hypothesis
        n = len(real(prompt))
        assert (beam.tokens[i, :, :n] == np.array(real(prompt))).all()


def test_beam_search_with_xla_equals_plain_tf_function(lm):
    prompt_ids = prompts(seed=5)
    outputs = []
    for jit in (True, False):
        decoder = BatchDecoder(lm, method="beam", beam_size=3, max_length_b=NEW, jit_compile=jit)
        outputs.append(decoder(prompt_ids))
        assert decoder.uses_xla == jit
    np.testing.assert_array_equal(outputs[0].tokens, outputs[1].tokens)
    np.testing.assert_allclose(outputs[0].scores, outputs[1].scores, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_batched_equals_one_by_one(lm, method):
    """The prompt's padding (and its batch) changes nothing."""
    prompt_ids = prompts(seed=6)
    decoder = BatchDecoder(lm, method=method, beam_size=2, max_length_b=NEW, jit_compile=False)
    batched = decoder(prompt_ids)
    found = continuations(batched.tokens, prompt_ids, NEW)
    for i, prompt in enumerate(prompt_ids):
        alone = np.array([real(prompt) or [PAD_ID]], "int32")
        output = decoder(alone)
        np.testing.assert_array_equal(continuations(output.tokens, alone, NEW)[0], found[i])
        np.testing.assert_allclose(output.scores[0], batched.scores[i], rtol=1e-4, atol=1e-5)


def test_sampling_top_k_one_is_greedy_and_seeds_reproduce(lm):
    prompt_ids = prompts(seed=7)
    common = {"max_length_b": NEW}
    greedy = BatchDecoder(lm, method="greedy", jit_compile=False, **common)(prompt_ids)
    top1 = BatchDecoder(lm, method="sample", top_k=1, seed=3, jit_compile=False, **common)(
        prompt_ids
    )
    np.testing.assert_array_equal(top1.tokens, greedy.tokens)

    def draw(seed, jit_compile=False):
        decoder = BatchDecoder(
            lm,
            method="sample",
            temperature=2.0,
            top_p=0.9,
            seed=seed,
            jit_compile=jit_compile,
            **common,
        )
        return decoder(prompt_ids).tokens

    first = draw(5)
    np.testing.assert_array_equal(draw(5), first)
    assert not np.array_equal(draw(6), first)
    # Compiled with XLA too (whose random numbers differ from the TF kernels'). Sampling
    # never touches the prompts.
    for tokens in (first, draw(5, jit_compile=True)):
        for i, prompt in enumerate(prompt_ids):
            assert tokens[i, 0, : len(real(prompt))].tolist() == real(prompt)
