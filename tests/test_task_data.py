"""The tasks' data: generated offline sets, TFDS with a fallback, the input pipeline, and
the experiment config's task sections."""

import logging
import re

import numpy as np
import pytest
import tensorflow as tf
from task_configs import task_of

from keras_transformer.config import load_config
from keras_transformer.constants import BOS_ID, EOS_ID, NO_TAG_ID
from keras_transformer.data import DataUnavailableError, synthetic
from keras_transformer.data.encoding import classification_ids, language_model_windows
from keras_transformer.data.task_sources import (
    load_classification_data,
    load_language_modeling_data,
    load_tagging_data,
)
from keras_transformer.tokenization import train_sentencepiece


@pytest.fixture(scope="module")
def tokenizer():
    words, _ = synthetic.synthetic_tagging("train[:1000]")
    texts = [" ".join(w) for w in words] + synthetic.synthetic_text("train[:300]")
    return train_sentencepiece(texts, vocab_size=330, seed=0)


def test_synthetic_sets_are_deterministic_and_sliced():
    words, tags = synthetic.synthetic_tagging("train[:100]")
    assert (words, tags) == synthetic.synthetic_tagging("train[:100]")
    assert synthetic.synthetic_tagging("train[40:60]") == (words[40:60], tags[40:60])
    assert len(synthetic.synthetic_text("validation")) == synthetic.SPLIT_SIZES["validation"]
    assert synthetic.synthetic_text("dev[:5]") == synthetic.synthetic_text("validation[:5]")
    assert len(synthetic.synthetic_classification("train[:10%]")[0]) == 800
    assert synthetic.synthetic_text("test[:20]") != synthetic.synthetic_text("train[:20]")
    with pytest.raises(ValueError, match="Received: split='training'"):
        synthetic.synthetic_text("training")


def test_synthetic_tags_need_the_context():
    """'watch' (and the other ambiguous words) is a noun or a verb by its neighbours."""
    words, tags = synthetic.synthetic_tagging("train[:2000]")
    seen = {
        synthetic.POS_TAGS[t]
        for sentence, sentence_tags in zip(words, tags)
        for w, t in zip(sentence, sentence_tags)
        if w == "watch"
    }
    assert seen == {"NOUN", "VERB"}


def test_synthetic_sentiment_labels_follow_polarity_and_negation():
    import re

    texts, labels = synthetic.synthetic_classification("train[:3000]")
    assert 0.4 < np.mean(labels) < 0.6
    # One-sentence reviews "The dog was [not] [very] good." carry the adjective's polarity,
    # flipped by "not".
    pattern = re.compile(
        r"^\w+ (\w+) (?:was|is|seems) (not )?(?:(?:really|very|quite) )?(\w+)[.!]$"
    )
    checked = {True: 0, False: 0}
    for text, label in zip(texts, labels):
        match = pattern.match(text)
        if match and match.group(1) in synthetic._NOUNS:
            polarity = synthetic._ADJECTIVES[match.group(3)]
            negated = match.group(2) is not None
            assert label == int((polarity > 0) != negated), text
            checked[negated] += 1
    assert checked[True] > 10 and checked[False] > 10


def test_tfds_source_falls_back_offline_or_fails(tmp_path, caplog):
    empty = str(tmp_path)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.data.task_sources"):
        data = load_tagging_data("conll2003", "dev[:3]", data_dir=empty, download=False)
    assert data.origin == "synthetic_pos" and data.labels == synthetic.POS_TAGS
    assert "Could not load the TFDS dataset 'conll2003' (DataUnavailableError" in caplog.text
    words, tags = next(iter(data.dataset))
    assert words.dtype == tf.string and tags.dtype == tf.int32 and words.shape == tags.shape
    with pytest.raises(
        DataUnavailableError, match=re.escape(f"'imdb_reviews' is not prepared in {empty}")
    ):
        load_classification_data(
            "imdb_reviews", "test", data_dir=empty, download=False, fallback=False
        )
    lm = load_language_modeling_data("synthetic_text", "test[:4]")
    assert [t.decode() for t in lm.dataset.as_numpy_iterator()] == synthetic.synthetic_text(
        "test[:4]"
    )


