"""`keras-transformer predict RUN_DIR [TEXT ...]`: what a trained run of any task says about
texts: translations, continuations, tags or labels, one input a line.

Texts come from the arguments, else from `--input FILE`, else from stdin, one per line.
What is written per input is the task's (`Task.predict_lines`): a translation, the prompt
with its continuation, `word/TAG` pairs, or `label<TAB>probability`; with `--nbest N` (tasks
that decode), N lines `index<TAB>score<TAB>text` per input. `translate`, `generate`, `tag`
and `classify` are the same command for a run of their task only.

Example:

    keras-transformer predict runs/de-en "Ein Hund läuft." --beam-size 4
    keras-transformer tag runs/pos --input sentences.txt --output tagged.txt
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from keras_transformer import storage
from keras_transformer.commands.decoding_options import (
    add_decoding_arguments,
    decoding_tasks,
    join_names,
    predictor_options,
)
from keras_transformer.constants import TASKS

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser, tasks: Sequence[str] = TASKS) -> None:
    """Adds `predict`'s arguments, for runs of `tasks` (a task alias: its task only)."""
    parser.add_argument("run_dir", help="The training run directory (model.keras, tokenizers/).")
    parser.add_argument("texts", nargs="*", help="Texts (default: --input or stdin).")
    parser.add_argument(
        "--input", "-i", default=None, help="A file with one text a line (UTF-8; `.gz`: gzipped)."
    )
    parser.add_argument("--output", "-o", default=None, help="Write here instead of stdout.")
    decoding = decoding_tasks(tasks)
    scope = f"; {join_names(decoding)} runs only" if len(decoding) < len(tasks) else ""
    parser.add_argument(
        "--nbest",
        type=int,
        default=None,
        help=f"Write the N best as 'index<TAB>score<TAB>text' lines (N <= beam size{scope})."
        if decoding
        else argparse.SUPPRESS,
    )
    parser.add_argument("--progress", action="store_true", help="Show a progress bar on stderr.")
    add_decoding_arguments(parser, tasks)


def read_lines(path: str | None) -> list[str]:
    """The lines of `path` (stdin for None or `-`; `.gz` read as gzip), without their line
    ends, strictly UTF-8 (`data.text_files.read_lines`: the error names the line)."""
    from keras_transformer.data.text_files import decode_lines, read_lines, split_lines

    if path in (None, "-"):
        return [text for _, text in decode_lines(split_lines(sys.stdin.buffer), "stdin")]
    return [text for _, text in read_lines(path)]


def run(args: argparse.Namespace, expected_task: str | None = None) -> int:
    """Runs `predict` (or an alias that takes runs of `expected_task` only)."""
    from keras_transformer.run_dir import run_task
    from keras_transformer.tasks import task_class

    task = task_class(run_task(args.run_dir))
    if expected_task is not None and task.name != expected_task:
        raise ValueError(
            f"Received a {task.name} run directory ({args.run_dir}), expected a "
            f"{expected_task} run."
        )
    if args.texts and args.input:
        raise ValueError("Pass texts as arguments or --input, not both.")
    if args.nbest is not None and not task.decodes:
        raise ValueError(
            f"Received --nbest for a {task.name} run ({args.run_dir}), which does not decode."
        )
    if args.nbest is not None and args.nbest < 1:
        raise ValueError(
            "Received an invalid value for --nbest, expected a positive integer. "
            f"Received: --nbest={args.nbest}"
        )
    options = predictor_options(args, task)
    texts = list(args.texts) if args.texts else read_lines(args.input)
    predictor = task.load_predictor(args.run_dir, **options)
    out = sys.stdout if args.output in (None, "-") else storage.open_for_writing(args.output)
    try:
        for line in task.predict_lines(predictor, texts, nbest=args.nbest, progress=args.progress):
            out.write(line + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
            logger.info("Wrote the predictions of %d inputs to %s", len(texts), args.output)
    return 0


def task_command(task: str) -> tuple[Callable, Callable]:
    """`(add_arguments, run)` of `predict` for runs of `task` only (the command aliases),
    whose help shows the options and defaults of `task`'s predictor only."""

    def add_arguments_for_task(parser: argparse.ArgumentParser) -> None:
        add_arguments(parser, (task,))

    def run_for_task(args: argparse.Namespace) -> int:
        return run(args, expected_task=task)

    return add_arguments_for_task, run_for_task
