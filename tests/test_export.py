"""Export: versioned atomic writes, fresh-process loading (TF2 and TF1 session paths),
saved_model_cli, the op allow-list, and the stand-in answering the real export over REST and
gRPC."""

import base64
import inspect
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from multi30k_files import read_lines

from keras_transformer import Transformer
from keras_transformer.export import export_predictor, next_version
from keras_transformer.predictors import Translator
from keras_transformer.serving.client import ServingClient, ServingError
from keras_transformer.serving.ops import graph_ops, load_allowed_ops
from keras_transformer.serving.server import start_server
from keras_transformer.tokenization import train_sentencepiece

SENTENCES = ["Ein Hund läuft über die Wiese.", "Zwei Männer spielen Fußball.", ""]

# The translator export's signatures: a contract with the clients of every earlier version.
SIGNATURES = ("serving_default", "translate_nbest", "tokenize", "detokenize")


@pytest.fixture(scope="module")
def translator(multi30k_dir):
    lines = read_lines("train.de.gz", 1500, multi30k_dir) + read_lines(
        "train.en.gz", 1500, multi30k_dir
    )
    tokenizer = train_sentencepiece(lines, vocab_size=400, seed=0)
    model = Transformer.from_preset(
        "tiny", tokenizer.vocab_size, tokenizer.vocab_size, max_length=32
    )
    model.build(((None, None), (None, None)))
    return Translator(model, tokenizer, tokenizer, beam_size=2, max_length=10, jit_compile=False)


@pytest.fixture(scope="module")
def exported(translator, tmp_path_factory):
    base = str(tmp_path_factory.mktemp("exports"))
    return base, export_predictor(translator, base)


@pytest.fixture(scope="module")
def expected(translator):
    translations, scores = translator.translate_strings(tf.constant(SENTENCES))
    nbest, nbest_scores = translator.translate_strings_nbest(tf.constant(SENTENCES))
    ragged = translator.source_tokenizer.tokenize(tf.constant(SENTENCES))
    return {
        "translations": [t.decode() for t in translations.numpy()],
        "scores": scores.numpy().tolist(),
        "nbest": [[t.decode() for t in row] for row in nbest.numpy()],
        "nbest_scores": nbest_scores.numpy().tolist(),
        "token_ids": ragged.to_tensor().numpy().tolist(),
        "lengths": ragged.row_lengths().numpy().tolist(),
    }


def test_export_layout_versions_and_info(exported, translator):
    base, path = exported
    assert path == os.path.join(base, "transformer", "1")
    assert sorted(os.listdir(path)) == [
        "assets",
        "assets.extra",
        "fingerprint.pb",
        "saved_model.pb",
        "variables",
    ]
    with open(os.path.join(path, "assets.extra", "export_info.json")) as f:
        info = json.load(f)
    assert info["decoding"]["beam_size"] == 2 and info["signatures"] == list(SIGNATURES)
    assert info["decoding"]["max_length"] == 10 and info["source_eos"] is True
    assert info["task"] == "translation"
    assert next_version(os.path.join(base, "transformer")) == 2


def test_export_info_records_the_search_as_it_runs(translator):
    from keras_transformer.tasks import task_class

    sampler = Translator(
        translator.model,
        translator.source_tokenizer,
        translator.target_tokenizer,
        method="sample",
        beam_size=4,  # unused by sampling: one hypothesis a sentence
        temperature=0.5,
        top_k=5,
        seed=7,
        jit_compile=False,
    )
    decoding = task_class("translation").export_info(sampler)["decoding"]
    assert decoding["method"] == "sample" and decoding["beam_size"] == 1
    assert (decoding["temperature"], decoding["top_k"], decoding["seed"]) == (0.5, 5, 7)
    assert decoding["top_p"] is None
    # Every argument that changes what the search finds is recorded (early_stopping was not).
    from keras_transformer.decoding.runtime import SETTINGS_NOT_RECORDED, BatchDecoder

    arguments = set(inspect.signature(BatchDecoder.__init__).parameters) - {"self"}
    assert set(decoding) == arguments - SETTINGS_NOT_RECORDED


