"""`keras-transformer export --format ctranslate2` (`keras_transformer.ctranslate2_export`):
CTranslate2 runs the converted model as ours runs.

Random-weight models of each architecture option give CTranslate2's `score_batch` the
log-probabilities of our teacher-forced logits; what cannot be converted is refused, naming
it, and so are the options of the other format. Trained runs (greedy ids and scores, int8,
the command) are in tests/test_ctranslate2_runs.py."""

import os

import ctranslate2
import keras
import numpy as np
import pytest
import tensorflow as tf
from ctranslate2.specs import model_spec

from keras_transformer import Transformer, cli
from keras_transformer.constants import CTRANSLATE2_QUANTIZATIONS, EOS_ID
from keras_transformer.ctranslate2_export import (
    export_ctranslate2,
    transformer_spec,
)


def test_quantizations_are_ctranslate2s():
    assert CTRANSLATE2_QUANTIZATIONS == model_spec.ACCEPTED_MODEL_TYPES


# Random weights: every architecture option, through `score_batch`.


def _pieces(size, prefix):
    return ["<pad>", "<unk>", "<s>", "</s>"] + [f"{prefix}{i}" for i in range(4, size)]


def _random_model(source_vocab=60, target_vocab=50, **options):
    keras.utils.set_random_seed(0)
    model = Transformer.from_preset("tiny", source_vocab, target_vocab, **options)
    model((np.ones((1, 3), "int32"), np.ones((1, 2), "int32")))
    return model


def _save(spec, directory):
    spec.optimize(quantization=None)
    os.makedirs(directory)
    spec.save(str(directory))
    return ctranslate2.Translator(str(directory))


def _largest_log_prob_difference(model, translator, source_pieces, target_pieces):
    """The largest |ours - CTranslate2's| over the log-probabilities of random targets
    (EOS included) after random sources (EOS added by CTranslate2, `add_source_eos`)."""
    rng = np.random.default_rng(1)
    sources = [rng.integers(4, model.source_vocab_size, n).tolist() for n in (5, 9, 3)]
    targets = [rng.integers(4, model.target_vocab_size, n).tolist() for n in (6, 4, 8)]
    results = translator.score_batch(
        [[source_pieces[i] for i in s] for s in sources],
        [[target_pieces[i] for i in t] for t in targets],
    )
    largest = 0.0
    for source, target, result in zip(sources, targets, results):
        logits = model((np.array([source + [EOS_ID]], "int32"), np.array([[2] + target], "int32")))
        log_probs = tf.nn.log_softmax(logits[0]).numpy()  # (T + 1, V)
        ours = log_probs[np.arange(len(target) + 1), target + [EOS_ID]]
        assert result.tokens == [target_pieces[i] for i in target] + ["</s>"]
        largest = max(largest, float(np.max(np.abs(ours - np.array(result.log_probs)))))
    return largest


ARCHITECTURES = {
    "post_norm": {},
    "pre_norm": {"norm_first": True},
    "shared_embeddings": {"share_embeddings": True, "source_vocab": 50},
    "untied_pre_norm": {"tie_output_embeddings": False, "norm_first": True},
    "shared_untied": {"share_embeddings": True, "source_vocab": 50, "tie_output_embeddings": False},
    # CTranslate2's default epsilon is 1e-5: a model's own is written into config.json.
    "epsilon_1e-3": {"layer_norm_epsilon": 1e-3},
    "gelu": {"activation": "gelu"},
    "silu": {"activation": "silu"},
    "tanh": {"activation": "tanh"},
    "sigmoid": {"activation": "sigmoid"},
}


@pytest.mark.parametrize("options", ARCHITECTURES.values(), ids=ARCHITECTURES)
def test_ctranslate2_scores_as_our_model(tmp_path, options):
    model = _random_model(**options)
    source = _pieces(model.source_vocab_size, "s")
    target = source if model.share_embeddings else _pieces(model.target_vocab_size, "t")
    translator = _save(transformer_spec(model, source, target, source_eos=True), tmp_path / "m")
    # float32 rounding; a wrong epsilon alone (1e-5 for 1e-6) moves them by ~1e-5.
    assert _largest_log_prob_difference(model, translator, source, target) < 4e-6


