"""The offline Multi30k copy the tests read: `$KERAS_TRANSFORMER_MULTI30K_DIR`, else
`../shared/data/multi30k` beside the repository (as the README says)."""

import gzip
import os

from keras_transformer.constants import MULTI30K_DIR_ENV_VAR

MULTI30K_DIR = os.path.abspath(
    os.environ.get(MULTI30K_DIR_ENV_VAR)
    or os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "multi30k")
)


def read_lines(name: str, limit: int | None = None, directory: str = MULTI30K_DIR) -> list[str]:
    """The first `limit` lines (all by default) of a gzipped Multi30k file, e.g. `train.de.gz`."""
    with gzip.open(os.path.join(directory, name), "rt", encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines[:limit]
