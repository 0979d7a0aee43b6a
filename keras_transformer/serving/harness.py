"""A managed version's state and harness, and the helpers of the model manager.

``VersionState`` is what ``GetModelStatus`` reports of a version, ``LoadRetries`` how a failed
load is retried, and ``Harness`` the manager's record of one version (TF Serving's
``LoaderHarness``).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os

logger = logging.getLogger("keras_transformer.serving.manager")

ERROR_MESSAGE_LIMIT = 2000


@dataclasses.dataclass
class VersionState:
    """A version's ``ModelVersionStatus``: state name, error code name and message."""

    state: str
    error_code: str = "OK"
    error_message: str = ""


@dataclasses.dataclass(frozen=True)
class LoadRetries:
    """How often a failed load is tried again (TF Serving's ``LoaderHarness::Load`` with
    ``Retry``, ``util/retrier.cc``): ``--max_num_load_retries`` more tries (0: one try only),
    ``--load_retry_interval_micros`` apart (negative: no wait). The version is LOADING
    meanwhile, and END with the last error once the tries are spent."""

    max_num_load_retries: int = 5
    load_retry_interval_micros: int = 60_000_000

    def __post_init__(self) -> None:
        if self.max_num_load_retries < 0:
            raise ValueError(f"max_num_load_retries must be >= 0, got {self.max_num_load_retries}")


@dataclasses.dataclass
class Harness:
    """A version the manager manages (TF Serving's ``LoaderHarness`` with its ``Aspired``
    flag): state ``new``, ``ready``, ``error`` or ``disabled`` (unloaded)."""

    path: str
    aspired: bool = True
    state: str = "new"
    stamp: float | None = None  # saved_model.pb mtime when it was loaded (retry a failure)


def release_memory() -> None:
    """Free unloaded versions now. A version's ``tf.Graph`` is full of reference cycles, which
    only the cyclic collector frees, and its oldest generation runs rarely: without this, an
    unloaded version's graph stays in memory for an unbounded time after each swap."""
    gc.collect()


def graph_mtime(path: str) -> float | None:
    for name in ("saved_model.pb", "saved_model.pbtxt"):
        try:
            return os.path.getmtime(os.path.join(path, name))
        except OSError:
            continue
    return None


def log_poll_error(error: OSError) -> None:
    """Log a failed poll of the base paths in TF Serving's words (nothing changes)."""
    logger.error("FileSystemStoragePathSource encountered a filesystem access error: %s", error)
