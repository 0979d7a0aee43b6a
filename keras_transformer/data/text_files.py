"""Parallel corpora from local text files.

Two layouts are read, plain or gzipped (a name ending in `.gz`):

- two line-aligned files, one sentence per line, line N of the target file translating line
  N of the source file (`train.de`, `train.en`);
- one TSV file, `source<TAB>target` on each line.

Files are first checked in one streaming pass (`validate=True`): an empty file, files of
different line counts, bytes that are not UTF-8 and TSV lines without exactly two columns raise
a `ValueError` naming the file and the line. The dataset then streams the files with
`tf.data.TextLineDataset` (nothing is held in memory). Lines end at `\\n`; a trailing `\\r`
and a UTF-8 byte-order mark are removed.

Public API:

- `load_text_files(source_path, target_path=None, *, skip_empty=True, validate=True)
  -> tf.data.Dataset` of `(source_text, target_text)` scalar `tf.string` pairs.
- `check_text_files(source_path, target_path=None) -> int`: the validation pass alone;
  returns the number of lines (pairs).
- `read_lines(path)`: `(line_number, text)` of one such file, strictly UTF-8 (what the
  check reads, and what `predict --input` and `evaluate --source-file` read);
  `decode_lines(split_lines(stream), name)` the same of a binary stream (stdin).

Example:

```python
pairs = load_text_files("corpus/train.de.gz", "corpus/train.en.gz")
pairs = load_text_files("corpus/train.tsv")
```
"""

from __future__ import annotations

import gzip
import itertools
import logging
import zlib
from collections.abc import Iterable, Iterator

import tensorflow as tf

from keras_transformer import storage

logger = logging.getLogger(__name__)

_BOM = b"\xef\xbb\xbf"


