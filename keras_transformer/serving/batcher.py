"""Dynamic batching: concurrent requests to one signature merged into one session run.

As in TF Serving (``--enable_batching``), requests are merged when every signature input is
batch-major (first dim -1) and the requests agree on dtypes and inner dimensions; a merged
batch holds at most ``max_batch_size`` rows and runs once full or ``batch_timeout_micros``
after its oldest request arrived; a request larger than ``max_batch_size`` is refused
(INVALID_ARGUMENT) and a full queue answers UNAVAILABLE. Outputs whose inner dims depend on
the batch (padded token ids) are padded to the longest request of the merged batch.

What TF Serving does not do: requests are grouped by length. A translation's cost grows with
its longest sentence (every row of a batch decodes until the longest is done), so the batcher
sorts the queued requests by the byte length of their strings and builds each batch around
its oldest request from its nearest neighbours in length, leaving out a request that would
make padding exceed ``max_padding`` of the padded batch; those wait for the next batch (at
once, as their timeout has run).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from keras_transformer.serving.config import BatchOptions
from keras_transformer.serving.errors import ServingStatusError, invalid

logger = logging.getLogger(__name__)


def row_lengths(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """Each row's length for bucketing: its longest string in bytes (strings inputs), else
    the number of elements of the row."""
    first = next(iter(arrays.values()))
    lengths = np.zeros(first.shape[0], dtype=np.int64)
    for array in arrays.values():
        rows = array.reshape(array.shape[0], -1)
        if array.dtype == object:
            sizes = np.vectorize(len, otypes=[np.int64])(rows) if rows.size else rows
            longest = sizes.max(axis=1) if rows.shape[1] else np.zeros(len(rows), np.int64)
        else:
            longest = np.full(rows.shape[0], rows.shape[1], dtype=np.int64)
        lengths = np.maximum(lengths, longest)
    return lengths


class _Task:
    __slots__ = (
        "signature",
        "arrays",
        "size",
        "key",
        "lengths",
        "enqueued",
        "deadline",
        "done",
        "result",
    )

    def __init__(
        self, signature: str, arrays: Mapping[str, np.ndarray], key: tuple, timeout_ms: int = 0
    ) -> None:
        self.signature = signature
        self.arrays = arrays
        self.size = int(next(iter(arrays.values())).shape[0])
        self.key = key
        self.lengths = row_lengths(arrays)
        self.enqueued = time.monotonic()
        # No timeout (0) is no deadline, as TF Serving reads an unset RunOptions timeout.
        self.deadline = self.enqueued + timeout_ms / 1e3 if timeout_ms > 0 else float("inf")
        self.done = threading.Event()
        self.result: dict[str, np.ndarray] | BaseException | None = None

    @property
    def length(self) -> int:
        return int(self.lengths.max()) if self.size else 0


def padding(tasks: list[_Task]) -> float:
    """The padded fraction of a batch of ``tasks``: 1 - real / (rows x longest)."""
    lengths = np.concatenate([t.lengths for t in tasks])
    longest = int(lengths.max()) if lengths.size else 0
    return 0.0 if longest == 0 else 1.0 - float(lengths.sum()) / (len(lengths) * longest)


def choose_batch(first: _Task, candidates: list[_Task], options: BatchOptions) -> list[_Task]:
    """``first`` and the candidates nearest to it in length that fit ``max_batch_size`` and
    keep the batch's padding within ``max_padding`` (the candidates share its key)."""
    ranked = sorted(candidates, key=lambda t: (abs(t.length - first.length), t.enqueued))
    batch, rows = [first], first.size
    for task in ranked:
        if rows + task.size > options.max_batch_size:
            continue
        if padding([*batch, task]) > options.max_padding:
            continue
        batch.append(task)
        rows += task.size
        if rows == options.max_batch_size:
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
        # batches: session runs made by the batcher; tasks: the requests they answered.
        self.stats = {"batches": 0, "tasks": 0}
        self._threads = [
            threading.Thread(target=self._loop, name=f"batch-{i}", daemon=True)
            for i in range(options.num_batch_threads)
        ]
        for thread in self._threads:
            thread.start()

    def can_batch(self, signature_name: str, arrays: Mapping[str, np.ndarray]) -> bool:
        """Whether the request's inputs are batch-major with one batch size."""
        signature = self._signatures.get(signature_name)
        if signature is None or not arrays or set(arrays) != set(signature.inputs):
            return False
        sizes = set()
        for alias, info in signature.inputs.items():
            dims = info.tensor_shape.dim
            if info.tensor_shape.unknown_rank or not dims or dims[0].size != -1:
                return False
            if arrays[alias].ndim == 0:
                return False
            sizes.add(arrays[alias].shape[0])
        return len(sizes) == 1

    def submit(
        self, signature_name: str, arrays: Mapping[str, np.ndarray], timeout_ms: int = 0
    ) -> dict:
        """Queue a request and wait for its rows of the merged run's outputs; ``timeout_ms``
        (0: none) counts from now, the time in the queue included."""
        key = (signature_name,) + tuple(
            (alias, arrays[alias].dtype.str, arrays[alias].shape[1:]) for alias in sorted(arrays)
        )
        task = _Task(signature_name, arrays, key, timeout_ms)
        limit = self._options.max_batch_size
        if task.size > limit:
            raise invalid(f"Task size {task.size} is larger than maximum input batch size {limit}")
        with self._cond:
            if self._stopped:
                raise ServingStatusError("UNAVAILABLE", "The model version is being unloaded")
            queued_rows = sum(t.size for t in self._queue)
            if queued_rows + task.size > limit * self._options.max_enqueued_batches:
                raise ServingStatusError(
                    "UNAVAILABLE",
                    "The batch scheduling queue to which this task was submitted is full",
                )
            self._queue.append(task)
            self._cond.notify_all()
        task.done.wait()
        if isinstance(task.result, BaseException):
            raise task.result
        if task.result is None:
            raise ServingStatusError("INTERNAL", "The batched session run returned no result")
        return task.result

    def _take_batch(self) -> list[_Task] | None:
        timeout = self._options.batch_timeout_micros / 1e6
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
                if rows >= self._options.max_batch_size or remaining <= 0 or self._stopped:
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
                for task in batch:
                    if not task.done.is_set():
                        task.result = e
                        task.done.set()

    def _count(self, tasks: int) -> None:
        with self._cond:
            self.stats["batches"] += 1
            self.stats["tasks"] += tasks

    @staticmethod
    def _timeout_ms(batch: list[_Task]) -> int:
        """The batch's session-run timeout, as TF Serving's ``BatchingSession`` sets it: until
        the latest deadline of its tasks (0: none); DEADLINE_EXCEEDED when every task's
        deadline has passed while it waited in the queue."""
        now = time.monotonic()
        latest = max(t.deadline for t in batch)
        if latest <= now:
            raise ServingStatusError(
                "DEADLINE_EXCEEDED", "Run() timeout exceeded while waiting in batching queue"
            )
        return 0 if latest == float("inf") else max(1, int((latest - now) * 1e3))

    def _run_batch(self, batch: list[_Task]) -> None:
        if len(batch) == 1:
            self._run_single(batch[0])
            return
        first = batch[0]
        merged = {
            alias: np.concatenate([t.arrays[alias] for t in batch], axis=0)
            for alias in first.arrays
        }
        total = sum(t.size for t in batch)
        try:
            outputs = self._run(first.signature, merged, None, self._timeout_ms(batch))
        except ServingStatusError:
            # One bad request must not fail the others: answer each on its own.
            for task in batch:
                self._run_single(task)
            return
        if any(v.ndim == 0 or v.shape[0] != total for v in outputs.values()):
            logger.warning(
                "signature %r: an output is not batch-major; running requests unbatched",
                first.signature,
            )
            for task in batch:
                self._run_single(task)
            return
        self._count(len(batch))
        offset = 0
        for task in batch:
            task.result = {k: v[offset : offset + task.size] for k, v in outputs.items()}
            offset += task.size
            task.done.set()

    def _run_single(self, task: _Task) -> None:
        self._count(1)
        try:
            task.result = self._run(task.signature, task.arrays, None, self._timeout_ms([task]))
        except BaseException as e:
            task.result = e
        task.done.set()

    def stop(self) -> None:
        """Answer what is queued, then end the batch threads."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)
