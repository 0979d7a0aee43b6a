"""`Translator`, the translate/evaluate commands and attention extraction."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from multi30k_files import read_lines

from keras_transformer import Transformer, cli
from keras_transformer.constants import EOS_ID
from keras_transformer.data import encode_pairs
from keras_transformer.data.encoding import translation_source_ids
from keras_transformer.plotting import translation_attention
from keras_transformer.predictors import Translator
from keras_transformer.run_dir import RunPaths
from keras_transformer.tokenization import train_sentencepiece

GERMAN = [
    "Ein Hund läuft durch den Park.",
    "Zwei Männer spielen Fußball.",
    "Eine Frau mit einem roten Hut sitzt auf einer Bank.",
    "Kinder.",
    "",
]


@pytest.fixture(scope="module")
def tokenizer(request):
    """A small shared SentencePiece model trained on the first Multi30k sentences."""
    directory = request.getfixturevalue("multi30k_dir")
    texts = read_lines("train.de.gz", 400, directory) + read_lines("train.en.gz", 400, directory)
    return train_sentencepiece(texts, vocab_size=300, byte_fallback=False, seed=0)


def normalized(tokenizer, sentences):
    return [t.decode("utf-8") for t in tokenizer.detokenize(tokenizer.tokenize(sentences)).numpy()]


class CopyModel:
    """A stand-in for `Transformer` whose decoder copies the source, then emits EOS.

    It implements the decoding interface (`pad_id`, `max_length`, `encode`,
    `init_decoding_cache`, `decode_step`) with TF ops, so the search, the batching and the
    tokenizers can be checked end to end on exact strings.
    """

    pad_id = 0
    max_length = 64

    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def encode(self, source_ids, training=False):
        return tf.cast(source_ids, tf.float32)[..., None], tf.not_equal(source_ids, 0)

    def init_decoding_cache(self, encoder_output, max_length):
        batch_size = tf.shape(encoder_output)[0]
        cache = tf.zeros([batch_size, 1, 2, max_length, 1, 1])
        return cache, encoder_output[:, None, None, :, :, None]  # (B, 1, 1, S, 1, 1)

    def decode_step(self, token_ids, source_mask, cache, cross_cache, index):
        source = tf.cast(cross_cache[:, 0, 0, :, 0, 0], tf.int32)  # (B, S)
        length = tf.reduce_sum(tf.cast(source_mask, tf.int32), axis=1)  # (B,)
        position = tf.minimum(index, tf.shape(source)[1] - 1)
        copied = tf.gather(source, tf.fill([tf.shape(source)[0]], position), batch_dims=1)
        next_ids = tf.where(index < length, copied, EOS_ID)  # (B,)
        logits = tf.one_hot(next_ids, self.vocab_size) * 8.0 - 4.0  # (B, V)
        return logits[:, None, :], cache


def test_translator_round_trip_with_a_copy_model(tokenizer):
    translator = Translator(CopyModel(tokenizer.vocab_size), tokenizer, tokenizer, beam_size=3)
    expected = normalized(tokenizer, GERMAN)
    assert translator.translate(GERMAN) == expected
    nbest = translator.translate_nbest(GERMAN, n=2)
    assert [len(h) for h in nbest] == [2] * len(GERMAN)
    assert [h[0][0] for h in nbest] == expected
    assert all(h[0][1] >= h[1][1] and h[0][0] != h[1][0] for h in nbest[:-1])
    assert nbest[-1] == [("", 0.0)] * 2  # the blank sentence: empty in, empty out
    # The pure-TF path, traced over a [None] string signature, gives the same strings.
    translations, scores = translator.serving_function()(tf.constant(GERMAN))
    assert [t.decode("utf-8") for t in translations.numpy()] == expected
    np.testing.assert_allclose(scores, [h[0][1] for h in nbest], rtol=1e-5, atol=1e-5)
    assert translator.translate([]) == []
    for one in ("Ein Hund.", np.array("Ein Hund."), tf.constant("Ein Hund.")):
        with pytest.raises(ValueError, match="not a single string"):
            translator.translate(one)
    with pytest.raises(ValueError, match="expected at most 3"):
        translator.translate_nbest(GERMAN, n=4)


@pytest.mark.parametrize("source_eos", [True, False])
def test_sources_end_with_eos_as_the_model_was_trained(tokenizer, source_eos):
    model = CopyModel(tokenizer.vocab_size)
    model.max_length = 6
    translator = Translator(model, tokenizer, tokenizer, beam_size=1, source_eos=source_eos)
    plain = tokenizer.tokenize(GERMAN).to_list()
    ids = [list(row) for row in translator.encode_sources(GERMAN)]
    if source_eos:  # cut to max_length with EOS last
        assert ids == [row[:5] + [EOS_ID] for row in plain]
    else:
        assert ids == [row[:6] for row in plain]
    # The graph path (export) and the training pipeline encode the same ids.
    graph_ids = tf.function(
        lambda s: translation_source_ids(tokenizer, s, 6, source_eos=source_eos)
    )(tf.constant(GERMAN))
    assert graph_ids.to_list() == ids
    pairs = tf.data.Dataset.from_tensor_slices((GERMAN, GERMAN)).filter(
        lambda s, t: tf.strings.length(s) > 0  # training drops empty pairs
    )
    encoded = encode_pairs(
        pairs, tokenizer, max_source_length=6, length_policy="truncate", source_eos=source_eos
    )
    assert [list(s.numpy()) for (s, _), _ in encoded] == [i for i, g in zip(ids, GERMAN) if g]


def test_run_directories_record_source_eos(tmp_path, tokenizer):
    from keras_transformer.config import ExperimentConfig, save_config
    from keras_transformer.run_dir import trained_with_source_eos

    paths = RunPaths(str(tmp_path))
    assert trained_with_source_eos(paths.root) is False  # no config.yaml: an old layout
    save_config(ExperimentConfig(), paths.config)
    assert trained_with_source_eos(paths.root) is True  # the default of new runs
    config = ExperimentConfig().to_dict()
    del config["translation"]["source_eos"]  # a run trained before the option existed
    with open(paths.config, "w", encoding="utf-8") as f:
        json.dump(config, f)
    assert trained_with_source_eos(paths.root) is False
    # The layout before the task sections kept it in `data`.
    config["data"]["source_eos"] = True
    del config["translation"]
    with open(paths.config, "w", encoding="utf-8") as f:
        json.dump(config, f)
    assert trained_with_source_eos(paths.root) is True


@pytest.fixture(scope="module")
def tiny_model(tokenizer):
    keras.utils.set_random_seed(3)
    model = Transformer.from_preset(
        "tiny",
        source_vocab_size=tokenizer.vocab_size,
        target_vocab_size=tokenizer.vocab_size,
        share_embeddings=True,
    )
    model((np.ones((1, 3), "int32"), np.ones((1, 2), "int32")))
    return model


@pytest.mark.parametrize("beam_size", [1, 2])
def test_translate_equals_the_pure_tf_function(tokenizer, tiny_model, beam_size):
    translator = Translator(
        tiny_model,
        tokenizer,
        tokenizer,
        beam_size=beam_size,
        max_length=20,
        batch_size=2,
        jit_compile=False,
    )
    texts = translator.translate(GERMAN)
    assert len(texts) == len(GERMAN) and all(isinstance(t, str) for t in texts)
    translations, scores = translator.serving_function()(tf.constant(GERMAN))
    assert [t.decode("utf-8") for t in translations.numpy()] == texts
    assert scores.shape == (len(GERMAN),) and scores.dtype == tf.float32


BLANK = ["", "   ", "\t\n", "\u00a0\u3000"]  # empty, spaces, tab/newline, Unicode spaces


@pytest.mark.parametrize("beam_size", [1, 3])
def test_blank_sources_translate_to_empty_strings(tokenizer, tiny_model, beam_size):
    """Empty in, empty out, in Python and in the export's pure-TF path: a blank source gets
    an empty translation (score 0) instead of whatever the model says after EOS alone."""
    translator = Translator(
        tiny_model, tokenizer, tokenizer, beam_size=beam_size, max_length=12, jit_compile=False
    )
    texts = [GERMAN[0], *BLANK, GERMAN[1]]
    translations = translator.translate(texts)
    assert translations[1:-1] == [""] * len(BLANK)
    assert translations[0] == translator.translate([GERMAN[0]])[0]
    assert translations[-1] == translator.translate([GERMAN[1]])[0]
    assert translator.translate(BLANK) == [""] * len(BLANK)  # no sentence to decode
    nbest = translator.translate_nbest(texts, n=beam_size)
    assert all(best == [("", 0.0)] * beam_size for best in nbest[1:-1])
    served, scores = translator.serving_function()(tf.constant(texts))
    assert [t.decode("utf-8") for t in served.numpy()] == translations
    assert scores.numpy()[1:-1].tolist() == [0.0] * len(BLANK)


def _make_run_dir(root, model, tokenizer):
    paths = RunPaths(str(root))
    os.makedirs(paths.root, exist_ok=True)
    model.save(paths.model)
    tokenizer.save(paths.source_tokenizer)
    tokenizer.save(paths.target_tokenizer)
    return paths.root


def test_commands_translate_and_evaluate(tmp_path, tokenizer, tiny_model, multi30k_dir, capsys):
    run_dir = _make_run_dir(tmp_path / "run", tiny_model, tokenizer)
    translator = Translator.from_run_dir(run_dir, beam_size=2, max_length=16, jit_compile=False)
    assert translator.source_eos is False  # no config.yaml: translated as trained, without
    expected = translator.translate(GERMAN[:3])
    common = ["--beam-size", "2", "--max-length", "16", "--jit", "off"]

    output = tmp_path / "out.txt"
    assert cli.main(["translate", run_dir, *GERMAN[:3], "--output", str(output), *common]) == 0
    assert output.read_text(encoding="utf-8").splitlines() == expected

    source_file = tmp_path / "test.de"
    source_file.write_text("\n".join(GERMAN[:3]) + "\n", encoding="utf-8")
    assert (
        cli.main(["translate", run_dir, "--input", str(source_file), "--nbest", "2", *common]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and [line.split("\t")[0] for line in lines[::2]] == ["0", "1", "2"]
    assert [line.split("\t", 2)[2] for line in lines[::2]] == expected

    reference_file = tmp_path / "test.en"
    reference_file.write_text("\n".join(expected) + "\n", encoding="utf-8")
    hypotheses, details, scores = (tmp_path / n for n in ("hyp.txt", "d.jsonl", "s.json"))
    arguments = ["--source-file", str(source_file), "--reference-file", str(reference_file)]
    arguments += ["--output", str(hypotheses), "--details", str(details)]
    arguments += ["--scores-json", str(scores), *common]
    assert cli.main(["evaluate", run_dir, *arguments]) == 0
    printed = capsys.readouterr().out
    assert "BLEU|nrefs:1|" in printed and "chrF2|" in printed
    summary = json.loads(scores.read_text())
    assert summary["scores"] == {"bleu": pytest.approx(100.0), "chrf": pytest.approx(100.0)}
    assert summary["signatures"]["bleu"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert hypotheses.read_text(encoding="utf-8").splitlines() == expected
    rows = [json.loads(line) for line in details.read_text(encoding="utf-8").splitlines()]
    assert [r["source"] for r in rows] == GERMAN[:3] and all("chrf" in r for r in rows)

    # A split of Multi30k, through keras_transformer.data.
    arguments = ["--data", "multi30k/de-en", "--split", "test", "--local-dir", multi30k_dir]
    arguments += ["--data-dir", str(tmp_path / "tfds"), "--max-sentences", "4"]
    arguments += ["--metrics", "chrf", "--output", str(hypotheses), *common]
    assert cli.main(["evaluate", run_dir, *arguments]) == 0
    assert "\nchrF2|nrefs:1|" in capsys.readouterr().out  # after TFDS's own messages
    assert hypotheses.read_text(encoding="utf-8").splitlines() == translator.translate(
        read_lines("test_2016_flickr.de.gz", 4, multi30k_dir)
    )


def test_translation_attention_shapes(tokenizer, tiny_model):
    translator = Translator(tiny_model, tokenizer, tokenizer, beam_size=2, max_length=12)
    sentence = GERMAN[0]
    source_pieces, target_pieces, weights = translation_attention(translator, sentence)
    num_source = len(tokenizer.tokenize([sentence])[0]) + 1  # + EOS
    assert len(source_pieces) == num_source and all(isinstance(p, str) for p in source_pieces)
    assert source_pieces[-1] == "</s>"
    num_target = len(target_pieces)
    assert 1 <= num_target <= 12
    layers, heads = tiny_model.num_decoder_layers, tiny_model.num_heads
    assert weights["cross_attention"].shape == (layers, heads, num_target, num_source)
    assert weights["decoder_self_attention"].shape == (layers, heads, num_target, num_target)
    assert weights["encoder_self_attention"].shape == (layers, heads, num_source, num_source)
    np.testing.assert_allclose(weights["cross_attention"].sum(-1), 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="at least one token"):
        translation_attention(translator, "")


def test_a_tokenizer_that_pads_with_another_id_is_refused(tokenizer):
    # The model masks its padding by pad_id: a tokenizer padding with another id would feed
    # padding as real tokens, so the wrappers refuse it (the check lives in validation.py).
    model = CopyModel(tokenizer.vocab_size)
    model.pad_id = 5
    with pytest.raises(ValueError, match="pad id differs.*expected pad_id=5. Received: pad_id=0"):
        Translator(model, tokenizer, tokenizer)
    from keras_transformer.predictors import TextGenerator

    with pytest.raises(ValueError, match="expected pad_id=5. Received: pad_id=0"):
        TextGenerator(model, tokenizer)


def test_a_generator_keeps_the_last_pieces_its_max_length_has_room_for(tokenizer):
    """A prompt longer than the search's `max_length` (shorter than the model's) keeps its
    last `max_length - 1` pieces and gets its new token, in Python and in the graph that an
    export serves (the model's limit cut it: Python gave "", the graph failed in Substr)."""
    from keras_transformer import TransformerDecoderModel
    from keras_transformer.predictors import TextGenerator

    model = TransformerDecoderModel.from_preset("tiny", vocabulary_size=tokenizer.vocab_size)
    model.build((None, None))
    prompt = "Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt ein Fenster ."
    assert len(tokenizer.tokenize(prompt)) > 8 and model.max_length > 8
    options = {"method": "greedy", "max_length": 8, "min_length": 8, "jit_compile": False}
    generator = TextGenerator(model, tokenizer, max_new_tokens=3, **options)
    continuation = generator.generate([prompt])
    assert continuation[0] != ""  # min_length 8: the 8th token is a new one, not EOS
    graph = generator.generate_strings(tf.constant([prompt]))
    assert [c.decode("utf-8") for c in graph["continuations"].numpy()] == continuation
    # `texts` is the prompt as given and its continuation, as `predict` writes them (it was
    # the detokenized pieces: the cut prompt, its spaces and newlines normalized).
    for given in (prompt, " Zwei Hunde\nim  Schnee"):
        graph = generator.generate_strings(tf.constant([given]))
        expected = given + generator.generate([given])[0]
        assert graph["texts"].numpy()[0].decode("utf-8") == expected


def test_batches_go_longest_first_and_results_come_back_in_order(tokenizer, monkeypatch):
    from keras_transformer.decoding import BatchDecoder

    translator = Translator(
        CopyModel(tokenizer.vocab_size), tokenizer, tokenizer, beam_size=1, batch_size=2
    )
    widths = []
    call = BatchDecoder.__call__
    monkeypatch.setattr(
        BatchDecoder, "__call__", lambda self, b: widths.append(b.shape[1]) or call(self, b)
    )
    assert translator.translate(GERMAN) == normalized(tokenizer, GERMAN)
    # Four sentences to decode (the blank one is not), two a batch.
    assert widths == sorted(widths, reverse=True) and len(widths) == 2
    with pytest.raises(ValueError, match=r"expected strings. Received: int at index 1"):
        translator.translate(["Ein Hund.", 3])


def test_from_run_dir_refuses_a_run_of_another_task(tmp_path):
    from keras_transformer.predictors import TextClassifier, TextGenerator, TextTagger

    lm = tmp_path / "lm"
    lm.mkdir()
    (lm / "config.yaml").write_text("task: language_modeling\n")
    with pytest.raises(ValueError) as error:
        Translator.from_run_dir(str(lm))
    assert str(error.value) == (
        f"Received a language_modeling run directory ({lm}), expected a translation run."
    )
    # A folder without config.yaml is a translation run (runs of version 0.1).
    for cls, task in (
        (TextGenerator, "language_modeling"),
        (TextClassifier, "classification"),
        (TextTagger, "tagging"),
    ):
        with pytest.raises(
            ValueError, match=rf"Received a translation run .*expected a {task} run"
        ):
            cls.from_run_dir(str(tmp_path))
