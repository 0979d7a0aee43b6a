"""`keras-transformer plot RUN_DIR`: the figures of a trained run, as PNG files.

Writes to `--out` (default `RUN_DIR/plots`) and prints each path:

- `positional_curves.png`, `positional_heatmap.png`: the model's positional encoding;
- `masks.png`: the masks of a padded batch, the sentence and its first half, tokenized;
- `encoder_self_attention.png`, `decoder_self_attention.png`, `cross_attention.png`: every
  layer and head of the attention behind the translation of `--sentence`;
- `training_curves.png`: loss, accuracy, learning rate and validation BLEU per epoch
  (the run's TensorBoard logs and `bleu.jsonl`), when the run has them;
- `bleu_over_time.png`: validation BLEU against training minutes (`bleu.jsonl`), when
  the run scored BLEU (`translation.bleu_every`).

The figures are a translation run's; a run of another task is refused in one line.

Example:

    keras-transformer plot runs/de-en --sentence "Ein Hund läuft über die Wiese." --out plots
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from keras_transformer import storage

logger = logging.getLogger(__name__)

# A Multi30k validation sentence (German), for runs trained on Multi30k de->en.
DEFAULT_SENTENCE = "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"
# Positions drawn in the positional-encoding figures (at most the model's max_length).
POSITIONS = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="The training run directory (model.keras, tokenizers/).")
    parser.add_argument(
        "--sentence",
        default=DEFAULT_SENTENCE,
        help="The source sentence whose attention is drawn (default: a German Multi30k "
        "validation sentence).",
    )
    parser.add_argument(
        "--out", default=None, help="The folder of the PNGs (default: RUN_DIR/plots)."
    )
    parser.add_argument(
        "--beam-size", type=int, default=4, help="Beam size of the translation (default: 4)."
    )


def _masks_batch(translator, sentence: str):
    """Source ids and pieces of the sentence and of its first half: a batch with padding."""
    import numpy as np

    words = sentence.split()
    sentences = [sentence, " ".join(words[: max(1, len(words) // 2)])]
    ids = [translator.encode_sources([s])[0] for s in sentences]
    batch = np.zeros((len(ids), max(len(i) for i in ids)), np.int32)
    for row, values in enumerate(ids):
        batch[row, : len(values)] = values
    pieces = [
        [p.decode("utf-8") for p in translator.source_tokenizer.id_to_piece(i).numpy()] for i in ids
    ]
    return batch, pieces


def _figures(args: argparse.Namespace) -> dict:
    """`{name: Figure}` for the run.

    Raises:
        FileNotFoundError: for an incomplete run directory.
        ValueError: for a damaged `bleu.jsonl` or a sentence without tokens.
    """
    from keras_transformer.plotting import (
        plot_bleu_over_time,
        plot_masks,
        plot_positional_curves,
        plot_positional_heatmap,
        plot_training_curves,
        plot_translation_attention,
        translation_attention,
    )
    from keras_transformer.predictors import Translator
    from keras_transformer.run_dir import RunPaths
    from keras_transformer.training.bleu import read_bleu_log
    from keras_transformer.training.curves import read_run_curves

    paths = RunPaths(args.run_dir)
    curves = read_run_curves(args.run_dir)
    records = read_bleu_log(paths.bleu_log) if storage.exists(paths.bleu_log) else []
    translator = Translator.from_run_dir(args.run_dir, beam_size=args.beam_size, jit_compile=False)
    source, target, weights = translation_attention(translator, args.sentence)

    model = translator.model
    positions = min(POSITIONS, int(model.max_length))
    figures = {
        "positional_curves": plot_positional_curves(positions, int(model.d_model)),
        "positional_heatmap": plot_positional_heatmap(positions, int(model.d_model)),
    }
    ids, pieces = _masks_batch(translator, args.sentence)
    figures["masks"] = plot_masks(ids, pad_id=int(model.pad_id), pieces=pieces)
    figures.update(plot_translation_attention(source, target, weights))
    name = os.path.basename(os.path.abspath(args.run_dir))
    try:
        figures["training_curves"] = plot_training_curves(curves, title=f"Training of {name}")
    except ValueError:
        logger.warning("No loss, accuracy or learning rate logged in %s: no curves.", paths.logs)
    if records:
        figures["bleu_over_time"] = plot_bleu_over_time(records)
    return figures


def run(args: argparse.Namespace) -> int:
    from keras_transformer.run_dir import check_run_dir

    check_run_dir(args.run_dir)
    out = args.out or os.path.join(args.run_dir, "plots")
    if storage.exists(out) and not storage.isdir(out):
        raise NotADirectoryError(f"Received --out {out!r}, a file; expected a folder.")
    figures = _figures(args)  # a bad run raises before any file is written
    storage.makedirs(out)
    for name, figure in figures.items():
        path = os.path.join(out, f"{name}.png")
        with storage.open_file(path, "wb") as f:
            figure.savefig(f, format="png", dpi=100)
        sys.stdout.write(path + "\n")
    return 0
