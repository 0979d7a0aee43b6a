"""Dynamic batching: concurrent requests to one signature merged into one session run.

As in TF Serving (``--enable_batching``; ``batching_session.cc`` and TensorFlow's
``shared_batch_scheduler.h``): every request goes through the batcher; a request larger than
``max_batch_size`` is refused (INVALID_ARGUMENT, "Task size N is larger than maximum input
batch size M") and a full queue answers UNAVAILABLE. A batch holds at most the execution batch
size of rows (``max_batch_size``, or ``max_execution_batch_size`` with
``enable_large_batch_splitting``) and runs once full or ``batch_timeout_micros`` after its
oldest request arrived. With splitting, a request larger than the execution batch size is cut
into pieces of that size that run in different batches, and its outputs are the pieces'
outputs concatenated in order. Tensors are merged and split as `batch_merge.py` describes
(``allowed_batch_sizes``, ``pad_variable_length_inputs``); when a batch fails (its merge, its
session run, or its outputs), every request in it gets that error, as in TF Serving.

Where the stand-in differs: pieces are cut from the request's start in execution-batch-size
rows (TF Serving's first piece fills what is left of the open batch), and batches are grouped
by length. A translation's cost grows with its longest sentence (every row of a batch decodes
until the longest is done), so the batcher sorts the queued pieces by the byte length of their
strings and builds each batch around its oldest piece from its nearest neighbours in length,
leaving out one that would make padding exceed ``max_padding`` of the padded batch; those wait
for the next batch (at once, as their timeout has run). ``max_padding`` 1 merges whatever is
queued, as TF Serving does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from keras_transformer.serving.batch_merge import (
    batch_size,
    concat_pieces,
    merge_inputs,
    split_outputs,
)
from keras_transformer.serving.batching_config import BatchOptions
from keras_transformer.serving.errors import ServingStatusError, invalid

logger = logging.getLogger(__name__)

# The counts of BatchScheduler.stats (see its __init__).
STATS_KEYS = ("batches", "failed_batches", "tasks", "pieces", "padding_rows")


def row_lengths(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """Each row's length for bucketing: its longest string in bytes (strings inputs), else
    the number of elements of the row."""
    first = next(iter(arrays.values()))
    lengths = np.zeros(first.shape[0], dtype=np.int64)
    for array in arrays.values():
        # (rows, elements a row); -1 cannot be inferred for a request of 0 rows.
        rows = array.reshape(array.shape[0], int(np.prod(array.shape[1:], dtype=np.int64)))
        if array.dtype == object:
            sizes = np.vectorize(len, otypes=[np.int64])(rows) if rows.size else rows
            longest = sizes.max(axis=1) if rows.shape[1] else np.zeros(len(rows), np.int64)
        else:
            longest = np.full(rows.shape[0], rows.shape[1], dtype=np.int64)
        lengths = np.maximum(lengths, longest)
    return lengths


class _Request:
    """A submitted request: its pieces' results, gathered; ``done`` once all are in."""

    def __init__(self, pieces: int, max_execution_batch_size: int) -> None:
        self._lock = threading.Lock()
        self._outputs: list[Mapping[str, np.ndarray] | None] = [None] * pieces
        self._left = pieces
        self._limit = max_execution_batch_size
        self._error: BaseException | None = None
        self.done = threading.Event()
        self.result: dict[str, np.ndarray] | BaseException | None = None

    def finish(self, index: int, result: Mapping[str, np.ndarray] | BaseException) -> None:
        """Record piece ``index``'s outputs or error (the first error is the request's)."""
        with self._lock:
            if isinstance(result, BaseException):
                self._error = self._error or result
            else:
                self._outputs[index] = result
            self._left -= 1
            if self._left:
                return
        if self._error is not None:
            self.result = self._error
        elif len(self._outputs) == 1:
            self.result = dict(self._outputs[0] or {})
        else:
            try:
                self.result = concat_pieces([o or {} for o in self._outputs], self._limit)
            except ServingStatusError as e:
                self.result = e
        self.done.set()


