"""The tagging, classification and language-modelling tasks end to end, offline:
`keras-transformer train` on a packaged recipe (falling back to its generated set),
`evaluate`, the Python wrappers, `export` (op allow-list, no XLA, TF1 session loader) and
`generate`."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from task_configs import RECIPES as TASK_RECIPES
from task_configs import task_of

from keras_transformer import TransformerDecoderModel, TransformerEncoderModel
from keras_transformer.cli import main
from keras_transformer.data.synthetic import CLASSIFICATION_LABELS, POS_TAGS
from keras_transformer.predictors import TextClassifier, TextGenerator, TextTagger
from keras_transformer.run_dir import RunPaths, load_run, read_labels, run_task
from keras_transformer.serving.ops import graph_ops, load_allowed_ops, load_xla_ops

RECIPES = {task: TASK_RECIPES[task] for task in ("tagging", "classification", "language_modeling")}
TEXTS = ["they watch the film .", "The old dog was not good!", ""]


def _train_args(task, run_dir, tfds_dir):
    layers = "num_decoder_layers" if task == "language_modeling" else "num_encoder_layers"
    overrides = [
        f"data.data_dir={tfds_dir}",
        "data.download=false",  # offline: the recipe falls back to its generated set
        "data.max_train_examples=400",
        "data.max_validation_examples=32",
        "data.vocab_size=300",
        "data.batch_size=32",
        f"{task}.max_length=32",
        f"model.{layers}=1",
        "model.d_model=32",
        "model.d_ff=64",
        "model.max_length=32",
        "training.epochs=1",
        "training.steps_per_epoch=3",
        "training.verbose=0",
    ]
    args = ["train", "--config", RECIPES[task], "--run-dir", run_dir]
    for override in overrides:
        args += ["--set", override]
    return args


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("task_runs")
    result = {}
    for task in RECIPES:
        run_dir = str(root / task)
        assert main(_train_args(task, run_dir, str(root / "tfds"))) == 0
        result[task] = run_dir
    return result


@pytest.fixture(scope="module")
def exports(runs, tmp_path_factory):
    from keras_transformer.export import export_run

    base = str(tmp_path_factory.mktemp("task_exports"))
    paths = {
        task: export_run(run_dir, base)
        for task, run_dir in runs.items()
        if task != "language_modeling"
    }
    paths["language_modeling"] = export_run(
        runs["language_modeling"], base, max_new_tokens=6, beam_size=2
    )
    return paths


@pytest.mark.slow
def test_cli_train_writes_a_run_directory_per_task(runs):
    for task, run_dir in runs.items():
        paths = RunPaths(run_dir)
        assert run_task(run_dir) == task
        model, source, target = load_run(run_dir)
        assert source.model_proto == target.model_proto  # one tokenizer, saved twice
        assert os.path.isfile(os.path.join(paths.checkpoints, "last.weights.h5"))
        if task == "language_modeling":
            assert type(model) is TransformerDecoderModel
            assert not os.path.exists(os.path.join(run_dir, "labels.txt"))
        else:
            assert type(model) is TransformerEncoderModel
            labels = read_labels(run_dir)
            # The generated fallback's labels (no TFDS copy here), one more class (no
            # tag) for the tagger.
            offline = {"classification": CLASSIFICATION_LABELS, "tagging": POS_TAGS}[task]
            assert labels == offline
            assert model.num_classes == len(labels) + (task == "tagging")
            assert model.pooling == ("mean" if task == "classification" else None)


def _perplexity(run_dir, split):
    from keras_transformer.data.task_sources import load_language_modeling_data

    model, tokenizer, _ = load_run(run_dir)
    data = load_language_modeling_data("synthetic_text", split)
    task = task_of("language_modeling", 32, "data.batch_size=7")
    total, count = 0.0, 0
    for x, y in task.make_batches(data, (tokenizer, tokenizer), shuffle=False):
        log_probs = tf.nn.log_softmax(model(x)).numpy()
        y = y.numpy()
        picked = np.take_along_axis(log_probs, y[..., None], -1)[..., 0]
        total -= picked[y != 0].sum()
        count += (y != 0).sum()
    return float(np.exp(total / count))


def _independent_accuracy(task, run_dir, split):
    """Accuracy through another path: the classifier's texts through TextClassifier, the
    tagger's labelled pieces counted in numpy."""

    from keras_transformer.config import load_config
    from keras_transformer.constants import NO_TAG_ID
    from keras_transformer.data.task_sources import load_classification_data, load_tagging_data

    if task == "classification":
        data = load_classification_data("synthetic_sentiment", split)
        texts, gold = zip(*[(t.decode(), int(y)) for t, y in data.dataset.as_numpy_iterator()])
        predicted = TextClassifier.from_run_dir(run_dir).classify(list(texts))
        return float(np.mean([p == data.labels[y] for p, y in zip(predicted, gold)]))
    model, tokenizer, _ = load_run(run_dir)
    config = load_config(RunPaths(run_dir).config)
    data = load_tagging_data("synthetic_pos", split)
    hits = total = 0
    task = task_of("tagging", config.section.max_length)
    for x, y in task.make_batches(data, (tokenizer, tokenizer), shuffle=False):
        y = y.numpy()
        labelled = y != NO_TAG_ID
        hits += (np.argmax(model(x).numpy(), -1) == y)[labelled].sum()
        total += labelled.sum()
    return float(hits / total)


