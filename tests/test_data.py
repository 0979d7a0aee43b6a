"""Tests of `keras_transformer.data`: TFDS, Multi30k, local files and the tf.data pipeline."""

import gzip
import hashlib
import os
import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from multi30k_files import MULTI30K_DIR as MULTI30K
from multi30k_files import read_lines as _lines

from keras_transformer.data import (
    check_text_files,
    default_bucket_lengths,
    encode_pairs,
    load_multi30k,
    load_parallel_dataset,
    load_text_files,
    load_tfds_translation,
    make_batches,
)
from keras_transformer.data import multi30k as multi30k_lib
from keras_transformer.tokenization import BOS_ID, EOS_ID, train_sentencepiece


def _pairs(dataset):
    return [(s.decode("utf-8"), t.decode("utf-8")) for s, t in dataset.as_numpy_iterator()]


# --- Local text files ---------------------------------------------------------------------


def _write(path, data: bytes):
    if str(path).endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return str(path)


def test_line_aligned_files_plain_and_gzip(tmp_path):
    src = _write(tmp_path / "a.de", b"Ein Hund.\nZwei Katzen.\r\n\nDrei.\n")
    tgt = _write(tmp_path / "a.en.gz", "\ufeffA dog.\nTwo cats.\nx\nThree.".encode())
    assert check_text_files(src, tgt) == 4
    assert _pairs(load_text_files(src, tgt)) == [
        ("Ein Hund.", "A dog."),
        ("Zwei Katzen.", "Two cats."),
        ("Drei.", "Three."),
    ]
    kept = _pairs(load_text_files(src, tgt, skip_empty=False))
    assert len(kept) == 4 and kept[2] == ("", "x")


def test_tsv_file(tmp_path):
    path = _write(tmp_path / "c.tsv.gz", b"Ein Hund.\tA dog.\nHaus\tHouse\n")
    assert _pairs(load_text_files(path)) == [("Ein Hund.", "A dog."), ("Haus", "House")]
    assert _pairs(load_parallel_dataset(path)) == [("Ein Hund.", "A dog."), ("Haus", "House")]


def test_real_multi30k_files_through_load_parallel_dataset():
    src, tgt = os.path.join(MULTI30K, "val.de.gz"), os.path.join(MULTI30K, "val.en.gz")
    pairs = _pairs(load_parallel_dataset(src, target_path=tgt))
    assert pairs == list(zip(_lines("val.de.gz"), _lines("val.en.gz")))


@pytest.mark.parametrize("longer", ["source", "target"])
def test_different_line_counts(tmp_path, longer):
    a = _write(tmp_path / "a.txt", b"1\n2\n3\n")
    b = _write(tmp_path / "b.txt.gz", b"1\n2\n3\n4\n5\n")
    src, tgt = (b, a) if longer == "source" else (a, b)
    with pytest.raises(ValueError) as info:
        check_text_files(src, tgt)
    message = str(info.value)
    assert "a.txt has 3 lines" in message and "b.txt.gz has 5" in message
    assert "line 4 of " + b in message
    with pytest.raises(ValueError, match="same number of lines"):
        load_text_files(src, tgt)


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_empty_files(tmp_path, content):
    good = _write(tmp_path / "good.txt", b"1\n2\n3\n")
    empty = _write(tmp_path / "empty.txt", content)
    for args in ((empty, good), (good, empty), (empty,)):
        with pytest.raises(ValueError, match=re.escape(empty) + " is empty"):
            load_text_files(*args)


@pytest.mark.parametrize("name", ["bad.txt", "bad.txt.gz"])
def test_undecodable_bytes(tmp_path, name):
    bad = _write(tmp_path / name, "ok\nstill ok\nKöln \xff\n".encode("latin-1"))
    good = _write(tmp_path / "good.txt", b"1\n2\n3\n")
    with pytest.raises(ValueError, match=re.escape(bad) + r".*not UTF-8 on line 3"):
        load_text_files(good, bad)


def test_tsv_column_errors(tmp_path):
    three = _write(tmp_path / "three.tsv", b"a\tb\na\tb\tc\n")
    with pytest.raises(ValueError, match=re.escape(three) + r".*3 column\(s\) on line 2"):
        load_text_files(three)
    one = _write(tmp_path / "one.tsv", b"only one column\n")
    with pytest.raises(ValueError, match=r"1 column\(s\) on line 1"):
        load_text_files(one)


