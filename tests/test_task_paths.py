"""Every task through the one path: `runner.train` a few steps, `runner.evaluate_run`,
predict strings with the task's predictor, `export.export_run`, and the same answers from
the export served by the stand-in (started here) over REST and gRPC as from the predictor
in this process."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from task_configs import RECIPES, TINY_TRAINING

from keras_transformer.config import load_config
from keras_transformer.constants import TASKS
from keras_transformer.export import export_run
from keras_transformer.run_dir import run_task
from keras_transformer.runner import evaluate_run, train
from keras_transformer.serving.client import ServingClient
from keras_transformer.serving.server import start_server
from keras_transformer.tasks import task_class
from keras_transformer.tasks.classification import CLASSIFY_SIGNATURE, text_example

# A model's stack sizes under the keys its task reads.
LAYERS = {
    "translation": ["model.num_encoder_layers=1", "model.num_decoder_layers=1"],
    "tagging": ["model.num_encoder_layers=1"],
    "classification": ["model.num_encoder_layers=1"],
    "language_modeling": ["model.num_decoder_layers=1"],
}
# The predictors' options, the same in this process and in the export.
OPTIONS = {
    "translation": {"beam_size": 2, "max_length": 12},
    "tagging": {},
    "classification": {},
    "language_modeling": {"beam_size": 2, "max_new_tokens": 4},
}
TEXTS = ["Ein Hund läuft durch den Schnee.", "they watch the film .", ""]


def _config(task, root, multi30k_dir):
    overrides = [
        f"training.run_dir={root / task}",
        f"data.data_dir={root / 'tfds'}",
        "data.max_train_examples=300",
        "data.max_validation_examples=16",
        "data.vocab_size=500",
        "data.batch_size=16",
        *LAYERS[task],
        *TINY_TRAINING,
    ]
    if task == "translation":
        overrides += [
            f"translation.local_dir={multi30k_dir}",
            "translation.max_source_length=32",
            "translation.max_target_length=32",
            "translation.bleu_every=null",
        ]
    else:  # offline: the recipe falls back to its task's generated set
        overrides += [f"{task}.max_length=32", "data.download=false"]
    return load_config(RECIPES[task], overrides)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, multi30k_dir):
    root = tmp_path_factory.mktemp("task_paths")
    return {task: train(_config(task, root, multi30k_dir)).paths.root for task in TASKS}


@pytest.fixture(scope="module")
def served(runs, tmp_path_factory):
    base = tmp_path_factory.mktemp("task_exports")
    exports = {
        task: export_run(run_dir, str(base), model_name=task, **OPTIONS[task])
        for task, run_dir in runs.items()
    }
    config = base / "models.config"
    config.write_text(
        "model_config_list {"
        + "".join(
            f' config {{ name: "{task}" base_path: "{base / task}" model_platform: "tensorflow" }}'
            for task in TASKS
        )
        + " }"
    )
    with start_server(model_config_file=config, port=0, grpc_port=0, poll_interval=0) as server:
        yield server, exports


@pytest.mark.slow
def test_each_task_trains_and_evaluates_through_the_one_path(runs):
    for task, run_dir in runs.items():
        assert run_task(run_dir) == task
        result = evaluate_run(
            run_dir, "validation" if task == "translation" else "test", max_examples=8
        )
        main_metric = task_class(task).main_metric
        assert result.task == task and list(result.scores)[0] == main_metric
        assert result.num_sentences == 8 and np.isfinite(result.scores[main_metric])
        assert result.format().splitlines()[0].startswith(f"{task} on ")


@pytest.mark.slow
def test_each_task_predicts_strings_and_serves_the_same_answers(runs, served):
    server, exports = served
    for task, run_dir in runs.items():
        cls = task_class(task)
        predictor = cls.load_predictor(
            run_dir, **{**OPTIONS[task], "jit_compile": False} if cls.decodes else {}
        )
        lines = list(cls.predict_lines(predictor, TEXTS))
        assert len(lines) == len(TEXTS) and all(isinstance(line, str) for line in lines)
        if task == "translation":  # empty in, empty out (the export: below)
            assert lines[-1] == ""
        endpoints = cls.serving_endpoints(predictor)
        for name, function in endpoints.items():
            spec = function.input_signature[0]
            inputs = TEXTS if spec.dtype == tf.string else [[5, 6, 7], [8, 9, 0]]
            if name == CLASSIFY_SIGNATURE:  # serialized tf.Examples (TF Serving's Classify API)
                inputs = [text_example(text) for text in TEXTS]
            expected = {k: v.numpy() for k, v in function(tf.constant(inputs, spec.dtype)).items()}
            # REST sends JSON numbers, which the server reads as the signature's dtype; a
            # gRPC client sends typed tensors.
            for url, values in (
                (server.url, inputs),
                (f"grpc://{server.grpc_target}", np.asarray(inputs, spec.dtype.as_numpy_dtype)),
            ):
                client = ServingClient(url, task)
                answer = client.predict({spec.name: values}, signature_name=name, columnar=True)
                client.close()
                if len(expected) == 1 and not isinstance(answer, dict):  # one output: bare
                    answer = {next(iter(expected)): answer}
                assert sorted(answer) == sorted(expected), (task, name, url)
                for key, value in expected.items():
                    if value.dtype == object:  # strings
                        got = np.asarray(answer[key], dtype=object)
                        want = np.vectorize(lambda b: b.decode("utf-8"))(value)
                        assert got.tolist() == want.tolist(), (task, name, key, url)
                    else:
                        np.testing.assert_allclose(answer[key], value, atol=1e-4)


@pytest.mark.slow
def test_each_task_exports_with_its_predictors_own_arguments(runs, tmp_path):
    """`quantize` and `batch_size` are every predictor's arguments, so every task's export
    takes them (a classifier's and a tagger's were refused as decoding options); a search
    option is the predictor's TypeError for a task that does not decode."""
    for task, run_dir in runs.items():
        options = {**OPTIONS[task], "quantize": "bfloat16", "batch_size": 8}
        path = export_run(run_dir, str(tmp_path), model_name=task, **options)
        with open(os.path.join(path, "assets.extra", "export_info.json")) as f:
            assert json.load(f)["quantize"] == "bfloat16", task
        if not task_class(task).decodes:
            with pytest.raises(TypeError, match="unexpected keyword argument 'beam_size'"):
                export_run(run_dir, str(tmp_path), model_name=task, beam_size=4)
