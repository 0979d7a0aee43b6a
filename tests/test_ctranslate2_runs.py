"""`keras-transformer export --format ctranslate2` on trained runs: CTranslate2's greedy search
gives our greedy ids and scores, int8 loads and translates, the command writes the directory,
and a failed export leaves nothing.

Two runs are trained (about a minute in all on 2 CPUs): post-norm with a shared vocabulary
and embeddings and sources ending in EOS; pre-norm with two vocabularies, separate embeddings
and output projection, and sources without EOS."""

import json
import os

import ctranslate2
import numpy as np
import pytest
from multi30k_files import read_lines

from keras_transformer import cli
from keras_transformer.config import load_config
from keras_transformer.constants import EOS_ID, PAD_ID
from keras_transformer.ctranslate2_export import (
    INFO_FILENAME,
    SOURCE_SPM_FILENAME,
    TARGET_SPM_FILENAME,
    export_ctranslate2,
    export_translator_ctranslate2,
)
from keras_transformer.predictors import Translator
from keras_transformer.runner import train
from keras_transformer.tokenization import SubwordTokenizer

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
            # CTranslate2 converts the float32 weights and computes in float32: so does ours
            # here (the recipe's `auto` would pick bf16 on a CPU with AVX512_BF16 or AMX).
            "training.dtype_policy=float32",
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


def _ours(run_dir, sentences, **decoding):
    """Our greedy ids (up to EOS) and summed log-probabilities of `sentences`."""
    translator = Translator.from_run_dir(
        run_dir,
        beam_size=1,
        length_penalty=0.0,
        max_length_a=0.0,
        max_length_b=MAX_OUTPUT,
        jit_compile=False,
        **decoding,
    )
    tokens, scores = translator.decode_ids(translator.encode_sources(sentences))
    ids = []
    for row in tokens:
        row = [i for i in row[0].tolist() if i != PAD_ID]  # PAD only follows the end
        ids.append(row[: row.index(EOS_ID)] if EOS_ID in row else row)
    return translator, ids, np.array([s[0] for s in scores])


def _theirs(directory, sentences, max_length, compute_type="default", **decoding):
    """CTranslate2's greedy ids and scores of `sentences`, tokenized by the exported
    SentencePiece model, with the limits that make its search ours."""
    source = SubwordTokenizer.load(os.path.join(directory, SOURCE_SPM_FILENAME))
    target = SubwordTokenizer.load(os.path.join(directory, TARGET_SPM_FILENAME))
    tokens = source.id_to_piece(source.tokenize(sentences)).to_list()
    results = ctranslate2.Translator(directory, compute_type=compute_type).translate_batch(
        [[t.decode("utf-8") for t in row] for row in tokens],
        beam_size=1,
        max_input_length=max_length,
        max_decoding_length=MAX_OUTPUT,
        length_penalty=0.0,  # else CTranslate2 divides greedy scores by the length too
        min_decoding_length=0,  # 1 forbids EOS first, raising the first log-probability
        return_scores=True,
        **decoding,
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
def test_repeated_ngram_blocking_equals_ctranslate2s(runs, sentences, tmp_path):
    """`no_repeat_ngram_size` is CTranslate2's option of that name: the same greedy ids."""
    run_dir = runs["post_norm_shared"]
    translator, plain, _ = _ours(run_dir, sentences)
    _, ours, _ = _ours(run_dir, sentences, no_repeat_ngram_size=2)
    assert ours != plain  # the briefly trained model repeats itself unless told not to
    directory = export_ctranslate2(run_dir, str(tmp_path / "ct2"))
    max_length = translator.model.max_length
    _, theirs, _ = _theirs(directory, sentences, max_length, no_repeat_ngram_size=2)
    assert theirs == ours


def _has_vnni() -> bool:
    """Whether the CPU has VNNI (AVX512_VNNI or AVX-VNNI), which oneDNN's int8 GEMM needs to
    sum u8 x s8 products in 32 bits; without it pairs of products are summed in 16 bits, which
    saturate (oneDNN's "int8 computations" guide). `ONEDNN_MAX_CPU_ISA` below VNNI (AVX2,
    AVX512_CORE) counts as without."""
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if isa != "ALL" and "VNNI" not in isa and "AMX" not in isa:
        return False
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line.split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


def _prefix_share(ids, reference) -> float:
    """The mean share of each reference output that `ids` repeats before its first difference.

    A tiny model's greedy outputs run to the length limit, so one close call late in a
    sentence changes the whole sentence; a wrong quantization changes them from the start.
    """
    shares = []
    for ours, theirs in zip(reference, ids):
        common = 0
        while common < min(len(ours), len(theirs)) and ours[common] == theirs[common]:
            common += 1
        shares.append(common / max(len(ours), 1))
    return float(np.mean(shares))


@pytest.mark.slow
def test_int8_loads_and_translates(runs, sentences, tmp_path):
    translator, our_ids, _ = _ours(runs["post_norm_shared"], sentences)
    directory = export_translator_ctranslate2(translator, str(tmp_path / "int8"), "int8")
    float32 = export_translator_ctranslate2(translator, str(tmp_path / "float32"))
    size = os.path.getsize
    assert size(os.path.join(directory, "model.bin")) < size(os.path.join(float32, "model.bin"))
    info = json.load(open(os.path.join(directory, INFO_FILENAME)))
    assert info["quantization"] == "int8"
    max_length = translator.model.max_length
    # The int8 weights, multiplied in float32: close, not equal, so the greedy outputs follow
    # float32's for most of their length (whole sentences equal vary with the trained model:
    # 10 of 16 on an AVX512 EPYC, prefix share 0.88).
    _, ids, scores = _theirs(directory, sentences, max_length, compute_type="float32")
    weights_share = _prefix_share(ids, our_ids)
    assert np.all(np.isfinite(scores)) and weights_share >= 0.5
    # CTranslate2's int8 GEMM (int8 weights and activations).
    assert ctranslate2.Translator(directory).compute_type == "int8_float32"
    results, ids, scores = _theirs(directory, sentences, max_length)
    assert len(ids) == len(sentences) and np.all(np.isfinite(scores))
    share = _prefix_share(ids, our_ids)
    print(
        f"int8: greedy outputs repeat {weights_share:.2f} of float32's with the weights computed "
        f"in float32, {share:.2f} with int8 GEMMs (VNNI: {_has_vnni()})"
    )
    if _has_vnni():  # without VNNI the 16-bit sums saturate: 0 of 16 sentences equal
        assert share >= 0.5  # 0.81 on an AVX512 EPYC (7 of 16 sentences equal)


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
