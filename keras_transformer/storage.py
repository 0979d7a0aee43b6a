"""Every file the package reads or writes, on any file system TensorFlow knows.

Run directories, exports, configs and outputs may be local paths or `scheme://` paths of
a file system `tf.io.gfile` serves (`gs://`, `hdfs://`, `ram://` in tests). Every module
reads and writes through the functions here; Keras' own saving (`model.save`,
`save_weights`, `load_weights`, `keras.models.load_model`, `BackupAndRestore`,
`ModelCheckpoint`, `TensorBoard`) already goes through gfile for such paths
(`keras.src.utils.file_utils`), so the package hands those paths to Keras unchanged.

A path with a `scheme://` is treated as an object store (`is_object_store`): nothing there
renames a folder atomically, and a file is best seen as appearing whole when its writer
closes it. Local paths keep the local guarantees (`os.replace`, folder renames). TensorFlow
is imported on first use, so that reading a config does not load it.

`ram://` is the memory of one process: it stands for a bucket in single-process tests only
(two workers cannot share it).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _gfile() -> Any:
    import tensorflow as tf

    return tf.io.gfile


@contextlib.contextmanager
def _as_os_errors(path: str) -> Iterator[None]:
    """Raises gfile's `tf.errors.OpError`s as `OSError` (`FileNotFoundError` when missing)."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.NotFoundError as e:
        raise FileNotFoundError(f"{path}: {e.message}") from e
    except tf.errors.OpError as e:
        raise OSError(f"{path}: {e.message}") from e


def is_object_store(path: str) -> bool:
    """Whether `path` has a `scheme://` (an object store: no atomic folder rename).

    Args:
        path: a local path or a `scheme://` path.

    Returns:
        True for `gs://...`, `s3://...`, `ram://...` and every other `scheme://` path.

    Example:
    >>> is_object_store("gs://bucket/runs/a"), is_object_store("runs/a")
    (True, False)
    """
    return bool(_SCHEME.match(str(path)))


def exists(path: str) -> bool:
    """Whether a file or folder exists at `path`."""
    return bool(_gfile().exists(path))


def isdir(path: str) -> bool:
    """Whether `path` is a folder."""
    return bool(_gfile().isdir(path))


def makedirs(path: str) -> None:
    """Creates the folder `path` and its parents (nothing when it exists).

    Raises:
        OSError: a file stands where a folder would go (or the file system refuses).
    """
    with _as_os_errors(path):
        _gfile().makedirs(path)


def listdir(path: str) -> list[str]:
    """The names in folder `path` (object stores' trailing `/` of folders removed).

    Raises:
        OSError: `FileNotFoundError` when there is no such folder.
    """
    with _as_os_errors(path):
        return [name.rstrip("/") for name in _gfile().listdir(path)]


def glob(pattern: str) -> list[str]:
    """The paths matching `pattern` (`*` wildcards), sorted."""
    return sorted(_gfile().glob(pattern))


def remove(path: str) -> None:
    """Deletes the file `path`."""
    with _as_os_errors(path):
        _gfile().remove(path)


def rmtree(path: str) -> None:
    """Deletes the folder `path` with everything in it (nothing when it does not exist)."""
    import tensorflow as tf

    if not exists(path):
        return
    try:
        _gfile().rmtree(path)
    except tf.errors.NotFoundError:
        # `ram://` lists `a.b/...` inside a sibling folder `a` too (its GetChildren matches
        # name prefixes), so its recursive delete trips over a path it listed; delete what
        # the walk finds, deepest first, skipping those.
        walked = list(_gfile().walk(path))
        for folder, _, names in reversed(walked):
            for target in [f"{folder}/{name}" for name in names] + [folder]:
                with contextlib.suppress(tf.errors.NotFoundError, FileNotFoundError):
                    if isdir(target):
                        _gfile().rmtree(target)
                    else:
                        remove(target)
        if exists(path):
            raise


def remove_if_no_files(root: str) -> None:
    """Deletes the folder `root` with its subfolders when no file is left anywhere in it
    (nothing when it does not exist, or holds a file).

    `ram://` lists a folder `a`'s name-prefix siblings among its children (`a.b/c` as the
    file `.b` of `a`: see `rmtree`), so a file counts only where its path exists.
    """
    if not isdir(root):
        return
    with _as_os_errors(root):
        for folder, _, names in _gfile().walk(root):
            if any(exists(f"{folder.rstrip('/')}/{name}") for name in names):
                return
    rmtree(root)


def parent(path: str) -> str:
    """The folder of `path` (`"."` for a bare local file name)."""
    return os.path.dirname(path) or "."


def clear_for_rewrite(path: str) -> None:
    """Removes the file `path` where writing it again would not truncate it.

    TensorFlow's `ram://` file system keeps a file's old bytes when it is opened for
    writing (`RamFileSystem::NewWritableFile` in `tsl/platform/ram_file_system.h`), so a
    rewrite there appends; every other file system truncates, and nothing is removed.
    Call it before handing Keras a path it overwrites (`save_weights`, `save`).
    """
    if str(path).startswith("ram://") and exists(path):
        remove(path)


