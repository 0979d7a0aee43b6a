"""The stand-in's Prometheus page (``--monitoring_config_file``), scraped after real requests.

TF Serving's behaviour followed here: ``model_servers/http_server.cc`` (the page on the REST
port at the configured path, any method; REST requests under ``/v1/`` counted by model and
status, successful ones timed by model, API and entrypoint), ``prediction_service_impl.cc``
(gRPC ``Predict`` counted and timed; metadata and status not), ``servables/tensorflow/util.cc``
(names, labels, microsecond buckets) and ``util/prometheus_exporter.cc`` (Prometheus names).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from toy_model import save_toy_model

from keras_transformer.serving.config import ConfigError
from keras_transformer.serving.monitoring import LATENCY_BUCKETS, ServingMetrics
from keras_transformer.serving.server import start_server

DEFAULT_PATH = "/monitoring/prometheus/metrics"  # PrometheusExporter::kPrometheusPath
REQUEST_COUNT = ":tensorflow:serving:request_count"
REQUEST_LATENCY = ":tensorflow:serving:request_latency"
RUNTIME_LATENCY = ":tensorflow:serving:runtime_latency"
STANDIN_LATENCY = ":keras_transformer:serving:request_latency"


def http(url: str, method: str = "GET", body: bytes | None = None) -> tuple[int, str, str]:
    """(status, Content-Type, text) of one request."""
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def predict(srv, model: str, body) -> int:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return http(f"{srv.url}/v1/models/{model}:predict", "POST", data)[0]


def samples(text: str) -> dict[str, list]:
    """Every sample of a Prometheus page by sample name (the page must parse)."""
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def value(page: dict[str, list], name: str, **labels: str) -> float:
    """The value of the sample `name` with exactly these labels (0 when absent)."""
    matches = [s.value for s in page.get(name, []) if s.labels == labels]
    assert len(matches) <= 1, (name, labels)
    return matches[0] if matches else 0.0


def by_labels(page: dict[str, list], name: str) -> dict[tuple, float]:
    return {tuple(sorted(s.labels.items())): s.value for s in page.get(name, [])}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("metrics")
    save_toy_model(root / "toy" / "1", prefix="v1:")
    return root / "toy"


@pytest.fixture(scope="module")
def monitoring_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("monitoring") / "monitoring.config"
    path.write_text("prometheus_config {\n  enable: true\n}\n")  # TF Serving's default path
    return path


@pytest.fixture(scope="module")
def server(base, monitoring_config):
    with start_server(
        base, "toy", port=0, grpc_port=0, poll_interval=0, monitoring_config_file=monitoring_config
    ) as srv:
        yield srv


def scrape(srv) -> dict[str, list]:
    status, content_type, text = http(srv.url + srv.metrics_path)
    assert status == 200, text
    assert content_type.startswith("text/plain"), content_type
    return samples(text)


def test_counts_and_latency_by_model_api_entrypoint_and_status(server):
    channel = grpc.insecure_channel(server.grpc_target)
    prediction = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    models = model_service_pb2_grpc.ModelServiceStub(channel)
    before = scrape(server)

    # REST: 3 OK predicts, 2 INVALID_ARGUMENT (bad JSON, wrong input), 1 NOT_FOUND model,
    # 1 OK status, 1 OK metadata, 1 malformed /v1/ path, 1 path outside /v1/ (not counted).
    assert [predict(server, "toy", {"instances": [s]}) for s in "abc"] == [200] * 3
    assert predict(server, "toy", b"{not json") == 400
    assert predict(server, "toy", {"inputs": {"nope": ["a"]}}) == 400
    assert predict(server, "ghost", {"instances": ["a"]}) == 404
    assert http(f"{server.url}/v1/models/toy")[0] == 200
    assert http(f"{server.url}/v1/models/toy/metadata")[0] == 200
    assert http(f"{server.url}/v1/nothing/here")[0] == 400
    assert http(f"{server.url}/elsewhere")[0] == 404

    # gRPC: 2 OK predicts, 1 NOT_FOUND predict, 1 INVALID_ARGUMENT predict (no model spec),
    # 1 OK status, 1 OK metadata, 1 NOT_FOUND status.
    ok = predict_pb2.PredictRequest()
    ok.model_spec.name = "toy"
    ok.inputs["sentences"].CopyFrom(_string_tensor(["x"]))
    prediction.Predict(ok, timeout=30)
    prediction.Predict(ok, timeout=30)
    ghost = predict_pb2.PredictRequest()
    ghost.CopyFrom(ok)
    ghost.model_spec.name = "ghost"
    for request, code in (
        (ghost, grpc.StatusCode.NOT_FOUND),
        (predict_pb2.PredictRequest(), grpc.StatusCode.INVALID_ARGUMENT),
    ):
        with pytest.raises(grpc.RpcError) as error:
            prediction.Predict(request, timeout=30)
        assert error.value.code() == code
    status_request = get_model_status_pb2.GetModelStatusRequest()
    status_request.model_spec.name = "toy"
    models.GetModelStatus(status_request, timeout=30)
    metadata_request = get_model_metadata_pb2.GetModelMetadataRequest(
        metadata_field=["signature_def"]
    )
    metadata_request.model_spec.name = "toy"
    prediction.GetModelMetadata(metadata_request, timeout=30)
    status_request.model_spec.name = "ghost"
    with pytest.raises(grpc.RpcError):
        models.GetModelStatus(status_request, timeout=30)
    channel.close()

    after = scrape(server)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    # TF Serving's request_count: all REST /v1/ requests and gRPC Predict, by model and status.
    assert delta(REQUEST_COUNT, model_name="toy", status="OK") == 3 + 2 + 2  # REST 5, gRPC 2
    assert delta(REQUEST_COUNT, model_name="toy", status="INVALID_ARGUMENT") == 2
    assert delta(REQUEST_COUNT, model_name="ghost", status="NOT_FOUND") == 1 + 1
    assert delta(REQUEST_COUNT, model_name="", status="INVALID_ARGUMENT") == 1 + 1
    # TF Serving's request_latency: successful ones only, by model, API and entrypoint (GET has
    # no API label value in TF Serving: its ParseModelInfo sets the method for POST only).
    latency = REQUEST_LATENCY + "_count"
    assert delta(latency, model_name="toy", API="predict", entrypoint="REST") == 3
    assert delta(latency, model_name="toy", API="", entrypoint="REST") == 2
    assert delta(latency, model_name="toy", API="Predict", entrypoint="GRPC") == 2
    assert sum(by_labels(after, latency).values()) - sum(by_labels(before, latency).values()) == 7
    # The session runs of the 5 successful predicts.
    runtime = RUNTIME_LATENCY + "_count"
    assert delta(runtime, model_name="toy", API="Predict", runtime="TF1") == 5

    # The stand-in's own: every request of both front ends, by model, API, entrypoint, status.
    standin = STANDIN_LATENCY + "_count"
    expected = {
        ("toy", "Predict", "REST", "OK"): 3,
        ("toy", "Predict", "REST", "INVALID_ARGUMENT"): 2,
        ("ghost", "Predict", "REST", "NOT_FOUND"): 1,
        ("toy", "GetModelStatus", "REST", "OK"): 1,
        ("toy", "GetModelMetadata", "REST", "OK"): 1,
        ("", "", "REST", "INVALID_ARGUMENT"): 1,
        ("toy", "Predict", "GRPC", "OK"): 2,
        ("ghost", "Predict", "GRPC", "NOT_FOUND"): 1,
        ("", "Predict", "GRPC", "INVALID_ARGUMENT"): 1,
        ("toy", "GetModelStatus", "GRPC", "OK"): 1,
        ("toy", "GetModelMetadata", "GRPC", "OK"): 1,
        ("ghost", "GetModelStatus", "GRPC", "NOT_FOUND"): 1,
    }
    got = {}
    for labels in {tuple(s.labels.items()) for s in after.get(standin, [])}:
        labels = dict(labels)
        key = (labels["model_name"], labels["API"], labels["entrypoint"], labels["status"])
        got[key] = delta(standin, **labels)
    assert {k: v for k, v in got.items() if v} == expected


def _string_tensor(values: list[str]):
    import tensorflow as tf

    return tf.make_tensor_proto(values, dtype=tf.string)


def test_histograms_have_tf_servings_microsecond_buckets(server):
    assert predict(server, "toy", {"instances": ["a"]}) == 200
    page = scrape(server)
    labels = {"model_name": "toy", "API": "predict", "entrypoint": "REST"}
    buckets = [s for s in page[REQUEST_LATENCY + "_bucket"] if s.labels.items() > labels.items()]
    limits = [s.labels["le"] for s in buckets]
    # Buckets::Exponential(10, 1.8, 33), then +Inf: 10, 18, 32.4, ... microseconds.
    assert limits[:4] == ["10", "18", "32.4", "58.32"] and limits[-1] == "+Inf"
    assert len(limits) == 33 + 1 and len(LATENCY_BUCKETS) == 33
    counts = [s.value for s in buckets]
    assert counts == sorted(counts)  # cumulative
    total = value(page, REQUEST_LATENCY + "_count", **labels)
    assert counts[-1] == total >= 1
    assert value(page, REQUEST_LATENCY + "_sum", **labels) > 0  # microseconds, recorded


def test_each_server_has_its_own_metrics(server, base, monitoring_config):
    with start_server(
        base, "toy", port=0, grpc_port=None, poll_interval=0,
        monitoring_config_file=monitoring_config,
    ) as other:  # fmt: skip
        assert predict(other, "toy", {"instances": ["a"]}) == 200
        page = scrape(other)
    assert value(page, REQUEST_COUNT, model_name="toy", status="OK") == 1


def test_any_method_on_the_metrics_path_gets_the_page(server):
    """http_server.cc registers the exporter for the path without a method check."""
    status, _, text = http(server.url + DEFAULT_PATH, "POST", b"")
    assert status == 200 and REQUEST_COUNT in text


def test_without_the_flag_or_with_prometheus_disabled_the_path_is_not_served(base, tmp_path):
    disabled = tmp_path / "disabled.config"
    disabled.write_text('prometheus_config { enable: false path: "/metrics" }\n')
    empty = tmp_path / "empty.config"
    empty.write_text("")
    for config, path in ((None, DEFAULT_PATH), (disabled, "/metrics"), (empty, DEFAULT_PATH)):
        with start_server(
            base, "toy", port=0, grpc_port=None, poll_interval=0, monitoring_config_file=config
        ) as srv:
            assert srv.metrics_path is None
            assert http(srv.url + path)[0] == 404


def test_a_configured_path_is_served_exactly(base, tmp_path):
    config = tmp_path / "monitoring.config"
    config.write_text('prometheus_config { enable: true path: "/custom/metrics" }\n')
    with start_server(
        base, "toy", port=0, grpc_port=None, poll_interval=0, monitoring_config_file=config
    ) as srv:
        assert srv.metrics_path == "/custom/metrics"
        assert http(srv.url + "/custom/metrics")[0] == 200
        assert http(srv.url + DEFAULT_PATH)[0] == 404


BAD_MONITORING = {
    "misspelt field": (
        "prometheus_config {\n  enable: true\n  paht: '/m'\n}\n",
        r':3:\d+: field paht: .*has no field named "paht"',
    ),
    "wrong type": ("prometheus_config {\n  enable: maybe\n}\n", r":2:\d+: field enable: "),
    "unknown top-level field": ("prometheus {\n  enable: true\n}\n", r":1:\d+: field prometheus: "),
    "relative path": (
        "prometheus_config {\n  enable: true\n  path: 'metrics'\n}\n",
        r":3: field path: the metrics path must start with '/'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_MONITORING))
def test_a_bad_monitoring_config_fails_at_startup_naming_the_field(case, base, tmp_path):
    text, expected = BAD_MONITORING[case]
    path = tmp_path / "monitoring.config"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        start_server(base, "toy", port=0, grpc_port=None, monitoring_config_file=path)
    message = str(error.value)
    assert message.startswith(str(path)), message
    assert re.search(expected, message[len(str(path)) :]), message


@pytest.mark.slow
def test_the_cli_refuses_a_bad_monitoring_config(base, tmp_path):
    path = tmp_path / "monitoring.config"
    path.write_text("prometheus_config {\n  enabled: true\n}\n")
    result = subprocess.run(
        [
            sys.executable, "-m", "keras_transformer.serving", "--model_base_path", str(base),
            "--model_name", "toy", "--rest_api_port", "0", "--port", "0",
            "--monitoring_config_file", str(path),
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert f"Failed to start server. Error: {path}:2:" in result.stderr
    assert "field enabled:" in result.stderr


def test_bucket_edges_as_tf_histogram_add():
    """TF's Histogram::Add puts a value in the first bucket whose limit exceeds it."""
    metrics = ServingMetrics()
    for usec in (9, 10, 17):
        metrics.record_runtime("m", "Predict", usec)
    page = samples(metrics.page().decode())
    buckets = {s.labels["le"]: s.value for s in page[RUNTIME_LATENCY + "_bucket"]}
    assert (buckets["10"], buckets["18"], buckets["+Inf"]) == (1, 3, 3)
    assert value(page, RUNTIME_LATENCY + "_sum", model_name="m", API="Predict", runtime="TF1") == 36
