"""`keras-transformer export --format ctranslate2` (`keras_transformer.ctranslate2_export`):
CTranslate2 runs the converted model as ours runs.

Random-weight models of each architecture option give CTranslate2's `score_batch` the
log-probabilities of our teacher-forced logits; two trained runs (post-norm, shared
vocabulary and embeddings, sources with EOS; pre-norm, two vocabularies, separate embeddings
and output projection, sources without EOS) give CTranslate2's greedy search our greedy ids
and scores; int8 loads and translates; what cannot be converted is refused, naming it."""

import json
import os

import ctranslate2
import keras
import numpy as np
import pytest
import tensorflow as tf
from ctranslate2.specs import model_spec
from multi30k_files import read_lines

from keras_transformer import Transformer, cli
from keras_transformer.config import load_config
from keras_transformer.constants import CTRANSLATE2_QUANTIZATIONS, EOS_ID, PAD_ID
from keras_transformer.ctranslate2_export import (
    INFO_FILENAME,
    SOURCE_SPM_FILENAME,
    TARGET_SPM_FILENAME,
    export_ctranslate2,
    export_translator_ctranslate2,
    transformer_spec,
)
from keras_transformer.predictors import Translator
from keras_transformer.runner import train
from keras_transformer.tokenization import SubwordTokenizer


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


# Trained runs: greedy ids, scores, int8, the command line.

MAX_OUTPUT = 20  # some outputs stop at EOS, others at this limit


def _config(root, multi30k_dir, name, *overrides):
    return load_config(
        "multi30k_de_en",
        [
            f"training.run_dir={root / name}",
            f"translation.local_dir={multi30k_dir}",
            "translation.max_source_length=40",
            "translation.max_target_length=40",
            "translation.bleu_every=null",
            "data.max_train_examples=8000",
            "data.max_validation_examples=16",
            "data.vocab_size=1000",
            "data.batch_size=32",
            "data.tokens_per_batch=null",
            "model.num_encoder_layers=2",
            "model.num_decoder_layers=2",
            "model.d_model=32",
            "model.num_heads=2",
            "model.d_ff=64",
            "model.max_length=40",
            "training.epochs=1",
            "training.steps_per_epoch=null",  # one pass over the examples: ~240 steps
            "training.warmup_steps=40",
            # A low rate: at the recipe's (scale 0.5, linear decay) a post-norm model of
            # 100 steps gave one output for every source.
            "training.learning_rate_scale=0.25",
            "training.lr_decay=inverse_sqrt",
            "model.dropout=0.0",
            "training.max_minutes=null",
            "training.verbose=0",
            *overrides,
        ],
    )


RUNS = {
    "post_norm_shared": [],
    "pre_norm_separate": [
        "model.norm_first=true",
        "translation.shared_vocab=false",
        "model.share_embeddings=false",
        "model.tie_output_embeddings=false",
        "translation.source_eos=false",
    ],
}


@pytest.fixture(scope="module")
def sentences(multi30k_dir):
    return read_lines("val.de.gz", 16, multi30k_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, multi30k_dir):
    root = tmp_path_factory.mktemp("ct2_runs")
    return {
        name: train(_config(root, multi30k_dir, name, *overrides)).paths.root
        for name, overrides in RUNS.items()
    }


def _ours(run_dir, sentences):
    """Our greedy ids (up to EOS) and summed log-probabilities of `sentences`."""
    translator = Translator.from_run_dir(
        run_dir,
        beam_size=1,
        length_penalty=0.0,
        max_length_a=0.0,
        max_length_b=MAX_OUTPUT,
        jit_compile=False,
    )
    tokens, scores = translator.decode_ids(translator.encode_sources(sentences))
    ids = []
    for row in tokens:
        row = [i for i in row[0].tolist() if i != PAD_ID]  # PAD only follows the end
        ids.append(row[: row.index(EOS_ID)] if EOS_ID in row else row)
    return translator, ids, np.array([s[0] for s in scores])


