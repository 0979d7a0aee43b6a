"""Labels, versions and config reloads on the stand-in, as TF Serving's ``ServerCore`` does
them (``server_core.cc``: ``ReloadConfig``, ``UpdateModelVersionLabelMap``;
``get_model_status_impl.cc``; ``model_service_impl.cc``; ``server.cc``:
``PollFilesystemAndReloadConfig``), over REST and gRPC, with the real server started."""

from __future__ import annotations

import logging
import shutil
import time
import urllib.error
import urllib.request

import grpc
import pytest
from google.protobuf import text_format
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
)
from tensorflow_serving.config import model_server_config_pb2
from test_serving_server import http, predict_url
from toy_model import save_toy_model

from keras_transformer.serving.server import start_server

# Version polling on, but no poll comes by itself during a test: a reload polls the base paths
# (with polling off, --file_system_poll_wait_seconds=0, a reload changes the config only).
BY_HAND = 3600

UNAVAILABLE_2 = (
    "Request to assign label to version 2 of model toy, which is not currently available "
    "for inference"
)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Three toy SavedModels: version N answers 'vN:' + upper."""
    root = tmp_path_factory.mktemp("label-exports")
    return {n: save_toy_model(root / f"v{n}", prefix=f"v{n}:") for n in (1, 2, 3)}


def config_text(base, versions, labels, name="toy") -> str:
    specific = " ".join(f"versions: {v}" for v in versions)
    label_text = " ".join(
        f'version_labels {{ key: "{k}" value: {v} }}' for k, v in sorted(labels.items())
    )
    return (
        f'config {{ name: "{name}" base_path: "{base}" model_platform: "tensorflow" '
        f"model_version_policy {{ specific {{ {specific} }} }} {label_text} }}"
    )


def write_config(path, *models: str) -> None:
    path.write_text("model_config_list { " + " ".join(models) + " }")


def answer(srv, suffix: str = "") -> str | int:
    """The translation of 'a' at ``suffix`` (a label or version path), or the HTTP status."""
    status, body = http(predict_url(srv, suffix), "POST", {"inputs": ["a"]})
    return body["outputs"]["translations"][0] if status == 200 else status


def versions(srv, path: str = "") -> list[tuple[str, str]]:
    return versions_of(srv, "toy", path)


def versions_of(srv, model: str, path: str = "") -> list[tuple[str, str]]:
    body = http(f"{srv.url}/v1/models/{model}{path}")[1]
    return [(v["version"], v["state"]) for v in body["model_version_status"]]


def serve_labelled(config, grpc_port: int | None = 0):
    """The stand-in on ``config``, with labels allowed for versions not yet loaded."""
    return start_server(
        model_config_file=config,
        allow_version_labels_for_unavailable_models=True,
        port=0,
        grpc_port=grpc_port,
        poll_interval=BY_HAND,
    )


@pytest.fixture
def base(exports, tmp_path):
    base = tmp_path / "toy"
    for version in (1, 2):
        shutil.copytree(exports[version], base / str(version))
    return base


def test_promotion_in_one_edit_is_refused_on_every_reload_and_works_in_two(base, tmp_path, caplog):
    config = tmp_path / "models.config"
    write_config(config, config_text(base, [1], {"stable": 1}))
    with serve_labelled(config, grpc_port=None) as srv:
        assert answer(srv, "/labels/stable") == "v1:A"
        assert versions(srv) == [("1", "AVAILABLE")]
        # One edit: add version 2 and move "stable" to it. TF Serving checks the labels
        # before loading anything, so the config is refused, every time, and 2 never loads.
        write_config(config, config_text(base, [1, 2], {"stable": 2}))
        for _ in range(2):
            caplog.clear()
            with caplog.at_level(logging.ERROR, logger="keras_transformer.serving.core"):
                srv.reload_config_file(config)
            assert f"PollFilesystemAndReloadConfig failed to ReloadConfig: {UNAVAILABLE_2}" in (
                caplog.text
            )
            assert versions(srv) == [("1", "AVAILABLE")]
            assert answer(srv, "/labels/stable") == "v1:A"
        # Two edits: the version first (a new label may name it while it loads, with the
        # flag), then, once it is AVAILABLE, the label moves.
        write_config(config, config_text(base, [1, 2], {"stable": 1, "canary": 2}))
        srv.reload_config_file(config)
        assert versions(srv) == [("2", "AVAILABLE"), ("1", "AVAILABLE")]
        assert (answer(srv, "/labels/stable"), answer(srv, "/labels/canary")) == ("v1:A", "v2:A")
        write_config(config, config_text(base, [1, 2], {"stable": 2, "canary": 2}))
        srv.reload_config_file(config)
        assert answer(srv, "/labels/stable") == "v2:A"
        # Version 1 leaves the policy: unloaded once no longer aspired.
        write_config(config, config_text(base, [2], {"stable": 2}))
        srv.reload_config_file(config)
        assert versions(srv) == [("2", "AVAILABLE"), ("1", "END")]
        assert answer(srv, "/labels/canary") == 400  # the label is gone with the config


def test_without_the_flag_a_reload_may_label_only_available_versions(base, tmp_path, caplog):
    config = tmp_path / "models.config"
    write_config(config, config_text(base, [1, 2], {}))
    with start_server(
        model_config_file=config, port=0, grpc_port=None, poll_interval=BY_HAND
    ) as srv:
        write_config(config, config_text(base, [1, 2, 3], {"next": 3}))
        with caplog.at_level(logging.ERROR, logger="keras_transformer.serving.core"):
            srv.reload_config_file(config)
        assert "label to version 3 of model toy, which is not currently available" in caplog.text
        write_config(config, config_text(base, [1, 2], {"stable": 1}))
        srv.reload_config_file(config)
        assert answer(srv, "/labels/stable") == "v1:A"


def test_a_config_file_that_does_not_parse_keeps_the_running_config(base, tmp_path, caplog):
    config = tmp_path / "models.config"
    write_config(config, config_text(base, [1], {}))
    with start_server(
        model_config_file=config, port=0, grpc_port=None, poll_interval=BY_HAND
    ) as srv:
        config.write_text("model_config_list { config { nmae: 'toy' } }")
        with caplog.at_level(logging.ERROR, logger="keras_transformer.serving.core"):
            srv.reload_config_file(config)
        assert "Failed to read ModelServerConfig file:" in caplog.text
        assert "field nmae" in caplog.text
        assert answer(srv) == "v1:A"


def test_the_config_poll_reloads_the_file(base, tmp_path):
    config = tmp_path / "models.config"
    write_config(config, config_text(base, [1], {}))
    with start_server(
        model_config_file=config,
        port=0,
        grpc_port=None,
        poll_interval=BY_HAND,
        config_poll_interval=0.2,
    ) as srv:
        assert versions(srv) == [("1", "AVAILABLE")]
        write_config(config, config_text(base, [2], {}))
        deadline = time.monotonic() + 30
        while versions(srv)[0] != ("2", "AVAILABLE") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert answer(srv) == "v2:A"


def test_status_by_label_lists_every_version_as_tf_serving_does(base, tmp_path):
    config = tmp_path / "models.config"
    write_config(config, config_text(base, [1, 2], {"stable": 1}))
    with serve_labelled(config) as srv:
        every = [("2", "AVAILABLE"), ("1", "AVAILABLE")]
        # GetModelStatusImpl reads only the version: a label, known or not, lists them all.
        assert versions(srv, "/labels/stable") == every
        assert versions(srv, "/labels/nope") == every
        assert versions(srv, "/versions/1") == [("1", "AVAILABLE")]
        stub = model_service_pb2_grpc.ModelServiceStub(grpc.insecure_channel(srv.grpc_target))
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = "toy"
        request.model_spec.version_label = "stable"
        reply = stub.GetModelStatus(request, timeout=30)
        assert [s.version for s in reply.model_version_status] == [2, 1]
        # Metadata and predict resolve the label (an unknown one is INVALID_ARGUMENT).
        status, body = http(f"{srv.url}/v1/models/toy/labels/nope/metadata")
        assert status == 400 and "Unrecognized servable version label: nope" in body["error"]


def reload_request(text: str):
    request = model_management_pb2.ReloadConfigRequest()
    text_format.Parse(text, request.config)
    return request


def test_handle_reload_config_request_over_grpc(base, tmp_path, exports):
    config = tmp_path / "models.config"
    write_config(config, config_text(base, [1], {"stable": 1}))
    other = tmp_path / "other"
    shutil.copytree(exports[3], other / "3")
    with serve_labelled(config) as srv:
        stub = model_service_pb2_grpc.ModelServiceStub(grpc.insecure_channel(srv.grpc_target))
        moved = "model_config_list { " + config_text(base, [1, 2], {"stable": 2}) + " }"
        with pytest.raises(grpc.RpcError) as error:
            stub.HandleReloadConfigRequest(reload_request(moved), timeout=60)
        assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert error.value.details() == UNAVAILABLE_2
        assert versions(srv) == [("1", "AVAILABLE")]
        # A second model added, the labels unchanged: loaded before the call returns.
        both = (
            "model_config_list { "
            + config_text(base, [1, 2], {"stable": 1})
            + config_text(other, [3], {}, name="other")
            + " }"
        )
        reply = stub.HandleReloadConfigRequest(reload_request(both), timeout=60)
        assert reply.status.error_code == 0 and reply.status.error_message == ""
        assert versions(srv) == [("2", "AVAILABLE"), ("1", "AVAILABLE")]
        status, body = http(f"{srv.url}/v1/models/other:predict", "POST", {"inputs": ["a"]})
        assert (status, body["outputs"]["translations"]) == (200, ["v3:A"])
        # The second model removed: predict finds nothing at once, and its versions end (status
        # END) once unloaded, in the background, as TF Serving's manager unloads them.
        only_toy = "model_config_list { " + config_text(base, [1, 2], {"stable": 1}) + " }"
        stub.HandleReloadConfigRequest(reload_request(only_toy), timeout=60)
        deadline = time.monotonic() + 60
        while versions_of(srv, "other") != [("3", "END")] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert versions_of(srv, "other") == [("3", "END")]
        status, body = http(f"{srv.url}/v1/models/other:predict", "POST", {"inputs": ["a"]})
        assert status == 404 and "Servable not found for request: Latest(other)" in body["error"]
        # Only a model_config_list can be reloaded; a bad entry names its field.
        request = model_management_pb2.ReloadConfigRequest()
        request.config.custom_model_config.Pack(model_server_config_pb2.ModelServerConfig())
        with pytest.raises(grpc.RpcError) as error:
            stub.HandleReloadConfigRequest(request, timeout=30)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "Only ModelConfigList is currently supported" in error.value.details()
        relative = (
            "model_config_list { config { name: 'x' base_path: 'rel' "
            "model_platform: 'tensorflow' } }"
        )
        with pytest.raises(grpc.RpcError) as error:
            stub.HandleReloadConfigRequest(reload_request(relative), timeout=30)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "field base_path" in error.value.details()
        assert answer(srv, "/labels/stable") == "v1:A"
        # An empty list is a config too: every model unloads (TF Serving un-aspires what a
        # config drops); it was refused as "the config lists no models".
        reply = stub.HandleReloadConfigRequest(reload_request("model_config_list { }"), timeout=60)
        assert reply.status.error_code == 0
        deadline = time.monotonic() + 60
        while versions(srv) != [("2", "END"), ("1", "END")] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert versions(srv) == [("2", "END"), ("1", "END")]


def test_other_methods_on_the_api_are_malformed_requests(base):
    """TF Serving answers GET and POST only (``http_rest_api_handler.cc``): HEAD, PUT, ... get
    400 "Malformed request" (a HEAD answer carries no body); OPTIONS is a CORS preflight
    (serving_conformance_cases.py)."""
    with start_server(base, "toy", port=0, grpc_port=None, poll_interval=BY_HAND) as srv:
        for method in ("HEAD", "PUT", "DELETE"):
            request = urllib.request.Request(f"{srv.url}/v1/models/toy", method=method)
            with pytest.raises(urllib.error.HTTPError) as error:
                urllib.request.urlopen(request, timeout=30)
            assert error.value.code == 400, method
            if method != "HEAD":
                body = error.value.read().decode()
                assert f"Malformed request: {method} /v1/models/toy" in body
