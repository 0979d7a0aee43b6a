"""The development stand-in server: TF Serving's REST contract on a toy SavedModel, its
configuration files, batching, versions, and the command line."""

from __future__ import annotations

import base64
import concurrent.futures
import gc
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import weakref

import pytest
from toy_model import save_toy_model
from xla_saved_model import save_xla_model

from keras_transformer.serving.batching_config import BatchOptions, load_batching_parameters
from keras_transformer.serving.cli import build_arg_parser
from keras_transformer.serving.config import (
    ConfigError,
    load_model_server_config,
    load_monitoring_config,
)
from keras_transformer.serving.servable import SessionOptions
from keras_transformer.serving.server import start_server

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MAX_BYTES = 64 * 1024
MAX_BATCH = 32


def http(url: str, method: str = "GET", body=None, timeout: float = 30.0):
    """(status, decoded JSON) for one request; ``body`` is JSON-encoded unless it is bytes."""
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode("utf-8")
    request = urllib.request.Request(
        url, data=body, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def b64(data: bytes) -> dict:
    return {"b64": base64.b64encode(data).decode("ascii")}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Two toy SavedModels: v1 answers 'v1:'+upper, v2 answers 'v2:'+upper."""
    root = tmp_path_factory.mktemp("exports")
    return {
        1: save_toy_model(root / "v1", prefix="v1:"),
        2: save_toy_model(root / "v2", prefix="v2:"),
    }


@pytest.fixture(scope="module")
def server(exports, tmp_path_factory):
    base = tmp_path_factory.mktemp("models") / "toy"
    shutil.copytree(exports[1], base / "1")
    with start_server(
        base,
        "toy",
        port=0,
        poll_interval=0,
        max_request_bytes=MAX_BYTES,
        max_request_batch_size=MAX_BATCH,
    ) as srv:
        yield srv


def predict_url(srv, suffix: str = "") -> str:
    return f"{srv.url}/v1/models/toy{suffix}:predict"


def assert_healthy(srv) -> None:
    status, body = http(predict_url(srv), "POST", {"instances": ["ok"]})
    assert status == 200, body
    assert body == {"predictions": [{"scores": 0.2, "translations": "v1:OK"}]}


# --- predict ---------------------------------------------------------------------------------


def test_predict_row_format_multi_output(server):
    status, body = http(predict_url(server), "POST", {"instances": ["hello", "", "grüße"]})
    assert status == 200, body
    assert body == {
        "predictions": [
            {"scores": 0.5, "translations": "v1:HELLO"},
            {"scores": 0.0, "translations": "v1:"},
            {"scores": 0.5, "translations": "v1:GRüßE"},
        ]
    }


def test_predict_columnar_format(server):
    status, body = http(predict_url(server), "POST", {"inputs": ["ab", "c"]})
    assert status == 200, body
    assert body == {"outputs": {"scores": [0.2, 0.1], "translations": ["v1:AB", "v1:C"]}}
    # A named-input object works too for a single input.
    status, named = http(predict_url(server), "POST", {"inputs": {"sentences": ["ab", "c"]}})
    assert (status, named) == (200, body)


def test_predict_b64_input_and_explicit_default_signature(server):
    request = {"signature_name": "serving_default", "instances": [b64(b"abc"), "d"]}
    status, body = http(predict_url(server), "POST", request)
    assert status == 200, body
    assert [p["translations"] for p in body["predictions"]] == ["v1:ABC", "v1:D"]


def test_predict_signature_name_with_padded_outputs(server):
    request = {"signature_name": "tokenize", "instances": ["ab", "c", ""]}
    status, body = http(predict_url(server), "POST", request)
    assert status == 200, body
    assert body == {
        "predictions": [
            {"lengths": 2, "token_ids": [97, 98]},
            {"lengths": 1, "token_ids": [99, 0]},
            {"lengths": 0, "token_ids": [0, 0]},
        ]
    }
    status, body = http(predict_url(server), "POST", {"signature_name": "tokenize", "inputs": [""]})
    assert status == 200, body
    assert body == {"outputs": {"lengths": [0], "token_ids": [[]]}}


def test_predict_multi_input_single_bytes_output(server):
    rows = {
        "signature_name": "pair",
        "instances": [{"a": "x", "b": "y"}, {"a": b64(b"1"), "b": ""}],
    }
    status, body = http(predict_url(server), "POST", rows)
    assert status == 200, body
    # One output: bare values; a `_bytes` output comes back base64-encoded.
    assert body == {"predictions": [b64(b"x|y"), b64(b"1|")]}
    columns = {"signature_name": "pair", "inputs": {"a": ["x"], "b": ["y"]}}
    status, body = http(predict_url(server), "POST", columns)
    assert (status, body) == (200, {"outputs": [b64(b"x|y")]})


def test_metadata_endpoint(server):
    for suffix in ("", "/versions/1"):
        status, body = http(f"{server.url}/v1/models/toy{suffix}/metadata")
        assert status == 200, body
        assert body["model_spec"] == {"name": "toy", "signature_name": "", "version": "1"}
        sigs = body["metadata"]["signature_def"]["signature_def"]
        assert {"serving_default", "tokenize", "pair"} <= set(sigs)
        default = sigs["serving_default"]
        assert default["method_name"] == "tensorflow/serving/predict"
        sentences = default["inputs"]["sentences"]
        assert sentences["dtype"] == "DT_STRING"
        assert sentences["tensor_shape"] == {
            "dim": [{"size": "-1", "name": ""}],
            "unknown_rank": False,
        }
        assert sentences["name"].endswith(":0")
        assert default["outputs"]["scores"]["dtype"] == "DT_FLOAT"
        assert sigs["tokenize"]["outputs"]["token_ids"]["tensor_shape"]["dim"] == [
            {"size": "-1", "name": ""},
            {"size": "-1", "name": ""},
        ]


# --- bad requests ------------------------------------------------------------------------------

# What the conformance table (serving_conformance_cases.py) does not hold: the stand-in's own
# limits and answers, and errors the graph raises.
BAD_REQUESTS = {
    "invalid_utf8_body": ("POST", "", b'{"instances": ["\xff"]}', 400, "encoding"),
    "bool_not_string": ("POST", "", {"instances": [True]}, 400, "type: string"),
    "null_not_string": ("POST", "", {"inputs": None}, 400, "type: string"),
    "pair_batch_mismatch": (
        "POST",
        "",
        {"signature_name": "pair", "inputs": {"a": ["x", "y"], "b": ["z"]}},
        400,
        "",
    ),
    "invalid_utf8_b64": ("POST", "", {"instances": [b64(b"\xff\xfe")]}, 400, "input string"),
    "invalid_utf8_b64_tokenize": (
        "POST",
        "",
        {"signature_name": "tokenize", "inputs": [b64(b"ok"), b64(b"\xc3")]},
        400,
        "input string",
    ),
    "wrong_rank": ("POST", "", {"inputs": "scalar"}, 400, "shape"),
    "batch_over_limit_rows": ("POST", "", {"instances": ["a"] * (MAX_BATCH + 1)}, 400, "limit"),
    "batch_over_limit_columns": ("POST", "", {"inputs": ["a"] * (MAX_BATCH + 1)}, 400, "limit"),
    "oversized_body": ("POST", "", {"instances": ["x" * MAX_BYTES]}, 413, "exceeds"),
    "regress": ("POST", "/v1/models/toy:regress", {"examples": [{}]}, 501, "regress"),
    "post_on_status": ("POST", "/v1/models/toy", {"inputs": ["a"]}, 400, "Malformed request"),
    "delete": ("DELETE", "/v1/models/toy", None, 400, "Malformed request"),
    "unknown_path": ("GET", "/v2/whatever", None, 404, "Not found"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_request_gets_4xx_and_server_keeps_answering(server, case):
    method, path, body, expected_status, fragment = BAD_REQUESTS[case]
    url = server.url + path if path else predict_url(server)
    status, answer = http(url, method, body)
    assert status == expected_status, answer
    assert set(answer) == {"error"} and isinstance(answer["error"], str) and answer["error"]
    assert fragment in answer["error"]
    assert "Traceback" not in answer["error"]
    assert_healthy(server)


MALFORMED_HTTP = {
    "not_http": b"GARBAGE\r\n\r\n",
    "bad_content_length": b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: x\r\n"
    b"Content-Length: x\r\n\r\n",
    # A chunk longer than its size line says, then no CRLF where the terminator belongs.
    "bad_chunk_terminator": b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: x\r\n"
    b'Transfer-Encoding: chunked\r\n\r\n5\r\n{"ins-XX\r\n0\r\n\r\n',
    "bad_chunk_size": b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: x\r\n"
    b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
}


@pytest.mark.parametrize("case", sorted(MALFORMED_HTTP))
def test_malformed_http_gets_400_and_server_keeps_answering(server, case):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(MALFORMED_HTTP[case])
        answer = sock.recv(65536)
    assert re.match(rb"HTTP/1\.[01] 400 ", answer), answer[:200]
    assert_healthy(server)


def test_short_body_and_valid_chunked_body(server):
    # The client promises 100 bytes, sends 10 and goes away: nothing is run, nothing breaks.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
            b'{"inputs":'
        )
    assert_healthy(server)
    body = b'{"inputs": ["chunked"]}'
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n" % (10, body[:10])
            + b"%x\r\n%s\r\n" % (len(body) - 10, body[10:])
            + b"0\r\n\r\n"
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {
        "outputs": {"scores": [0.7], "translations": ["v1:CHUNKED"]}
    }


# --- versions and config -----------------------------------------------------------------------


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def test_new_version_is_picked_up_and_non_numeric_dir_ignored(exports, tmp_path):
    # (A numbered folder without saved_model.pb is a version that fails and is retried:
    # test_serving_lifecycle.py.)
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    (base / "notaversion").mkdir()
    with start_server(base, "toy", port=0, poll_interval=0.2) as srv:
        assert http(predict_url(srv), "POST", {"inputs": ["a"]})[1]["outputs"]["translations"] == [
            "v1:A"
        ]
        assert http(f"{srv.url}/v1/models/toy/versions/5")[0] == 404
        # A version copied in while serving: picked up by the background poll.
        shutil.copytree(exports[2], tmp_path / "staging")
        os.rename(tmp_path / "staging", base / "2")

        def on_v2():
            _, body = http(predict_url(srv), "POST", {"inputs": ["a"]})
            return body.get("outputs", {}).get("translations") == ["v2:A"]

        wait_for(on_v2)
        status = http(f"{srv.url}/v1/models/toy")[1]["model_version_status"]
        assert [(s["version"], s["state"]) for s in status] == [("2", "AVAILABLE"), ("1", "END")]
        assert http(predict_url(srv, "/versions/1"), "POST", {"inputs": ["a"]})[0] == 404
        assert http(f"{srv.url}/v1/models/toy/metadata")[1]["model_spec"]["version"] == "2"


def test_model_that_needs_xla_loads_only_with_the_flag(tmp_path):
    """TF Serving's rule: no XLA compilation unless --xla_cpu_compilation_enabled=true."""
    base = tmp_path / "xla"
    save_xla_model(base / "1")
    with start_server(base, "xla", port=0, poll_interval=0, max_num_load_retries=0) as srv:
        status, body = http(f"{srv.url}/v1/models/xla")
        assert status == 200
        (version,) = body["model_version_status"]
        assert version["version"] == "1" and version["state"] == "END"
        assert version["status"]["error_code"] == "INTERNAL"
        message = version["status"]["error_message"]
        assert message.startswith("XLA compilation disabled")
        assert "op XlaDynamicUpdateSlice" in message and "_XlaMustCompile" in message
        assert "--xla_cpu_compilation_enabled=true" in message
        status, body = http(f"{srv.url}/v1/models/xla:predict", "POST", {"instances": [5.0]})
        assert status == 404 and "Servable not found" in body["error"]
    allow_xla = SessionOptions(xla_compilation_enabled=True)
    with start_server(base, "xla", port=0, poll_interval=0, session_options=allow_xla) as srv:
        body = {"instances": [5.0, 5.0, 5.0, 5.0]}
        status, reply = http(f"{srv.url}/v1/models/xla:predict", "POST", body)
        assert status == 200 and reply == {"predictions": [5.0, 1.0, 1.0, 5.0]}


@pytest.mark.parametrize(
    "flag, expected",
    [
        ([], False),
        (["--xla_cpu_compilation_enabled"], True),
        (["--xla_cpu_compilation_enabled=true"], True),
        (["--xla_cpu_compilation_enabled=false"], False),
    ],
)
def test_xla_flag_parses_like_tf_serving(flag, expected):
    assert build_arg_parser().parse_args(flag).xla_cpu_compilation_enabled is expected


def test_model_config_file_with_labels(exports, tmp_path):
    base = tmp_path / "toy"
    for version, path in exports.items():
        shutil.copytree(path, base / str(version))
    config = tmp_path / "models.config"
    config.write_text(
        """
        # comment
        model_config_list {
          config {
            name: "toy"
            base_path: "BASE"
            model_platform: "tensorflow"
            model_version_policy { specific { versions: 1 versions: 2 } }
            version_labels { key: "stable" value: 1 }
            version_labels { key: "canary" value: 2 }
          }
        }
        """.replace("BASE", str(base))
    )
    with pytest.raises(ConfigError, match="allow_version_labels_for_unavailable_models"):
        start_server(model_config_file=config, port=0, poll_interval=0)
    with start_server(
        model_config_file=config,
        allow_version_labels_for_unavailable_models=True,
        port=0,
        poll_interval=0,
    ) as srv:
        for suffix, expected in [
            ("", "v2:A"),
            ("/labels/stable", "v1:A"),
            ("/labels/canary", "v2:A"),
            ("/versions/1", "v1:A"),
        ]:
            status, body = http(predict_url(srv, suffix), "POST", {"inputs": ["a"]})
            assert status == 200, (suffix, body)
            assert body["outputs"]["translations"] == [expected]
        # Status by label lists every version, as TF Serving's GetModelStatusImpl does.
        status_versions = http(f"{srv.url}/v1/models/toy/labels/stable")[1]["model_version_status"]
        assert [v["version"] for v in status_versions] == ["2", "1"]
        status, body = http(f"{srv.url}/v1/models/toy/labels/beta/metadata")
        assert status == 400 and "Unrecognized servable version label: beta" in body["error"]


# Every config file under serving/ and the schema TF Serving reads it with.
REPO_CONFIGS = {
    "models.config": "ModelServerConfig",
    "batching.config": "BatchingParameters",
    "monitoring.config": "MonitoringConfig",
}


def test_every_repo_config_file_parses_with_tf_servings_schema():
    found = sorted(f for f in os.listdir(os.path.join(REPO, "serving")) if f.endswith(".config"))
    assert found == sorted(REPO_CONFIGS), "a config file under serving/ has no parser in the test"
    path = os.path.join(REPO, "serving", "models.config")
    (model,) = load_model_server_config(path, allow_version_labels_for_unavailable_models=True)
    assert model.name == "transformer" and model.base_path == "/models/transformer"
    # The version the quickstart exports, labelled; promotion is two edits (see the file).
    assert model.version_policy == ("specific", frozenset({1}))
    assert model.version_labels == {"stable": 1}
    # TF Serving refuses labels at startup without the flag; the compose file passes it.
    with pytest.raises(ConfigError, match=r"models\.config:\d+: field version_labels"):
        load_model_server_config(path)
    with open(os.path.join(REPO, "serving", "docker-compose.yml"), encoding="utf-8") as f:
        assert "--allow_version_labels_for_unavailable_models=true" in f.read()
    params = load_batching_parameters(os.path.join(REPO, "serving", "batching.config"))
    assert (params.max_batch_size, params.execution_batch_size) == (512, 32)
    assert params.enable_large_batch_splitting and params.pad_variable_length_inputs
    assert (params.batch_timeout_micros, params.max_enqueued_batches) == (5000, 100)
    monitoring = os.path.join(REPO, "serving", "monitoring.config")
    assert load_monitoring_config(monitoring) == "/monitoring/prometheus/metrics"


BAD_CONFIGS = {
    # name: (kind, file text, regex the message must match after "FILE")
    "misspelt_field": (
        "models",
        'model_config_list {\n  config {\n    nam: "toy"\n  }\n}\n',
        r'^:3:\d+: field nam: .*has no field named "nam"',
    ),
    "misspelt_nested_field": (
        "models",
        'model_config_list { config { name: "toy" base_path: "/m"\n'
        "  model_version_policy { latest { num_version: 2 } } } }\n",
        r"^:2:\d+: field num_version: ",
    ),
    "wrong_type": (
        "models",
        "model_config_list {\n config {\n  name: 3\n } }\n",
        r"^:3:\d+: field name: .*Expected string",
    ),
    "relative_base_path": (
        "models",
        'model_config_list {\n config {\n  name: "toy"\n  base_path: "toy"\n'
        '  model_platform: "tensorflow" } }\n',
        r"^:4: field base_path: Expected model toy to have an absolute path",
    ),
    "missing_platform": (
        "models",
        'model_config_list {\n config {\n  name: "toy"\n  base_path: "/m" } }\n',
        r"^:3: field model_platform: Illegal setting neither",
    ),
    "duplicate_model": (
        "models",
        'model_config_list {\n config { name: "a" base_path: "/a" model_platform: "tensorflow" }'
        '\n config { name: "a" base_path: "/b" model_platform: "tensorflow" } }\n',
        r"^:3: field name: Illegal to list model a multiple times",
    ),
    "custom_model_config": (
        "models",
        "custom_model_config {}\n",
        r"^:1: field custom_model_config: ",
    ),
    "bare_wrapper_value": (
        "batching",
        "max_batch_size: 8\n",
        r'^:1:\d+: field max_batch_size: .*Expected "{"',
    ),
    "misspelt_batching_field": (
        "batching",
        "max_batch_size { value: 8 }\nnum_batch_thread { value: 2 }\n",
        r"^:2:\d+: field num_batch_thread: .*has no field named",
    ),
    "batching_value_out_of_range": (
        "batching",
        "\nnum_batch_threads { value: 0 }\n",
        r"^:2: field num_batch_threads: .*must be >= 1",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_is_a_startup_error_naming_file_line_and_field(case, tmp_path):
    kind, text, expected = BAD_CONFIGS[case]
    path = tmp_path / f"{kind}.config"
    path.write_text(text)
    load = load_model_server_config if kind == "models" else load_batching_parameters
    with pytest.raises(ConfigError) as error:
        load(path)
    message = str(error.value)
    assert message.startswith(str(path)), message
    assert re.search(expected, message[len(str(path)) :]), message


def test_batching_file_without_enable_batching_is_refused(tmp_path):
    """TF Serving: "batching_parameters_file is set without setting enable_batching"."""
    batching = os.path.join(REPO, "serving", "batching.config")
    with pytest.raises(ValueError, match="without setting enable_batching"):
        start_server(tmp_path, "toy", port=0, batching_parameters=batching)


def test_tf_text_ops_load_through_the_session_loader(tmp_path):
    import tensorflow as tf
    import tensorflow_text as tf_text

    class Norm(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, sentences):
            return {"normalized": tf_text.normalize_utf8(sentences, "NFKC")}

    module = Norm()
    tf.saved_model.save(
        module, str(tmp_path / "m" / "1"), signatures={"serving_default": module.serve}
    )
    with start_server(tmp_path / "m", "m", port=0, poll_interval=0) as srv:
        status, body = http(f"{srv.url}/v1/models/m:predict", "POST", {"instances": ["ﬁ①"]})
    assert (status, body) == (200, {"predictions": ["fi1"]})


# --- concurrency -------------------------------------------------------------------------------


def hammer(srv, threads: int = 8, per_thread: int = 10) -> None:
    def worker(t: int) -> None:
        for i in range(per_thread):
            words = [f"t{t}r{i}", "x" * (i % 4)]
            if i % 3 == 0:
                status, body = http(
                    predict_url(srv), "POST", {"signature_name": "tokenize", "instances": words}
                )
                assert status == 200, body
                for word, pred in zip(words, body["predictions"]):
                    assert pred["lengths"] == len(word)
                    ids = pred["token_ids"]
                    # Merged batches pad to the longest request in the batch, as TF Serving does.
                    assert ids[: len(word)] == [ord(c) for c in word]
                    assert not any(ids[len(word) :])
            else:
                status, body = http(predict_url(srv), "POST", {"instances": words})
                assert status == 200, body
                assert [p["translations"] for p in body["predictions"]] == [
                    "v1:" + w.upper() for w in words
                ]
                assert [p["scores"] for p in body["predictions"]] == [
                    pytest.approx(len(w) / 10) for w in words
                ]

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(worker, t) for t in range(threads)]:
            future.result(timeout=60)


def test_concurrent_clients_without_batching(server):
    started = time.monotonic()
    hammer(server)
    assert time.monotonic() - started < 60


def test_concurrent_clients_with_batching(exports, tmp_path):
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    params = BatchOptions(max_batch_size=16, batch_timeout_micros=5000, num_batch_threads=2)
    with start_server(
        base, "toy", port=0, poll_interval=0, enable_batching=True, batching_parameters=params
    ) as srv:
        started = time.monotonic()
        hammer(srv)
        assert time.monotonic() - started < 60
        stats = srv.batching_stats("toy")
        assert stats["tasks"] == 80  # every request went through the batcher
        assert stats["batches"] <= stats["tasks"]
        # Larger than a batch: rejected like TF Serving does, then still serving.
        status, body = http(predict_url(srv), "POST", {"instances": ["a"] * 17})
        assert status == 400 and "maximum input batch size 16" in body["error"]
        assert http(predict_url(srv), "POST", {"inputs": ["a"]})[0] == 200


def test_batching_merges_concurrent_requests(exports, tmp_path):
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    params = BatchOptions(
        max_batch_size=64, batch_timeout_micros=300_000, num_batch_threads=1, max_padding=1.0
    )
    with start_server(
        base, "toy", port=0, poll_interval=0, enable_batching=True, batching_parameters=params
    ) as srv:
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            futures = [
                pool.submit(http, predict_url(srv), "POST", {"instances": [f"s{i}"] * (i + 1)})
                for i in range(6)
            ]
            results = [f.result(timeout=60) for f in futures]
        for i, (status, body) in enumerate(results):
            assert status == 200, body
            assert [p["translations"] for p in body["predictions"]] == [f"v1:S{i}"] * (i + 1)
        stats = srv.batching_stats("toy")
        assert stats["tasks"] == 6 and stats["batches"] < 6


# --- CLI ---------------------------------------------------------------------------------------


def start_cli(args, cwd=REPO):
    """The server as a process; returns (process, REST port, gRPC port) once both listen."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "keras_transformer.serving", *args],
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    ports = {}
    deadline = time.monotonic() + 120
    while len(ports) < 2 and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        for key, pattern in (
            ("rest", r"Exporting HTTP/REST API at:127\.0\.0\.1:(\d+)"),
            ("grpc", r"Running gRPC ModelServer at 127\.0\.0\.1:(\d+)"),
        ):
            m = re.search(pattern, line)
            if m:
                ports[key] = int(m.group(1))
    if len(ports) < 2:
        proc.kill()
        raise AssertionError(f"the server did not report its ports: {proc.stderr.read()[-2000:]}")
    return proc, ports["rest"], ports["grpc"]


@pytest.mark.slow
def test_cli_serves_both_apis_and_sigterm_answers_requests_in_flight(exports, tmp_path):
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    batching = tmp_path / "batching.config"
    # Each request waits 2 s in the batcher for company: long enough to be in flight at SIGTERM.
    batching.write_text("max_batch_size { value: 64 }\nbatch_timeout_micros { value: 2000000 }\n")
    config = tmp_path / "models.config"
    config.write_text(
        f'model_config_list {{ config {{ name: "toy" base_path: "{base}" '
        'model_platform: "tensorflow" } }'
    )
    proc, rest_port, grpc_port = start_cli(
        [
            # As TF Serving's Docker image starts it: --model_name/--model_base_path always
            # given, ignored beside --model_config_file (server.cc BuildAndStart).
            "--model_name", "model", "--model_base_path", str(tmp_path / "models" / "model"),
            "--model_config_file", str(config),
            "--rest_api_port", "0", "--port", "0", "--file_system_poll_wait_seconds", "0",
            "--enable_batching", "--batching_parameters_file", str(batching),
        ]
    )  # fmt: skip
    url = f"http://127.0.0.1:{rest_port}/v1/models/toy:predict"
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            in_flight = pool.submit(http, url, "POST", {"inputs": ["a"]})
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            assert in_flight.result(timeout=30) == (
                200,
                {"outputs": {"scores": [0.1], "translations": ["v1:A"]}},
            )
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    # Both ports are closed now.
    for port in (rest_port, grpc_port):
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_grpc_port_in_use_fails_the_start_in_one_error(exports, tmp_path):
    # grpcio raises RuntimeError on a port in use: it escaped the CLI as a traceback.
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OSError, match=f"Failed to BuildAndStart gRPC server: .*:{port}"):
            start_server(base, "toy", host="127.0.0.1", port=None, grpc_port=port)


@pytest.mark.slow
def test_cli_refuses_a_bad_config_naming_file_line_and_field(tmp_path):
    config = tmp_path / "models.config"
    config.write_text('model_config_list {\n  config {\n    nmae: "toy"\n  }\n}\n')
    result = subprocess.run(
        [sys.executable, "-m", "keras_transformer.serving", "--model_config_file", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 1
    assert f"Failed to start server. Error: {config}:3:" in result.stderr
    assert 'field nmae: Message type "tensorflow.serving.ModelConfig" has no field named' in (
        result.stderr
    )


# --- units -------------------------------------------------------------------------------------


def test_string_outputs_utf8_or_base64():
    import numpy as np

    from keras_transformer.serving.codec import make_predict_response
    from keras_transformer.serving.errors import ServingStatusError

    bad = {"translations": np.array([b"ok", b"\xff"], dtype=object)}
    with pytest.raises(ServingStatusError) as e:
        make_predict_response(bad, row_format=True)
    assert e.value.http_status == 400 and "_bytes" in e.value.message
    raw = {"translations_bytes": np.array([b"\xff"], dtype=object)}
    assert make_predict_response(raw, row_format=True) == {"predictions": [b64(b"\xff")]}
    floats = {"a": np.array([[0.1, 1.0]], dtype=np.float32), "b": np.array([True])}
    assert make_predict_response(floats, row_format=False) == {
        "outputs": {"a": [[0.1, 1.0]], "b": [True]}
    }
    with pytest.raises(ServingStatusError, match="inconsistent batch size"):
        make_predict_response({"a": np.zeros([2]), "b": np.zeros([3])}, row_format=True)
    # Output dtypes json_tensor.cc does not write (json_tensor_test.cc: "tensor type:
    # complex64"; AddSingleValueAndAdvance has no half or uint16 either).
    for dtype, name in [(np.complex64, "complex64"), (np.float16, "half"), (np.uint16, "uint16")]:
        with pytest.raises(ServingStatusError) as e:
            make_predict_response({"a": np.zeros([2], dtype)}, row_format=True)
        assert e.value.message == f"Failed to write JSON value for tensor type: {name}"


def test_json_to_array_type_rules():
    from tensorflow.core.framework import types_pb2

    from keras_transformer.serving.codec import json_to_array
    from keras_transformer.serving.errors import ServingStatusError

    assert json_to_array([[1, 2]], types_pb2.DT_INT32).tolist() == [[1, 2]]
    assert json_to_array(1, types_pb2.DT_FLOAT).dtype.name == "float32"
    for value, dtype in [
        (1.5, types_pb2.DT_INT32),
        (2**31, types_pb2.DT_INT32),
        (True, types_pb2.DT_INT64),
        ("1", types_pb2.DT_FLOAT),
        (1, types_pb2.DT_BOOL),
    ]:
        with pytest.raises(ServingStatusError):
            json_to_array(value, dtype)
    # As TF Serving (api_rest.md, "Floating Point Precision"): a number that a float cannot
    # hold exactly is converted, not refused; small ints are cast from int32 (wrapping); half
    # has no JSON conversion (json_tensor.cc AddValueToTensor).
    assert json_to_array([1435774380], types_pb2.DT_FLOAT).tolist() == [1435774336.0]
    assert json_to_array([300, -1], types_pb2.DT_UINT8).tolist() == [44, 255]
    with pytest.raises(ServingStatusError) as error:
        json_to_array([1.5], types_pb2.DT_HALF)
    assert (error.value.code, error.value.message) == (
        "UNIMPLEMENTED",
        "Conversion of JSON Value: 1.5 to type: half",
    )


def test_version_swap_under_load_drops_no_request(exports, tmp_path):
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    with start_server(base, "toy", port=0, poll_interval=0.1) as srv:
        seen, failures = set(), []
        stop = time.monotonic() + 20

        def worker() -> None:
            while time.monotonic() < stop and "v2:A" not in seen:
                status, body = http(predict_url(srv), "POST", {"inputs": ["a"]})
                if status != 200:
                    failures.append(body)
                    return
                seen.add(body["outputs"]["translations"][0])

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(worker) for _ in range(4)]
            time.sleep(0.3)
            shutil.copytree(exports[2], tmp_path / "staging")
            os.rename(tmp_path / "staging", base / "2")
            for future in futures:
                future.result(timeout=60)
        assert not failures
        assert seen == {"v1:A", "v2:A"}


def test_unloaded_version_is_freed_at_once(exports, tmp_path):
    # An unloaded version's graph and session must not outlive it: each version swap would
    # otherwise leave the old graph in memory until the cyclic collector happens to run.
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    params = BatchOptions(max_batch_size=8, batch_timeout_micros=1000, num_batch_threads=2)
    with start_server(
        base, "toy", port=0, poll_interval=0, enable_batching=True, batching_parameters=params
    ) as srv:
        hammer(srv, threads=4, per_thread=3)  # the batcher has run batches for version 1
        servable = srv.core.manager("toy").get(1)
        old, old_graph = weakref.ref(servable), weakref.ref(servable._graph)
        del servable
        gc.disable()  # only the unload itself may free it
        try:
            shutil.copytree(exports[2], base / "2")
            srv.refresh()
            assert srv.core.manager("toy").states()[1].state == "END"
            assert old() is None and old_graph() is None
        finally:
            gc.enable()
        assert http(predict_url(srv), "POST", {"inputs": ["a"]})[1]["outputs"]["translations"] == [
            "v2:A"
        ]


def test_keep_alive_connection_survives_errors(server):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        for body, expected in [
            (b'{"instances": ["a"]}', 200),
            (b"{bad", 400),
            (json.dumps({"instances": ["x" * MAX_BYTES]}).encode(), 413),
            (b'{"inputs": ["b"]}', 200),
        ]:
            conn.request("POST", "/v1/models/toy:predict", body=body)
            reply = conn.getresponse()
            assert reply.status == expected
            assert json.loads(reply.read())
    finally:
        conn.close()


def test_batcher_groups_similar_lengths_and_splits_what_would_pad_too_much():
    import numpy as np

    from keras_transformer.serving.batcher import _Task, choose_batch, padding

    def task(text: str) -> _Task:
        return _Task("serving_default", {"sentences": np.array([text.encode()], object)}, ("k",))

    first = task("x" * 20)
    others = [task("x" * n) for n in (2, 19, 40, 21, 3, 22)]
    options = BatchOptions(max_batch_size=4, num_batch_threads=1, max_padding=0.5)
    chosen = choose_batch(first, others, options)
    # The oldest request and its nearest neighbours in length, up to max_batch_size rows.
    assert sorted(t.length for t in chosen) == [19, 20, 21, 22]
    assert padding(chosen) < 0.1
    # Nothing close enough: the short ones are left for a batch of their own.
    strict = BatchOptions(max_batch_size=4, num_batch_threads=1, max_padding=0.3)
    assert [t.length for t in choose_batch(first, [task("ab"), task("abc")], strict)] == [20]
    assert [t.length for t in choose_batch(task("ab"), [task("abc")], strict)] == [2, 3]
    # max_padding 1 merges whatever is queued (TF Serving's behaviour).
    merge_all = BatchOptions(max_batch_size=8, num_batch_threads=1, max_padding=1.0)
    assert len(choose_batch(first, others, merge_all)) == 7


def test_length_grouping_under_load_answers_every_request_correctly(exports, tmp_path):
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    params = BatchOptions(
        max_batch_size=8, batch_timeout_micros=20_000, num_batch_threads=2, max_padding=0.3
    )
    with start_server(
        base, "toy", port=0, poll_interval=0, enable_batching=True, batching_parameters=params
    ) as srv:
        words = [("w" * n) + str(i) for i, n in enumerate([1, 30, 2, 31, 3, 29, 1, 32] * 4)]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(
                pool.map(lambda w: http(predict_url(srv), "POST", {"inputs": [w]}), words)
            )
        for word, (status, body) in zip(words, results):
            assert status == 200, body
            assert body["outputs"]["translations"] == ["v1:" + word.upper()]
        stats = srv.batching_stats("toy")
        assert stats["tasks"] == len(words) and stats["batches"] < len(words)