def test_a_misspelt_name_or_a_file_is_an_error_not_the_offline_set(tmp_path):
    """Only data that cannot be had here falls back; a source the user must fix never
    trains on generated data in its place."""
    with pytest.raises(ValueError, match="imdb_review not found"):
        load_classification_data("imdb_review", "test", data_dir=str(tmp_path), download=False)
    own = tmp_path / "reviews.tsv"
    own.write_text("A fine film.\tpositive\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"a file as the classification data .*train_data="):
        load_classification_data(str(own), "train", data_dir=str(tmp_path))


def test_tagging_examples_label_each_word_once(tokenizer):
    data = load_tagging_data("synthetic_pos", "test[:50]")
    examples = list(task_of("tagging", 64).encode(data.dataset, (tokenizer, tokenizer)))
    for (words, tags), (ids, labels) in zip(data.dataset, examples):
        ids, labels = ids.numpy(), labels.numpy()
        assert labels.shape == ids.shape
        labelled = labels != NO_TAG_ID
        assert (labels[labelled] - 1).tolist() == tags.numpy().tolist()  # word order
        # Each labelled position starts a word: its piece begins with "▁".
        pieces = tokenizer.id_to_piece(ids).numpy()
        assert all(p.decode().startswith("▁") for p in pieces[labelled])
        text = tokenizer.detokenize(ids[None]).numpy()[0].decode()
        assert text == " ".join(w.decode() for w in words.numpy())
    cut = list(task_of("tagging", 3).encode(data.dataset, (tokenizer, tokenizer)))
    assert max(len(x) for x, _ in cut) == 3


def test_classification_ids_start_with_bos_and_are_cut(tokenizer):
    ids = classification_ids(tokenizer, tf.constant(["The dog was good.", ""]), 4)
    assert ids[0, 0] == BOS_ID and ids.row_lengths().numpy().tolist() == [4, 1]
    data = load_classification_data("synthetic_sentiment", "test[:20]")
    classification = task_of("classification", 128)
    examples = list(classification.encode(data.dataset, (tokenizer, tokenizer)))
    assert [int(y) for _, y in examples] == [int(y) for _, y in data.dataset]


def test_language_model_windows_cover_each_document(tokenizer):
    texts = tf.constant(synthetic.synthetic_text("test[:6]"))
    full = tokenizer.tokenize(texts)
    inputs, labels = language_model_windows(tokenizer, texts, 16)
    assert max(inputs.row_lengths().numpy()) <= 16
    flat_inputs, flat_labels = inputs.flat_values.numpy(), labels.flat_values.numpy()
    expected_inputs = np.concatenate([[BOS_ID, *row] for row in full.to_list()])
    expected_labels = np.concatenate([[*row, EOS_ID] for row in full.to_list()])
    np.testing.assert_array_equal(flat_inputs, expected_inputs)
    np.testing.assert_array_equal(flat_labels, expected_labels)
    # labels are the inputs one step ahead: next-token prediction.
    np.testing.assert_array_equal(
        flat_inputs[1:][flat_inputs[1:] != BOS_ID], flat_labels[:-1][flat_inputs[1:] != BOS_ID]
    )


def test_blank_documents_are_not_language_model_windows(tokenizer):
    documents = tf.data.Dataset.from_tensor_slices(["", "  ", "\n", "\u00a0", "The dog."])
    windows = list(task_of("language_modeling", 16).encode(documents, (tokenizer, tokenizer)))
    expected = tokenizer.tokenize(tf.constant(["The dog."])).to_list()[0]
    assert [(x.numpy().tolist(), y.numpy().tolist()) for x, y in windows] == [
        ([BOS_ID, *expected], [*expected, EOS_ID])
    ]


def _synthetic_data(task, split):
    """The offline synthetic set of a one-tokenizer task."""
    if task == "tagging":
        return load_tagging_data("synthetic_pos", split)
    if task == "classification":
        return load_classification_data("synthetic_sentiment", split)
    return load_language_modeling_data("synthetic_text", split)


@pytest.mark.parametrize("task", ["tagging", "classification", "language_modeling"])
def test_batches_are_padded_and_bucketed(tokenizer, task):
    config = task_of(task, 24, "data.batch_size=16", "data.bucket_step=8", "training.seed=0")
    data = _synthetic_data(task, "train[:200]")
    batches = config.make_batches(data, (tokenizer, tokenizer), shuffle=True)
    count = 0
    for x, y in batches:
        x, y = x.numpy(), y.numpy()
        assert x.dtype == np.int32 and x.shape[1] <= 24 and x.shape[0] <= 16
        if task == "classification":
            assert y.shape == (x.shape[0],)
        else:
            assert y.shape == x.shape and (y[x == 0] == 0).all()
        count += len(x)
    assert count >= 200 if task == "language_modeling" else count == 200


def _examples(batches):
    """The batches' examples as a sorted list of `(ids, labels)` without padding."""
    rows = []
    for x, y in batches:
        for xi, yi in zip(x.numpy(), y.numpy()):
            labels = int(yi) if yi.ndim == 0 else tuple(yi[xi != 0])
            rows.append((tuple(xi[xi != 0]), labels))
    return sorted(rows)


@pytest.mark.parametrize("task", ["tagging", "classification", "language_modeling"])
def test_subword_sampling_changes_each_pass_of_training_batches_only(tokenizer, task):
    config = task_of(task, 24, "data.batch_size=16", "data.subword_sampling=0.1")
    data = _synthetic_data(task, "train[:50]" if task == "language_modeling" else "train[:100]")
    tokenizers = (tokenizer, tokenizer)
    sampled = config.make_batches(data, tokenizers, shuffle=True, sample_subwords=True)
    first, second = _examples(sampled), _examples(sampled)
    assert first != second
    best = config.make_batches(data, tokenizers, shuffle=True)
    assert _examples(best) == _examples(best)
    assert _examples(best) not in (first, second)
    if task == "classification":  # the same examples, each resegmented: labels are kept
        assert sorted(y for _, y in first) == sorted(y for _, y in _examples(best))


def test_packaged_task_configs_and_task_checks():
    expected = {
        "conll2003_pos": ("tagging", "conll2003"),
        "imdb_reviews": ("classification", "imdb_reviews"),
        "tiny_shakespeare": ("language_modeling", "tiny_shakespeare"),
        "multi30k_de_en": ("translation", "multi30k"),
    }
    for name, (task, source) in expected.items():
        config = load_config(name)
        assert (config.task, config.data.source) == (task, source)
    assert load_config("tiny_shakespeare").language_modeling.document_separator == "\n\n"
    with pytest.raises(ValueError, match="Received: task='ner'"):
        load_config(None, ["task=ner"])
    with pytest.raises(ValueError, match="`classification.pooling`.*Received: .*'max'"):
        load_config("imdb_reviews", ["classification.pooling=max"])
    # Token batches are every task's now (one bucketer).
    config = load_config("imdb_reviews", ["data.batch_size=null", "data.tokens_per_batch=4096"])
    assert config.data.tokens_per_batch == 4096
    with pytest.raises(ValueError, match="`training.bleu_every` for task 'tagging'"):
        load_config("conll2003_pos", ["training.bleu_every=1"])
    # Each task checks the one length it reads against the positional table.
    assert load_config("imdb_reviews", ["model.max_length=64", "classification.max_length=64"])
    with pytest.raises(ValueError, match="language_modeling.max_length <= model.max_length=64"):
        load_config("tiny_shakespeare", ["model.max_length=64"])
    with pytest.raises(ValueError, match="max_source_length <= model.max_length=64"):
        load_config(
            "multi30k_de_en",
            [
                "model.max_length=64",
                "translation.max_target_length=64",
                "translation.max_source_length=65",
            ],
        )
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['tagging.tag_feature'\]"):
        load_config("conll2003_pos", ["tagging.tag_feature=ner"])


def test_soft_vocabulary_limit_for_small_corpora():
    """The tasks' tokenizers take `data.vocab_size` as a most: a recipe sized for its TFDS
    dataset still trains on the small offline set it falls back to."""
    texts = synthetic.synthetic_text("train[:200]")
    with pytest.raises(ValueError, match="vocab_size"):
        train_sentencepiece(texts, vocab_size=4000, seed=0)
    tokenizer = train_sentencepiece(texts, vocab_size=4000, hard_vocab_limit=False, seed=0)
    assert 260 < tokenizer.vocab_size < 4000