@contextlib.contextmanager
def written_beside(path: str) -> Iterator[str]:
    """A file beside `path` to write instead of it, moved over `path` when the block ends
    (removed when it raises): a process killed while writing leaves `path` as it was, never
    half written. Its name is `partial-` and `path`'s own, so it keeps the ending that Keras
    checks (`.keras`, `.weights.h5`).

    Example:

    ```python
    with written_beside("runs/x/model.keras") as partial:
        model.save(partial)
    ```
    """
    partial = os.path.join(parent(path), f"partial-{os.path.basename(path)}")
    clear_for_rewrite(partial)  # a killed writer's leftover, on ram://
    try:
        yield partial
    except BaseException:
        if exists(partial):
            remove(partial)
        raise
    replace(partial, path)


def check_file(path: str, *, reading: bool) -> None:
    """Refuses, before anything is read or computed, a path that cannot be the file asked.

    `tf.io.gfile.GFile` opens a file at its first read or write, so without this a missing
    input fails only then (a raw `tf.errors.NotFoundError`), a folder given as an input
    reads as empty, and a folder given as an output fails after the work it would hold.

    Args:
        path: the file.
        reading: True for a file to read (it must exist), False for one to write.

    Raises:
        FileNotFoundError: a file to read does not exist.
        IsADirectoryError: `path` is a folder.
    """
    if isdir(path):
        raise IsADirectoryError(
            f"Received a folder, expected a file to {'read' if reading else 'write'}: {path}"
        )
    if reading and not exists(path):
        raise FileNotFoundError(f"No such file: {path}")


def open_file(path: str, mode: str = "r") -> IO:
    """Opens `path` (`tf.io.gfile.GFile`); text modes read and write UTF-8 `str`.

    Args:
        path: the file.
        mode: `"r"`, `"w"`, `"rb"`, `"wb"` (`"a"`: see `append_text`).

    Returns:
        A file object (a context manager).

    Raises:
        FileNotFoundError, IsADirectoryError: see `check_file`, raised here rather than at
            the first read or write.
    """
    check_file(path, reading=mode.startswith("r"))
    if mode.startswith("w"):
        clear_for_rewrite(path)
    return _gfile().GFile(path, mode)


def open_for_writing(path: str) -> IO:
    """Opens `path` for writing text, creating its folder first."""
    makedirs(parent(path))
    return open_file(path, "w")


def read_text(path: str) -> str:
    """The content of the text file `path`.

    Raises:
        OSError: `FileNotFoundError` when there is no such file.
    """
    with _as_os_errors(path), open_file(path, "r") as f:
        return f.read()


def write_text(path: str, text: str) -> None:
    """Writes `text` to `path`, creating its folder first."""
    with open_for_writing(path) as f:
        f.write(text)


def append_text(path: str, text: str) -> None:
    """Appends `text` to `path` (created with its folder when missing).

    Object stores have no append: there the file is read and written again whole, which
    is what TensorFlow's own appendable GCS files do.
    """
    makedirs(parent(path))
    if not is_object_store(path):
        with open_file(path, "a") as f:
            f.write(text)
        return
    old = read_text(path) if exists(path) else ""
    write_text(path, old + text)


def replace(source: str, destination: str) -> None:
    """Moves the file `source` to `destination`, replacing it (atomic on a local disk)."""
    if is_object_store(source) or is_object_store(destination):
        with _as_os_errors(destination):
            _gfile().rename(source, destination, overwrite=True)
    else:
        os.replace(source, destination)


def copy_file(source: str, destination: str) -> None:
    """Copies one file (never over an existing one)."""
    with _as_os_errors(destination):
        _gfile().copy(source, destination, overwrite=False)


def copy_tree(
    source: str,
    destination: str,
    *,
    last: Iterable[str] = (),
    copy: Callable[[str, str], None] = copy_file,
) -> list[str]:
    """Copies the files of folder `source` into `destination`, those named `last` last.

    Folders are created first, then every file in sorted order except those whose
    relative path is in `last`, then those (in the order given). A reader that waits for
    a `last` file therefore never sees it before everything else is there.

    Args:
        source: the folder to copy (any gfile path).
        destination: the folder to fill (created).
        last: relative paths (`/`-separated) to copy after all others, when present.
        copy: `copy(source_file, destination_file)`; `copy_file` by default.

    Returns:
        The relative paths copied, in order.
    """
    last = list(last)
    files: list[str] = []
    makedirs(destination)
    root = source.rstrip("/")
    for folder, _, names in _gfile().walk(root):
        relative_folder = folder.rstrip("/")[len(root) :].strip("/")
        if relative_folder:
            makedirs(f"{destination}/{relative_folder}")
        files += [f"{relative_folder}/{name}".lstrip("/") for name in names]
    order = sorted(f for f in files if f not in last) + [f for f in last if f in files]
    for relative in order:
        copy(f"{root}/{relative}", f"{destination.rstrip('/')}/{relative}")
    return order


def wait_for(path: str, timeout_s: float, poll_s: float = 2.0, what: str | None = None) -> None:
    """Waits until `path` exists.

    Args:
        path: the file (a marker another process writes last).
        timeout_s: seconds to wait at most.
        poll_s: seconds between looks.
        what: what the file stands for, for the error.

    Raises:
        TimeoutError: when `path` did not appear in `timeout_s` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while not exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{what or path!r} did not appear in {timeout_s:g} s (waiting for {path!r})."
            )
        time.sleep(poll_s)
