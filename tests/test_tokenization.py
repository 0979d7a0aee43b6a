"""Tests of `keras_transformer.tokenization` (SentencePiece in the TensorFlow graph)."""

import io
import json
import os
import subprocess
import sys
import textwrap
import unicodedata

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf
from multi30k_files import read_lines as _lines

from keras_transformer.tokenization import (
    BOS_ID,
    EOS_ID,
    MODEL_FILENAME,
    PAD_ID,
    UNK_ID,
    SubwordTokenizer,
    train_sentencepiece,
    train_tokenizers,
)


def _nmt_nfkc(text):
    """What SentencePiece's default `nmt_nfkc` rule does to ordinary text."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def _decode(tensor):
    return [s.decode("utf-8") for s in tensor.numpy().tolist()]


@pytest.fixture(scope="session")
def tokenizer():
    """A shared de+en unigram model, trained once on 3,000 Multi30k training pairs."""
    texts = _lines("train.de.gz", 3000) + _lines("train.en.gz", 3000)
    return train_sentencepiece(texts, vocab_size=1000, seed=7)


def test_properties_and_special_pieces(tokenizer):
    assert tokenizer.vocab_size == 1000
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (
        0,
        1,
        2,
        3,
    )
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    pieces = _decode(tokenizer.id_to_piece([0, 1, 2, 3]))
    assert pieces == ["<pad>", "<unk>", "<s>", "</s>"]
    assert isinstance(tokenizer, tf.Module)


def test_tokenize_returns_ragged_int32_without_specials(tokenizer):
    ids = tokenizer.tokenize(["Ein Hund rennt.", "A dog runs through the grass."])
    assert isinstance(ids, tf.RaggedTensor)
    assert ids.dtype == tf.int32
    assert ids.shape.as_list() == [2, None]
    flat = ids.flat_values.numpy()
    assert flat.min() > EOS_ID  # no pad/unk/bos/eos in ordinary text
    assert flat.max() < tokenizer.vocab_size
    pieces = _decode(tokenizer.id_to_piece(ids[1]))
    assert "".join(pieces).replace("\u2581", " ").strip() == "A dog runs through the grass."


def test_scalar_input_gives_1d_ids(tokenizer):
    ids = tokenizer.tokenize("A dog.")
    assert isinstance(ids, tf.Tensor) and ids.shape.rank == 1
    assert tokenizer.detokenize(ids).numpy().decode() == "A dog."


@pytest.mark.parametrize("name", ["val.de.gz", "val.en.gz"])
def test_round_trip_on_unseen_multi30k_sentences(tokenizer, name):
    sentences = _lines(name)
    assert len(sentences) == 1014
    out = _decode(tokenizer.detokenize(tokenizer.tokenize(sentences)))
    mismatches = [(s, o) for s, o in zip(sentences, out) if _nmt_nfkc(s) != o]
    assert mismatches == []
    # The model really splits words: many more ids than words.
    ids = tokenizer.tokenize(sentences)
    assert ids.flat_values.shape[0] > 1.2 * sum(len(s.split()) for s in sentences)


def test_round_trip_of_unseen_characters_uses_byte_fallback(tokenizer):
    text = "Ein Schneemann ☃ vor dem 漢字-Schild, 25°C."
    ids = tokenizer.tokenize([text])
    assert UNK_ID not in ids.flat_values.numpy()
    assert _decode(tokenizer.detokenize(ids)) == [_nmt_nfkc(text)]
    # NFKC and whitespace normalization happen: full-width letters and runs of spaces.
    assert _decode(tokenizer.detokenize(tokenizer.tokenize(["  Ａ   dog  "]))) == ["A dog"]


def test_detokenize_dense_padded_drops_specials_and_after_eos(tokenizer):
    ragged = tokenizer.tokenize(["Ein Hund.", "Zwei Katzen schlafen auf dem Sofa."])
    a, b = ragged[0].numpy().tolist(), ragged[1].numpy().tolist()
    width = len(b) + 6
    dense = np.zeros((2, width), np.int32)
    row_a = [BOS_ID] + a + [EOS_ID] + b[:3]  # junk after EOS must go
    dense[0, : len(row_a)] = row_a
    dense[1, : len(b) + 1] = b + [EOS_ID]
    expected = ["Ein Hund.", "Zwei Katzen schlafen auf dem Sofa."]
    assert _decode(tokenizer.detokenize(dense)) == expected
    assert _decode(tokenizer.detokenize(tf.constant(dense, tf.int64))) == expected
    assert _decode(tokenizer.detokenize(ragged)) == expected
    # A row without EOS keeps everything but padding.
    assert _decode(tokenizer.detokenize([a + [0, 0]])) == ["Ein Hund."]
    # A row starting with EOS is empty.
    assert _decode(tokenizer.detokenize([[EOS_ID] + a])) == [""]


def test_detokenize_rejects_bad_inputs(tokenizer):
    with pytest.raises(ValueError, match="expected integer ids"):
        tokenizer.detokenize(tf.constant([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="rank 1 or 2"):
        tokenizer.detokenize(tf.zeros((1, 2, 3), tf.int32))


def test_works_inside_tf_function(tokenizer):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(text):
        ids = tokenizer.tokenize(text)
        return tokenizer.detokenize(ids.to_tensor()), ids.to_tensor()

    texts = ["Ein Mann fährt Fahrrad.", "A woman is cooking."]
    out, ids = round_trip(tf.constant(texts))
    assert _decode(out) == texts
    np.testing.assert_array_equal(ids.numpy(), tokenizer.tokenize(texts).to_tensor().numpy())


def test_survives_clearing_the_eager_kernel_cache():
    # `tf.random.set_seed` (and `keras.utils.set_random_seed`) clear the eager kernel cache,
    # which deleted tf-text's kernel-private SentencePiece resource.
    tok = train_sentencepiece(_lines("train.en.gz", 500), vocab_size=400)
    before = tok.tokenize(["A dog runs."]).to_list()
    tf.random.set_seed(5)
    assert tok.tokenize(["A dog runs."]).to_list() == before
    assert _decode(tok.detokenize(tok.tokenize(["A dog runs."]))) == ["A dog runs."]


def test_save_and_load(tokenizer, tmp_path):
    path = tokenizer.save(str(tmp_path / "tok"))
    assert path == str(tmp_path / "tok" / MODEL_FILENAME)
    vocab = (tmp_path / "tok" / "spm.vocab").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == 1000 and vocab[3].startswith("</s>\t")
    texts = ["Zwei Hunde spielen im Schnee.", "Two dogs play in the snow."]
    for loaded in (SubwordTokenizer.load(str(tmp_path / "tok")), SubwordTokenizer.load(path)):
        assert loaded.model_proto == tokenizer.model_proto
        assert loaded.vocab_size == tokenizer.vocab_size
        np.testing.assert_array_equal(
            loaded.tokenize(texts).to_tensor().numpy(),
            tokenizer.tokenize(texts).to_tensor().numpy(),
        )
    tokenizer.save(str(tmp_path / "other"), filename="de.model")
    assert SubwordTokenizer.load(str(tmp_path / "other"), "de.model").vocab_size == 1000


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="No SentencePiece model"):
        SubwordTokenizer.load(str(tmp_path))
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a sentencepiece model")
    with pytest.raises(ValueError, match="bad.model"):
        SubwordTokenizer.load(str(bad))
    with pytest.raises(ValueError, match="model_proto"):
        SubwordTokenizer(b"")


def test_rejects_model_with_other_special_ids():
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_lines("train.en.gz", 300)),
        model_writer=buffer,
        vocab_size=200,
        minloglevel=2,
    )  # SentencePiece's defaults: unk=0, bos=1, eos=2, no pad.
    with pytest.raises(ValueError, match=r"expected pad=0, unk=1, bos=2, eos=3.*pad=-1, unk=0"):
        SubwordTokenizer(buffer.getvalue())


@pytest.mark.parametrize("texts", [[], ["", "   ", "\n"]])
def test_train_on_empty_corpus_raises(texts):
    with pytest.raises(ValueError, match="empty corpus"):
        train_sentencepiece(texts, vocab_size=300)


def test_train_argument_errors():
    texts = _lines("train.en.gz", 50)
    with pytest.raises(ValueError, match="vocab_size.*Vocabulary size too high"):
        train_sentencepiece(texts, vocab_size=5000)
    with pytest.raises(ValueError, match="vocab_size.*smaller than required"):
        train_sentencepiece(texts, vocab_size=100)
    # Below the 4 special pieces and one more (2 crashed SentencePiece with a RuntimeError).
    for size in (0, 2, 4):
        with pytest.raises(ValueError, match=f"at least 5 .*Received: vocab_size={size}"):
            train_sentencepiece(texts, vocab_size=size)
    with pytest.raises(ValueError, match="model_type"):
        train_sentencepiece(texts, vocab_size=300, model_type="word2vec")
    with pytest.raises(ValueError, match="normalization"):
        train_sentencepiece(texts, vocab_size=300, normalization="nfd")
    with pytest.raises(ValueError, match="character_coverage"):
        train_sentencepiece(texts, vocab_size=300, character_coverage=0)
    with pytest.raises(ValueError, match="not a single string"):
        train_sentencepiece("A dog runs.", vocab_size=300)
    with pytest.raises(ValueError, match="str or bytes"):
        train_sentencepiece(["A dog.", 3], vocab_size=300)
    with pytest.raises(ValueError, match="not valid UTF-8 at index 1"):
        train_sentencepiece([b"A dog.", b"\xff\xfe"], vocab_size=300)


def test_bpe_from_dataset_with_identity_normalization():
    texts = _lines("train.fr.gz", 1000)
    dataset = tf.data.Dataset.from_tensor_slices(texts)
    tok = train_sentencepiece(dataset, vocab_size=600, model_type="bpe", normalization="identity")
    assert tok.vocab_size == 600
    val = _lines("val.fr.gz", 200)
    assert _decode(tok.detokenize(tok.tokenize(val))) == [" ".join(s.split()) for s in val]
    # identity keeps full-width letters (NFKC would fold them to ASCII).
    assert _decode(tok.detokenize(tok.tokenize(["Ａ chien"]))) == ["Ａ chien"]


SAMPLED_TEXT = "Zwei junge Männer in roten Hemden spielen auf einer großen Wiese Fußball."


@pytest.mark.parametrize("model_type, alpha", [("unigram", 0.1), ("bpe", 0.3)])
def test_sampling_tokenizer_varies_the_segmentation_not_the_text(tokenizer, model_type, alpha):
    if model_type == "bpe":
        texts = _lines("train.de.gz", 1000)
        tokenizer = train_sentencepiece(texts, vocab_size=600, model_type="bpe", seed=7)
    sampler = tokenizer.with_sampling(alpha)
    assert sampler.sampling_alpha == alpha and tokenizer.sampling_alpha is None
    assert sampler.vocab_size == tokenizer.vocab_size
    assert tokenizer.with_sampling(None) is tokenizer and sampler.with_sampling(alpha) is sampler
    best = tuple(tokenizer.tokenize(SAMPLED_TEXT).numpy())
    assert {tuple(tokenizer.tokenize(SAMPLED_TEXT).numpy()) for _ in range(10)} == {best}
    sampled = {tuple(sampler.tokenize(SAMPLED_TEXT).numpy()) for _ in range(50)}
    assert len(sampled) > 1 and sampled != {best}
    texts = {tokenizer.detokenize(list(ids)).numpy().decode("utf-8") for ids in sampled}
    assert texts == {_nmt_nfkc(SAMPLED_TEXT)}
    # A batch samples each row on its own, inside a tf.data pipeline too.
    rows = tf.data.Dataset.from_tensors([SAMPLED_TEXT] * 8).map(sampler.tokenize)
    batch = next(iter(rows)).to_list()
    assert len({tuple(r) for r in batch}) > 1


@pytest.mark.parametrize("alpha", [0, -0.1, 1.5, True, "0.1"])
def test_sampling_alpha_must_be_a_probability(tokenizer, alpha):
    with pytest.raises(ValueError, match="sampling_alpha.*a float in \\(0, 1\\]"):
        SubwordTokenizer(tokenizer.model_proto, sampling_alpha=alpha)


def test_train_tokenizers_shared_and_per_language():
    pairs = tf.data.Dataset.from_tensor_slices(
        (_lines("train.de.gz", 1500), _lines("train.en.gz", 1500))
    )
    source, target = train_tokenizers(pairs, vocab_size=700, shared=True)
    assert source is target
    pieces = set(_decode(source.id_to_piece(tf.range(source.vocab_size))))
    assert {"\u2581Hund", "\u2581dog"} <= pieces  # both languages in one model

    source, target = train_tokenizers(pairs, vocab_size=700, shared=False)
    assert source is not target
    de = set(_decode(source.id_to_piece(tf.range(700))))
    en = set(_decode(target.id_to_piece(tf.range(700))))
    assert "\u2581Hund" in de and "\u2581Hund" not in en
    assert "\u2581dog" in en and "\u2581dog" not in de


_LOADER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    path, texts = sys.argv[1], json.loads(sys.argv[2])
    result = {}

    # TF2 loader.
    loaded = tf.saved_model.load(path)
    ids = loaded.signatures["tokenize"](text=tf.constant(texts))["ids"]
    result["tf2_ids"] = ids.numpy().tolist()
    out = loaded.signatures["detokenize"](ids=ids)["text"]
    result["tf2_text"] = [s.decode("utf-8") for s in out.numpy().tolist()]

    # TF1 loader, as TF Serving: run the SignatureDefs by tensor name.
    with tf.compat.v1.Session(graph=tf.Graph()) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)
        tok = meta.signature_def["tokenize"]
        ids = sess.run(tok.outputs["ids"].name, {tok.inputs["text"].name: texts})
        detok = meta.signature_def["detokenize"]
        out = sess.run(detok.outputs["text"].name, {detok.inputs["ids"].name: ids})
    result["tf1_ids"] = ids.tolist()
    result["tf1_text"] = [s.decode("utf-8") for s in out.tolist()]
    result["modules"] = sorted(
        m for m in sys.modules if m.split(".")[0] in ("sentencepiece", "keras_transformer")
    )
    print("RESULT" + json.dumps(result))
    """
)

