"""Offline data: a dataset that is neither prepared, nor in a local copy, nor downloadable
raises `DataUnavailableError` at once, in one line that says what to do; a local copy, a
prepared dataset and a host that answers work as before.

The hosts are local sockets (one refuses connections, one accepts and never answers) and an
HTTP server of the Multi30k copy, so no test depends on whether the network is reachable.
"""

import functools
import http.server
import re
import socket
import threading

import pytest
from multi30k_files import MULTI30K_DIR as MULTI30K
from multi30k_files import read_lines

from keras_transformer.cli import main
from keras_transformer.constants import (
    MULTI30K_DIR_CONFIG_KEY,
    MULTI30K_DIR_ENV_VAR,
    TFDS_DATA_DIR_CONFIG_KEY,
)
from keras_transformer.data import (
    DataUnavailableError,
    load_multi30k,
    load_parallel_dataset,
    load_tfds_translation,
)
from keras_transformer.data import multi30k as multi30k_lib
from keras_transformer.data.availability import unreachable_reason

PUBLISHED = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"


def _files(*languages):
    return [f"{p}.{lang}.gz" for p in ("train", "val", "test_2016_flickr") for lang in languages]


@pytest.fixture(autouse=True)
def _no_local_copy_no_proxy(monkeypatch):
    monkeypatch.delenv(MULTI30K_DIR_ENV_VAR, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # the local hosts, even behind a proxy


@pytest.fixture
def refused_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound but not listening: connections are refused
        yield f"http://127.0.0.1:{s.getsockname()[1]}/"


@pytest.fixture
def silent_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(4)  # the kernel accepts connections; nobody reads or answers
        yield f"http://127.0.0.1:{s.getsockname()[1]}/"


@pytest.fixture
def multi30k_server():
    """An HTTP server of the Multi30k copy: its base URL and the requests it answered."""
    answered = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_request(self, code="-", size="-"):
            answered.append((self.command, self.path.lstrip("/"), int(code)))

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=MULTI30K)
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/", answered
    server.shutdown()
    server.server_close()


def _check_advice(
    error: Exception, files: list[str], data_dir: str, published: str = PUBLISHED
) -> str:
    """The one-line message of a Multi30k `DataUnavailableError`, checked for its advice."""
    assert isinstance(error, DataUnavailableError) and isinstance(error, OSError)
    message = str(error)
    assert "\n" not in message
    assert f"not prepared in {data_dir}, no local copy was found" in message
    assert f"Put {', '.join(files)} (published at {published})" in message
    assert f"environment variable {MULTI30K_DIR_ENV_VAR} or `{MULTI30K_DIR_CONFIG_KEY}`" in message
    return message


def test_unreachable_reason_of_local_hosts(refused_url, silent_url, multi30k_server):
    assert "Connection refused" in unreachable_reason(refused_url)
    assert unreachable_reason(silent_url, timeout=0.2) == "no answer within 0.2 s"
    base, answered = multi30k_server
    assert unreachable_reason(base + "train.de.gz") is None
    assert unreachable_reason(base + "missing.gz") is None  # an answer, if not the file
    assert answered == [("HEAD", "train.de.gz", 200), ("HEAD", "missing.gz", 404)]


def test_multi30k_without_download_or_local_copy(tmp_path):
    with pytest.raises(DataUnavailableError) as info:
        load_multi30k("validation", data_dir=str(tmp_path), download=False)
    message = _check_advice(info.value, _files("de", "en"), str(tmp_path))
    assert "downloading is off (download=False)" in message
    with pytest.raises(DataUnavailableError) as info:
        load_parallel_dataset("multi30k/en-fr", data_dir=str(tmp_path), download=False)
    _check_advice(info.value, _files("en", "fr"), str(tmp_path))


def test_multi30k_host_that_refuses(tmp_path, monkeypatch, refused_url):
    monkeypatch.setattr(multi30k_lib, "URL_TEMPLATE", refused_url + "{}")
    with pytest.raises(DataUnavailableError) as info:
        load_multi30k("train", data_dir=str(tmp_path))
    message = _check_advice(info.value, _files("de", "en"), str(tmp_path), refused_url)
    assert re.search(
        f"found, and {re.escape(refused_url)}train.de.gz could not be reached \\([^)]*"
        "Connection refused\\)",
        message,
    )