def test_ctranslate2s_own_position_table_is_not_ours(tmp_path):
    """Why the table is written: CTranslate2's sinusoidal encoding (all sines, then all
    cosines) is not ours (interleaved), and would change every log-probability."""
    model = _random_model()
    source, target = _pieces(60, "s"), _pieces(50, "t")
    spec = transformer_spec(model, source, target, source_eos=True)
    for stack in (spec.encoder, spec.decoder):
        stack.position_encodings.encodings = model_spec.OPTIONAL  # CTranslate2's own
    translator = _save(spec, tmp_path / "m")
    assert _largest_log_prob_difference(model, translator, source, target) > 0.1


def test_positions_past_max_length_are_refused_as_ours_refuses_them(tmp_path):
    model = _random_model(source_vocab=50, target_vocab=50, max_length=16)
    pieces = _pieces(50, "s")
    translator = _save(transformer_spec(model, pieces, pieces, source_eos=True), tmp_path / "m")
    with pytest.raises(RuntimeError, match="No position encodings are defined for positions >= 16"):
        translator.translate_batch([["s5"] * 20], beam_size=1)  # 20 + EOS source positions
    # Truncated to max_length (EOS kept last), as `Translator.encode_sources` truncates.
    result = translator.translate_batch(
        [["s5"] * 20], beam_size=1, max_input_length=16, max_decoding_length=16
    )
    assert len(result[0].hypotheses[0]) <= 16


@pytest.mark.parametrize("activation", ["elu", "softplus"])
def test_an_activation_ctranslate2_lacks_is_refused_naming_it(activation):
    model = _random_model(activation=activation)
    with pytest.raises(ValueError) as error:
        transformer_spec(model, _pieces(60, "s"), _pieces(50, "t"), source_eos=True)
    assert str(error.value) == (
        f"Received a model with activation='{activation}', which CTranslate2's Transformer "
        "cannot express; expected one of ['gelu', 'relu', 'sigmoid', 'silu', 'tanh']."
    )


def test_other_models_and_wrong_vocabularies_are_refused():
    from keras_transformer import TransformerDecoderModel

    lm = TransformerDecoderModel.from_preset("tiny", vocabulary_size=50)
    with pytest.raises(ValueError, match="Received a TransformerDecoderModel, expected an "):
        transformer_spec(lm, _pieces(50, "s"), _pieces(50, "s"), source_eos=True)
    with pytest.raises(ValueError, match="Received 49 target pieces for a model whose target "):
        transformer_spec(_random_model(), _pieces(60, "s"), _pieces(49, "t"), source_eos=True)


# Refusals before anything is loaded or written.


def _one_error(capsys):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("keras-transformer export: error: ")
    return err.strip().removeprefix("keras-transformer export: error: ")


def test_a_run_of_another_task_is_refused(tmp_path, capsys):
    run = tmp_path / "lm"
    run.mkdir()
    (run / "config.yaml").write_text("task: language_modeling\n")
    out = tmp_path / "out"
    assert cli.main(["export", str(run), "--format", "ctranslate2", "--output-dir", str(out)]) == 2
    assert _one_error(capsys) == (
        f"Received a language_modeling run directory ({run}), expected a translation run."
    )
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["lm"]


@pytest.mark.parametrize(
    "options, message",
    [
        (
            [
                "--format",
                "ctranslate2",
                "--output-dir",
                "o",
                "--base-path",
                "b",
                "--beam-size",
                "2",
            ],
            "Received --base-path, --beam-size with --format ctranslate2, which does not take "
            "them.",
        ),
        (
            ["--base-path", "b", "--quantization", "int8"],
            "Received --quantization with --format savedmodel, which does not take it.",
        ),
        (["--format", "ctranslate2"], "--format ctranslate2 needs --output-dir."),
        ([], "--format savedmodel needs --base-path."),
    ],
    ids=["savedmodel_options", "ctranslate2_option", "no_output_dir", "no_base_path"],
)
def test_options_of_the_other_format_are_refused(tmp_path, capsys, options, message):
    assert cli.main(["export", str(tmp_path), *options]) == 2
    assert _one_error(capsys) == message


def test_bad_output_dirs_and_quantizations_are_refused(tmp_path):
    run = str(tmp_path / "run")  # never read: the arguments are checked first
    with pytest.raises(ValueError, match="which already exists; expected a new folder"):
        export_ctranslate2(run, str(tmp_path))
    with pytest.raises(ValueError, match="expected a local folder: CTranslate2 loads"):
        export_ctranslate2(run, "gs://bucket/ct2")
    with pytest.raises(ValueError, match=r"Received quantization='int4', expected None or one"):
        export_ctranslate2(run, str(tmp_path / "new"), quantization="int4")