def test_bad_gzip_and_missing_file(tmp_path):
    fake = tmp_path / "fake.gz"
    fake.write_bytes(b"plain text, not gzip\n")
    with pytest.raises(ValueError, match=re.escape(str(fake))):
        check_text_files(str(fake))
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_text_files(str(tmp_path / "nope.txt"), str(fake))
    with pytest.raises(FileNotFoundError, match="nope.tsv"):
        load_parallel_dataset(str(tmp_path / "nope.tsv"))


# --- TFDS ---------------------------------------------------------------------------------


def test_tfds_translation_with_mock_data():
    with tfds.testing.mock_data(num_examples=4):
        raw = list(tfds.load("ted_hrlr_translate/pt_to_en", split="train").as_numpy_iterator())
        pairs = load_tfds_translation("ted_hrlr_translate/pt_to_en", "train")
        reverse = load_tfds_translation(
            "ted_hrlr_translate/pt_to_en", "train", source_lang="en", target_lang="pt"
        )
        via_entry_point = load_parallel_dataset("ted_hrlr_translate/pt_to_en", split="train")
        assert pairs.element_spec == (
            tf.TensorSpec([], tf.string),
            tf.TensorSpec([], tf.string),
        )
        got = list(pairs.as_numpy_iterator())
        assert got == [(r["pt"], r["en"]) for r in raw]
        assert list(reverse.as_numpy_iterator()) == [(r["en"], r["pt"]) for r in raw]
        assert list(via_entry_point.as_numpy_iterator()) == got

        wmt = list(load_tfds_translation("wmt14_translate/de-en", "validation").as_numpy_iterator())
        raw = list(tfds.load("wmt14_translate/de-en", split="validation").as_numpy_iterator())
        assert wmt == [(r["de"], r["en"]) for r in raw] and len(wmt) == 4

        with pytest.raises(ValueError, match="`source_lang`.*among \\['pt', 'en'\\]"):
            load_tfds_translation("ted_hrlr_translate/pt_to_en", source_lang="fr")
        with pytest.raises(ValueError, match="same language"):
            load_tfds_translation("ted_hrlr_translate/pt_to_en", source_lang="en", target_lang="en")


# --- Multi30k -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def multi30k_de_en(tmp_path_factory):
    """The Multi30k de-en TFDS dataset, built once from the offline copy."""
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    builder = multi30k_lib.Multi30k(config="de-en", data_dir=data_dir, local_dir=MULTI30K)
    builder.download_and_prepare()
    return builder


def test_multi30k_builder_from_local_dir(multi30k_de_en):
    info = multi30k_de_en.info
    assert {k: v.num_examples for k, v in info.splits.items()} == {
        "train": 29000,
        "validation": 1014,
        "test": 1000,
    }
    assert info.supervised_keys == ("de", "en")
    train = multi30k_de_en.as_dataset(split="train", as_supervised=True)
    first = next(iter(train))
    assert first[0].numpy().decode() == (
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    )
    assert first[1].numpy().decode() == "Two young, White males are outside near many bushes."
    # Every validation pair, in the published order.
    validation = _pairs(multi30k_de_en.as_dataset(split="validation", as_supervised=True))
    assert validation == list(zip(_lines("val.de.gz"), _lines("val.en.gz")))


def test_multi30k_through_tfds_load_and_entry_point(multi30k_de_en):
    data_dir = multi30k_de_en.data_dir_root
    test = tfds.load("multi30k/de-en", split="test", data_dir=data_dir, as_supervised=True)
    assert len(test) == 1000
    pairs = load_parallel_dataset("multi30k", split="val[:3]", data_dir=data_dir)
    assert _pairs(pairs) == list(zip(_lines("val.de.gz", 3), _lines("val.en.gz", 3)))
    pairs = load_parallel_dataset("multi30k/de-en", split="test_2016_flickr", data_dir=data_dir)
    assert len(_pairs(pairs)) == 1000
    with pytest.raises(ValueError, match="contradict"):
        load_parallel_dataset("multi30k/de-en", source_lang="fr", data_dir=data_dir)
    with pytest.raises(ValueError, match="source_lang"):
        load_multi30k("train", "es", "en", data_dir=data_dir)


