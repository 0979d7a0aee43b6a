"""The layout of a training run's directory, shared by training, decoding and export.

```
RUN_DIR/
  config.yaml                  the experiment configuration the run used
  model.keras                  the trained model (`model.save`)
  tokenizers/source/spm.model  SentencePiece model of the source side
  tokenizers/target/spm.model  ... of the target side (same file content when shared)
  tokenizers/settings.json     what they were trained from and with (reused only for the same)
  checkpoints/, backup/, logs/ training state (see `keras_transformer.training`)
  bleu.jsonl                   validation BLEU against training minutes (`translation.bleu_every`)
  labels.txt                   tagging and classification: the label names, in id order
```

A tagging, classification or language-modelling run (`task` in `config.yaml`) has one
tokenizer, saved as both `tokenizers/source` and `tokenizers/target`.

`root` may be any path `keras_transformer.storage` reads (`gs://bucket/runs/a`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from keras_transformer import storage


@dataclass(frozen=True)
class RunPaths:
    """Paths inside a run directory."""

    root: str

    @property
    def config(self) -> str:
        return os.path.join(self.root, "config.yaml")

    @property
    def model(self) -> str:
        return os.path.join(self.root, "model.keras")

    @property
    def source_tokenizer(self) -> str:
        return os.path.join(self.root, "tokenizers", "source")

    @property
    def target_tokenizer(self) -> str:
        return os.path.join(self.root, "tokenizers", "target")

    @property
    def checkpoints(self) -> str:
        return os.path.join(self.root, "checkpoints")

    @property
    def backup(self) -> str:
        return os.path.join(self.root, "backup")

    @property
    def logs(self) -> str:
        return os.path.join(self.root, "logs")

    @property
    def labels(self) -> str:
        """Tagging and classification: the label names, one a line, in id order."""
        return os.path.join(self.root, "labels.txt")

    @property
    def bleu_log(self) -> str:
        """Validation BLEU against training minutes, one JSON object per line."""
        return os.path.join(self.root, "bleu.jsonl")


def trained_with_source_eos(root: str) -> bool:
    """Whether the run's sources ended with EOS in training (`data.source_eos`).

    Runs written before the option existed have no such key in `config.yaml` and were
    trained without it; a folder without `config.yaml` is taken to be one of them.
    """
    import yaml

    path = RunPaths(root).config
    if not storage.exists(path):
        return False
    config = yaml.safe_load(storage.read_text(path)) or {}
    # `translation.source_eos`, or `data.source_eos` in the layout before the task sections.
    for section in ("translation", "data"):
        values = config.get(section) or {}
        if "source_eos" in values:
            return bool(values["source_eos"])
    return False


def check_run_dir(root: str) -> None:
    """Refuses a run directory that is not there (a mistyped path), before anything reads
    a file of it and reports that file missing instead.

    Raises:
        FileNotFoundError: `root` is not a folder.
    """
    if not storage.isdir(root):
        raise FileNotFoundError(
            f"Received a run directory that does not exist: {root!r}. Expected the folder "
            "that `keras-transformer train` wrote (its --run-dir, `training.run_dir`)."
        )


def run_task(root: str) -> str:
    """The task a run directory was trained for: `task` of its `config.yaml`; runs without
    the key (or without the file) are translation runs.

    Raises:
        FileNotFoundError: there is no folder `root` (`check_run_dir`).
    """
    import yaml

    check_run_dir(root)
    path = RunPaths(root).config
    if not storage.exists(path):
        return "translation"
    return (yaml.safe_load(storage.read_text(path)) or {}).get("task", "translation")


def load_run(root: str):
    """Loads `(model, source_tokenizer, target_tokenizer)` from a run directory.

    Raises:
        FileNotFoundError: naming the missing file when the directory is incomplete.
    """
    import keras

    from keras_transformer.tokenization import SubwordTokenizer

    check_run_dir(root)
    paths = RunPaths(root)
    for required in (paths.model, paths.source_tokenizer, paths.target_tokenizer):
        if not storage.exists(required):
            unfinished = required == paths.model and storage.exists(paths.backup)
            raise FileNotFoundError(
                f"Received an incomplete run directory {root!r}: expected {required!r} to "
                "exist (see keras_transformer.run_dir for the layout)."
                + (
                    " The run was interrupted before its end (its backup is there): resume "
                    "it with the same `keras-transformer train` command, or save the average "
                    "of its last epochs' weights as its model with `keras-transformer average "
                    f"{root} --last N`."
                    if unfinished
                    else ""
                )
            )
    model = keras.models.load_model(paths.model)
    return (
        model,
        SubwordTokenizer.load(paths.source_tokenizer),
        SubwordTokenizer.load(paths.target_tokenizer),
    )


def label_names(labels: Any, argument: str = "labels") -> tuple[str, ...]:
    """`labels` as the names a run keeps (`labels.txt`, a line each): a list or tuple of at
    least two distinct, non-empty, single-line strings, in id order.

    Raises:
        ValueError: naming `argument` and the value, for anything else.
    """
    ok = (
        isinstance(labels, (list, tuple))
        and len(labels) >= 2
        and all(_single_line(label) for label in labels)
        and len(set(labels)) == len(labels)
    )
    if not ok:
        raise ValueError(
            f"Received an invalid value for argument `{argument}`, expected a list of at "
            "least two distinct, non-empty, single-line strings: the names of the label ids "
            f"0, 1, ..., in order. Received: {argument}={labels!r}"
        )
    return tuple(labels)


def _single_line(label: Any) -> bool:
    return isinstance(label, str) and bool(label) and not {"\n", "\r"} & set(label)


def write_labels(root: str, labels: tuple[str, ...]) -> str:
    """Writes the label names (`label_names`), one a line, to `root/labels.txt`; returns
    the path."""
    labels = label_names(labels)
    path = RunPaths(root).labels
    storage.write_text(path, "".join(f"{label}\n" for label in labels))
    return path


def read_labels(root: str) -> tuple[str, ...]:
    """The label names of a tagging or classification run (`root/labels.txt`)."""
    path = RunPaths(root).labels
    if not storage.exists(path):
        raise FileNotFoundError(
            f"Received an incomplete run directory {root!r}: expected {path!r} (the label "
            "names of a tagging or classification run) to exist."
        )
    lines = storage.read_text(path).split("\n")
    return tuple(line for line in lines if line)
