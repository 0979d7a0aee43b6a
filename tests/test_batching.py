"""`data.batching.bucket_batches`: one bucketer for every task's examples."""

import numpy as np
import pytest
import tensorflow as tf
from task_configs import task_of

from keras_transformer.data import synthetic
from keras_transformer.data.batching import (
    bucket_batches,
    default_bucket_lengths,
    without_autotuning,
)
from keras_transformer.data.task_sources import load_classification_data, load_tagging_data
from keras_transformer.tokenization import train_sentencepiece


@pytest.fixture(scope="module")
def tokenizer():
    words, _ = synthetic.synthetic_tagging("train[:1000]")
    texts = [" ".join(w) for w in words] + synthetic.synthetic_classification("train[:300]")[0]
    return train_sentencepiece(texts, vocab_size=330, seed=0)


def _examples(lengths):
    """`((a, b), label)` examples: `a` of each length, `b` one shorter, `label` a scalar."""
    rows = tf.ragged.constant([list(range(1, n + 1)) for n in lengths], tf.int32)
    return tf.data.Dataset.from_tensor_slices(rows).map(lambda x: ((x, x[1:]), tf.size(x) * 10))


def test_any_structure_is_padded_with_zero_by_its_longest_sequence():
    lengths = [3, 9, 1, 12, 5, 7, 2, 16]
    batches = list(
        bucket_batches(_examples(lengths), batch_size=8, bucket_lengths=[4, 16], shuffle=False)
    )
    seen = []
    for (a, b), label in batches:
        a, b, label = a.numpy(), b.numpy(), label.numpy()
        assert label.shape == (len(a),)
        # Each sequence padded to its longest in the batch.
        assert a.shape[1] == max((a != 0).sum(1)) and b.shape[1] == max((b != 0).sum(1))
        np.testing.assert_array_equal(label, (a != 0).sum(1) * 10)  # scalars untouched
        assert ((a[:, 1:] == b) | (b == 0)).all()
        seen += (label // 10).tolist()
    assert sorted(seen) == sorted(lengths)
    # One batch per bucket: lengths <= 4, then 5..16.
    assert sorted(len(a) for (a, _), _ in batches) == [3, 5]


def test_tokens_per_batch_and_pad_to_bucket_checks():
    with pytest.raises(ValueError, match="at most one of `batch_size` and `tokens_per_batch`"):
        bucket_batches(_examples([2]), batch_size=2, tokens_per_batch=8, bucket_lengths=[4])
    with pytest.raises(ValueError, match=r"max_length=16 with pad_to_bucket=True"):
        bucket_batches(_examples([2]), bucket_lengths=[4, 8], max_length=16, pad_to_bucket=True)
    strings = tf.data.Dataset.from_tensor_slices(["a"])
    with pytest.raises(ValueError, match="expected a tf.data.Dataset of int tensors"):
        bucket_batches(strings, bucket_lengths=[4])


@pytest.mark.parametrize("task", ["tagging", "classification"])
def test_task_batches_by_tokens_fit_the_budget_and_pad_to_buckets(tokenizer, task):
    data = (
        load_tagging_data("synthetic_pos", "train[:300]")
        if task == "tagging"
        else load_classification_data("synthetic_sentiment", "train[:300]")
    )
    budget, max_length = 96, 32
    buckets = set(default_bucket_lengths(max_length, 8))
    shapes, count = set(), 0
    overrides = [f"data.tokens_per_batch={budget}", "data.pad_to_bucket=true"]
    task_batches = task_of(task, max_length, *overrides).make_batches(
        data, (tokenizer, tokenizer), shuffle=True
    )
    for x, y in task_batches:
        batch, length = x.shape
        assert batch * length <= budget
        assert length in buckets  # padded to the bucket, not the longest example
        assert y.shape == ((batch,) if task == "classification" else (batch, length))
        shapes.add((batch, length))
        count += batch
    assert count == 300 and len(shapes) >= 2
    # A bucket of length L makes batches of budget // L examples (its last may be shorter).
    largest = {}
    for batch, length in shapes:
        largest[length] = max(batch, largest.get(length, 0))
    assert any(batch == budget // length for length, batch in largest.items())


def _pass(batches):
    """One pass: each batch as (rows, longest length) and its examples' lengths."""
    return [(tuple(sorted(label.numpy() // 10)), a.shape[1]) for (a, _), label in batches]


def test_batch_shuffling_spreads_the_end_of_pass_remainders_and_keeps_every_example():
    # 20 buckets of 5 examples each, 3 a batch: every bucket fills one batch during the pass
    # and flushes a 2-example remainder at its end, shortest bucket first.
    lengths = [n for n in range(1, 21) for _ in range(5)]
    options = dict(batch_size=3, bucket_lengths=list(range(1, 21)), shuffle_buffer_size=100)
    in_fill_order = bucket_batches(_examples(lengths), seed=3, **options)
    first = _pass(in_fill_order)
    assert [longest for _, longest in first[-20:]] == list(range(1, 21))
    assert all(len(rows) == 2 for rows, _ in first[-20:])

    shuffled = bucket_batches(_examples(lengths), seed=3, batch_shuffle_buffer_size=40, **options)
    passes = [_pass(shuffled) for _ in range(3)]
    for batches in passes:
        # The same examples, each once a pass, in batches of one bucket.
        assert sorted(n for rows, _ in batches for n in rows) == sorted(lengths)
        assert all(set(rows) == {longest} for rows, longest in batches)
    # The remainders no longer close each pass in length order.
    tails = [[longest for _, longest in batches[-20:]] for batches in passes]
    assert all(tail != list(range(1, 21)) for tail in tails)
    assert len({tuple(t) for t in tails}) > 1  # reshuffled each pass


def test_batch_shuffle_buffer_size_is_checked():
    with pytest.raises(ValueError, match="batch_shuffle_buffer_size"):
        bucket_batches(
            _examples([1, 2]), batch_size=2, bucket_lengths=[2], batch_shuffle_buffer_size=0
        )


def test_without_autotuning_keeps_the_batches_and_turns_autotuning_off():
    batches = bucket_batches(
        _examples([3, 5, 4, 9]), batch_size=2, bucket_lengths=[4, 8], shuffle=False
    )
    plain = without_autotuning(batches)
    assert batches.options().autotune.enabled is not False  # tf.data's default: autotuned
    assert plain.options().autotune.enabled is False
    assert [a.numpy().tolist() for (a, _), _ in plain] == [
        a.numpy().tolist() for (a, _), _ in batches
    ]