def test_multi30k_from_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(multi30k_lib.ENV_VAR, MULTI30K)
    pairs = load_multi30k("test", "fr", "en", data_dir=str(tmp_path), download=True)
    expected = list(zip(_lines("test_2016_flickr.fr.gz"), _lines("test_2016_flickr.en.gz")))
    assert _pairs(pairs) == expected


def test_multi30k_from_manual_dir(tmp_path, monkeypatch):
    monkeypatch.delenv(multi30k_lib.ENV_VAR, raising=False)

    def no_download(self, urls):
        raise AssertionError(f"unexpected download of {urls}")

    monkeypatch.setattr(tfds.download.DownloadManager, "download", no_download)
    builder = multi30k_lib.Multi30k(config="en-de", data_dir=str(tmp_path))
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=MULTI30K))
    first = next(iter(builder.as_dataset(split="validation", as_supervised=True)))
    assert first[0].numpy().decode() == "A group of men are loading cotton onto a truck"
    assert first[1].numpy().decode() == "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"


def test_multi30k_checksums_match_the_published_readme():
    readme = open(os.path.join(MULTI30K, "README.md"), encoding="utf-8").read()
    published = dict(
        (name, digest) for digest, name in re.findall(r"([0-9a-f]{64})\s+(\S+\.gz)", readme)
    )
    assert len(published) == 9
    infos = multi30k_lib.Multi30k.url_infos
    assert {url.rsplit("/", 1)[1]: info.checksum for url, info in infos.items()} == published
    for url, info in infos.items():
        path = os.path.join(MULTI30K, url.rsplit("/", 1)[1])
        assert os.path.getsize(path) == int(info.size)


def test_multi30k_local_checksum_mismatch_and_missing_file(tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(MULTI30K, copy)
    target = copy / "train.en.gz"
    os.chmod(target, 0o644)
    target.write_bytes(gzip.compress(b"tampered\n"))
    with pytest.raises(ValueError, match=re.escape(str(target)) + ".*expected sha256 d79cfa"):
        multi30k_lib.verify_multi30k_files(str(copy), ["de", "en"])
    builder = multi30k_lib.Multi30k(
        config="de-en", data_dir=str(tmp_path / "tfds"), local_dir=str(copy)
    )
    with pytest.raises(ValueError, match="Checksum mismatch.*train.en.gz"):
        builder.download_and_prepare()
    # de-fr does not need the English files.
    assert len(multi30k_lib.verify_multi30k_files(str(copy), ["de", "fr"])) == 6
    os.remove(copy / "val.fr.gz")
    with pytest.raises(FileNotFoundError, match="lacks val.fr.gz"):
        multi30k_lib.verify_multi30k_files(str(copy), ["de", "fr"])
    digest = hashlib.sha256(open(copy / "val.de.gz", "rb").read()).hexdigest()
    assert digest == multi30k_lib.CHECKSUMS["val.de.gz"][0]


# --- Pipeline -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    texts = _lines("train.de.gz", 2000) + _lines("train.en.gz", 2000)
    return train_sentencepiece(texts, vocab_size=800, seed=3)


@pytest.fixture(scope="module")
def val_pairs():
    return tf.data.Dataset.from_tensor_slices((_lines("val.de.gz"), _lines("val.en.gz")))


@pytest.fixture(scope="module")
def val_lengths(tokenizer):
    """(source ids, target ids) lengths of the validation pairs."""
    source = tokenizer.tokenize(_lines("val.de.gz")).row_lengths().numpy()
    target = tokenizer.tokenize(_lines("val.en.gz")).row_lengths().numpy()
    return source, target


def _collect(batches):
    rows = []
    for (source, target_in), target_out in batches.as_numpy_iterator():
        assert source.dtype == target_in.dtype == target_out.dtype == np.int32
        assert target_in.shape == target_out.shape and source.shape[0] == target_in.shape[0]
        for s, ti, to in zip(source, target_in, target_out):
            rows.append((s, ti, to))
    return rows


def _strip(ids):
    ids = list(ids)
    while ids and ids[-1] == 0:
        ids.pop()
    return ids


def test_make_batches_teacher_forcing_structure(tokenizer, val_pairs):
    batches = make_batches(val_pairs, tokenizer, batch_size=50, shuffle=False)
    spec = batches.element_spec
    assert spec == (
        (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32)),
        tf.TensorSpec([None, None], tf.int32),
    )
    rows = _collect(batches)
    assert len(rows) == 1014  # Multi30k val sentences are short: nothing dropped.
    de = {tuple(ids) for ids in tokenizer.tokenize(_lines("val.de.gz")).to_list()}
    en = {tuple(ids) for ids in tokenizer.tokenize(_lines("val.en.gz")).to_list()}
    for source, target_in, target_out in rows:
        ids = _strip(target_out)
        assert ids[-1] == EOS_ID and EOS_ID not in ids[:-1]
        assert _strip(target_in) == [BOS_ID] + ids[:-1]
        source_ids = _strip(source)  # the source ends with EOS (source_eos=True)
        assert source_ids[-1] == EOS_ID and EOS_ID not in source_ids[:-1]
        assert tuple(source_ids[:-1]) in de and tuple(ids[:-1]) in en
    pairs = {
        (tuple(_strip(s)[:-1]), tuple(_strip(to)[:-1])) for s, _, to in rows
    }  # each source is batched with its own target
    expected = set(
        zip(
            (tuple(x) for x in tokenizer.tokenize(_lines("val.de.gz")).to_list()),
            (tuple(x) for x in tokenizer.tokenize(_lines("val.en.gz")).to_list()),
        )
    )
    assert pairs == expected


