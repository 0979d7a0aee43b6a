"""Post-training weight types (`keras_transformer.quantization`): the copies' weights and
outputs, the predictors' `quantize`, the exports TF Serving runs, and the commands' option."""

import argparse
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from multi30k_files import read_lines

from keras_transformer import Transformer, TransformerDecoderModel, TransformerEncoderModel
from keras_transformer.commands.decoding_options import add_decoding_arguments, predictor_options
from keras_transformer.constants import QUANTIZATIONS, TASKS
from keras_transformer.export import export_predictor
from keras_transformer.predictors import Translator
from keras_transformer.quantization import quantize_model
from keras_transformer.serving.ops import check_serving_ops
from keras_transformer.tasks import task_class
from keras_transformer.tokenization import train_sentencepiece

SENTENCES = ["Ein Hund läuft über die Wiese.", "Zwei Männer spielen Fußball.", ""]


def _models():
    """(model, inputs) of each architecture, tiny, random weights."""
    ids = np.array([[5, 9, 13, 3], [7, 8, 3, 0]], "int32")
    transformer = Transformer.from_preset("tiny", 60, 50)
    encoder = TransformerEncoderModel(60, 4, pooling="mean", num_layers=2, d_model=32, d_ff=64)
    decoder = TransformerDecoderModel(60, num_layers=2, d_model=32, d_ff=64)
    cases = [(transformer, (ids, ids[:, :3])), (encoder, ids), (decoder, ids)]
    for model, inputs in cases:
        model(inputs)
    return cases


@pytest.mark.parametrize("quantize", QUANTIZATIONS)
def test_copies_hold_the_new_type_and_the_same_function(quantize):
    for model, inputs in _models():
        before = [w.numpy().copy() for w in model.weights]
        reference = np.asarray(model(inputs))
        copy = quantize_model(model, quantize)

        assert copy is not model
        dtypes = {str(w.dtype) for w in copy.weights}
        if quantize == "bfloat16":
            assert dtypes == {"bfloat16"}
        else:  # int8 kernels and embeddings, float32 scales and the rest
            kernels = [w for w in copy.weights if str(w.dtype) == "int8"]
            dense = [w for w in model.weights if w.path.endswith(("/kernel", "/embeddings"))]
            assert len(kernels) == len(dense) > 0
        # The original is untouched.
        assert all(str(w.dtype) == "float32" for w in model.weights)
        for w, b in zip(model.weights, before):
            np.testing.assert_array_equal(w.numpy(), b)
        # The same function, to the type's precision: random weights copied from a
        # different model would be off by about the logits' own spread.
        output = np.asarray(copy(inputs), "float32")
        assert output.dtype == reference.dtype == np.float32
        error = np.abs(output - reference).max() / reference.std()
        assert error < 0.15, (type(model).__name__, error)


@pytest.mark.parametrize("quantize", QUANTIZATIONS)
def test_a_model_trained_in_mixed_bfloat16_quantises_and_predicts(quantize):
    # A run trained with `training.dtype_policy=mixed_bfloat16` (the half-hour recipe) is
    # saved with that policy; its int8 copy once failed in the embedding (bf16 positions
    # added to the int8 lookup's float32 output).
    keras.config.set_dtype_policy("mixed_bfloat16")
    cases = _models()
    keras.config.set_dtype_policy("float32")  # as in a new process that loads the run
    for model, inputs in cases:
        reference = np.asarray(model(inputs), "float32")  # the model's own policy: bf16
        output = np.asarray(quantize_model(model, quantize)(inputs), "float32")
        error = np.abs(output - reference).max() / reference.std()
        assert error < 0.15, (type(model).__name__, error)


def test_refuses_an_unknown_type_and_a_quantised_model():
    model, _ = _models()[0]
    assert quantize_model(model, None) is model
    with pytest.raises(ValueError, match=r"argument `quantize`, expected one of \('int8', "):
        quantize_model(model, "int4")
    with pytest.raises(ValueError, match="already quantised"):
        quantize_model(quantize_model(model, "int8"), "int8")


@pytest.fixture(scope="module")
def tokenizer(multi30k_dir):
    lines = read_lines("train.de.gz", 1000, multi30k_dir) + read_lines(
        "train.en.gz", 1000, multi30k_dir
    )
    return train_sentencepiece(lines, vocab_size=400, seed=0)


@pytest.mark.parametrize("quantize", QUANTIZATIONS)
def test_quantised_translator_exports_a_model_tf_serving_runs(tokenizer, quantize, tmp_path):
    model = Transformer.from_preset("tiny", tokenizer.vocab_size, tokenizer.vocab_size)
    model.build(((None, None), (None, None)))
    options = {"beam_size": 2, "max_length": 10, "jit_compile": False}
    translator = Translator(model, tokenizer, tokenizer, quantize=quantize, **options)
    assert translator.quantize == quantize and translator.model is not model
    assert translator.decoder.model is translator.model

    path = export_predictor(translator, str(tmp_path))  # the op check runs on publishing
    check_serving_ops(path)
    with open(os.path.join(path, "assets.extra", "export_info.json")) as f:
        assert json.load(f)["quantize"] == quantize
    loaded = tf.saved_model.load(path)
    types = {v.dtype.name for v in loaded.variables if v.name.split(":")[0].endswith("embeddings")}
    assert types == {"int8" if quantize == "int8" else "bfloat16"}
    served = loaded.signatures["serving_default"](sentences=tf.constant(SENTENCES))
    expected, scores = translator.translate_strings(tf.constant(SENTENCES))
    assert served["translations"].numpy().tolist() == expected.numpy().tolist()
    np.testing.assert_allclose(served["scores"].numpy(), scores.numpy(), rtol=1e-5, atol=1e-6)
    assert expected.numpy()[-1] == b""  # a blank sentence stays blank
    assert translator.translate(SENTENCES) == [t.decode() for t in expected.numpy()]


def test_every_task_takes_quantize_on_the_command_line():
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    add_decoding_arguments(parser)
    for name in TASKS:
        args = parser.parse_args(["runs/x", "--quantize", "bfloat16"])
        assert predictor_options(args, task_class(name))["quantize"] == "bfloat16"
    with pytest.raises(SystemExit):
        parser.parse_args(["runs/x", "--quantize", "int4"])
