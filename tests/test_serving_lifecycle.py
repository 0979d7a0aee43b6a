"""The model lifecycle of the TF Serving stand-in, against TF Serving's own rules.

TF Serving's ``FileSystemStoragePathSource`` lists every base path each poll and hands each
model's aspired versions to the ``AspiredVersionsManager``, whose default
``AvailabilityPreservingPolicy`` loads and unloads them. Each test starts the stand-in on
real SavedModel folders and polls by hand (``refresh``), so nothing depends on timing.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import shutil
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
from google.protobuf import text_format
from tensorflow_serving.apis import model_management_pb2, model_service_pb2_grpc
from toy_model import save_toy_model

from keras_transformer import storage
from keras_transformer.serving.config import (
    ConfigError,
    ModelConfig,
    read_model_server_config,
    single_model_config,
)
from keras_transformer.serving.server import start_server

# Version polling on, but no poll comes by itself during a test: a reload polls the base paths
# (with polling off, --file_system_poll_wait_seconds=0, a reload changes the config only).
BY_HAND = 3600

# A corrupt version's load is retried (--max_num_load_retries, 5 by default, 1 min apart):
# the tests that are not about retries try once.
NO_RETRIES = {"max_num_load_retries": 0}


def http(url: str, method: str = "GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Toy SavedModels answering 'vN:' + upper, and one whose saved_model.pb is corrupt."""
    root = tmp_path_factory.mktemp("exports")
    found = {n: save_toy_model(root / f"v{n}", prefix=f"v{n}:") for n in (1, 2)}
    corrupt = root / "corrupt"
    shutil.copytree(found[1], corrupt)
    (corrupt / "saved_model.pb").write_bytes(b"not a SavedModel")
    found["corrupt"] = str(corrupt)
    return found


def answer(srv, name: str = "toy") -> str | int:
    """The translation of 'a' by the latest version, or the HTTP status of a failure."""
    code, body = http(f"{srv.url}/v1/models/{name}:predict", "POST", {"instances": ["a"]})
    return body["predictions"][0]["translations"] if code == 200 else code


def states(srv, name: str = "toy") -> list[tuple[int, str, bool]]:
    """(version, state, failed) of each version, as GetModelStatus reports them."""
    code, body = http(f"{srv.url}/v1/models/{name}")
    assert code == 200, body
    return [
        (int(s["version"]), s["state"], s["status"].get("error_code", "OK") != "OK")
        for s in body["model_version_status"]
    ]


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def write_config(path, models: dict[str, str], policy: str) -> str:
    entries = "".join(
        f'config {{ name: "{name}" base_path: "{base}" model_platform: "tensorflow" '
        f"model_version_policy {{ {policy} }} }}\n"
        for name, base in models.items()
    )
    path.write_text(f"model_config_list {{\n{entries}}}\n")
    return str(path)


@pytest.mark.parametrize("where", ["local", "object_store"])
def test_rollback_by_deleting_the_newest_version_loads_the_previous_one(exports, tmp_path, where):
    # v1 was unloaded when v2 came; once v2 is deleted, v1 is aspired again and loads, and
    # v2 is unloaded only after (AvailabilityPreservingPolicy), on ram:// (for gs://) too.
    base = "ram://lifecycle-rollback/toy" if where == "object_store" else str(tmp_path / "toy")
    storage.copy_tree(exports[1], f"{base}/1", last=["saved_model.pb"])
    with start_server(models=[ModelConfig("toy", base)], grpc_port=None, poll_interval=0) as srv:
        assert answer(srv) == "v1:A"
        storage.copy_tree(exports[2], f"{base}/2", last=["saved_model.pb"])
        srv.refresh()
        assert answer(srv) == "v2:A"
        assert states(srv) == [(2, "AVAILABLE", False), (1, "END", False)]
        storage.rmtree(f"{base}/2")
        srv.refresh()
        assert answer(srv) == "v1:A"
        assert states(srv) == [(2, "END", False), (1, "AVAILABLE", False)]


def test_uri_base_paths_are_kept_as_tf_serving_keeps_them(exports, tmp_path):
    # server_core.cc UriIsRelativePath: a base path with a scheme is absolute, from
    # --model_base_path (BuildSingleModelConfig) and from a config file alike.
    assert single_model_config("toy", "gs://bucket/toy").base_path == "gs://bucket/toy"
    config = write_config(tmp_path / "uri.config", {"toy": "gs://bucket/toy"}, "all {}")
    assert read_model_server_config(config)[0].base_path == "gs://bucket/toy"
    relative = write_config(tmp_path / "relative.config", {"toy": "models/toy"}, "all {}")
    with pytest.raises(ConfigError, match="Expected model toy to have an absolute path or URI"):
        read_model_server_config(relative)
    base = "ram://lifecycle-uri/toy"
    storage.copy_tree(exports[1], f"{base}/1", last=["saved_model.pb"])
    with start_server(base, "toy", grpc_port=None, poll_interval=0) as srv:
        assert answer(srv) == "v1:A"


