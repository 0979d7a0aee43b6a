"""The batches of `train_compare.py`: the package's training pipeline materialized as numpy."""

from __future__ import annotations

import os
import sys

import numpy as np

from keras_transformer.config import ExperimentConfig

Batch = tuple[tuple[np.ndarray, np.ndarray], np.ndarray]


def batching(data) -> str:
    """The batch size as the config states it."""
    if data.batch_size:
        return f"{data.batch_size} sentences"
    return f"~{data.tokens_per_batch} target tokens"


def load_batches(config: ExperimentConfig, work_dir: str, count: int) -> tuple[list[Batch], int]:
    """The first `count` batches of the package's training pipeline as numpy, and the vocab."""
    from keras_transformer.run_dir import RunPaths
    from keras_transformer.runner import training_data
    from keras_transformer.tasks import get_task

    paths = RunPaths(work_dir)
    os.makedirs(paths.root, exist_ok=True)
    task = get_task(config)
    pairs, tokenizers = training_data(task, paths)
    # The data repeated, as training with `steps_per_epoch` does.
    train = task.make_batches(pairs, tokenizers, shuffle=True).repeat()
    batches = []
    for (source, target_in), target_out in train.take(count).as_numpy_iterator():
        batches.append(
            ((source.astype(np.int32), target_in.astype(np.int32)), target_out.astype(np.int32))
        )
    if tokenizers[0].vocab_size != tokenizers[1].vocab_size:
        sys.exit("train_compare.py needs one shared vocabulary (translation.shared_vocab: true).")
    return batches, tokenizers[1].vocab_size


def pad_batch(batch: Batch, source_length: int, target_length: int) -> Batch:
    """`batch` padded with 0 to (B, source_length) and (B, target_length)."""
    (source, target_in), target_out = batch

    def pad(x: np.ndarray, length: int) -> np.ndarray:
        return np.pad(x, ((0, 0), (0, length - x.shape[1])))

    return (pad(source, source_length), pad(target_in, target_length)), pad(
        target_out, target_length
    )


def real_tokens(batch: Batch) -> int:
    return int(np.count_nonzero(batch[1]))
