"""One batch's tensors: the tasks' inputs merged into one session run's feeds and its outputs
split back, as TF Serving's ``BatchingSession`` does it.

Followed from TF Serving's source (``tensorflow_serving/batching/``):

* ``batching_session.cc`` ``MergeInputTensors``: the merged batch of N rows is padded up to
  the first ``allowed_batch_sizes`` entry M >= N with M - N copies of the first row of the
  last task's tensor; with ``pad_variable_length_inputs`` each task's tensor is padded to the
  batch's largest inner dims, else tasks whose inner dims differ fail the whole batch
  (FAILED_PRECONDITION, TF Serving's message).
* ``batching_util.cc`` ``AddPadding``/``PadTensor``: padding appends after each inner dim, with
  the tensor's own first element as the value ("using existing values in padding"), not 0;
  only ranks 1 to 6 are padded.
* ``batching_session.cc`` ``SplitOutputTensors``: every output must be batch-major with the
  padded batch's rows (FAILED_PRECONDITION otherwise); the padding rows are dropped.
* ``SplitInputTask``'s done callback: a split task's outputs are its pieces' outputs
  concatenated in order with ``tensor::Concat``, which does not check inner dims.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from keras_transformer.serving.errors import ServingStatusError, invalid

# batching_util.cc PadTensorOfSpecificType: "only ranks from 1 to 6 are supported".
MAX_PADDED_RANK = 6


def batch_size(arrays: Mapping[str, np.ndarray]) -> int:
    """A request's rows, checked as ``ComputeTensorBatchSize`` (``batching_util.h``) does.

    Raises:
        ServingStatusError: INVALID_ARGUMENT with TF Serving's message when there is no input,
            an input is a scalar, or the inputs' first dims differ.

    Example:
        >>> batch_size({"a": np.zeros([3, 2]), "b": np.zeros([3])})
        3
    """
    if not arrays:
        raise invalid("Batching Run() must have at least one input tensor")
    sizes = set()
    for array in arrays.values():
        if array.ndim == 0:
            raise invalid("Batching Run() input tensors must have at least one dimension")
        sizes.add(int(array.shape[0]))
    if len(sizes) != 1:
        raise invalid("Batching Run() input tensors must have equal 0th-dimension size")
    return sizes.pop()


def round_to_allowed(allowed_batch_sizes: Sequence[int], size: int) -> int:
    """``RoundToLowestAllowedBatchSize``: the first allowed size >= ``size`` (``size`` itself
    when there are none or it is larger than all).

    Example:
        >>> round_to_allowed((4, 8, 16), 5), round_to_allowed((), 5)
        (8, 5)
    """
    return next((a for a in allowed_batch_sizes if a >= size), size)


def pad_inner_dims(array: np.ndarray, dims: Sequence[int]) -> np.ndarray:
    """``AddPadding``: ``array`` padded after its inner dims up to ``dims`` (``dims[0]`` is
    ignored), with its first element as the value.

    Example:
        >>> pad_inner_dims(np.array([[7, 1]]), [1, 4]).tolist()
        [[7, 1, 7, 7]]
    """
    if not 1 <= array.ndim <= MAX_PADDED_RANK:
        raise invalid("Only tensors with rank from 1 to 6 can be padded.")
    widths = [(0, 0)] + [(0, max(0, d - s)) for d, s in zip(dims[1:], array.shape[1:])]
    if not any(after for _, after in widths):
        return array
    if array.size == 0:
        raise invalid("Got empty tensor in batch of non-empty tensors.")
    first = array.reshape(-1)[0]
    if array.dtype == object:  # np.pad's constant mode casts; fill strings by hand
        padded = np.full([s + a for s, (_, a) in zip(array.shape, widths)], first, dtype=object)
        padded[tuple(slice(0, s) for s in array.shape)] = array
        return padded
    return np.pad(array, widths, mode="constant", constant_values=first)


def _shape_mismatch(tensor_name: str) -> ServingStatusError:
    return ServingStatusError(
        "FAILED_PRECONDITION",
        f"Tensors with name '{tensor_name}' from different tasks have different shapes and "
        "padding is turned off. Set pad_variable_length_inputs to true, or ensure that all "
        "tensors with the same name have equal dimensions starting with the first dim.",
    )


def merge_inputs(
    tasks: Sequence[Mapping[str, np.ndarray]],
    tensor_names: Mapping[str, str],
    allowed_batch_sizes: Sequence[int] = (),
    pad_variable_length_inputs: bool = False,
) -> tuple[dict[str, np.ndarray], int]:
    """The feeds of one session run for the tasks of a batch (``MergeInputTensors``).

    Args:
        tasks: each task's inputs by alias (the same aliases in every task).
        tensor_names: alias -> graph tensor name, as TF Serving's messages name tensors.
        allowed_batch_sizes: pad the batch's rows up to the first entry that holds them.
        pad_variable_length_inputs: pad inner dims to the batch's largest.

    Returns:
        ``(merged inputs by alias, padding rows added)``.

    Raises:
        ServingStatusError: inner dims differ without padding (FAILED_PRECONDITION), or a
            tensor cannot be padded (INVALID_ARGUMENT), with TF Serving's messages.

    Example:
        >>> merged, pad = merge_inputs([{"x": np.array([[1]])}, {"x": np.array([[2, 3]])}],
        ...                            {"x": "x:0"}, (4,), pad_variable_length_inputs=True)
        >>> merged["x"].tolist(), pad
        ([[1, 1], [2, 3], [2, 3], [2, 3]], 2)
    """
    aliases = sorted(tasks[0])
    rows = sum(int(t[aliases[0]].shape[0]) for t in tasks)
    padding = round_to_allowed(allowed_batch_sizes, rows) - rows
    merged: dict[str, np.ndarray] = {}
    for alias in aliases:
        arrays = [t[alias] for t in tasks]
        if pad_variable_length_inputs:
            if len({a.ndim for a in arrays}) != 1:
                raise invalid(
                    f"Tensors with name '{tensor_names[alias]}' from different tasks have "
                    f"different ranks ({sorted({a.ndim for a in arrays})}) and cannot be padded"
                )
            dims = np.max([a.shape for a in arrays], axis=0).tolist()
            arrays = [pad_inner_dims(a, dims) for a in arrays]
        elif any(a.shape[1:] != arrays[0].shape[1:] for a in arrays[1:]):
            raise _shape_mismatch(tensor_names[alias])
        if padding > 0 and arrays[-1].shape[0] > 0:
            arrays.append(np.repeat(arrays[-1][:1], padding, axis=0))
        merged[alias] = np.concatenate(arrays, axis=0)
    if padding > 0 and merged[aliases[0]].shape[0] == rows:
        padding = 0  # the last task has no row to copy: nothing was added
    return merged, padding


def split_outputs(
    outputs: Mapping[str, np.ndarray], sizes: Sequence[int], padding: int
) -> list[dict[str, np.ndarray]]:
    """Each task's rows of a merged run's outputs (``SplitOutputTensors``).

    Raises:
        ServingStatusError: FAILED_PRECONDITION, TF Serving's message, for an output that is
            a scalar or whose first dim is not the padded batch's rows.

    Example:
        >>> [o["y"].tolist() for o in split_outputs({"y": np.arange(4)}, [1, 2], 1)]
        [[0], [1, 2]]
    """
    total = sum(sizes) + padding
    for value in outputs.values():
        if value.ndim == 0:
            raise ServingStatusError(
                "FAILED_PRECONDITION", "Batched output tensor has 0 dimensions"
            )
        if value.shape[0] != total:
            raise ServingStatusError(
                "FAILED_PRECONDITION",
                "Batched output tensor's 0th dimension does not equal the sum of the 0th "
                "dimension sizes of the input tensors",
            )
    bounds = np.cumsum([0, *sizes]).tolist()
    return [
        {alias: value[start:end] for alias, value in outputs.items()}
        for start, end in zip(bounds, bounds[1:])
    ]


def concat_pieces(
    pieces: Sequence[Mapping[str, np.ndarray]], max_execution_batch_size: int
) -> dict[str, np.ndarray]:
    """A split task's outputs: its pieces' outputs concatenated in order.

    TF Serving's ``tensor::Concat`` takes the shape of the first piece and copies the others'
    bytes after it unchecked, so pieces whose outputs differ in inner dims (an output padded to
    its batch's longest row, such as ``tokenize``'s ``token_ids``) abort the server or come back
    misaligned there; the stand-in refuses them instead (INTERNAL).

    Example:
        >>> concat_pieces([{"y": np.array([1, 2])}, {"y": np.array([3])}], 2)["y"].tolist()
        [1, 2, 3]
    """
    result: dict[str, np.ndarray] = {}
    for alias in pieces[0]:
        values = [p[alias] for p in pieces]
        shapes = sorted({v.shape[1:] for v in values})
        if len(shapes) > 1:
            raise ServingStatusError(
                "INTERNAL",
                f"The pieces of a split request have outputs '{alias}' of different inner "
                f"shapes {[list(s) for s in shapes]}: TF Serving concatenates them unchecked "
                "(tensor::Concat), which aborts the server or returns misaligned rows. Send "
                f"at most max_execution_batch_size ({max_execution_batch_size}) rows to a "
                "signature whose output dims depend on the batch.",
            )
        result[alias] = np.concatenate(values, axis=0)
    return result