@pytest.mark.slow
def test_cli_evaluate_reports_the_tasks_metric(runs, tmp_path, capsys):
    for task, run_dir in runs.items():
        scores = str(tmp_path / f"{task}.json")
        assert main(["evaluate", run_dir, "--split", "test[:40]", "--scores-json", scores]) == 0
        printed = capsys.readouterr().out
        with open(scores) as f:
            result = json.load(f)
        assert result["task"] == task and result["num_sentences"] == 40
        main_metric = "perplexity" if task == "language_modeling" else "accuracy"
        assert printed.splitlines()[1] == f"{main_metric} = {result['scores'][main_metric]:.4f}"
        assert " on synthetic_" in printed.splitlines()[0]  # the offline fallback
        if task == "language_modeling":  # exp(the mean cross-entropy of the test tokens)
            assert result["scores"]["perplexity"] == pytest.approx(
                _perplexity(run_dir, "test[:40]"), rel=1e-4
            )
        else:  # the share of texts (labelled pieces) predicted right
            assert result["scores"]["accuracy"] == pytest.approx(
                _independent_accuracy(task, run_dir, "test[:40]"), abs=1e-6
            )


@pytest.mark.slow
def test_wrappers_agree_with_their_models(runs):
    classifier = TextClassifier.from_run_dir(runs["classification"])
    probabilities = classifier.predict_proba(TEXTS)
    ids = tf.ragged.constant(
        [[2, *row] for row in classifier.tokenizer.tokenize(TEXTS).to_list()]
    ).to_tensor()
    np.testing.assert_allclose(
        probabilities, tf.nn.softmax(classifier.model(ids)).numpy(), atol=1e-5
    )
    assert classifier.classify(TEXTS) == [classifier.labels[i] for i in probabilities.argmax(1)]

    tagger = TextTagger.from_run_dir(runs["tagging"])
    tagged = tagger.tag(TEXTS)
    assert [[w for w, _ in row] for row in tagged] == [t.split() for t in TEXTS]
    assert all(tag in tagger.labels for row in tagged for _, tag in row)
    # Words are what the model split (ASCII whitespace), never padding, whatever the batch.
    odd = tagger.tag(["a\u00a0dog runs", "one two three four five"])
    assert [w for w, _ in odd[0]] == ["a\u00a0dog", "runs"] and all(t for _, t in odd[0])

    generator = TextGenerator.from_run_dir(
        runs["language_modeling"], max_new_tokens=5, jit_compile=False
    )
    python = generator.generate(TEXTS)
    graph = generator.generate_strings(tf.constant(TEXTS))
    assert [c.decode() for c in graph["continuations"].numpy()] == python
    for text, continuation, full in zip(TEXTS, python, graph["texts"].numpy()):
        assert full.decode().startswith(
            generator.tokenizer.detokenize(generator.tokenizer.tokenize([text])).numpy()[0].decode()
        )
        assert full.decode().endswith(continuation)
        assert len(generator.tokenizer.tokenize([continuation]).to_list()[0]) <= 6


