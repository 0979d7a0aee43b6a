"""`keras-transformer generate RUN_DIR [PROMPT ...]`: continue prompts with a language model.

Prompts come from the arguments, else from `--input FILE`, else from stdin, one per line.
Each prompt is written with its continuation, one line per prompt (to stdout or
`--output`); with `--nbest N`, N lines `index<TAB>score<TAB>text` per prompt.

Example:

    keras-transformer generate runs/lm "The old dog" --max-new-tokens 30
    keras-transformer generate runs/lm "The old dog" --method sample --top-p 0.9 --seed 3
"""

from __future__ import annotations

import argparse
import sys

from keras_transformer import storage
from keras_transformer.commands.decoding_options import add_decoding_arguments, decoding_kwargs
from keras_transformer.commands.translate import _read_lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="A language-modelling run directory.")
    parser.add_argument("prompts", nargs="*", help="Prompts (default: --input or stdin).")
    parser.add_argument("--input", "-i", default=None, help="A file with one prompt a line.")
    parser.add_argument("--output", "-o", default=None, help="Write here instead of stdout.")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=50,
        help="The most tokens generated after each prompt (default: 50).",
    )
    parser.add_argument(
        "--nbest",
        type=int,
        default=None,
        help="Write the N best as 'index<TAB>score<TAB>text' lines (N <= beam size).",
    )
    add_decoding_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from keras_transformer.predictors import TextGenerator
    from keras_transformer.run_dir import run_task

    if args.prompts and args.input:
        raise ValueError("Pass prompts as arguments or --input, not both.")
    task = run_task(args.run_dir)
    if task != "language_modeling":
        raise ValueError(
            f"Received a {task} run directory ({args.run_dir}), expected a language-modelling run."
        )
    prompts = list(args.prompts) if args.prompts else list(_read_lines(args.input))
    generator = TextGenerator.from_run_dir(
        args.run_dir, max_new_tokens=args.max_new_tokens, **decoding_kwargs(args)
    )
    results = generator.generate_nbest(prompts, n=args.nbest or 1)
    out = sys.stdout if args.output in (None, "-") else storage.open_for_writing(args.output)
    try:
        for index, (prompt, hypotheses) in enumerate(zip(prompts, results)):
            for text, score in hypotheses:
                line = prompt + text
                out.write(f"{index}\t{score:.4f}\t{line}\n" if args.nbest else line + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0
