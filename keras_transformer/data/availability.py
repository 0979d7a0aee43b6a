"""When a dataset cannot be had: the error, and a quick check that a download's host answers.

Offline, TFDS's downloader (tensorflow-datasets 4.9) retries each file 10 times with a
growing backoff and no timeout (`downloader.MAX_RETRIES`, not an option of
`tfds.download.DownloadConfig`), so a download waits minutes per file before it fails; and
`tfds.load(..., download=False)` on a dataset that is not prepared raises an
`AssertionError`. The loaders of this package ask the host first, with a short timeout, and
raise `DataUnavailableError` with one line that says what to do.

Public API:

- `DataUnavailableError`: the data is neither prepared, nor in a local copy, nor
  downloadable.
- `HOST_TIMEOUT_S`: how long `unreachable_reason` waits for an answer.
- `unreachable_reason(url, timeout=HOST_TIMEOUT_S) -> str | None`: why `url`'s host does not
  answer, or None when it does.
- `load_tfds(name, split, *, data_dir=None, download=True, builder_kwargs=None)`:
  `tfds.load(..., with_info=True)`, raising `DataUnavailableError` for a dataset that is not
  prepared while downloading is off.

Example:
>>> issubclass(DataUnavailableError, OSError)
True
"""

from __future__ import annotations

import os
from typing import Any

from keras_transformer.constants import TFDS_DATA_DIR_CONFIG_KEY

HOST_TIMEOUT_S = 5.0


class DataUnavailableError(OSError):
    """A dataset is neither prepared, nor in a local copy, nor downloadable (downloading is
    off, or its host does not answer).

    An `OSError`, as `FileNotFoundError` and `ConnectionError` are: what is missing lies
    outside the program (files, a network), and the command line reports it in one line.
    Neither of those two fits alone, as the same data is missing whether downloading is off
    or the network is.
    """


def unreachable_reason(url: str, timeout: float = HOST_TIMEOUT_S) -> str | None:
    """Asks `url`'s host for the headers of `url` (HTTP HEAD, no retries, the proxies of the
    environment as TFDS's downloader uses them).

    Args:
        url: an `http://` or `https://` address.
        timeout: the seconds to wait for the connection and for the answer.

    Returns:
        None when the host answers (whatever the status: the download reports that), else
        why it does not, in a few words on one line.

    Example (not run as a doctest: it opens a connection):

    ```python
    unreachable_reason("http://127.0.0.1:9/")
    # 'Failed to establish a new connection: [Errno 111] Connection refused'
    ```
    """
    import requests  # a dependency of tensorflow-datasets, imported when needed

    try:
        requests.head(url, timeout=timeout, allow_redirects=False)
    except requests.Timeout:
        return f"no answer within {timeout:g} s"
    except requests.ConnectionError as e:  # SSL errors included
        return _short_reason(e)
    return None


def _short_reason(error: Exception) -> str:
    # requests wraps urllib3's MaxRetryError, whose `reason` is the error of the connection
    # ("HTTPSConnection(host=..., port=443): Failed to resolve ...").
    cause = getattr(error.args[0], "reason", None) if error.args else None
    text = " ".join(str(cause or error).split())
    _, sep, tail = text.partition("): ")
    return (tail if sep else text) or type(error).__name__


def load_tfds(
    name: str,
    split: str,
    *,
    data_dir: str | None = None,
    download: bool = True,
    builder_kwargs: dict[str, Any] | None = None,
) -> tuple[Any, Any]:
    """`tfds.load(name, split=split, ..., with_info=True)`: the dataset and its info.

    Raises:
        DataUnavailableError: the dataset is not prepared in `data_dir` and `download` is
            False (where TFDS raises an `AssertionError`), or a host it downloads from
            (its checksums file's URLs) does not answer within `HOST_TIMEOUT_S`.

    Example (not run as a doctest: it reads a prepared dataset):

    ```python
    dataset, info = load_tfds("imdb_reviews", "test", data_dir="/data/tfds", download=False)
    ```
    """
    import tensorflow_datasets as tfds

    if download:
        _check_hosts(name, tfds.builder(name, data_dir=data_dir, **(builder_kwargs or {})))
    try:
        return tfds.load(
            name,
            split=split,
            data_dir=data_dir,
            download=download,
            with_info=True,
            builder_kwargs=builder_kwargs,
        )
    except AssertionError:
        if download:
            raise
        builder = tfds.builder(name, data_dir=data_dir, **(builder_kwargs or {}))
        if builder.is_prepared():
            raise
        raise _not_prepared_error(name, os.fspath(builder.data_dir_root)) from None


def _check_hosts(name: str, builder: Any) -> None:
    """Raises `DataUnavailableError` at once when a dataset to download has a host that does
    not answer, where TFDS's downloader would retry for minutes before failing.

    The URLs are those of the builder's checksums file (`url_infos`); a dataset without one,
    one already prepared, or a builder that checks its own (`CHECKS_ITS_OWN_HOSTS`, as
    Multi30k's, which reads a local copy first) is left to TFDS.
    """
    if getattr(builder, "CHECKS_ITS_OWN_HOSTS", False) or builder.is_prepared():
        return
    if _tfds_mocked():
        return  # `tfds.testing.mock_data` makes the examples: nothing is downloaded
    for url in sorted(builder.url_infos or {}):
        reason = unreachable_reason(url)
        if reason is not None:
            raise DataUnavailableError(
                f"The TFDS dataset {name!r} is not prepared in "
                f"{os.fspath(builder.data_dir_root)} and its download {url} could not be "
                f"reached ({reason}). Prepare it where the network is reachable (`tfds build "
                f"{name} --data_dir <folder>`), copy that folder here and name it with "
                f"`{TFDS_DATA_DIR_CONFIG_KEY}` (argument `data_dir`)."
            )


def _tfds_mocked() -> bool:
    """Whether `tfds.testing.mock_data` is in effect (it replaces
    `DatasetBuilder.download_and_prepare` with a function of `tensorflow_datasets.testing`)."""
    import tensorflow_datasets as tfds

    prepare = tfds.core.DatasetBuilder.download_and_prepare
    return getattr(prepare, "__module__", "").startswith("tensorflow_datasets.testing")


def _not_prepared_error(name: str, data_dir: str) -> DataUnavailableError:
    return DataUnavailableError(
        f"The TFDS dataset {name!r} is not prepared in {data_dir} and downloading is off "
        f"(download=False). Prepare it where the network is reachable (a run with download "
        f"on, or `tfds build {name} --data_dir <folder>`), copy that folder here and name it "
        f"with `{TFDS_DATA_DIR_CONFIG_KEY}` (argument `data_dir`)."
    )