def test_existing_version_and_failed_checks_leave_nothing_behind(translator, tmp_path):
    base = str(tmp_path)
    model_dir = os.path.join(base, "transformer")
    os.makedirs(os.path.join(model_dir, "3"))
    with pytest.raises(ValueError, match="already exists.*next free one is 4"):
        export_predictor(translator, base, version=3)
    # An allow-list without the SentencePiece ops: the graph is refused, nothing published.
    allowed = {op for op in load_allowed_ops() if not op.startswith("Sentencepiece")}
    with pytest.raises(ValueError, match="Sentencepiece"):
        export_predictor(translator, base, allowed_ops=allowed)
    assert os.listdir(model_dir) == ["3"]
    with pytest.raises(ValueError, match="expected a positive integer. Received: version=0"):
        export_predictor(translator, base, version=0)


def test_graph_uses_only_ops_tf_serving_ships(exported):
    ops = graph_ops(exported[1])
    assert "SentencepieceOp" in ops and "SentencepieceTokenizeOp" in ops
    assert ops <= load_allowed_ops()


def test_graph_needs_no_xla(exported):
    """Every function of the served graph: no Xla* op, nothing marked for XLA compilation."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(exported[1], "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    (meta_graph_def,) = saved_model.meta_graphs
    library = meta_graph_def.graph_def.library
    assert any("while_body" in fn.signature.name for fn in library.function)  # decoding loop
    op_types = {node.op for fn in library.function for node in fn.node_def}
    op_types |= {node.op for node in meta_graph_def.graph_def.node}
    assert "TensorScatterUpdate" in op_types  # the cache write
    assert not {op for op in op_types if op.startswith(("Xla", "_Xla"))}
    for fn in library.function:
        assert not fn.attr["_XlaMustCompile"].b, fn.signature.name
        for node in fn.node_def:
            assert not node.attr["_XlaMustCompile"].b, (fn.signature.name, node.name)


def test_export_refuses_a_cache_written_with_xla_ops(translator, tmp_path, monkeypatch):
    """The decoding loop with `keras.ops.slice_update` (XlaDynamicUpdateSlice) is refused."""
    import keras

    from keras_transformer.layers import multi_head_attention

    def write_cache_with_slice_update(cache, index, key, value):
        return tuple(
            keras.ops.slice_update(c, [0, 0, index, 0], keras.ops.cast(new, c.dtype))
            for c, new in zip(cache, (key, value))
        )

    monkeypatch.setattr(multi_head_attention, "write_cache", write_cache_with_slice_update)
    with pytest.raises(ValueError, match=r"op XlaDynamicUpdateSlice \(node '[^']*while[^']*'"):
        export_predictor(translator, str(tmp_path))
    assert os.listdir(tmp_path / "transformer") == []


_FRESH_PROCESS = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tf-text ops)

    path, sentences = sys.argv[1], json.loads(sys.argv[2])
    assert not any(m.startswith("keras_transformer") for m in sys.modules)
    out = {}

    loaded = tf.saved_model.load(path)
    assert set(loaded.signatures) == {"serving_default", "translate_nbest", "tokenize",
                                      "detokenize"}, list(loaded.signatures)
    s = tf.constant(sentences)
    r = loaded.signatures["serving_default"](sentences=s)
    out["tf2_translations"] = [t.decode() for t in r["translations"].numpy()]
    out["tf2_scores"] = r["scores"].numpy().tolist()
    r = loaded.signatures["translate_nbest"](sentences=s)
    out["tf2_nbest"] = [[t.decode() for t in row] for row in r["translations"].numpy()]
    r = loaded.signatures["tokenize"](sentences=s)
    out["tf2_token_ids"] = r["token_ids"].numpy().tolist()
    out["tf2_lengths"] = r["lengths"].numpy().tolist()
    r = loaded.signatures["detokenize"](token_ids=r["token_ids"])
    out["tf2_detokenized"] = [t.decode() for t in r["sentences"].numpy()]

    # The TF1 session path, as TF Serving's C++ server loads and runs a SavedModel.
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)
        def run(name, feeds):
            sig = meta.signature_def[name]
            fetches = {k: v.name for k, v in sig.outputs.items()}
            return sess.run(fetches, {sig.inputs[k].name: v for k, v in feeds.items()})
        r = run("serving_default", {"sentences": sentences})
        out["tf1_translations"] = [t.decode() for t in r["translations"]]
        out["tf1_scores"] = r["scores"].tolist()
        r = run("translate_nbest", {"sentences": sentences})
        out["tf1_nbest"] = [[t.decode() for t in row] for row in r["translations"]]
        r = run("tokenize", {"sentences": sentences})
        out["tf1_token_ids"] = r["token_ids"].tolist()
        r = run("detokenize", {"token_ids": r["token_ids"]})
        out["tf1_detokenized"] = [t.decode() for t in r["sentences"]]
    print("RESULT" + json.dumps(out))
    """
)