def load_text_files(
    source_path: str,
    target_path: str | None = None,
    *,
    skip_empty: bool = True,
    validate: bool = True,
) -> tf.data.Dataset:
    """Reads a local parallel corpus as `(source_text, target_text)` string pairs.

    Args:
        source_path: the source-language file (one sentence per line), or, when
            `target_path` is None, a TSV file with the source and target columns.
        target_path: the target-language file, line-aligned with `source_path`.
        skip_empty: drop the pairs where either side is empty or only whitespace.
        validate: check the files first (see `check_text_files`). Turning it off skips one
            pass over a large corpus, but bad lines then fail (or pass) silently.

    Returns:
        A `tf.data.Dataset` of `(source_text, target_text)` scalar `tf.string` tensors, in file
        order.

    Example (not run as a doctest: it reads corpus files):

    ```python
    pairs = load_text_files("train.de.gz", "train.en.gz")
    next(iter(pairs))
    # (<tf.Tensor: shape=(), dtype=string, numpy=b'Zwei junge ...'>, <tf.Tensor: ...>)
    ```
    """
    if validate:
        num_lines = check_text_files(source_path, target_path)
        logger.info("Read %d sentence pairs from %s", num_lines, source_path)
    if target_path is None:
        lines = _text_lines(source_path)

        def split_columns(line):
            columns = tf.strings.split(line, "\t")
            # Pad so that an unchecked line with one column cannot break the graph.
            columns = tf.concat([columns, ["", ""]], axis=0)
            return columns[0], columns[1]

        dataset = lines.map(split_columns, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        dataset = tf.data.Dataset.zip(_text_lines(source_path), _text_lines(target_path))
    if skip_empty:
        dataset = dataset.filter(
            lambda s, t: tf.logical_and(
                tf.strings.length(tf.strings.strip(s)) > 0,
                tf.strings.length(tf.strings.strip(t)) > 0,
            )
        )
    return dataset


def check_text_files(source_path: str, target_path: str | None = None) -> int:
    """Checks a parallel corpus in one streaming pass.

    Args:
        source_path: the source file, or the TSV file when `target_path` is None.
        target_path: the line-aligned target file.

    Returns:
        The number of lines (sentence pairs).

    Raises:
        FileNotFoundError: a file does not exist (IsADirectoryError: it is a folder).
        ValueError: a file is empty (no line with text), is not valid gzip, holds bytes that
            are not UTF-8, the two files have different numbers of lines, or a non-blank TSV
            line does not have exactly two tab-separated columns. The message names the file
            and line.

    Example (not run as a doctest: it reads corpus files):

    ```python
    check_text_files("train.de", "train.en")
    # 29000
    ```
    """
    for path in (source_path, target_path):
        if path is not None:
            storage.check_file(path, reading=True)
    if target_path is None:
        count = 0
        has_text = False
        for number, line in read_lines(source_path):
            if not line.strip():
                count = number
                continue  # A blank line is an empty pair (dropped by `skip_empty`).
            has_text = True
            columns = line.count("\t") + 1
            if columns != 2:
                raise ValueError(
                    f"Expected 2 tab-separated columns (source<TAB>target) on each line of "
                    f"{source_path}. Received: {columns} column(s) on line {number}"
                )
            count = number
        _check_not_empty(source_path, has_text)
        return count
    count = 0
    has_text = {source_path: False, target_path: False}
    source_lines = read_lines(source_path)
    target_lines = read_lines(target_path)
    for source, target in itertools.zip_longest(source_lines, target_lines):
        if source is None or target is None:
            longer, shorter, number = (
                (target_path, source_path, target[0])
                if source is None
                else (source_path, target_path, source[0])
            )
            if number == 1:
                _check_not_empty(shorter, False)
            rest = sum(1 for _ in (target_lines if source is None else source_lines))
            raise ValueError(
                f"Expected line-aligned files with the same number of lines. Received: "
                f"{shorter} has {number - 1} lines, but {longer} has {number + rest} "
                f"(line {number} of {longer} has no counterpart)."
            )
        count = source[0]
        has_text[source_path] = has_text[source_path] or bool(source[1].strip())
        has_text[target_path] = has_text[target_path] or bool(target[1].strip())
    _check_not_empty(source_path, has_text[source_path])
    _check_not_empty(target_path, has_text[target_path])
    return count


def _text_lines(path: str) -> tf.data.Dataset:
    compression = "GZIP" if path.endswith(".gz") else ""
    lines = tf.data.TextLineDataset(path, compression_type=compression)
    return lines.map(
        lambda line: tf.strings.regex_replace(line, "^\ufeff", ""),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def read_lines(path: str) -> Iterator[tuple[int, str]]:
    """Yields `(line_number, text)` of a text file from 1: plain or gzipped (`.gz`), UTF-8
    decoded strictly, without line ends (`\\n`, `\\r\\n`) or a byte-order mark.

    Raises:
        FileNotFoundError, IsADirectoryError: `path` is not a file.
        ValueError: bytes that are not UTF-8 (naming the file, line and byte), or a `.gz`
            file that is not gzip.
    """
    storage.check_file(path, reading=True)
    with tf.io.gfile.GFile(path, "rb") as raw:
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if path.endswith(".gz") else raw
        lines = decode_lines(split_lines(stream), path)
        number = 0
        try:
            for number, text in lines:  # noqa: B007
                yield number, text
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            raise ValueError(
                f"Could not read the gzip file {path} (after line {number}): {e}"
            ) from e


def decode_lines(lines: Iterable[bytes], name: str) -> Iterator[tuple[int, str]]:
    """Yields `(line_number, text)` from 1 of byte lines (without their ends), decoding
    UTF-8 strictly and dropping a byte-order mark from the first; `name` is what an error
    calls their origin (a file's path, or "stdin").

    Raises:
        ValueError: bytes that are not UTF-8, naming `name`, the line and the byte.
    """
    for number, line in enumerate(lines, start=1):
        if number == 1 and line.startswith(_BOM):
            line = line[len(_BOM) :]
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"Expected UTF-8 text in {name}. Received: bytes that are not UTF-8 on "
                f"line {number} (byte {e.start + 1} of the line: "
                f"{line[e.start : e.start + 1]!r})"
            ) from e
        yield number, text


def split_lines(stream) -> Iterator[bytes]:
    """Splits a binary stream at `\\n` as `tf.data.TextLineDataset` does."""
    pending = b""
    while True:
        chunk = stream.read(1 << 20)
        if not chunk:
            break
        pending += chunk
        lines = pending.split(b"\n")
        pending = lines.pop()
        for line in lines:
            yield line[:-1] if line.endswith(b"\r") else line
    if pending:
        yield pending[:-1] if pending.endswith(b"\r") else pending


def _check_not_empty(path: str, has_text: bool) -> None:
    if not has_text:
        raise ValueError(
            f"Expected a file with at least one line of text. Received: {path} is empty "
            "(no line with text)"
        )
