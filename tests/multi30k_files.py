"""The offline Multi30k copy the tests read: `../shared/data/multi30k` beside the repo."""

import gzip
import os

MULTI30K_DIR = os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "multi30k")
)


def read_lines(name: str, limit: int | None = None, directory: str = MULTI30K_DIR) -> list[str]:
    """The first `limit` lines (all by default) of a gzipped Multi30k file, e.g. `train.de.gz`."""
    with gzip.open(os.path.join(directory, name), "rt", encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines[:limit]