class _Task:
    """One piece of a request (the whole request unless it was split), as queued."""

    __slots__ = (
        "signature",
        "arrays",
        "size",
        "key",
        "lengths",
        "enqueued",
        "deadline",
        "request",
        "index",
    )

    def __init__(
        self,
        signature: str,
        arrays: Mapping[str, np.ndarray],
        key: Any,
        request: _Request | None = None,
        index: int = 0,
        timeout_ms: int = 0,
    ) -> None:
        self.signature = signature
        self.arrays = arrays
        self.size = int(next(iter(arrays.values())).shape[0])
        self.key = key
        self.lengths = row_lengths(arrays)
        self.enqueued = time.monotonic()
        # No timeout (0) is no deadline, as TF Serving reads an unset RunOptions timeout.
        self.deadline = self.enqueued + timeout_ms / 1e3 if timeout_ms > 0 else float("inf")
        self.request = request
        self.index = index

    def finish(self, result: Mapping[str, np.ndarray] | BaseException) -> None:
        if self.request is not None:
            self.request.finish(self.index, result)

    @property
    def length(self) -> int:
        return int(self.lengths.max()) if self.size else 0


def padding(tasks: list[_Task]) -> float:
    """The padded fraction of a batch of ``tasks``: 1 - real / (rows x longest)."""
    lengths = np.concatenate([t.lengths for t in tasks])
    longest = int(lengths.max()) if lengths.size else 0
    return 0.0 if longest == 0 else 1.0 - float(lengths.sum()) / (len(lengths) * longest)


def choose_batch(first: _Task, candidates: list[_Task], options: BatchOptions) -> list[_Task]:
    """``first`` and the candidates nearest to it in length that fit the execution batch size
    and keep the batch's padding within ``max_padding`` (the candidates share its key)."""
    limit = options.execution_batch_size
    ranked = sorted(candidates, key=lambda t: (abs(t.length - first.length), t.enqueued))
    batch, rows = [first], first.size
    for task in ranked:
        if rows + task.size > limit:
            continue
        if padding([*batch, task]) > options.max_padding:
            continue
        batch.append(task)
        rows += task.size
        if rows == limit:
            break
    return batch


