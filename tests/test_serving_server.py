"""The development stand-in server: TF Serving's REST contract on a toy SavedModel."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from xla_saved_model import save_xla_model

from keras_transformer.serving.server import (
    BatchingParameters,
    build_arg_parser,
    parse_model_config,
    start_server,
)
from keras_transformer.serving.toy_model import save_toy_model

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


def test_predict_versions_path_and_case_insensitive_route(server):
    status, body = http(f"{server.url}/V1/Models/toy/versions/1:PREDICT", "POST", {"inputs": ["a"]})
    assert status == 200, body
    assert body["outputs"]["translations"] == ["v1:A"]


# --- status and metadata ---------------------------------------------------------------------


def test_status_endpoints(server):
    expected = {
        "model_version_status": [
            {
                "version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    assert http(f"{server.url}/v1/models/toy") == (200, expected)
    assert http(f"{server.url}/v1/models/toy/versions/1") == (200, expected)
    status, body = http(f"{server.url}/v1/models/toy/versions/9")
    assert status == 404 and "Could not find version 9" in body["error"]
    status, body = http(f"{server.url}/v1/models/nope")
    assert status == 404 and "nope" in body["error"]


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

BAD_REQUESTS = {
    "malformed_json": ("POST", "", b'{"instances": ["a"', 400, "JSON Parse error"),
    "empty_body": ("POST", "", b"", 400, "empty"),
    "not_an_object": ("POST", "", [1, 2], 400, "Is not object"),
    "invalid_utf8_body": ("POST", "", b'{"instances": ["\xff"]}', 400, "encoding"),
    "both_keys": ("POST", "", {"instances": ["a"], "inputs": ["a"]}, 400, "only one of"),
    "neither_key": ("POST", "", {"signature_name": "serving_default"}, 400, "Missing 'inputs'"),
    "numbers_not_strings": ("POST", "", {"instances": [1, 2]}, 400, "DT_STRING"),
    "numbers_not_strings_columnar": ("POST", "", {"inputs": [1.5]}, 400, "DT_STRING"),
    "bool_not_string": ("POST", "", {"instances": [True]}, 400, "DT_STRING"),
    "null_not_string": ("POST", "", {"inputs": None}, 400, "DT_STRING"),
    "instances_not_list": ("POST", "", {"instances": "a"}, 400, "list/array"),
    "empty_instances": ("POST", "", {"instances": []}, 400, "No values"),
    "ragged_instances": ("POST", "", {"instances": [["a"], ["b", "c"]]}, 400, "Expecting"),
    "mixed_rank": ("POST", "", {"inputs": [["a"], "b"]}, 400, "incorrect level"),
    "bad_b64": ("POST", "", {"instances": [{"b64": "!!"}]}, 400, "base64"),
    "object_not_b64": ("POST", "", {"instances": [{"b64": 1}]}, 400, "b64"),
    "signature_not_string": ("POST", "", {"signature_name": 3, "inputs": ["a"]}, 400, "string"),
    "unknown_signature": ("POST", "", {"signature_name": "nope", "inputs": ["a"]}, 400, "nope"),
    "init_op_signature": (
        "POST",
        "",
        {"signature_name": "__saved_model_init_op", "inputs": ["a"]},
        400,
        "input map",
    ),
    "pair_plain_list": ("POST", "", {"signature_name": "pair", "instances": ["a"]}, 400, "objects"),
    "pair_missing_input": (
        "POST",
        "",
        {"signature_name": "pair", "inputs": {"a": ["x"]}},
        400,
        "Missing named input: b",
    ),
    "pair_wrong_keys": (
        "POST",
        "",
        {"signature_name": "pair", "instances": [{"a": "x", "c": "y"}]},
        400,
        "named input: c",
    ),
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
    "unknown_model": ("POST", "/v1/models/nope:predict", {"inputs": ["a"]}, 404, "nope"),
    "unknown_version": ("POST", "/v1/models/toy/versions/7:predict", {"inputs": ["a"]}, 404, "7"),
    "unknown_label": ("POST", "/v1/models/toy/labels/x:predict", {"inputs": ["a"]}, 400, "label"),
    "classify": ("POST", "/v1/models/toy:classify", {"examples": [{}]}, 501, "classify"),
    "get_on_predict": ("GET", "/v1/models/toy:predict", None, 400, "Malformed request"),
    "post_on_status": ("POST", "/v1/models/toy", {"inputs": ["a"]}, 400, "Malformed request"),
    "put": ("PUT", "/v1/models/toy:predict", {"inputs": ["a"]}, 400, "Malformed request"),
    "delete": ("DELETE", "/v1/models/toy", None, 400, "Malformed request"),
    "no_model_name": ("GET", "/v1/models", None, 400, "Missing model name"),
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


def test_garbage_on_the_socket_does_not_hurt(server):
    for junk in (
        b"GARBAGE\r\n\r\n",
        b"POST /v1/models/toy:predict HTTP/1.1\r\nContent-Length: x\r\n\r\n",
    ):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(junk)
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(65536)  # some answer, then close
    assert_healthy(server)


# --- versions and config -----------------------------------------------------------------------


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def test_new_version_is_picked_up_and_incomplete_dir_ignored(exports, tmp_path):
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    (base / "5" / "variables").mkdir(parents=True)  # no saved_model.pb: not a version yet
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
    with start_server(base, "xla", port=0, poll_interval=0) as srv:
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
    with start_server(base, "xla", port=0, poll_interval=0, xla_compilation_enabled=True) as srv:
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
            base_path: "toy"          # relative to the config file
            model_platform: "tensorflow"
            model_version_policy { specific { versions: 1 versions: 2 } }
            version_labels { key: "stable" value: 1 }
            version_labels { key: "canary" value: 2 }
          }
        }
        """
    )
    with start_server(model_config_file=config, port=0, poll_interval=0) as srv:
        for suffix, expected in [
            ("", "v2:A"),
            ("/labels/stable", "v1:A"),
            ("/labels/canary", "v2:A"),
            ("/versions/1", "v1:A"),
        ]:
            status, body = http(predict_url(srv, suffix), "POST", {"inputs": ["a"]})
            assert status == 200, (suffix, body)
            assert body["outputs"]["translations"] == [expected]
        assert (
            http(f"{srv.url}/v1/models/toy/labels/stable")[1]["model_version_status"][0]["version"]
            == "1"
        )
        status, body = http(f"{srv.url}/v1/models/toy/labels/beta/metadata")
        assert status == 400 and "Unrecognized servable version label: beta" in body["error"]