def test_serving_version_stays_when_the_only_other_version_fails(exports, tmp_path):
    # Policy latest: v2 serves; v2 is deleted and v1 (aspired again) fails to load. With no
    # aspired version AVAILABLE, v2 is not unloaded (availability_preserving_policy.cc).
    base = tmp_path / "toy"
    shutil.copytree(exports["corrupt"], base / "1")
    shutil.copytree(exports[2], base / "2")
    with start_server(base, "toy", grpc_port=None, poll_interval=0, **NO_RETRIES) as srv:
        assert answer(srv) == "v2:A"
        shutil.rmtree(base / "2")
        srv.refresh()
        assert answer(srv) == "v2:A"
        assert states(srv) == [(2, "AVAILABLE", False), (1, "END", True)]


def test_missing_base_path_fails_the_poll_and_unloads_nothing(exports, tmp_path, caplog):
    # PollFileSystemForServable: a base path that does not exist is an error, not an empty
    # list, and one failing base path fails the whole poll: no model changes.
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(exports[1], a / "1")
    shutil.copytree(exports[1], b / "1")
    models = [ModelConfig("a", str(a)), ModelConfig("b", str(b))]
    with start_server(models=models, grpc_port=None, poll_interval=0) as srv:
        os.rename(b, tmp_path / "b.moved")
        shutil.copytree(exports[2], a / "2")
        with caplog.at_level(logging.ERROR):
            srv.refresh()
        assert answer(srv, "a") == "v1:A" and answer(srv, "b") == "v1:A"
        assert f"Could not find base path {b} for servable b" in caplog.text
        assert states(srv, "a") == [(1, "AVAILABLE", False)]
        assert states(srv, "b") == [(1, "AVAILABLE", False)]
        os.rename(tmp_path / "b.moved", b)
        srv.refresh()
        assert answer(srv, "a") == "v2:A" and answer(srv, "b") == "v1:A"


def test_policy_that_aspires_no_version_unloads_every_version(exports, tmp_path):
    # specific {versions: 7} with no folder 7: TF Serving aspires nothing, and with nothing
    # aspired the policy unloads every serving version, lowest first.
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    shutil.copytree(exports[2], base / "2")
    config = write_config(tmp_path / "models.config", {"toy": str(base)}, "all {}")
    with start_server(model_config_file=config, grpc_port=None, poll_interval=BY_HAND) as srv:
        assert states(srv) == [(2, "AVAILABLE", False), (1, "AVAILABLE", False)]
        write_config(tmp_path / "models.config", {"toy": str(base)}, "specific { versions: 7 }")
        srv.reload_config_file(config)
        assert states(srv) == [(2, "END", False), (1, "END", False)]
        assert answer(srv) == 404


def test_several_unaspired_serving_versions_keep_only_the_highest(exports, tmp_path):
    # all {} serving v1 and v2, then specific {3} with v3 corrupt: with two unaspired versions
    # AVAILABLE the policy unloads the lower one; v2 stays while v3 fails.
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    shutil.copytree(exports[2], base / "2")
    shutil.copytree(exports["corrupt"], base / "3")
    config = write_config(tmp_path / "models.config", {"toy": str(base)}, "all {}")
    with start_server(
        model_config_file=config, grpc_port=None, poll_interval=BY_HAND, **NO_RETRIES
    ) as srv:
        assert [s[:2] for s in states(srv)] == [(3, "END"), (2, "AVAILABLE"), (1, "AVAILABLE")]
        write_config(tmp_path / "models.config", {"toy": str(base)}, "specific { versions: 3 }")
        srv.reload_config_file(config)
        assert states(srv) == [(3, "END", True), (2, "AVAILABLE", False), (1, "END", False)]
        assert answer(srv) == "v2:A"


def incomplete_copy(source: str, destination) -> None:
    """A version folder being copied: everything but saved_model.pb (which comes last)."""
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns("saved_model.pb"))


