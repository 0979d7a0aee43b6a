"""``--batching_parameters_file``: TF Serving's ``BatchingParameters``, read into the options
the stand-in's batcher runs.

The file is parsed into ``tensorflow.serving.BatchingParameters`` (`batching_proto.py`) and its
values checked as TF Serving checks them when it wraps a session for batching
(``servables/tensorflow/bundle_factory_util.cc`` ``WrapSessionForBatching``, the queue options
of ``bundle_factory_util.h`` ``GetQueueOptions``, and ``SharedBatchScheduler::AddQueue`` in
TensorFlow's ``core/kernels/batching_util/shared_batch_scheduler.h``), with TF Serving's
messages. Every field of the message is run by the stand-in.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from keras_transformer.serving.batching_proto import BatchingParameters
from keras_transformer.serving.config import field_error, field_line, parse_text_file


class BatchOptionsError(ValueError):
    """A batching value TF Serving refuses; ``field`` names the field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclasses.dataclass(frozen=True)
class BatchOptions:
    """The batching parameters the stand-in runs, with TF Serving's defaults
    (``SharedBatchScheduler::QueueOptions``, ``BatchingSessionOptions``), plus its own
    length bucketing.

    Args:
        max_batch_size: the largest task (request rows) the queue takes (TF Serving's
            ``input_batch_size_limit``); a larger one is refused (INVALID_ARGUMENT). Without
            splitting it is also the most rows of one session run.
        batch_timeout_micros: how long the oldest queued request waits for company.
        max_enqueued_batches: the queue holds at most this many execution batches of rows
            (then UNAVAILABLE, HTTP 503).
        num_batch_threads: batches run at once.
        allowed_batch_sizes: if set, a merged batch is padded up to the first entry that
            holds it; increasing, and the last entry must be ``max_batch_size``.
        pad_variable_length_inputs: pad the inner dims of the merged tasks' inputs to the
            batch's largest (with each tensor's first element); without it a batch whose
            tasks differ in inner dims fails for every task in it.
        enable_large_batch_splitting: split a task larger than the execution batch size
            into pieces that run in different batches; their outputs are concatenated.
        max_execution_batch_size: most rows of one session run with splitting (TF Serving
            defaults it to ``max_batch_size``); ignored without splitting, as there.
        max_padding: the stand-in's own: a merged batch is split where its rows, sorted by
            length, would pad more than this fraction of the padded batch (0 merges nothing
            of unequal length, 1 never splits).

    Raises:
        BatchOptionsError: a value out of range, or a combination TF Serving refuses.

    Example:
        >>> options = BatchOptions(64, enable_large_batch_splitting=True,
        ...                        max_execution_batch_size=16)
        >>> options.execution_batch_size
        16
        >>> BatchOptions(8, batch_timeout_micros=5000).execution_batch_size
        8
    """

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 10
    num_batch_threads: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)
    allowed_batch_sizes: tuple[int, ...] = ()
    pad_variable_length_inputs: bool = False
    enable_large_batch_splitting: bool = False
    max_execution_batch_size: int | None = None
    max_padding: float = 0.5

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_batch_sizes", tuple(self.allowed_batch_sizes))
        for field in ("max_batch_size", "num_batch_threads", "max_enqueued_batches"):
            if getattr(self, field) < 1:
                raise BatchOptionsError(field, f"{field} must be >= 1, got {getattr(self, field)}")
        if self.batch_timeout_micros < 0:
            raise BatchOptionsError(
                "batch_timeout_micros",
                f"batch_timeout_micros must be >= 0, got {self.batch_timeout_micros}",
            )
        if not 0.0 <= self.max_padding <= 1.0:
            raise BatchOptionsError(
                "max_padding", f"max_padding must be in [0, 1], got {self.max_padding}"
            )
        if self.enable_large_batch_splitting:
            self._check_splitting()
        self._check_allowed_batch_sizes()

    def _check_splitting(self) -> None:
        limit = self.max_execution_batch_size
        if limit is None or limit < 1:
            # GetQueueOptions: max_execution_batch_size falls back to max_batch_size().value(),
            # which is 0 when unset; a queue of 0-row batches refuses every task.
            raise BatchOptionsError(
                "max_execution_batch_size",
                "max_execution_batch_size must be >= 1 with enable_large_batch_splitting "
                f"(got {limit}; TF Serving takes it from max_batch_size when unset, 0 if that "
                "is unset too, and then answers every request UNAVAILABLE)",
            )
        if self.max_batch_size < limit:  # SharedBatchScheduler::AddQueue
            raise BatchOptionsError(
                "max_execution_batch_size",
                "When enable_large_batch_splitting is true, input_batch_size_limit must be "
                "greater than or equal to max_execution_batch_size (max_batch_size "
                f"{self.max_batch_size}, max_execution_batch_size {limit})",
            )

    def _check_allowed_batch_sizes(self) -> None:
        sizes = self.allowed_batch_sizes
        if not sizes:
            return
        if any(b <= a for a, b in zip(sizes, sizes[1:])):
            # Required by session_bundle_config.proto and batching_options.h, and checked with
            # this message by batching_session.cc's CreateBasicBatchingSession; the model
            # server's WrapSessionForBatching leaves it unchecked: the stand-in is stricter.
            raise BatchOptionsError(
                "allowed_batch_sizes",
                f"allowed_batch_sizes entries must be monotonically increasing, got {list(sizes)}",
            )
        if sizes[-1] != self.max_batch_size:  # WrapSessionForBatching, splitting or not
            raise BatchOptionsError(
                "allowed_batch_sizes",
                "Last entry in allowed_batch_sizes must match max_batch_size; last entry was "
                f"{sizes[-1]}; expected {self.max_batch_size}",
            )

    @property
    def execution_batch_size(self) -> int:
        """Most rows of one session run (``Queue::GetMaxExecutionBatchSize``)."""
        if self.enable_large_batch_splitting and self.max_execution_batch_size is not None:
            return self.max_execution_batch_size
        return self.max_batch_size


