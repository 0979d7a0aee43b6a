"""The stand-in's batcher with TF Serving's semantics (``--enable_batching``): large-batch
splitting, ``allowed_batch_sizes``, ``pad_variable_length_inputs``, a failed batch failing every
request in it, and the batching parameters TF Serving refuses.

TF Serving's source followed: ``tensorflow_serving/batching/batching_session.cc``,
``batching_util.cc``, ``servables/tensorflow/bundle_factory_util.{h,cc}`` and TensorFlow's
``core/kernels/batching_util/shared_batch_scheduler.h``."""

from __future__ import annotations

import concurrent.futures
import os
import re

import numpy as np
import pytest
from google.protobuf import text_format
from test_serving_server import REPO, b64, http
from toy_model import save_toy_model

from keras_transformer.serving.batch_merge import merge_inputs
from keras_transformer.serving.batching_config import BatchOptions, load_batching_parameters
from keras_transformer.serving.batching_proto import BatchingParameters
from keras_transformer.serving.config import ConfigError
from keras_transformer.serving.server import start_server

SHIPPED = os.path.join(REPO, "serving", "batching.config")
SHAPES_DIFFER = (
    r"Tensors with name '[^']*token_ids[^']*' from different tasks have different shapes and "
    r"padding is turned off\. Set pad_variable_length_inputs to true"
)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A model base path holding the toy model as version 1 (answers 'v1:' + upper)."""
    root = tmp_path_factory.mktemp("batching") / "toy"
    save_toy_model(root / "1", prefix="v1:")
    return root


def batching_server(base, options):
    """The stand-in with ``--enable_batching``; its own row cap (``--max_request_batch_size``)
    is raised above the batchers', so that TF Serving's limits are the ones met."""
    return start_server(
        base,
        "toy",
        port=0,
        poll_interval=0,
        enable_batching=True,
        batching_parameters=options,
        max_request_batch_size=4096,
    )


def predict(srv, body):
    return http(f"{srv.url}/v1/models/toy:predict", "POST", body)


def concurrently(srv, bodies):
    """The (status, body) of requests sent at once, in order."""
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        futures = [pool.submit(predict, srv, body) for body in bodies]
        return [f.result(timeout=60) for f in futures]


def detokenize(*rows):
    return {"signature_name": "detokenize", "instances": [list(r) for r in rows]}


# --- large-batch splitting ---------------------------------------------------------------------


def test_shipped_config_answers_a_document_larger_than_the_execution_batch_whole(base):
    sentences = [f"sentence {i} " + "x" * (i % 7) for i in range(100)]
    with start_server(base, "toy", port=0, poll_interval=0) as plain:
        expected = predict(plain, {"instances": sentences})
    assert expected[0] == 200, expected
    with batching_server(base, SHIPPED) as srv:
        assert predict(srv, {"instances": sentences}) == expected
        # 100 rows in execution batches of at most 32: pieces of 32, 32, 32 and 4 rows.
        stats = srv.batching_stats("toy")
        assert (stats["tasks"], stats["pieces"], stats["batches"]) == (1, 4, 4)
        # The limit on one request is max_batch_size (512), with TF Serving's message.
        status, body = predict(srv, {"instances": ["a"] * 513})
        assert status == 400
        assert body["error"].endswith("Task size 513 is larger than maximum input batch size 512")


def test_a_request_of_no_rows_is_answered_as_without_batching(base):
    # TF Serving batches a task of 0 rows like any other (its outputs split to 0 rows); the
    # stand-in failed it with "cannot reshape array of size 0" (500) before it was queued.
    empty = [{"inputs": []}, {"inputs": {"sentences": []}}]
    with start_server(base, "toy", port=0, poll_interval=0) as plain:
        expected = [predict(plain, body) for body in empty]
    assert [status for status, _ in expected] == [200, 200], expected
    with batching_server(base, BatchOptions(8, batch_timeout_micros=200_000)) as srv:
        assert [predict(srv, body) for body in empty] == expected
        # Batched with rows of other requests, it still gets none of theirs.
        answers = concurrently(srv, [{"instances": ["a", "b"]}, empty[0], {"instances": ["c"]}])
        assert answers[1] == expected[0]
        translations = [[p["translations"] for p in a[1]["predictions"]] for a in answers[::2]]
        assert translations == [["v1:A", "v1:B"], ["v1:C"]]


def test_split_request_must_fit_the_queue(base):
    options = BatchOptions(
        64, enable_large_batch_splitting=True, max_execution_batch_size=4, max_enqueued_batches=2
    )
    with batching_server(base, options) as srv:
        status, body = predict(srv, {"instances": ["a"] * 9})
        assert status == 503
        assert "task size is 9 but scheduling capacity is only 8" in body["error"]
        assert predict(srv, {"instances": ["a"] * 8})[0] == 200


def test_split_pieces_whose_output_widths_differ_are_refused(base):
    options = BatchOptions(16, enable_large_batch_splitting=True, max_execution_batch_size=4)
    with batching_server(base, options) as srv:
        # tokenize pads token_ids to each batch's longest word: pieces of 4, 8 and 10 wide.
        words = ["w" * n for n in range(1, 11)]
        status, body = predict(srv, {"signature_name": "tokenize", "instances": words})
        assert status == 500
        assert "outputs 'token_ids' of different inner shapes" in body["error"]
        assert "max_execution_batch_size (4)" in body["error"]
        # Equal widths concatenate: the same 10 rows of one length are answered whole.
        status, body = predict(srv, {"signature_name": "tokenize", "instances": ["abc"] * 10})
        assert status == 200, body
        assert [p["token_ids"] for p in body["predictions"]] == [[97, 98, 99]] * 10


# --- pad_variable_length_inputs ----------------------------------------------------------------


def test_different_widths_merge_padded_with_the_first_element(base):
    # A batch runs once it holds 3 rows (or after 10 s): the three requests share one batch.
    options = BatchOptions(
        3, batch_timeout_micros=10_000_000, pad_variable_length_inputs=True, max_padding=1.0
    )
    with batching_server(base, options) as srv:
        results = concurrently(
            srv, [detokenize([104, 105]), detokenize([97, 98, 99, 100]), detokenize([120, 0, 0])]
        )
        assert [status for status, _ in results] == [200, 200, 200], results
        predictions = [body["predictions"][0] for _, body in results]
        # Every request ran 4 wide; TF Serving pads with the tensor's first element, not 0
        # (batching_util.cc PadTensor), so "hi" gets two more "h" and "x" ends in one.
        assert [p["widths"] for p in predictions] == [4, 4, 4]
        assert [p["sentences"] for p in predictions] == ["hihh", "abcd", "x\x00\x00x"]
        stats = srv.batching_stats("toy")
        assert (stats["batches"], stats["tasks"], stats["pieces"]) == (1, 3, 3)


def test_without_padding_a_batch_of_different_widths_fails_every_request(base):
    options = BatchOptions(3, batch_timeout_micros=10_000_000, max_padding=1.0)
    with batching_server(base, options) as srv:
        results = concurrently(
            srv, [detokenize([104, 105]), detokenize([97, 98, 99, 100]), detokenize([97, 98])]
        )
        for status, body in results:
            assert status == 400
            assert re.search(SHAPES_DIFFER, body["error"]), body["error"]
        stats = srv.batching_stats("toy")
        assert (stats["batches"], stats["failed_batches"], stats["tasks"]) == (1, 1, 3)
        # Equal widths merge without padding.
        results = concurrently(
            srv, [detokenize([104, 105]), detokenize([97, 98]), detokenize([0, 0])]
        )
        assert [b["predictions"][0]["sentences"] for _, b in results] == ["hi", "ab", ""]


def test_a_failed_batch_fails_every_request_in_it(base):
    # TF Serving does not rerun a failed batch request by request (batching_session.cc
    # ProcessBatch gives every task the batch's status): a bad request fails its neighbours.
    options = BatchOptions(2, batch_timeout_micros=10_000_000, max_padding=1.0)
    with batching_server(base, options) as srv:
        good, bad = {"instances": ["a"]}, {"instances": [b64(b"\xff")]}
        (status_good, body_good), (status_bad, body_bad) = concurrently(srv, [good, bad])
        assert status_good == status_bad == 400
        assert body_good == body_bad and "Invalid formatting on input string" in body_good["error"]
        # ComputeTensorBatchSize: all inputs of a batched request share their first dim.
        status, body = predict(
            srv, {"signature_name": "pair", "inputs": {"a": ["x", "y"], "b": ["z"]}}
        )
        assert status == 400
        assert "Batching Run() input tensors must have equal 0th-dimension size" in body["error"]


# --- allowed_batch_sizes -----------------------------------------------------------------------


def test_batches_are_padded_to_an_allowed_size_and_the_padding_dropped(base):
    options = BatchOptions(8, allowed_batch_sizes=(4, 8))
    with batching_server(base, options) as srv:
        status, body = predict(srv, {"instances": ["a", "bb", "ccc"]})
        assert (status, body["predictions"]) == (
            200,
            [
                {"translations": "v1:A", "scores": 0.1},
                {"translations": "v1:BB", "scores": 0.2},
                {"translations": "v1:CCC", "scores": pytest.approx(0.3)},
            ],
        )
        assert srv.batching_stats("toy")["padding_rows"] == 1  # 3 rows run as 4
        status, body = predict(srv, {"instances": ["d"] * 5})
        assert status == 200 and len(body["predictions"]) == 5
        assert srv.batching_stats("toy")["padding_rows"] == 1 + 3  # 5 rows run as 8


def test_allowed_batch_size_padding_copies_the_last_tasks_first_row():
    merged, padding = merge_inputs(
        [{"x": np.array([[1, 2]])}, {"x": np.array([[3, 4], [5, 6]])}], {"x": "x:0"}, (2, 6)
    )
    assert padding == 3
    assert merged["x"].tolist() == [[1, 2], [3, 4], [5, 6], [3, 4], [3, 4], [3, 4]]


# --- the batching parameters file --------------------------------------------------------------


def test_enable_large_batch_splitting_is_a_bool_value_wrapper():
    params = text_format.Parse("enable_large_batch_splitting { value: true }", BatchingParameters())
    assert params.HasField("enable_large_batch_splitting")
    assert params.enable_large_batch_splitting.value is True
    field = BatchingParameters.DESCRIPTOR.fields_by_name["enable_large_batch_splitting"]
    assert (field.number, field.message_type.full_name) == (8, "google.protobuf.BoolValue")
    with pytest.raises(text_format.ParseError):
        text_format.Parse("enable_large_batch_splitting: true", BatchingParameters())


GOOD_BATCHING = {
    # GetQueueOptions: with splitting, max_execution_batch_size defaults to max_batch_size.
    "split_defaults_to_max_batch_size": (
        "max_batch_size { value: 64 }\nenable_large_batch_splitting { value: true }\n",
        (64, 64),
    ),
    # Without splitting max_execution_batch_size is ignored.
    "execution_size_ignored_without_split": (
        "max_batch_size { value: 64 }\nmax_execution_batch_size { value: 8 }\n",
        (64, 64),
    ),
    # The model server checks the last entry against max_batch_size, splitting or not.
    "allowed_sizes_with_split": (
        "max_batch_size { value: 64 }\nenable_large_batch_splitting { value: true }\n"
        "max_execution_batch_size { value: 16 }\nallowed_batch_sizes: [8, 16, 64]\n",
        (64, 16),
    ),
}


@pytest.mark.parametrize("case", sorted(GOOD_BATCHING))
def test_batching_parameters_accepted_as_tf_serving_does(tmp_path, case):
    text, (max_batch_size, execution_batch_size) = GOOD_BATCHING[case]
    path = tmp_path / "batching.config"
    path.write_text(text)
    options = load_batching_parameters(path)
    assert (options.max_batch_size, options.execution_batch_size) == (
        max_batch_size,
        execution_batch_size,
    )


BAD_BATCHING = {
    "allowed_last_not_max_batch_size": (
        "max_batch_size { value: 32 }\nallowed_batch_sizes: [8, 16]\n",
        r":2: field allowed_batch_sizes: Last entry in allowed_batch_sizes must match "
        r"max_batch_size; last entry was 16; expected 32$",
    ),
    "allowed_last_not_the_default_1000": (
        "allowed_batch_sizes: [8, 512]\n",
        r":1: field allowed_batch_sizes: .*last entry was 512; expected 1000$",
    ),
    "allowed_not_increasing": (
        "max_batch_size { value: 32 }\nallowed_batch_sizes: [16, 8, 32]\n",
        r":2: field allowed_batch_sizes: allowed_batch_sizes entries must be monotonically "
        r"increasing",
    ),
    "execution_larger_than_max_batch_size": (
        "max_batch_size { value: 16 }\nenable_large_batch_splitting { value: true }\n"
        "max_execution_batch_size { value: 32 }\n",
        r":3: field max_execution_batch_size: When enable_large_batch_splitting is true, "
        r"input_batch_size_limit must be greater than or equal to max_execution_batch_size",
    ),
    "split_without_any_size": (
        "enable_large_batch_splitting { value: true }\n",
        r":1: field max_execution_batch_size: max_execution_batch_size must be >= 1 .*got 0",
    ),
    "split_bare_bool": (
        "enable_large_batch_splitting: true\n",
        r":1:\d+: field enable_large_batch_splitting: .*Expected \"{\"",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHING))
def test_batching_parameters_refused_as_tf_serving_refuses(tmp_path, case):
    text, pattern = BAD_BATCHING[case]
    path = tmp_path / "batching.config"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_batching_parameters(path)
    message = str(e.value)
    assert message.startswith(str(path))
    assert re.search(pattern, message[len(str(path)) :]), message