def test_numbered_folder_without_graph_is_retried_and_loads_once_complete(exports, tmp_path):
    # Every numbered child is a version (IndexChildrenByVersion); while saved_model.pb is
    # missing its load fails and is retried (LoaderHarness::Load, util/retrier.cc), LOADING
    # meanwhile, and the previous version keeps serving until it is AVAILABLE.
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    with start_server(
        base,
        "toy",
        grpc_port=None,
        poll_interval=0,
        max_num_load_retries=1000,
        load_retry_interval_micros=100_000,
    ) as srv:
        incomplete_copy(exports[2], base / "2")
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            poll = pool.submit(srv.refresh)  # blocks while version 2 is retried
            wait_for(lambda: states(srv)[0] == (2, "LOADING", False))
            assert states(srv) == [(2, "LOADING", False), (1, "AVAILABLE", False)]
            assert answer(srv) == "v1:A"
            shutil.copy(os.path.join(exports[2], "saved_model.pb"), base / "2")
            poll.result(timeout=120)
        assert states(srv) == [(2, "AVAILABLE", False), (1, "END", False)]
        assert answer(srv) == "v2:A"


def test_numbered_folder_without_graph_fails_not_found_after_the_retries(exports, tmp_path, caplog):
    # session_bundle_util.cc: NOT_FOUND "Specified file path does not appear to contain a
    # SavedModel bundle ..."; after --max_num_load_retries more tries the version is END with
    # that error, and the previous version keeps serving.
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    with start_server(
        base,
        "toy",
        grpc_port=None,
        poll_interval=0,
        max_num_load_retries=2,
        load_retry_interval_micros=1000,
    ) as srv:
        incomplete_copy(exports[2], base / "2")
        with caplog.at_level(logging.INFO, logger="keras_transformer.serving.manager"):
            srv.refresh()
        assert states(srv) == [(2, "END", True), (1, "AVAILABLE", False)]
        assert answer(srv) == "v1:A"
        status = http(f"{srv.url}/v1/models/toy/versions/2")[1]["model_version_status"][0]
        assert status["status"]["error_code"] == "NOT_FOUND"
        assert status["status"]["error_message"].startswith(
            "Specified file path does not appear to contain a SavedModel bundle"
        )
    assert caplog.text.count("Retrying of Loading servable: {name: toy version: 2} retry:") == 2
    assert "exhausted max_num_retries: 2" in caplog.text


@pytest.mark.slow
def test_unload_waits_for_a_request_in_flight_with_no_time_limit(exports, tmp_path):
    # BasicManager::ExecuteUnload: UpdateServingMap blocks until the last handle to the
    # version is released, with no time limit, and only then unloads it: a request held
    # past the stand-in's old 60 s limit still runs on its version's session.
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    with start_server(base, "toy", grpc_port=None, poll_interval=0) as srv:
        held = srv.core.servable("toy")  # what a request holds while it runs
        try:
            shutil.copytree(exports[2], base / "2")
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                poll = pool.submit(srv.refresh)  # unloads version 1: waits for the request
                wait_for(lambda: states(srv) == [(2, "AVAILABLE", False), (1, "UNLOADING", False)])
                assert answer(srv) == "v2:A"
                time.sleep(65)
                assert not poll.done()
                assert states(srv) == [(2, "AVAILABLE", False), (1, "UNLOADING", False)]
                sentences = {"sentences": np.array([b"a"], dtype=object)}
                outputs = srv.core.predict(held, "serving_default", sentences)
                assert outputs["translations"].tolist() == [b"v1:A"]
                held.release()
                held = None
                poll.result(timeout=120)
        finally:
            if held is not None:
                held.release()
        assert states(srv) == [(2, "AVAILABLE", False), (1, "END", False)]


def reload_over_grpc(srv, models: dict[str, str], timeout: float = 60):
    """HandleReloadConfigRequest with a model_config_list of ``models`` (name: base path)."""
    entries = "".join(
        f'config {{ name: "{name}" base_path: "{base}" model_platform: "tensorflow" }} '
        for name, base in models.items()
    )
    request = model_management_pb2.ReloadConfigRequest()
    text_format.Parse(f"model_config_list {{ {entries}}}", request.config)
    stub = model_service_pb2_grpc.ModelServiceStub(grpc.insecure_channel(srv.grpc_target))
    return stub.HandleReloadConfigRequest(request, timeout=timeout)


