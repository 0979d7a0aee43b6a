"""`keras-transformer evaluate RUN_DIR`: score a trained run of any task on a test set.

By default the data is the run's own (`data.source` of its `config.yaml`, what it was
trained on) at `--split test`; `--data` names other data (a TFDS name, a corpus known to
`keras_transformer.data.load_parallel_dataset` such as `multi30k/de-en`, a TSV file, or a
task's offline set). The run's task scores it (`keras_transformer.runner.evaluate_run`):

- translation translates and scores with sacreBLEU (BLEU and chrF by default) on the
  detokenized translations against the raw references, printed with sacreBLEU's
  signature; `--source-file`/`--reference-file` take line-aligned test files, `--output`
  gets the translations, `--details` one JSON line of sentence scores per sentence;
- tagging and classification report accuracy, language modelling perplexity.

`--scores-json` gets the scores (and signatures) as JSON.

Example:

    keras-transformer evaluate runs/de-en --split test --output runs/de-en/test.hyp.en
    keras-transformer evaluate runs/de-en --source-file test.de --reference-file test.en
    keras-transformer evaluate runs/pos --split test
"""

from __future__ import annotations

import argparse
import json
import logging

from keras_transformer import storage
from keras_transformer.commands.decoding_options import (
    add_decoding_arguments,
    evaluation_arguments,
    predictor_options,
)

logger = logging.getLogger(__name__)

# The task's evaluation options: passed on only when set (a task refuses those it does not
# take, naming them).
_EVALUATION_OPTIONS = (
    "progress",
    "source_file",
    "reference_file",
    "metrics",
    "lowercase",
    "tokenize",
    "output_file",
    "details_file",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="The training run directory (model.keras, tokenizers/).")
    data = parser.add_argument_group("data")
    data.add_argument(
        "--data",
        default=None,
        help="Other data than the run's data.source: a TFDS name, a corpus such as "
        '"multi30k/de-en", a TSV file, or a task\'s offline set.',
    )
    data.add_argument("--split", default="test", help="The split (default: test).")
    data.add_argument(
        "--source-lang", default=None, help="Translation: the source language / feature."
    )
    data.add_argument(
        "--target-lang", default=None, help="Translation: the target language / feature."
    )
    data.add_argument("--local-dir", default=None, help="Translation: offline Multi30k folder.")
    data.add_argument("--data-dir", default=None, help="TFDS data folder.")
    data.add_argument(
        "--source-file",
        default=None,
        help="Translation: source sentences, one a line (with --reference-file).",
    )
    data.add_argument("--reference-file", default=None, help="Translation: references, one a line.")
    data.add_argument(
        "--max-sentences", type=int, default=None, help="Evaluate only the first N examples."
    )
    scoring = parser.add_argument_group("scoring (translation)")
    scoring.add_argument(
        "--metrics",
        nargs="+",
        default=None,
        help="Among bleu, chrf, chrf++, ter (default: bleu chrf).",
    )
    scoring.add_argument(
        "--lowercase", action="store_true", default=None, help="Case-insensitive scores."
    )
    scoring.add_argument(
        "--tokenize", default=None, help="sacreBLEU's BLEU tokenizer (default: 13a)."
    )
    scoring.add_argument(
        "--output", "-o", dest="output_file", default=None, help="Write the translations here."
    )
    scoring.add_argument(
        "--details",
        dest="details_file",
        default=None,
        help="Write per-sentence JSON lines (scores) here.",
    )
    parser.add_argument(
        "--scores-json", default=None, help="Write the scores (and signatures) here."
    )
    parser.add_argument(
        "--progress", action="store_true", default=None, help="Show a progress bar."
    )
    add_decoding_arguments(parser, arguments=evaluation_arguments)


def _overrides(args: argparse.Namespace) -> list[str]:
    """The run config's keys that the translation data options change."""
    keys = {
        "source_lang": "translation.source_lang",
        "target_lang": "translation.target_lang",
        "local_dir": "translation.local_dir",
    }
    return [f"{key}={getattr(args, name)}" for name, key in keys.items() if getattr(args, name)]


def run(args: argparse.Namespace) -> int:
    from keras_transformer.run_dir import run_task
    from keras_transformer.runner import evaluate_run
    from keras_transformer.tasks import task_class

    if args.scores_json:
        storage.check_file(args.scores_json, reading=False)  # before the evaluation
    options = {name: getattr(args, name) for name in _EVALUATION_OPTIONS}
    options = {k: v for k, v in options.items() if v is not None}
    task = task_class(run_task(args.run_dir))
    options.update(predictor_options(args, task, evaluation_arguments))
    result = evaluate_run(
        args.run_dir,
        args.split,
        source=args.data,
        data_dir=args.data_dir,
        overrides=_overrides(args),
        max_examples=args.max_sentences,
        **options,
    )
    print(result.format())  # noqa: T201 - the command's output
    if args.scores_json:
        summary = {**result.to_dict(), "run_dir": args.run_dir}
        storage.write_text(args.scores_json, json.dumps(summary, indent=2))
    return 0
