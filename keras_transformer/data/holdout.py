"""Holding out the last part of a training split as validation data, as Keras'
`fit(validation_split=...)` does: deterministic (the split's own order, no shuffling), so a
run and its later evaluation hold out the same examples.

Public API:

- `split_off(dataset, holdout)`: `(kept, held_out, Holdout)`.

Example:
>>> import tensorflow as tf
>>> kept, held_out, counts = split_off(tf.data.Dataset.range(10), 0.2)
>>> [int(x) for x in held_out], counts.held_out, counts.total
([8, 9], 2, 10)
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from keras_transformer.validation import check_holdout


@dataclasses.dataclass(frozen=True)
class Holdout:
    """What was held out: the last `held_out` of the split's `total` examples."""

    total: int
    held_out: int

    @property
    def kept(self) -> int:
        return self.total - self.held_out


def split_off(
    dataset: tf.data.Dataset, holdout: float | int
) -> tuple[tf.data.Dataset, tf.data.Dataset, Holdout]:
    """The first examples of `dataset` and its last `holdout` (a fraction or a count).

    Args:
        dataset: a finite dataset (read once to count it when its length is unknown).
        holdout: a fraction in (0, 1), rounded to at least one example, or a count.

    Returns:
        `(kept, held_out, Holdout(total, held_out))`.

    Raises:
        ValueError: when nothing would be left to train on.
    """
    holdout = check_holdout("holdout", holdout)
    total = int(dataset.cardinality())
    if total < 0:
        total = int(dataset.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))
    held_out = max(1, round(total * holdout)) if isinstance(holdout, float) else holdout
    if held_out >= total:
        raise ValueError(
            f"Received a holdout of {held_out} examples from a split of {total}, expected "
            "fewer, leaving examples to train on. Received: holdout="
            f"{holdout}"
        )
    kept = total - held_out
    return dataset.take(kept), dataset.skip(kept), Holdout(total, held_out)
