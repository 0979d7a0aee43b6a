"""`keras_transformer.storage` on TensorFlow's `ram://` file system (a stand-in for a bucket):
the helpers, publishing a version with `saved_model.pb` last, and the tokenizer handshake
between a chief and a waiting worker.

`ram://` is the memory of one process, so the worker is a thread here; two worker
processes on a local folder are `tests/test_training_multiworker.py`'s.
"""

import threading
import time
import uuid

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import storage
from keras_transformer.export import next_version, publish_saved_model
from keras_transformer.run_dir import RunPaths
from keras_transformer.tokenization import train_sentencepiece
from keras_transformer.training.tokenizer_files import (
    load_or_train_tokenizers,
    load_tokenizers,
    publish_tokenizers,
    ready_marker,
    settings_file,
    wait_for_tokenizers,
)


def _ram(name):
    return f"ram://{name}-{uuid.uuid4().hex[:8]}"


def test_helpers_on_ram():
    root = _ram("helpers")
    assert storage.is_object_store(root) and not storage.is_object_store("runs/a")
    path = f"{root}/logs/bleu.jsonl"
    storage.append_text(path, "a\n")
    storage.append_text(path, "b\n")
    assert storage.read_text(path) == "a\nb\n"
    storage.write_text(path, "c\n")  # rewrites (ram:// alone would append)
    assert storage.read_text(path) == "c\n"
    assert storage.listdir(root) == ["logs"] and storage.isdir(f"{root}/logs")
    storage.write_text(f"{root}/tmp.json", "{}")
    storage.replace(f"{root}/tmp.json", f"{root}/final.json")
    assert storage.glob(f"{root}/*.json") == [f"{root}/final.json"]
    with pytest.raises(FileNotFoundError):
        storage.read_text(f"{root}/missing.txt")
    with pytest.raises(FileNotFoundError):
        storage.listdir(f"{root}/missing")
    storage.rmtree(root)
    assert not storage.exists(root)


@pytest.mark.parametrize("scheme", ["local", "ram"])
def test_a_file_written_beside_replaces_its_target_only_when_whole(scheme, tmp_path):
    root = str(tmp_path) if scheme == "local" else _ram("beside")
    path = f"{root}/model.keras"
    storage.write_text(path, "the last whole model")
    with pytest.raises(KeyboardInterrupt), storage.written_beside(path) as partial:
        assert partial.endswith(".keras") and partial != path
        storage.write_text(partial, "half of a mod")
        raise KeyboardInterrupt  # killed while writing
    assert storage.read_text(path) == "the last whole model"
    assert storage.listdir(root) == ["model.keras"]  # nothing half written left
    with storage.written_beside(path) as partial:
        storage.write_text(partial, "the next model")
        assert storage.read_text(path) == "the last whole model"  # until the block ends
    assert storage.read_text(path) == "the next model"
    assert storage.listdir(root) == ["model.keras"]


def _endpoint():
    layer = keras.layers.Dense(3)
    layer.build((None, 2))

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
    def serving_default(x):
        return {"y": layer(x)}

    return layer, serving_default


def test_publish_on_an_object_store_copies_saved_model_pb_last():
    base = _ram("exports")
    layer, fn = _endpoint()
    version_dir = f"{base}/toy/1"
    copied = []

    def observed_copy(source, destination):
        # What a server polling the base path would find just before this copy.
        copied.append((destination[len(version_dir) + 1 :], _has_graph(version_dir)))
        storage.copy_file(source, destination)

    path = publish_saved_model(
        base,
        "toy",
        None,
        track=[layer],
        endpoints={"serving_default": fn},
        info={},
        copy_file=observed_copy,
    )
    assert path == version_dir
    names = [name for name, _ in copied]
    assert names[-1] == "saved_model.pb"
    assert "variables/variables.index" in names and "assets.extra/export_info.json" in names
    assert not any(graph_there for _, graph_there in copied)  # never before the last copy
    assert _has_graph(version_dir)
    x = np.ones((4, 2), "float32")
    loaded = tf.saved_model.load(version_dir)
    np.testing.assert_allclose(
        loaded.signatures["serving_default"](x=tf.constant(x))["y"].numpy(),
        np.asarray(layer(x)),
        rtol=1e-6,
    )
    with pytest.raises(ValueError, match="already exists"):
        publish_saved_model(
            base, "toy", 1, track=[layer], endpoints={"serving_default": fn}, info={}
        )
    assert next_version(f"{base}/toy") == 2


def test_a_copy_failing_midway_leaves_no_version_and_no_graph():
    base = _ram("exports")
    layer, fn = _endpoint()
    written = []

    def failing_copy(source, destination):
        if len(written) == 2:
            raise OSError("the bucket went away")
        written.append(destination)
        storage.copy_file(source, destination)

    with pytest.raises(OSError, match="went away"):
        publish_saved_model(
            base,
            "toy",
            None,
            track=[layer],
            endpoints={"serving_default": fn},
            info={},
            copy_file=failing_copy,
        )
    assert len(written) == 2 and not any(w.endswith("saved_model.pb") for w in written)
    assert not storage.exists(f"{base}/toy/1")
    assert next_version(f"{base}/toy") == 1


