"""`keras-transformer translate RUN_DIR [SENTENCE ...]`: translate text with a trained run.

Sentences come from the arguments, else from `--input FILE`, else from stdin, one per line.
One translation is written per input line (to stdout or `--output`); with `--nbest N`, N
lines `index<TAB>score<TAB>translation` per input.

Example:

    keras-transformer translate runs/de-en "Ein Hund läuft." --beam-size 4
    keras-transformer translate runs/de-en --input test.de --output test.hyp.en --progress
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator

from keras_transformer import storage
from keras_transformer.commands.decoding_options import (
    add_decoding_arguments,
    translator_from_args,
)

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="The training run directory (model.keras, tokenizers/).")
    parser.add_argument(
        "sentences", nargs="*", help="Sentences to translate (default: --input or stdin)."
    )
    parser.add_argument("--input", "-i", default=None, help="A file with one sentence a line.")
    parser.add_argument("--output", "-o", default=None, help="Write here instead of stdout.")
    parser.add_argument(
        "--nbest",
        type=int,
        default=None,
        help="Write the N best as 'index<TAB>score<TAB>translation' lines (N <= beam size).",
    )
    parser.add_argument("--progress", action="store_true", help="Show a progress bar on stderr.")
    add_decoding_arguments(parser)


def _read_lines(path: str | None) -> Iterator[str]:
    stream = sys.stdin if path in (None, "-") else storage.open_file(path)
    try:
        for line in stream:
            yield line.rstrip("\n").rstrip("\r")
    finally:
        if stream is not sys.stdin:
            stream.close()


def run(args: argparse.Namespace) -> int:
    if args.sentences and args.input:
        logger.error("Pass sentences as arguments or --input, not both.")
        return 2
    sentences = list(args.sentences) if args.sentences else list(_read_lines(args.input))
    translator = translator_from_args(args)
    out = sys.stdout if args.output in (None, "-") else storage.open_for_writing(args.output)
    try:
        if args.nbest:
            results = translator.translate_nbest(sentences, n=args.nbest, progress=args.progress)
            for index, hypotheses in enumerate(results):
                for text, score in hypotheses:
                    out.write(f"{index}\t{score:.4f}\t{text}\n")
        else:
            for text in translator.translate(sentences, progress=args.progress):
                out.write(text + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
            logger.info("Wrote %d translations to %s", len(sentences), args.output)
    return 0