@pytest.mark.slow
def test_exports_use_only_ops_tf_serving_ships_and_no_xla(exports):
    xla = load_xla_ops()
    for task, path in exports.items():
        ops = graph_ops(path)
        assert "SentencepieceTokenizeOp" in ops and ops <= load_allowed_ops(), task
        assert not ops & xla
        with open(os.path.join(path, "assets.extra", "export_info.json")) as f:
            info = json.load(f)
        assert info["task"] == task
    assert "TensorScatterUpdate" in graph_ops(exports["language_modeling"])  # the cache
    assert os.path.basename(os.path.dirname(exports["language_modeling"])) == "generator"


_FRESH_PROCESS = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tf-text ops)

    paths, texts = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    assert not any(m.startswith("keras_transformer") for m in sys.modules)
    inputs = {"classification": "sentences", "tagging": "sentences",
              "language_modeling": "prompts"}
    signatures = {"classification": ["serving_default"], "tagging": ["serving_default"],
                  "language_modeling": ["serving_default", "generate_nbest"]}
    # Signatures of serialized tf.Examples, not texts (tests/test_serving_classify.py).
    example_signatures = {"classification": ["classification"]}
    out = {}

    def plain(outputs):
        return {k: (v.tolist() if v.dtype != object else
                    [[s.decode() for s in row] if v.ndim == 2 else row.decode() for row in v])
                for k, v in outputs.items()}

    for task, path in paths.items():
        loaded = tf.saved_model.load(path)
        exported = signatures[task] + example_signatures.get(task, [])
        assert sorted(loaded.signatures) == sorted(exported), list(loaded.signatures)
        for name in signatures[task]:
            r = loaded.signatures[name](**{inputs[task]: tf.constant(texts)})
            out[f"tf2/{task}/{name}"] = plain({k: v.numpy() for k, v in r.items()})
        # The TF1 session path, as TF Serving's C++ server loads and runs a SavedModel.
        with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
            meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)
            for name in signatures[task]:
                sig = meta.signature_def[name]
                fetches = {k: v.name for k, v in sig.outputs.items()}
                r = sess.run(fetches, {sig.inputs[inputs[task]].name: texts})
                out[f"tf1/{task}/{name}"] = plain(r)
    print("RESULT" + json.dumps(out))
    """
)


@pytest.mark.slow
def test_exports_load_with_tf2_and_tf1_session_loaders(exports, runs):
    result = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, json.dumps(exports), json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.split("RESULT", 1)[1])
    classifier = TextClassifier.from_run_dir(runs["classification"])
    tagger = TextTagger.from_run_dir(runs["tagging"])
    generator = TextGenerator.from_run_dir(
        runs["language_modeling"], max_new_tokens=6, beam_size=2, jit_compile=False
    )
    nbest = generator.generate_nbest(TEXTS)
    for loader in ("tf1", "tf2"):
        labels = out[f"{loader}/classification/serving_default"]
        assert labels["labels"] == classifier.classify(TEXTS)
        np.testing.assert_allclose(
            labels["probabilities"], classifier.predict_proba(TEXTS), atol=1e-5
        )
        tags = out[f"{loader}/tagging/serving_default"]
        assert [[t for t in row if t] for row in tags["tags"]] == [
            [t for _, t in row] for row in tagger.tag(TEXTS)
        ]
        best = out[f"{loader}/language_modeling/serving_default"]
        assert best["continuations"] == [hypotheses[0][0] for hypotheses in nbest]
        np.testing.assert_allclose(best["scores"], [h[0][1] for h in nbest], atol=1e-4)
        both = out[f"{loader}/language_modeling/generate_nbest"]
        assert both["continuations"] == [[text for text, _ in h] for h in nbest]


@pytest.mark.slow
def test_cli_generate_export_and_user_errors(runs, tmp_path, capsys):
    lm = runs["language_modeling"]
    assert main(["generate", lm, "The dog", "--max-new-tokens", "4", "--jit", "off"]) == 0
    assert capsys.readouterr().out.startswith("The dog")
    assert (
        main(
            [
                "generate",
                lm,
                "A",
                "--nbest",
                "2",
                "--beam-size",
                "2",
                "--jit",
                "off",
                "--max-new-tokens",
                "3",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["0", "0"]
    base = str(tmp_path / "exports")
    assert main(["export", runs["classification"], "--base-path", base]) == 0
    assert os.listdir(os.path.join(base, "classifier")) == ["1"]
    capsys.readouterr()
    # Strings are tagged and classified as they are translated.
    assert main(["tag", runs["tagging"], "the dog barks ."]) == 0
    words = [pair.rsplit("/", 1) for pair in capsys.readouterr().out.split()]
    assert [w for w, _ in words] == ["the", "dog", "barks", "."]
    assert {t for _, t in words} <= set(read_labels(runs["tagging"]))
    assert main(["classify", runs["classification"], "A good film.", "A bad one."]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and all(label in read_labels(runs["classification"]) for label, _ in rows)
    assert all(0.0 < float(p) <= 1.0 for _, p in rows)
    # User mistakes: one line on stderr, exit status 2.
    assert main(["translate", lm, "x"]) == 2
    error = capsys.readouterr().err
    assert "Received a language_modeling run directory" in error
    assert "expected a translation run" in error and len(error.splitlines()) == 1
    assert main(["plot", runs["tagging"]]) == 2
    assert "Received a tagging run directory" in capsys.readouterr().err
    assert main(["predict", runs["classification"], "x", "--nbest", "2"]) == 2
    assert "--nbest for a classification run" in capsys.readouterr().err
    assert main(["generate", runs["tagging"], "x"]) == 2
    assert "Received a tagging run directory" in capsys.readouterr().err
    assert main(["export", runs["tagging"], "--base-path", base, "--beam-size", "2"]) == 2
    assert "--beam-size for a tagging run" in capsys.readouterr().err


def test_a_run_on_given_examples_is_scored_only_on_given_examples(tmp_path, capsys):
    """Its config names a dataset it never trained on: `evaluate` refuses to score that,
    and scores the examples it is given, their ids naming the run's labels."""
    from task_configs import TINY_TRAINING

    from keras_transformer.config import load_config
    from keras_transformer.data.synthetic import synthetic_classification
    from keras_transformer.runner import evaluate_run, train

    def examples(split):
        return tf.data.Dataset.from_tensor_slices(synthetic_classification(split))

    overrides = ["data.vocab_size=300", "data.batch_size=16", "classification.max_length=32"]
    overrides += ["data.download=false", f"data.data_dir={tmp_path / 'tfds'}"]  # offline
    config = load_config("imdb_reviews", [*TINY_TRAINING, *overrides])
    result = train(
        config,
        str(tmp_path / "run"),
        train_data=examples("train[:200]"),
        labels=["neg", "pos"],
    )
    with pytest.raises(ValueError, match="trained on data given to `train`"):
        evaluate_run(result.run_dir, "test")
    assert main(["evaluate", result.run_dir, "--split", "validation"]) == 2
    assert "trained on data given to `train`" in capsys.readouterr().err
    with pytest.raises(
        ValueError, match=r"argument `data`.*\(text: str scalar, label: int scalar\)"
    ):
        evaluate_run(result.run_dir, "test", data=examples("test[:40]").batch(8))
    scored = evaluate_run(result.run_dir, "test", data=examples("test[:40]"))
    assert scored.num_sentences == 40 and 0.0 <= scored.scores["accuracy"] <= 1.0
    # Interrupted, then run again without its data: that would train on the config's.
    from crash import CrashAt

    interrupted = str(tmp_path / "interrupted")
    with pytest.raises(KeyboardInterrupt):
        train(
            config,
            interrupted,
            train_data=examples("train[:200]"),
            labels=["neg", "pos"],
            extra_callbacks=[CrashAt(1)],
        )
    with pytest.raises(ValueError, match="with the same `train_data` given to `train`"):
        train(config, interrupted)
