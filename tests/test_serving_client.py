"""The REST client against the stand-in server, and its retries/errors against fake servers."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import threading
import time

import pytest

from keras_transformer.serving.client import ServingClient, ServingError


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from toy_model import save_toy_model

    from keras_transformer.serving.server import start_server

    root = tmp_path_factory.mktemp("client")
    save_toy_model(root / "toy" / "1", prefix="v1:")
    save_toy_model(root / "staging", prefix="v2:")
    shutil.move(str(root / "staging"), str(root / "toy" / "2"))
    config = root / "models.config"
    config.write_text(
        f'model_config_list {{ config {{ name: "toy" base_path: "{root / "toy"}" '
        'model_platform: "tensorflow" model_version_policy { all {} } '
        'version_labels { key: "stable" value: 1 } version_labels { key: "canary" value: 2 } } }'
    )
    with start_server(
        model_config_file=config,
        allow_version_labels_for_unavailable_models=True,
        port=0,
        poll_interval=0,
    ) as srv:
        yield srv


def test_predict_row_and_columnar(server):
    client = ServingClient(server.url, "toy")
    assert client.predict(["ab", ""]) == [
        {"scores": 0.2, "translations": "v2:AB"},
        {"scores": 0.0, "translations": "v2:"},
    ]
    assert client.predict(["ab"], columnar=True) == {"scores": [0.2], "translations": ["v2:AB"]}
    # bytes go as {"b64": ...}; a `_bytes` output comes back the same way.
    assert client.predict([{"a": b"x", "b": "y"}], signature_name="pair") == [{"b64": "eHx5"}]
    tokens = client.predict({"sentences": ["ab"]}, signature_name="tokenize", columnar=True)
    assert tokens == {"lengths": [2], "token_ids": [[97, 98]]}


def test_versions_and_labels(server):
    for kwargs, prefix in [
        ({"version": 1}, "v1:"),
        ({"label": "stable"}, "v1:"),
        ({"label": "canary"}, "v2:"),
        ({}, "v2:"),
    ]:
        client = ServingClient(server.url, "toy", **kwargs)
        assert client.predict(["a"])[0]["translations"] == prefix + "A"
    with pytest.raises(ValueError):
        ServingClient(server.url, "toy", version=1, label="stable")


def test_status_and_metadata(server):
    client = ServingClient(server.url + "/", "toy", version=1)
    status = client.status()["model_version_status"]
    assert status == [
        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    ]
    meta = client.metadata()
    assert meta["model_spec"]["version"] == "1"
    assert "serving_default" in meta["metadata"]["signature_def"]["signature_def"]


def test_server_errors_raise_serving_error(server):
    client = ServingClient(server.url, "toy", retries=3, backoff=0.01)
    with pytest.raises(ServingError) as e:
        client.predict([1, 2])
    assert e.value.status_code == 400 and "type: string" in e.value.message
    with pytest.raises(ServingError) as e:
        client.predict(["a"], signature_name="nope")
    assert e.value.status_code == 400 and "nope" in str(e.value)
    with pytest.raises(ServingError) as e:
        ServingClient(server.url, "missing").status()
    assert e.value.status_code == 404
    with pytest.raises(ServingError) as e:
        ServingClient(server.url, "toy", version=9).predict(["a"])
    assert e.value.status_code == 404
    with pytest.raises(TypeError):
        client.predict("not a list")
    assert client.predict(["ok"])[0]["translations"] == "v2:OK"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_closed_port_raises_after_retries_in_bounded_time():
    client = ServingClient(
        f"http://127.0.0.1:{free_port()}", "toy", timeout=2, retries=3, backoff=0.05
    )
    started = time.monotonic()
    with pytest.raises(ServingError) as e:
        client.predict(["a"])
    elapsed = time.monotonic() - started
    assert e.value.status_code is None
    assert "after 4 attempt(s)" in e.value.message
    assert 0.05 + 0.1 + 0.2 <= elapsed < 10


class _Scripted(http.server.BaseHTTPRequestHandler):
    """Answers from ``server.script``: a list of (status, body or None, delay) per request."""

    def log_message(self, *args):
        pass

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.hits += 1
        status, body, delay = self.server.script[min(self.server.hits, len(self.server.script)) - 1]
        time.sleep(delay)
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass

    do_GET = do_POST = _answer


@pytest.fixture
def scripted():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    httpd.daemon_threads = True
    httpd.hits = 0
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_retries_503_then_succeeds(scripted):
    busy = (503, {"error": "The batch scheduling queue is full"}, 0)
    scripted.script = [busy, busy, (200, {"predictions": ["A"]}, 0)]
    client = ServingClient(f"http://127.0.0.1:{scripted.server_port}", "m", retries=3, backoff=0.01)
    assert client.predict(["a"]) == ["A"]
    assert scripted.hits == 3


def test_persistent_503_raises_with_message(scripted):
    scripted.script = [(503, {"error": "overloaded"}, 0)]
    client = ServingClient(f"http://127.0.0.1:{scripted.server_port}", "m", retries=2, backoff=0.01)
    with pytest.raises(ServingError) as e:
        client.status()
    assert (e.value.status_code, e.value.message, scripted.hits) == (503, "overloaded", 3)


def test_4xx_is_not_retried_and_non_json_errors_are_reported(scripted):
    scripted.script = [(400, b"<html>bad</html>", 0)]
    client = ServingClient(f"http://127.0.0.1:{scripted.server_port}", "m", retries=3)
    with pytest.raises(ServingError) as e:
        client.predict(["a"])
    assert (e.value.status_code, e.value.message, scripted.hits) == (400, "<html>bad</html>", 1)


def test_timeouts_are_retried_then_raise(scripted):
    scripted.script = [(200, {"predictions": []}, 1.0)]
    client = ServingClient(
        f"http://127.0.0.1:{scripted.server_port}", "m", timeout=0.2, retries=1, backoff=0.01
    )
    started = time.monotonic()
    with pytest.raises(ServingError) as e:
        client.predict(["a"])
    assert e.value.status_code is None and scripted.hits == 2
    assert time.monotonic() - started < 5
