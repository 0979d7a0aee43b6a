"""`keras-transformer export`: a trained run of any task -> `BASE/NAME/VERSION/` SavedModel for
TF Serving (`keras_transformer.export.export_run`, with the task's signatures), or with
`--format ctranslate2` a translation run -> a CTranslate2 model directory
(`keras_transformer.ctranslate2_export.export_ctranslate2`)."""

from __future__ import annotations

import argparse
import sys

from keras_transformer.commands.decoding_options import (
    add_decoding_arguments,
    decoding_kwargs,
    predictor_options,
)
from keras_transformer.constants import CTRANSLATE2_QUANTIZATIONS, EXPORT_FORMATS

# The options of each format (their argparse dests), refused with the other one.
_SAVEDMODEL_ONLY = ("base_path", "model_name", "version", "no_check_ops")
_CTRANSLATE2_ONLY = ("output_dir", "quantization")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="the training run directory")
    parser.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        default=EXPORT_FORMATS[0],
        help="savedmodel: a SavedModel for TF Serving in BASE_PATH/MODEL_NAME/VERSION, any "
        "task; ctranslate2: a CTranslate2 model directory in --output-dir, translation runs "
        "only (needs the ctranslate2 extra) (default: savedmodel)",
    )
    parser.add_argument(
        "--base-path",
        default=None,
        help="exports land in BASE_PATH/MODEL_NAME/VERSION (required with --format savedmodel)",
    )
    parser.add_argument(
        "--model-name",
        default=None,
        help="TF Serving model name (default: the task's: transformer, tagger, classifier "
        "or generator)",
    )
    parser.add_argument(
        "--version", type=int, default=None, help="integer version (default: next free one)"
    )
    parser.add_argument(
        "--no-check-ops",
        action="store_true",
        help="skip the TF Serving op allow-list check (not recommended)",
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        help="the new local folder of the CTranslate2 model (--format ctranslate2; required)",
    )
    parser.add_argument(
        "--quantization",
        choices=CTRANSLATE2_QUANTIZATIONS,
        default=None,
        help="the weights' type (--format ctranslate2; default: float32, unquantized)",
    )
    add_decoding_arguments(parser, runtime=False)


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _check_format_options(args: argparse.Namespace) -> None:
    """Refuses the options of the other format, and a missing required one, naming them."""
    if args.format == "ctranslate2":
        other = [_flag(d) for d in _SAVEDMODEL_ONLY if getattr(args, d) not in (None, False)]
        # CTranslate2 takes its search options when it translates, not in the model.
        other += [_flag(name) for name in decoding_kwargs(args)]
        required = "output_dir"
    else:
        other = [_flag(d) for d in _CTRANSLATE2_ONLY if getattr(args, d) is not None]
        required = "base_path"
    if other:
        raise ValueError(
            f"Received {', '.join(other)} with --format {args.format}, which does not take "
            f"{'it' if len(other) == 1 else 'them'}."
        )
    if getattr(args, required) is None:
        raise ValueError(f"--format {args.format} needs {_flag(required)}.")


def run(args: argparse.Namespace) -> int:
    _check_format_options(args)
    if args.format == "ctranslate2":
        from keras_transformer.ctranslate2_export import export_ctranslate2

        path = export_ctranslate2(args.run_dir, args.output_dir, quantization=args.quantization)
        sys.stdout.write(path + "\n")
        return 0

    from keras_transformer.export import export_run
    from keras_transformer.run_dir import run_task
    from keras_transformer.tasks import task_class

    task = task_class(run_task(args.run_dir))
    path = export_run(
        args.run_dir,
        args.base_path,
        model_name=args.model_name,
        version=args.version,
        check_ops=not args.no_check_ops,
        **predictor_options(args, task),
    )
    sys.stdout.write(path + "\n")
    return 0