def test_reload_adding_a_model_that_fails_to_load_fails_the_rpc(exports, tmp_path):
    # ServerCore::ReloadConfig waits for each new model (WaitUntilModelsAvailable): when its
    # first version to end its load failed, the RPC fails UNKNOWN and names it with its
    # error; the new config stays applied.
    base, bad = tmp_path / "toy", tmp_path / "bad"
    shutil.copytree(exports[1], base / "1")
    shutil.copytree(exports["corrupt"], bad / "1")
    with start_server(base, "toy", grpc_port=0, poll_interval=BY_HAND, **NO_RETRIES) as srv:
        with pytest.raises(grpc.RpcError) as error:
            reload_over_grpc(srv, {"toy": str(base), "bad": str(bad)})
        assert error.value.code() == grpc.StatusCode.UNKNOWN
        details = error.value.details()
        assert details.startswith(
            "1 model(s) did not become available: {{{name: bad version: 1} due to error: UNKNOWN: "
        ), details
        assert details.endswith("}, }"), details
        assert states(srv, "bad") == [(1, "END", True)]
        assert answer(srv) == "v1:A"
        # A model that loads: OK.
        assert reload_over_grpc(srv, {"toy": str(base)}).status.error_code == 0


def test_reload_removing_a_model_does_not_wait_for_its_requests_in_flight(exports, tmp_path):
    # Removing a model only un-aspires its versions (UnaspireServables); the manager unloads
    # them later, once their last handle is released, and ReloadConfig waits only for new
    # models. The reload returns while a request still holds the removed model's version.
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(exports[1], a / "1")
    shutil.copytree(exports[2], b / "2")
    models = [ModelConfig("a", str(a)), ModelConfig("b", str(b))]
    with start_server(models=models, grpc_port=None, poll_interval=BY_HAND) as srv:
        held = srv.core.servable("b")  # what a request holds while it runs
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                reload = pool.submit(srv.core.reload_config, [ModelConfig("a", str(a))])
                reload.result(timeout=30)  # the request is still held
                assert answer(srv, "b") == 404
                wait_for(lambda: states(srv, "b") == [(2, "UNLOADING", False)])
                sentences = {"sentences": np.array([b"a"], dtype=object)}
                outputs = srv.core.predict(held, "serving_default", sentences)
                assert outputs["translations"].tolist() == [b"v2:A"]
        finally:
            held.release()
        wait_for(lambda: states(srv, "b") == [(2, "END", False)])
        assert answer(srv, "a") == "v1:A"


def test_with_polling_off_a_reload_changes_the_config_only(exports, tmp_path):
    # --file_system_poll_wait_seconds=0: FileSystemStoragePathSource polls the base paths
    # once, at startup; a reload only updates its config (UpdateConfig). A new version is
    # not loaded, and a model the reload adds is never polled, so ReloadConfig waits for it
    # with no time limit (WaitUntilModelsAvailable): here the client's deadline passes.
    base, other = tmp_path / "toy", tmp_path / "other"
    shutil.copytree(exports[1], base / "1")
    shutil.copytree(exports[2], other / "2")
    config = write_config(tmp_path / "models.config", {"toy": str(base)}, "all {}")
    with start_server(model_config_file=config, grpc_port=0, poll_interval=0) as srv:
        shutil.copytree(exports[2], base / "2")
        srv.reload_config_file(config)
        assert states(srv) == [(1, "AVAILABLE", False)]
        assert answer(srv) == "v1:A"
        with pytest.raises(grpc.RpcError) as error:
            reload_over_grpc(srv, {"toy": str(base), "other": str(other)}, timeout=3)
        assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert http(f"{srv.url}/v1/models/other")[0] == 404
        assert states(srv) == [(1, "AVAILABLE", False)]
        srv.refresh()  # a poll by hand (none comes by itself) ends the reload's wait
        assert answer(srv, "other") == "v2:A"
        assert answer(srv) == "v2:A"


def test_version_without_variables_index_loads_with_nothing_restored(exports, tmp_path):
    # TF Serving's C++ loader (loader.cc, RunRestore): with no variables/variables.index it
    # logs "The specified SavedModel has no variables; no checkpoints were restored" and the
    # version loads, AVAILABLE (the Python loader would fail "not a valid checkpoint").
    base = tmp_path / "toy"
    shutil.copytree(exports[1], base / "1")
    with start_server(base, "toy", grpc_port=None, poll_interval=0, **NO_RETRIES) as srv:
        shutil.copytree(exports[2], base / "2")
        os.remove(base / "2" / "variables" / "variables.index")
        srv.refresh()
        assert states(srv) == [(2, "AVAILABLE", False), (1, "END", False)]
        assert answer(srv) == "v2:A"