def _theirs(directory, sentences, max_length):
    """CTranslate2's greedy ids and scores of `sentences`, tokenized by the exported
    SentencePiece model, with the limits that make its search ours."""
    source = SubwordTokenizer.load(os.path.join(directory, SOURCE_SPM_FILENAME))
    target = SubwordTokenizer.load(os.path.join(directory, TARGET_SPM_FILENAME))
    tokens = source.id_to_piece(source.tokenize(sentences)).to_list()
    results = ctranslate2.Translator(directory).translate_batch(
        [[t.decode("utf-8") for t in row] for row in tokens],
        beam_size=1,
        max_input_length=max_length,
        max_decoding_length=MAX_OUTPUT,
        length_penalty=0.0,  # else CTranslate2 divides greedy scores by the length too
        min_decoding_length=0,  # 1 forbids EOS first, raising the first log-probability
        return_scores=True,
    )
    index = {piece: i for i, piece in enumerate(target.pieces)}
    ids = [[index[piece] for piece in r.hypotheses[0]] for r in results]
    return results, ids, np.array([r.scores[0] for r in results])


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNS)
def test_greedy_ids_and_scores_equal_ours(runs, sentences, tmp_path, name):
    translator, our_ids, our_scores = _ours(runs[name], sentences)
    directory = export_ctranslate2(runs[name], str(tmp_path / "ct2"))
    _, their_ids, their_scores = _theirs(directory, sentences, translator.model.max_length)
    assert their_ids == our_ids
    print(f"{name}: largest score difference {np.max(np.abs(their_scores - our_scores)):.2e}")
    # Sums of up to MAX_OUTPUT float32 log-probabilities, each within ~1e-6.
    assert np.max(np.abs(their_scores - our_scores)) < 2e-5
    assert len({tuple(ids) for ids in our_ids}) > len(our_ids) // 2  # not one output for all
    assert 0 < sum(len(ids) < MAX_OUTPUT for ids in our_ids) < len(our_ids)  # EOS and limit

    config = json.load(open(os.path.join(directory, "config.json")))
    assert config["add_source_eos"] is translator.source_eos is (name == "post_norm_shared")
    assert config["layer_norm_epsilon"] == pytest.approx(1e-6)
    shared = os.path.exists(os.path.join(directory, "shared_vocabulary.json"))
    assert shared is (name == "post_norm_shared")
    info = json.load(open(os.path.join(directory, INFO_FILENAME)))
    assert (info["quantization"], info["max_length"]) == ("float32", 40)
    assert info["architecture"]["norm_first"] is (name == "pre_norm_separate")


@pytest.mark.slow
def test_int8_loads_and_translates(runs, sentences, tmp_path):
    translator, our_ids, _ = _ours(runs["post_norm_shared"], sentences)
    directory = export_translator_ctranslate2(translator, str(tmp_path / "int8"), "int8")
    float32 = export_translator_ctranslate2(translator, str(tmp_path / "float32"))
    size = os.path.getsize
    assert size(os.path.join(directory, "model.bin")) < size(os.path.join(float32, "model.bin"))
    results, ids, scores = _theirs(directory, sentences, translator.model.max_length)
    assert len(ids) == len(sentences) and np.all(np.isfinite(scores))
    # int8 weights are close, not equal: most greedy outputs stay the same.
    same = sum(a == b for a, b in zip(ids, our_ids))
    print(f"int8: {same} of {len(sentences)} greedy outputs equal float32's")
    assert same >= len(sentences) // 2
    info = json.load(open(os.path.join(directory, INFO_FILENAME)))
    assert info["quantization"] == "int8"


@pytest.mark.slow
def test_the_command_writes_the_directory(runs, tmp_path, capsys):
    output = tmp_path / "cli"
    assert (
        cli.main(
            [
                "export",
                runs["post_norm_shared"],
                "--format",
                "ctranslate2",
                "--output-dir",
                str(output),
                "--quantization",
                "int16",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == f"{output}\n"
    assert sorted(os.listdir(output)) == sorted(
        [
            "config.json",
            "model.bin",
            "shared_vocabulary.json",
            INFO_FILENAME,
            SOURCE_SPM_FILENAME,
            TARGET_SPM_FILENAME,
        ]
    )
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp")]
    # A second export into the same folder is refused, and leaves it as it was.
    before = sorted(os.listdir(output))
    assert (
        cli.main(
            [
                "export",
                runs["post_norm_shared"],
                "--format",
                "ctranslate2",
                "--output-dir",
                str(output),
            ]
        )
        == 2
    )
    assert "which already exists; expected a new folder" in capsys.readouterr().err
    assert sorted(os.listdir(output)) == before


@pytest.mark.slow
def test_a_failed_export_leaves_nothing(runs, tmp_path, monkeypatch):
    from keras_transformer import ctranslate2_export

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ctranslate2_export, "_write_info", fail)  # after model.bin is written
    with pytest.raises(OSError, match="disk full"):
        export_ctranslate2(runs["post_norm_shared"], str(tmp_path / "ct2"))
    assert os.listdir(tmp_path) == []


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