def test_sources_without_eos(tokenizer, val_pairs):
    """`source_eos=False`: the bare source ids, as models trained before source EOS saw."""
    rows = _collect(
        make_batches(val_pairs, tokenizer, batch_size=50, shuffle=False, source_eos=False)
    )
    de = {tuple(ids) for ids in tokenizer.tokenize(_lines("val.de.gz")).to_list()}
    assert len(rows) == 1014
    assert all(tuple(_strip(source)) in de for source, _, _ in rows)
    assert not any(EOS_ID in source for source, _, _ in rows)


def test_length_policies(tokenizer, val_pairs, val_lengths):
    source, target = val_lengths
    kept = int(((source + 1 <= 24) & (target + 1 <= 20)).sum())  # + EOS on both sides
    assert 100 < kept < 1000
    dropped = _collect(
        make_batches(val_pairs, tokenizer, max_source_length=24, max_target_length=20, seed=1)
    )
    assert len(dropped) == kept
    assert all(len(_strip(s)) <= 24 and len(_strip(to)) <= 20 for s, _, to in dropped)

    truncated = _collect(
        make_batches(
            val_pairs,
            tokenizer,
            max_source_length=24,
            max_target_length=20,
            length_policy="truncate",
        )
    )
    assert len(truncated) == 1014
    assert max(len(_strip(s)) for s, _, _ in truncated) == 24
    assert max(len(_strip(to)) for _, _, to in truncated) == 20
    assert all(_strip(to)[-1] == EOS_ID for _, _, to in truncated)
    assert all(_strip(s)[-1] == EOS_ID for s, _, _ in truncated)


def test_empty_sides_are_dropped(tokenizer):
    pairs = tf.data.Dataset.from_tensor_slices(
        (["Ein Hund.", "", "Eine Katze.", "  "], ["A dog.", "Nothing.", "", "x"])
    )
    rows = list(encode_pairs(pairs, tokenizer).as_numpy_iterator())
    assert len(rows) == 1
    (source, target_in), target_out = rows[0]
    assert tokenizer.detokenize(source).numpy() == b"Ein Hund."
    assert tokenizer.detokenize(target_out).numpy() == b"A dog."


def test_bucketing_by_sentences(tokenizer, val_pairs, val_lengths):
    buckets = [8, 16, 24, 32, 48]
    batches = make_batches(
        val_pairs,
        tokenizer,
        batch_size=16,
        bucket_lengths=buckets,
        max_source_length=48,
        max_target_length=48,
    )
    total = 0
    for (source, target_in), _ in batches.as_numpy_iterator():
        total += source.shape[0]
        assert source.shape[0] <= 16
        lengths = np.maximum((source != 0).sum(1), (target_in != 0).sum(1))
        bucket = min(b for b in buckets if b >= lengths.max())
        lower = max([0] + [b for b in buckets if b < bucket])
        assert lengths.min() > lower  # all rows of a batch come from one bucket
        assert max(source.shape[1], target_in.shape[1]) == lengths.max()  # padded to the batch
    source, target = val_lengths
    assert total == int(((source + 1 <= 48) & (target + 1 <= 48)).sum())