@pytest.mark.slow
def test_fresh_process_loads_with_tf2_and_tf1_session_loaders(exported, expected, translator):
    result = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, exported[1], json.dumps(SENTENCES)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.split("RESULT", 1)[1])
    for loader in ("tf2", "tf1"):
        assert out[f"{loader}_translations"] == expected["translations"]
        np.testing.assert_allclose(out[f"{loader}_scores"], expected["scores"], atol=1e-4)
        assert out[f"{loader}_nbest"] == expected["nbest"]
        assert out[f"{loader}_token_ids"] == expected["token_ids"]
        # detokenize(tokenize(s)) gives the source text back (after normalization).
        assert out[f"{loader}_detokenized"] == [s.strip() for s in SENTENCES]
    assert out["tf2_lengths"] == expected["lengths"]
    # And the in-Python Translator agrees with the exported graph.
    assert translator.translate(SENTENCES) == expected["translations"]


@pytest.mark.slow
def test_saved_model_cli_lists_the_signatures(exported):
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    result = subprocess.run(
        [cli, "show", "--dir", exported[1], "--all"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stdout
    for name in SIGNATURES:
        assert f"signature_def['{name}']" in text
    default = text.split("signature_def['serving_default']")[1].split("signature_def[")[0]
    assert "inputs['sentences'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in (
        default
    )
    assert (
        "outputs['translations'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)"
        in (default)
    )
    assert "outputs['scores'] tensor_info:\n        dtype: DT_FLOAT\n        shape: (-1)" in default
    for name in SIGNATURES:  # (the `__saved_model_init_op` entry is TF's own, DT_INVALID)
        section = text.split(f"signature_def['{name}']")[1].split("signature_def[")[0]
        assert "DT_INVALID" not in section and "unknown_rank" not in section


@pytest.mark.slow
def test_stand_in_serves_the_export_over_rest_and_grpc(exported, expected):
    base, _ = exported
    with start_server(os.path.join(base, "transformer"), "transformer") as server:
        rest = ServingClient(server.url, "transformer", timeout=60)
        grpc = ServingClient(f"grpc://{server.grpc_target}", "transformer", timeout=60)
        for client in (rest, grpc):
            rows = client.predict(SENTENCES)
            assert [r["translations"] for r in rows] == expected["translations"]
            np.testing.assert_allclose([r["scores"] for r in rows], expected["scores"], atol=1e-4)
            columns = client.predict(SENTENCES, columnar=True)
            assert columns["translations"] == expected["translations"]
            tokens = client.predict(SENTENCES[:1], signature_name="tokenize")
            length = expected["lengths"][0]
            assert tokens[0]["token_ids"][:length] == expected["token_ids"][0][:length]

            # Bad input on the real model: a clear 4xx or a normal answer, never a crash.
            very_long = " ".join(["Hund"] * 2000)
            assert len(client.predict([very_long])) == 1  # truncated to max_length, answered
            invalid_utf8 = base64.b64encode(b"\xff\xfe Hund").decode()
            try:
                client.predict([{"b64": invalid_utf8}])
            except ServingError as error:
                assert 400 <= error.status_code < 500 and error.message
            with pytest.raises(ServingError) as error:
                client.predict([1, 2])
            assert error.value.status_code == 400
            # ... and the server still answers a valid request correctly.
            rows = client.predict(SENTENCES)
            assert [r["translations"] for r in rows] == expected["translations"]


def test_cli_export_from_a_run_dir(translator, tmp_path):
    from keras_transformer.cli import main
    from keras_transformer.run_dir import RunPaths

    paths = RunPaths(str(tmp_path / "run"))
    os.makedirs(paths.root)
    translator.model.save(paths.model)
    translator.source_tokenizer.save(paths.source_tokenizer)
    translator.target_tokenizer.save(paths.target_tokenizer)
    base = str(tmp_path / "exports")
    assert main(["export", paths.root, "--base-path", base, "--beam-size", "1"]) == 0
    assert os.listdir(os.path.join(base, "transformer")) == ["1"]