def test_repo_deployment_configs_parse():
    with open(os.path.join(REPO, "serving", "models.config"), encoding="utf-8") as f:
        configs = parse_model_config(f.read(), "/")
    assert configs and all(c.base_path.startswith("/models/") for c in configs)
    labels = configs[0].version_labels
    assert {"stable", "canary"} <= set(labels)
    assert configs[0].version_policy[0] == "specific"
    assert set(labels.values()) <= set(configs[0].version_policy[1])
    params = BatchingParameters.from_file(os.path.join(REPO, "serving", "batching.config"))
    assert params.max_batch_size >= 1 and params.batch_timeout_micros >= 0


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
    params = BatchingParameters(max_batch_size=16, batch_timeout_micros=5000, num_batch_threads=2)
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
    params = BatchingParameters(
        max_batch_size=64, batch_timeout_micros=300_000, num_batch_threads=1
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


@pytest.mark.slow
def test_cli_serves_until_terminated(exports, tmp_path):
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "keras_transformer.serving.server",
            "--model_base_path",
            str(base),
            "--model_name",
            "toy",
            "--rest_api_port",
            "0",
            "--file_system_poll_wait_seconds",
            "0",
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        port = None
        deadline = time.monotonic() + 90
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            m = re.search(r"Exporting HTTP/REST API at:127\.0\.0\.1:(\d+)", line)
            port = int(m.group(1)) if m else None
        assert port, "server did not report its port"
        status, body = http(
            f"http://127.0.0.1:{port}/v1/models/toy:predict", "POST", {"inputs": ["a"]}
        )
        assert (status, body["outputs"]["translations"]) == (200, ["v1:A"])
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


# --- units -------------------------------------------------------------------------------------


def test_string_outputs_utf8_or_base64():
    import numpy as np

    from keras_transformer.serving.server import ServingStatusError, make_predict_response

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


def test_json_to_array_type_rules():
    from tensorflow.core.framework import types_pb2

    from keras_transformer.serving.server import ServingStatusError, json_to_array

    assert json_to_array([[1, 2]], types_pb2.DT_INT32).tolist() == [[1, 2]]
    assert json_to_array(1, types_pb2.DT_FLOAT).dtype.name == "float32"
    for value, dtype in [
        (1.5, types_pb2.DT_INT32),
        (2**31, types_pb2.DT_INT32),
        (True, types_pb2.DT_INT64),
        (2**25, types_pb2.DT_FLOAT),
        ("1", types_pb2.DT_FLOAT),
        (1, types_pb2.DT_BOOL),
    ]:
        with pytest.raises(ServingStatusError):
            json_to_array(value, dtype)


def test_parse_text_proto_subset():
    from keras_transformer.serving.server import parse_text_proto

    parsed = parse_text_proto(
        'a { value: 3 } b: "x" "y"  # comment\n c: [1, 2] d < e: true > f: ENUM_NAME'
    )
    assert parsed == {
        "a": [{"value": [3]}],
        "b": ["xy"],
        "c": [1, 2],
        "d": [{"e": [True]}],
        "f": ["ENUM_NAME"],
    }
    params = BatchingParameters.from_text(
        "max_batch_size { value: 8 } num_batch_threads { value: 1 }"
    )
    assert (params.max_batch_size, params.num_batch_threads) == (8, 1)


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
