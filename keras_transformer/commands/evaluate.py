"""`keras-transformer evaluate RUN_DIR`: score a trained run on a test set.

A translation run translates the test set and scores it with sacreBLEU. The test set is a
split of a corpus known to `keras_transformer.data.load_parallel_dataset`
(`--data multi30k/de-en --split test`, a TFDS name, or a TSV file), or two line-aligned
files (`--source-file`, `--reference-file`). Scores (BLEU and chrF by default) are computed
on the detokenized translations against the raw references and printed with sacreBLEU's
signature; `--output` gets the translations, `--details` one JSON line of sentence scores
per sentence, `--scores-json` the corpus scores and signatures.

A tagging, classification or language-modelling run reports its task's metric (accuracy,
or perplexity) on `--split` of its own data (`--data` another TFDS name or offline set),
with `keras_transformer.tasks.evaluation.evaluate_run`; `--scores-json` gets the scores.

Example:

    keras-transformer evaluate runs/de-en --data multi30k/de-en --split test \\
        --local-dir ../shared/data/multi30k --output runs/de-en/test.hyp.en
    keras-transformer evaluate runs/de-en --source-file test.de --reference-file test.en
"""

from __future__ import annotations

import argparse
import json
import logging

from keras_transformer import storage
from keras_transformer.commands.decoding_options import (
    add_decoding_arguments,
    translator_from_args,
)

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="The training run directory (model.keras, tokenizers/).")
    data = parser.add_argument_group("data")
    data.add_argument(
        "--data",
        default=None,
        help='A corpus for load_parallel_dataset: "multi30k", "multi30k/de-en", a TFDS '
        'name or a TSV file (default: "multi30k"); for the other tasks, a TFDS name or '
        "the task's offline set (default: the run's data.source).",
    )
    data.add_argument("--split", default="test", help="The split (default: test).")
    data.add_argument("--source-lang", default=None, help="Source language / feature.")
    data.add_argument("--target-lang", default=None, help="Target language / feature.")
    data.add_argument("--local-dir", default=None, help="Offline Multi30k folder.")
    data.add_argument("--data-dir", default=None, help="TFDS data folder.")
    data.add_argument(
        "--source-file", default=None, help="Source sentences, one a line (with --reference-file)."
    )
    data.add_argument("--reference-file", default=None, help="References, one a line.")
    data.add_argument(
        "--max-sentences", type=int, default=None, help="Evaluate only the first N sentences."
    )
    scoring = parser.add_argument_group("scoring")
    scoring.add_argument(
        "--metrics",
        nargs="+",
        default=["bleu", "chrf"],
        help="Among bleu, chrf, chrf++, ter (default: bleu chrf).",
    )
    scoring.add_argument("--lowercase", action="store_true", help="Case-insensitive scores.")
    scoring.add_argument(
        "--tokenize", default=None, help="sacreBLEU's BLEU tokenizer (default: 13a)."
    )
    scoring.add_argument("--output", "-o", default=None, help="Write the translations here.")
    scoring.add_argument(
        "--details", default=None, help="Write per-sentence JSON lines (scores) here."
    )
    scoring.add_argument(
        "--scores-json", default=None, help="Write the corpus scores and signatures here."
    )
    scoring.add_argument("--no-progress", action="store_true", help="Do not show a progress bar.")
    add_decoding_arguments(parser)


def _read_file(path: str) -> list[str]:
    with storage.open_file(path) as f:
        return [line.rstrip("\n").rstrip("\r") for line in f]


def load_test_set(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """`(sources, references)` from `--source-file/--reference-file` or `--data/--split`."""
    if (args.source_file is None) != (args.reference_file is None):
        raise ValueError("Pass both --source-file and --reference-file, or neither.")
    if args.source_file is not None:
        sources, references = _read_file(args.source_file), _read_file(args.reference_file)
        if len(sources) != len(references):
            raise ValueError(
                f"Received files of different lengths: {len(sources)} source lines in "
                f"{args.source_file} and {len(references)} reference lines in "
                f"{args.reference_file}."
            )
    else:
        from keras_transformer.data import load_parallel_dataset

        pairs = load_parallel_dataset(
            args.data or "multi30k",
            split=args.split,
            source_lang=args.source_lang,
            target_lang=args.target_lang,
            data_dir=args.data_dir,
            local_dir=args.local_dir,
        )
        if args.max_sentences is not None:
            pairs = pairs.take(args.max_sentences)
        sources, references = [], []
        for source, reference in pairs.as_numpy_iterator():
            sources.append(source.decode("utf-8"))
            references.append(reference.decode("utf-8"))
    if args.max_sentences is not None:
        sources, references = sources[: args.max_sentences], references[: args.max_sentences]
    return sources, references


def evaluate_task_run(args: argparse.Namespace) -> int:
    """Scores a tagging, classification or language-modelling run."""
    from keras_transformer.tasks.evaluation import evaluate_run

    result = evaluate_run(
        args.run_dir,
        args.split,
        source=args.data,
        data_dir=args.data_dir,
        max_examples=args.max_sentences,
    )
    print(result.format())  # noqa: T201 - the command's output
    if args.scores_json:
        summary = {**result.to_dict(), "run_dir": args.run_dir}
        storage.write_text(args.scores_json, json.dumps(summary, indent=2))
    return 0


def run(args: argparse.Namespace) -> int:
    from keras_transformer.evaluation import evaluate_translator
    from keras_transformer.run_dir import run_task

    if run_task(args.run_dir) != "translation":
        return evaluate_task_run(args)

    try:
        sources, references = load_test_set(args)
    except (ValueError, FileNotFoundError) as e:
        logger.error("%s", e)
        return 2
    logger.info("Evaluating %s on %d sentences.", args.run_dir, len(sources))
    translator = translator_from_args(args)
    result = evaluate_translator(
        translator,
        sources,
        references,
        args.metrics,
        output_file=args.output,
        details_file=args.details,
        lowercase=args.lowercase,
        tokenize=args.tokenize,
        progress=not args.no_progress,
    )
    print(result.format())  # noqa: T201 - the command's output
    if args.scores_json:
        summary = result.to_dict()
        summary.update(
            {
                "run_dir": args.run_dir,
                "data": args.source_file or f"{args.data or 'multi30k'}:{args.split}",
                "method": translator.method,
                "beam_size": translator.beam_size,
                "length_penalty": translator.length_penalty,
            }
        )
        storage.write_text(args.scores_json, json.dumps(summary, indent=2))
    return 0
