"""The batches of `train_compare.py`: the package's training pipeline materialized as numpy."""

from __future__ import annotations

import os
import sys

import numpy as np

Batch = tuple[tuple[np.ndarray, np.ndarray], np.ndarray]


def batching(data) -> str:
    """The batch size as the config states it."""
    if data.batch_size:
        return f"{data.batch_size} sentences"
    return f"~{data.tokens_per_batch} target tokens"


def load_batches(config, work_dir: str, count: int) -> tuple[list[Batch], int]:
    """The first `count` batches of the package's training pipeline as numpy, and the vocab.

    `config` is an `ExperimentConfig`; the package is imported here, since this module also
    serves the PyTorch workers, which never import TensorFlow."""
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


def fixed_sentence_batches(batches: list[Batch], seed: int) -> list[Batch]:
    """The sentences of `batches`, shuffled and regrouped into as many batches of (nearly)
    equal sentence counts, each padded to its own longest source and target: the batching a
    user gets from `Dataset.shuffle().padded_batch(n)` without length buckets. Same
    sentences, so the same real tokens and step count as `batches`."""
    rows = []
    for (source, target_in), target_out in batches:
        for i in range(source.shape[0]):
            s, t = int(np.count_nonzero(source[i])), int(np.count_nonzero(target_out[i]))
            rows.append((source[i, :s], target_in[i, :t], target_out[i, :t]))
    order = np.random.default_rng(seed).permutation(len(rows))
    fixed = []
    for group in np.array_split(order, len(batches)):
        s = max(len(rows[i][0]) for i in group)
        t = max(len(rows[i][1]) for i in group)

        def pad(x: np.ndarray, length: int) -> np.ndarray:
            return np.pad(x, (0, length - len(x)))

        source = np.stack([pad(rows[i][0], s) for i in group])
        target_in = np.stack([pad(rows[i][1], t) for i in group])
        target_out = np.stack([pad(rows[i][2], t) for i in group])
        fixed.append(((source, target_in), target_out))
    return fixed


def save_batches(path: str, groups: dict[str, list[Batch]], **extra: np.ndarray) -> None:
    """Saves each group's batches as `{prefix}{i}_source|_target_in|_target_out`."""
    arrays = dict(extra)
    for prefix, batches in groups.items():
        arrays[f"{prefix}count"] = np.array(len(batches))
        for i, ((source, target_in), target_out) in enumerate(batches):
            arrays[f"{prefix}{i}_source"] = source
            arrays[f"{prefix}{i}_target_in"] = target_in
            arrays[f"{prefix}{i}_target_out"] = target_out
    np.savez(path, **arrays)


def load_saved(data, prefix: str) -> list[Batch]:
    """The batches `save_batches` saved under `prefix` (from an open `np.load`)."""
    return [
        (
            (data[f"{prefix}{i}_source"], data[f"{prefix}{i}_target_in"]),
            data[f"{prefix}{i}_target_out"],
        )
        for i in range(int(data[f"{prefix}count"]))
    ]


def real_tokens(batch: Batch) -> int:
    return int(np.count_nonzero(batch[1]))