def test_tokens_per_batch_and_pad_to_bucket(tokenizer, val_pairs, val_lengths):
    batches = make_batches(
        val_pairs,
        tokenizer,
        tokens_per_batch=400,
        max_source_length=40,
        max_target_length=40,
        pad_to_bucket=True,
    )
    shapes, total = set(), 0
    for (source, target_in), target_out in batches.as_numpy_iterator():
        total += source.shape[0]
        assert source.shape == target_in.shape == target_out.shape
        assert source.shape[0] * source.shape[1] <= 400
        shapes.add(source.shape[1])
    assert shapes <= set(default_bucket_lengths(40)) and len(shapes) >= 3
    source, target = val_lengths
    assert total == int(((source + 1 <= 40) & (target + 1 <= 40)).sum())


def test_shuffle_is_seeded_and_cached(tokenizer, val_pairs, tmp_path):
    def first_batch(seed, cache=True):
        batches = make_batches(val_pairs, tokenizer, batch_size=8, seed=seed, cache=cache)
        return next(iter(batches))[0][0].numpy()

    np.testing.assert_array_equal(first_batch(1), first_batch(1, str(tmp_path / "cache")))
    assert not np.array_equal(first_batch(1), first_batch(2))
    assert any(p.name.startswith("cache") for p in tmp_path.iterdir())


def test_pipeline_has_no_python_in_the_graph(tokenizer, val_pairs):
    batches = make_batches(val_pairs, tokenizer, batch_size=8)
    graph = tf.compat.v1.GraphDef()
    graph.ParseFromString(batches._as_serialized_graph().numpy())
    ops = {n.op for n in graph.node}
    for f in graph.library.function:
        ops.update(n.op for n in f.node_def)
    assert "SentencepieceTokenizeOp" in ops
    assert not ops & {"PyFunc", "EagerPyFunc", "PyFuncStateless"}


@pytest.mark.filterwarnings("ignore:Your input ran out of data", "ignore:`shuffle=True`")
def test_batches_fit_a_keras_model(tokenizer, val_pairs):
    batches = make_batches(val_pairs.take(64), tokenizer, batch_size=16)
    source = keras.Input((None,), dtype="int32")
    target_in = keras.Input((None,), dtype="int32")
    context = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(800, 8)(source))
    hidden = keras.layers.Embedding(800, 8)(target_in) + keras.ops.expand_dims(context, 1)
    model = keras.Model([source, target_in], keras.layers.Dense(800)(hidden))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(batches, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_pipeline_argument_errors(tokenizer, val_pairs):
    with pytest.raises(ValueError, match="at most one of `batch_size` and `tokens_per_batch`"):
        make_batches(val_pairs, tokenizer, batch_size=8, tokens_per_batch=100)
    with pytest.raises(ValueError, match="expected a positive integer. Received: batch_size=0"):
        make_batches(val_pairs, tokenizer, batch_size=0)
    with pytest.raises(ValueError, match="length_policy"):
        make_batches(val_pairs, tokenizer, length_policy="cut")
    with pytest.raises(ValueError, match="bucket_lengths"):
        make_batches(val_pairs, tokenizer, bucket_lengths=[16, 8])
    with pytest.raises(ValueError, match="pad_to_bucket=True"):
        make_batches(val_pairs, tokenizer, bucket_lengths=[8, 16], pad_to_bucket=True)
    with pytest.raises(ValueError, match="max_target_length"):
        make_batches(val_pairs, tokenizer, max_target_length=1)
    with pytest.raises(ValueError, match="element_spec"):
        make_batches(tf.data.Dataset.from_tensor_slices(["a"]), tokenizer)
    with pytest.raises(ValueError, match="source_tokenizer"):
        make_batches(val_pairs, object())
    assert default_bucket_lengths(20) == [8, 16, 20]
    assert default_bucket_lengths(16) == [8, 16]