def test_a_copy_that_meets_another_exports_version_removes_only_its_own_files():
    """Two exports of one model to a bucket, both with the next free version: the second
    publishes while the first is copying; the first then fails (a file is there) and must
    leave the second's version whole."""
    base = _ram("exports")
    layer, fn = _endpoint()
    version_dir = f"{base}/toy/1"
    theirs = {"saved_model.pb": "their graph", "variables/variables.index": "their index"}
    ours = []

    def copy_racing_another_export(source, destination):
        if not ours:  # the other export publishes version 1 now
            for name, text in theirs.items():
                storage.write_text(f"{version_dir}/{name}", text)
        storage.copy_file(source, destination)  # ours, unless the file is theirs
        ours.append(destination)

    with pytest.raises(OSError):
        publish_saved_model(
            base,
            "toy",
            None,
            track=[layer],
            endpoints={"serving_default": fn},
            info={},
            copy_file=copy_racing_another_export,
        )
    assert ours  # it copied some files of its own before it met theirs
    assert {name: storage.read_text(f"{version_dir}/{name}") for name in theirs} == theirs
    left = storage.glob(f"{version_dir}/*") + storage.glob(f"{version_dir}/*/*")
    assert sorted(p for p in left if not storage.isdir(p)) == sorted(
        f"{version_dir}/{name}" for name in theirs
    )


def _has_graph(version_dir):
    return any(
        storage.exists(f"{version_dir}/{n}") for n in ("saved_model.pb", "saved_model.pbtxt")
    )


@pytest.fixture(scope="module")
def tokenizers():
    lines = [f"sentence {i} with words {i % 7} and {i % 11}" for i in range(300)]
    source = train_sentencepiece(lines, vocab_size=300, seed=0)
    target = train_sentencepiece(lines[::-1], vocab_size=290, seed=0)
    return source, target


class _SlowSave:
    """A tokenizer whose `save` takes a while and notes whether the worker was done."""

    def __init__(self, tokenizer, worker_done):
        self.tokenizer, self.worker_done, self.done_during_save = tokenizer, worker_done, []

    def save(self, directory):
        self.tokenizer.save(directory)
        time.sleep(0.3)  # the worker polls every 10 ms meanwhile
        self.done_during_save.append(self.worker_done.is_set())


def test_worker_sees_the_tokenizers_only_once_both_are_complete(tokenizers):
    paths = RunPaths(_ram("run"))
    worker_done, loaded, errors = threading.Event(), [], []

    def worker():
        try:
            wait_for_tokenizers(paths, timeout_s=60, poll_s=0.01)
            loaded.append(load_tokenizers(paths))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)
        worker_done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    time.sleep(0.1)
    source, target = (_SlowSave(t, worker_done) for t in tokenizers)
    publish_tokenizers(paths, source, target)
    thread.join(60)
    assert not errors, errors
    # Both model files were on the bucket while the worker kept waiting for the marker.
    assert source.done_during_save == [False] and target.done_during_save == [False]
    assert storage.exists(ready_marker(paths))
    ((got_source, got_target),) = loaded
    assert got_source.vocab_size == 300 and got_target.vocab_size == 290

    with pytest.raises(TimeoutError, match="tokenizers"):
        wait_for_tokenizers(RunPaths(_ram("empty")), timeout_s=0.05, poll_s=0.01)


def test_chief_reuses_a_run_without_the_marker_and_writes_it(tokenizers):
    paths = RunPaths(_ram("run"))
    source, target = tokenizers
    source.save(paths.source_tokenizer)  # a run written before the marker existed
    target.save(paths.target_tokenizer)
    pairs = tf.data.Dataset.from_tensor_slices((["unused"], ["unused"]))
    got_source, got_target = load_or_train_tokenizers(
        None, paths, pairs, tf.distribute.get_strategy(), shared=False
    )  # no config: training them would fail
    assert (got_source.vocab_size, got_target.vocab_size) == (300, 290)
    assert storage.exists(ready_marker(paths))


def test_chief_reuses_tokenizers_only_for_the_settings_they_were_trained_with(tokenizers):
    paths = RunPaths(_ram("run"))
    settings = {"task": "translation", "data.vocab_size": 300, "translation.source_lang": "de"}
    publish_tokenizers(paths, *tokenizers, settings)
    assert storage.exists(settings_file(paths)) and storage.exists(ready_marker(paths))
    pairs = tf.data.Dataset.from_tensor_slices((["unused"], ["unused"]))
    strategy = tf.distribute.get_strategy()
    # The same settings (a key the record lacks counts as the same): reused.
    got_source, _ = load_or_train_tokenizers(
        None, paths, pairs, strategy, shared=False, settings={**settings, "data.new_key": 1}
    )
    assert got_source.vocab_size == 300
    # Other settings: refused, each difference named; no model was trained in the folder,
    # so deleting the tokenizers is offered.
    other = {**settings, "data.vocab_size": 500, "translation.source_lang": "fr"}
    with pytest.raises(ValueError) as error:
        load_or_train_tokenizers(None, paths, pairs, strategy, shared=False, settings=other)
    message = str(error.value)
    assert "data.vocab_size=500 (the tokenizers': 300)" in message
    assert "translation.source_lang='fr' (the tokenizers': 'de')" in message
    assert "task=" not in message  # the unchanged keys are not named
    assert f"the folder {paths.root}/tokenizers deleted" in message
    # Once a model was trained there, only a new run directory is offered.
    storage.write_text(paths.model, "")
    with pytest.raises(ValueError) as error:
        load_or_train_tokenizers(None, paths, pairs, strategy, shared=False, settings=other)
    assert "deleted" not in str(error.value) and "a new run directory" in str(error.value)
    # Tokenizers saved before the record existed are reused unchecked.
    storage.remove(settings_file(paths))
    got_source, _ = load_or_train_tokenizers(
        None, paths, pairs, strategy, shared=False, settings=other
    )
    assert got_source.vocab_size == 300