class BatchScheduler:
    """Merges concurrent requests to one version's signatures (see the module docstring).

    Args:
        run: ``run(signature_name, arrays, output_aliases, timeout_ms) -> outputs``, one
            session run.
        options: the batching parameters.
        signatures: the version's SignatureDefs by name.

    Example (not run as a doctest: it needs a loaded servable):

    ```python
    scheduler = BatchScheduler(servable.run, BatchOptions(8), servable.signatures)
    ```
    """

    def __init__(
        self,
        run: Callable[..., dict],
        options: BatchOptions,
        signatures: Mapping[str, Any],
    ) -> None:
        self._run = run
        self._options = options
        self._signatures = signatures
        self._queue: list[_Task] = []
        self._cond = threading.Condition()
        self._stopped = False
        # batches: session runs the batcher made or tried (failed_batches of them failed);
        # tasks: the requests it answered; pieces: the tasks of its batches (more than tasks
        # when requests were split); padding_rows: rows added up to allowed_batch_sizes.
        self.stats = dict.fromkeys(STATS_KEYS, 0)
        self._threads = [
            threading.Thread(target=self._loop, name=f"batch-{i}", daemon=True)
            for i in range(options.num_batch_threads)
        ]
        for thread in self._threads:
            thread.start()

    def _pieces(
        self, signature_name: str, arrays: Mapping[str, np.ndarray], timeout_ms: int
    ) -> list[_Task]:
        size = batch_size(arrays)
        limit = self._options.max_batch_size
        if size > limit:
            raise invalid(f"Task size {size} is larger than maximum input batch size {limit}")
        step = self._options.execution_batch_size
        bounds = [(0, size)]
        if self._options.enable_large_batch_splitting and size > step:
            bounds = [(start, min(start + step, size)) for start in range(0, size, step)]
        request = _Request(len(bounds), step)
        return [
            _Task(
                signature_name,
                {k: v[a:b] for k, v in arrays.items()},
                signature_name,
                request,
                i,
                timeout_ms,
            )
            for i, (a, b) in enumerate(bounds)
        ]

    def _check_capacity(self, size: int) -> None:
        """TF Serving's ``ValidateBatchTaskQueueCapacity``, on the queued rows."""
        options, queued = self._options, sum(t.size for t in self._queue)
        step = options.execution_batch_size
        if options.enable_large_batch_splitting:
            capacity = options.max_enqueued_batches * step - queued
            if size > capacity:
                raise ServingStatusError(
                    "UNAVAILABLE",
                    "The batch scheduling queue to which this task was submitted is full; task "
                    f"size is {size} but scheduling capacity is only {capacity} "
                    f"(max_enqueued_batches={options.max_enqueued_batches}, "
                    f"max_execution_batch_size={step})",
                )
        elif queued + size > step * options.max_enqueued_batches:
            raise ServingStatusError(
                "UNAVAILABLE", "The batch scheduling queue to which this task was submitted is full"
            )

    def submit(
        self, signature_name: str, arrays: Mapping[str, np.ndarray], timeout_ms: int = 0
    ) -> dict:
        """Queue a request and wait for its rows of the merged runs' outputs; ``timeout_ms``
        (0: none) counts from now, the time in the queue included.

        Raises:
            ServingStatusError: the request is refused (too large, queue full, unloading) or
                its batch failed.
        """
        pieces = self._pieces(signature_name, arrays, timeout_ms)
        request = pieces[0].request
        with self._cond:
            if self._stopped:
                raise ServingStatusError("UNAVAILABLE", "The model version is being unloaded")
            self._check_capacity(sum(p.size for p in pieces))
            self._queue.extend(pieces)
            self._cond.notify_all()
        request.done.wait()
        with self._cond:
            self.stats["tasks"] += 1
        if isinstance(request.result, BaseException):
            raise request.result
        if request.result is None:
            raise ServingStatusError("INTERNAL", "The batched session run returned no result")
        return request.result

    def _take_batch(self) -> list[_Task] | None:
        timeout = self._options.batch_timeout_micros / 1e6
        limit = self._options.execution_batch_size
        with self._cond:
            while True:
                while not self._queue and not self._stopped:
                    self._cond.wait()
                if not self._queue:
                    return None  # stopped and drained
                first = min(self._queue, key=lambda t: t.enqueued)
                same = [t for t in self._queue if t.key == first.key and t is not first]
                rows = first.size + sum(t.size for t in same)
                remaining = first.enqueued + timeout - time.monotonic()
                if rows >= limit or remaining <= 0 or self._stopped:
                    break
                self._cond.wait(remaining)
            batch = choose_batch(first, same, self._options)
            for task in batch:
                self._queue.remove(task)
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            try:
                self._run_batch(batch)
            except BaseException as e:  # a batch thread never dies with tasks waiting
                logger.exception("batch of signature %r failed", batch[0].signature)
                self._count(batch, 0, failed=True)
                for task in batch:
                    task.finish(e)

    def _count(self, batch: list[_Task], padding_rows: int, failed: bool) -> None:
        with self._cond:
            self.stats["batches"] += 1
            self.stats["failed_batches"] += int(failed)
            self.stats["pieces"] += len(batch)
            self.stats["padding_rows"] += padding_rows

    @staticmethod
    def _timeout_ms(batch: list[_Task]) -> int:
        """The batch's session-run timeout, as TF Serving's ``BatchingSession`` sets it: until
        the latest deadline of its tasks (0: none); DEADLINE_EXCEEDED when every task's
        deadline passed while it waited in the queue."""
        now = time.monotonic()
        latest = max(t.deadline for t in batch)
        if latest <= now:
            raise ServingStatusError(
                "DEADLINE_EXCEEDED", "Run() timeout exceeded while waiting in batching queue"
            )
        return 0 if latest == float("inf") else max(1, int((latest - now) * 1e3))

    def _run_batch(self, batch: list[_Task]) -> None:
        """Merge, run, split; a failure at any step is every task's (TF Serving's
        ``ProcessBatch`` sets each task's status to the batch's)."""
        options, signature = self._options, batch[0].signature
        inputs = self._signatures[signature].inputs
        padding_rows = 0
        try:
            merged, padding_rows = merge_inputs(
                [t.arrays for t in batch],
                {alias: inputs[alias].name for alias in batch[0].arrays},
                options.allowed_batch_sizes,
                options.pad_variable_length_inputs,
            )
            outputs = self._run(signature, merged, None, self._timeout_ms(batch))
            results = split_outputs(outputs, [t.size for t in batch], padding_rows)
        except ServingStatusError as e:
            self._count(batch, padding_rows, failed=True)
            for task in batch:
                task.finish(e)
            return
        self._count(batch, padding_rows, failed=False)
        for task, result in zip(batch, results):
            task.finish(result)

    def stop(self) -> None:
        """Answer what is queued, then end the batch threads."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)
