"""What a task's raw examples look like, and the checks of a dataset of them.

Each task states the `element_spec` of its raw examples (`Task.example_spec`) as
`Component`s: translation `(source: str scalar, target: str scalar)`, tagging
`(words: str (W,), tags: int (W,))`, classification `(text: str scalar, label: int scalar)`,
language modelling `text: str scalar`. A dataset of one's own is checked against it before
anything is written (`check_examples`); the label ids are checked as the examples are encoded
(`checked_label_ids`), in the input pipeline: an id outside the labels would otherwise train
silently (under XLA an out-of-range label is clamped to the nearest class).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Component:
    """One component of a raw example: its name, its kind (`"str"`: `tf.string`; `"int"`:
    any integer dtype) and its rank (0: a scalar; 1: a vector, dense or ragged, of
    `length`)."""

    name: str
    kind: str
    rank: int
    length: str = "W"  # a vector's length, as the spec is written: `(W,)`

    def fits(self, spec: Any) -> bool:
        """Whether a component's `tf.TypeSpec` is this one."""
        if not isinstance(spec, (tf.TensorSpec, tf.RaggedTensorSpec)):
            return False
        if isinstance(spec, tf.RaggedTensorSpec) and self.rank == 0:
            return False
        dtype = tf.as_dtype(spec.dtype)
        kind = dtype == tf.string if self.kind == "str" else dtype.is_integer
        return bool(kind) and spec.shape.rank == self.rank

    def __str__(self) -> str:
        shape = "scalar" if self.rank == 0 else f"({self.length},)"
        return f"{self.name}: {self.kind} {shape}"


# Translation's examples, which `data.pipeline.encode_pairs` reads too.
TEXT_PAIRS = (Component("source", "str", 0), Component("target", "str", 0))


def describe(components: tuple[Component, ...]) -> str:
    """`components` as an element spec is written: one alone, more as a tuple."""
    text = ", ".join(str(c) for c in components)
    return text if len(components) == 1 else f"({text})"


def fits(spec: Any, components: tuple[Component, ...]) -> bool:
    """Whether a dataset's `element_spec` is `components` (one alone: not in a tuple)."""
    if len(components) == 1:
        return components[0].fits(spec)
    return (
        isinstance(spec, tuple)
        and len(spec) == len(components)
        and all(c.fits(s) for c, s in zip(components, spec, strict=True))
    )


def check_examples(dataset: Any, components: tuple[Component, ...], argument: str) -> None:
    """Refuses a dataset whose examples are not `components`.

    Raises:
        ValueError: naming `argument`, the expected and the received element spec.
    """
    spec = getattr(dataset, "element_spec", None)
    if not (isinstance(dataset, tf.data.Dataset) and fits(spec, components)):
        received = f"element_spec={spec}" if spec is not None else type(dataset).__name__
        raise ValueError(
            f"Received an invalid value for argument `{argument}`, expected a tf.data.Dataset "
            f"of unbatched examples {describe(components)}. Received: {received}"
        )


def assertion(ok: Any, data: Callable[[], list[Any]]) -> tf.Tensor:
    """A scalar to depend on (`tf.control_dependencies`) that raises
    `tf.errors.InvalidArgumentError` with the strings and tensors of `data()` when `ok` (a
    scalar bool) is false as the graph runs; `data` is computed only then."""

    def fail() -> tf.Tensor:
        failed = tf.debugging.Assert(tf.constant(False), data(), summarize=10)
        with tf.control_dependencies([failed]):
            return tf.constant(False)

    return tf.cond(ok, lambda: tf.constant(True), fail)


def checked_label_ids(ids: Any, num_labels: int, origin: str, what: str = "label") -> tf.Tensor:
    """`ids` (1-D) after an assertion (`assertion`) that each lies in `[0, num_labels)`,
    naming `origin`, the range and the ids outside it."""
    ids = tf.convert_to_tensor(ids)
    inside = tf.logical_and(ids >= 0, ids < tf.cast(num_labels, ids.dtype))
    check = assertion(
        tf.reduce_all(inside),
        lambda: [
            f"Received {what} ids outside [0, {num_labels}) in {origin}: expected the ids of "
            f"its {num_labels} labels. Received ids:",
            tf.unique(tf.boolean_mask(ids, tf.logical_not(inside))).y,
        ],
    )
    with tf.control_dependencies([check]):
        return tf.identity(ids)
