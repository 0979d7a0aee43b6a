"""`keras-transformer export`: a trained run of any task -> `BASE/NAME/VERSION/` SavedModel for
TF Serving (`keras_transformer.export.export_run`, with the task's signatures)."""

from __future__ import annotations

import argparse
import sys

from keras_transformer.commands.decoding_options import add_decoding_arguments, predictor_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="the training run directory")
    parser.add_argument(
        "--base-path", required=True, help="exports land in BASE_PATH/MODEL_NAME/VERSION"
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
    add_decoding_arguments(parser, runtime=False)


def run(args: argparse.Namespace) -> int:
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