# The Int64Value fields of BatchingParameters the stand-in reads.
_INT64_FIELDS = (
    "max_batch_size",
    "batch_timeout_micros",
    "max_enqueued_batches",
    "num_batch_threads",
    "max_execution_batch_size",
)


def load_batching_parameters(
    path: str | os.PathLike[str], max_padding: float | None = None
) -> BatchOptions:
    """Read a ``--batching_parameters_file`` (``BatchingParameters`` text format).

    As in TF Serving's ``GetQueueOptions``, with ``enable_large_batch_splitting`` an unset
    ``max_execution_batch_size`` is ``max_batch_size``'s value, and without it
    ``max_execution_batch_size`` is ignored.

    Args:
        path: the file.
        max_padding: the stand-in's bucketing threshold (see :class:`BatchOptions`);
            its default when None.

    Returns:
        The :class:`BatchOptions` the file sets, TF Serving's defaults elsewhere.

    Raises:
        ConfigError: a schema error, or a value or combination TF Serving refuses, with the
            file, line and field.

    Example (not run as a doctest: it reads a file relative to the project root):

    ```python
    load_batching_parameters("serving/batching.config").execution_batch_size  # 32
    ```
    """
    params, text = parse_text_file(path, BatchingParameters())
    path = os.fspath(path)
    values: dict[str, Any] = {}
    for field in _INT64_FIELDS:
        if params.HasField(field):
            values[field] = int(getattr(params, field).value)
    splitting = params.HasField("enable_large_batch_splitting") and bool(
        params.enable_large_batch_splitting.value
    )
    values["enable_large_batch_splitting"] = splitting
    if not splitting:
        values.pop("max_execution_batch_size", None)
    elif "max_execution_batch_size" not in values:
        values["max_execution_batch_size"] = int(params.max_batch_size.value)
    values["allowed_batch_sizes"] = tuple(int(v) for v in params.allowed_batch_sizes)
    values["pad_variable_length_inputs"] = bool(params.pad_variable_length_inputs)
    if max_padding is not None:
        values["max_padding"] = max_padding
    try:
        return BatchOptions(**values)
    except BatchOptionsError as e:
        line = field_line(text, e.field) or field_line(text, "enable_large_batch_splitting")
        raise field_error(path, line, e.field, str(e)) from None


__all__ = ["BatchOptions", "BatchOptionsError", "load_batching_parameters"]