_TEXT_OPS = {
    "SentencepieceOp",
    "SentencepieceTokenizeOp",
    "SentencepieceDetokenizeOp",
    "SentencepieceIdToStringOp",
    "SentencepieceStringToIdOp",
    "SentencepieceVocabSizeOp",
}


def _saved_model_ops(path):
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    ops = set()
    for meta in saved_model.meta_graphs:
        ops.update(node.op for node in meta.graph_def.node)
        for function in meta.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    function_names = {
        f.signature.name for m in saved_model.meta_graphs for f in m.graph_def.library.function
    }
    return ops - function_names


@pytest.mark.slow
def test_saved_model_loads_in_fresh_process_with_tf_and_tf_text_only(tokenizer, tmp_path):
    # The tokenizer comes from a file that is deleted before loading: the SavedModel must
    # carry the SentencePiece model itself.
    model_dir = tmp_path / "tokenizer"
    tokenizer.save(str(model_dir))
    loaded_tokenizer = SubwordTokenizer.load(str(model_dir))
    for f in model_dir.iterdir():
        f.unlink()
    model_dir.rmdir()

    class Exported(tf.Module):
        def __init__(self, tok):
            super().__init__()
            self.tokenizer = tok

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def tokenize(self, text):
            return {"ids": self.tokenizer.tokenize(text).to_tensor()}

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="ids")])
        def detokenize(self, ids):
            return {"text": self.tokenizer.detokenize(ids)}

    module = Exported(loaded_tokenizer)
    export_dir = str(tmp_path / "saved_model")
    tf.saved_model.save(
        module,
        export_dir,
        signatures={"tokenize": module.tokenize, "detokenize": module.detokenize},
    )
    assert not os.path.exists(os.path.join(export_dir, "assets", MODEL_FILENAME))

    ops = _saved_model_ops(export_dir)
    assert {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp"} <= ops
    assert not ops & {"PyFunc", "EagerPyFunc", "PyFuncStateless"}
    non_core = {op for op in ops if not hasattr(tf.raw_ops, op)}
    assert non_core <= _TEXT_OPS, non_core

    texts = _lines("test_2016_flickr.de.gz", 20) + _lines("test_2016_flickr.en.gz", 20)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [sys.executable, "-c", _LOADER_SCRIPT, export_dir, json.dumps(texts)],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    result = json.loads(line[len("RESULT") :])

    expected_ids = tokenizer.tokenize(texts).to_tensor().numpy().tolist()
    expected_text = [_nmt_nfkc(t) for t in texts]
    assert result["tf2_ids"] == expected_ids
    assert result["tf1_ids"] == expected_ids
    assert result["tf2_text"] == expected_text
    assert result["tf1_text"] == expected_text
    assert result["modules"] == []