def test_multi30k_local_copy_without_download_then_prepared(tmp_path, monkeypatch, refused_url):
    data_dir = str(tmp_path)
    pairs = load_multi30k(
        "validation[:5]", "en", "de", data_dir=data_dir, local_dir=MULTI30K, download=False
    )
    expected = list(zip(read_lines("val.en.gz", 5), read_lines("val.de.gz", 5)))
    assert [(s.decode(), t.decode()) for s, t in pairs.as_numpy_iterator()] == expected
    # Prepared: neither a local copy nor the host is needed.
    monkeypatch.setattr(multi30k_lib, "URL_TEMPLATE", refused_url + "{}")
    for download in (True, False):
        pairs = load_multi30k("validation[:5]", "en", "de", data_dir=data_dir, download=download)
        assert [(s.decode(), t.decode()) for s, t in pairs.as_numpy_iterator()] == expected


def test_multi30k_downloads_from_a_host_that_answers(tmp_path, monkeypatch, multi30k_server):
    assert multi30k_lib.URL_TEMPLATE.format("train.de.gz") == PUBLISHED + "train.de.gz"
    base, answered = multi30k_server
    monkeypatch.setattr(multi30k_lib, "URL_TEMPLATE", base + "{}")
    builder = multi30k_lib.Multi30k(config="de-fr", data_dir=str(tmp_path))
    builder.download_and_prepare()  # TFDS's downloader, checksums verified
    assert answered[0] == ("HEAD", "train.de.gz", 200)
    assert sorted(answered[1:]) == [("GET", name, 200) for name in sorted(_files("de", "fr"))]
    assert builder.info.splits["train"].num_examples == 29000
    first = next(iter(builder.as_dataset(split="test", as_supervised=True)))
    assert [t.numpy().decode() for t in first] == [
        read_lines("test_2016_flickr.de.gz", 1)[0],
        read_lines("test_2016_flickr.fr.gz", 1)[0],
    ]


def test_tfds_dataset_not_prepared_without_download(tmp_path):
    with pytest.raises(DataUnavailableError) as info:
        load_tfds_translation("ted_hrlr_translate/pt_to_en", data_dir=str(tmp_path), download=False)
    message = str(info.value)
    assert "\n" not in message
    assert f"'ted_hrlr_translate/pt_to_en' is not prepared in {tmp_path}" in message
    assert "`tfds build ted_hrlr_translate/pt_to_en --data_dir <folder>`" in message
    assert f"name it with `{TFDS_DATA_DIR_CONFIG_KEY}`" in message


def test_tfds_dataset_whose_host_does_not_answer_fails_at_once(
    tmp_path, monkeypatch, refused_url, caplog
):
    """TFDS's downloader would retry the host for minutes (offline: about 200 s for IMDb);
    the host is asked first. The dataset's download URL is replaced by a local refusing
    socket, so the test does not depend on the machine's network."""
    import tensorflow_datasets as tfds

    from keras_transformer.data.task_sources import load_classification_data

    builder_class = type(tfds.builder("imdb_reviews", data_dir=str(tmp_path)))
    monkeypatch.setattr(builder_class, "url_infos", {refused_url: None})
    with pytest.raises(DataUnavailableError) as info:
        load_classification_data("imdb_reviews", "test", data_dir=str(tmp_path), fallback=False)
    message = str(info.value)
    assert f"'imdb_reviews' is not prepared in {tmp_path} and its download {refused_url}" in message
    assert "Connection refused" in message and "\n" not in message
    with caplog.at_level("WARNING", logger="keras_transformer.data.task_sources"):
        data = load_classification_data("imdb_reviews", "test[:3]", data_dir=str(tmp_path))
    assert data.origin == "synthetic_sentiment" and "DataUnavailableError" in caplog.text


def test_train_command_without_download_or_local_copy(tmp_path, capsys):
    argv = ["train", "--config", "multi30k_de_en", "--run-dir", str(tmp_path / "run")]
    argv += ["--set", "data.download=false", "--set", f"data.data_dir={tmp_path / 'tfds'}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("keras-transformer ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("keras-transformer train: error: Multi30k de-en is not prepared")
    assert MULTI30K_DIR_ENV_VAR in lines[0] and MULTI30K_DIR_CONFIG_KEY in lines[0]
