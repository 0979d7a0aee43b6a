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

logger = logging.getLogger(__name__)

_JIT = {"auto": "auto", "on": True, "off": False}


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """The decoding options shared by `translate` and `evaluate`."""
    group = parser.add_argument_group("decoding")
    group.add_argument(
        "--method",
        choices=("greedy", "beam", "sample"),
        default=None,
        help="Search method (default: beam when --beam-size > 1, else greedy).",
    )
    group.add_argument("--beam-size", type=int, default=4, help="Beam size (default: 4).")
    group.add_argument(
        "--length-penalty",
        type=float,
        default=0.6,
        help="GNMT length penalty alpha, ((5 + len) / 6) ** alpha (default: 0.6).",
    )
    group.add_argument(
        "--batch-size", type=int, default=64, help="Sentences per batch (default: 64)."
    )
    group.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="Absolute limit of output tokens (default: the model's max_length).",
    )
    group.add_argument(
        "--max-length-a",
        type=float,
        default=1.0,
        help="Per-sentence limit min(max_length, a * source_tokens + b): a (default: 1.0).",
    )
    group.add_argument("--max-length-b", type=int, default=50, help="b (default: 50).")
    group.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature.")
    group.add_argument("--top-k", type=int, default=None, help="Sample among the k best.")
    group.add_argument("--top-p", type=float, default=None, help="Nucleus sampling mass.")
    group.add_argument("--seed", type=int, default=0, help="Sampling seed (default: 0).")
    group.add_argument(
        "--jit",
        choices=sorted(_JIT),
        default="auto",
        help="XLA compilation of the decoding loop: auto (XLA, falling back), on, off.",
    )


def translator_from_args(args: argparse.Namespace):
    """A `Translator` for `args.run_dir` with the decoding options of `args`."""
    from keras_transformer.translator import Translator

    return Translator.from_run_dir(
        args.run_dir,
        beam_size=args.beam_size,
        length_penalty=args.length_penalty,
        max_length=args.max_length,
        max_length_a=args.max_length_a,
        max_length_b=args.max_length_b,
        batch_size=args.batch_size,
        method=args.method,
        jit_compile=_JIT[args.jit],
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
    )


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
    stream = sys.stdin if path in (None, "-") else open(path, encoding="utf-8")  # noqa: SIM115
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
    out = sys.stdout if args.output in (None, "-") else open(args.output, "w", encoding="utf-8")  # noqa: SIM115
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
