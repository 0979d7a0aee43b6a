"""`keras-transformer export`: a trained run -> `BASE/NAME/VERSION/` SavedModel for TF Serving."""

from __future__ import annotations

import argparse
import sys

from keras_transformer.commands.decoding_options import (
    add_decoding_arguments,
    translator_from_args,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="the training run directory")
    parser.add_argument(
        "--base-path", required=True, help="exports land in BASE_PATH/MODEL_NAME/VERSION"
    )
    parser.add_argument("--model-name", default="transformer", help="TF Serving model name")
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
    from keras_transformer.export import export_translator

    # No XLA: the exported graph runs on TF Serving, which does not compile it.
    translator = translator_from_args(args, jit_compile=False)
    path = export_translator(
        translator,
        args.base_path,
        model_name=args.model_name,
        version=args.version,
        check_ops=not args.no_check_ops,
    )
    sys.stdout.write(path + "\n")
    return 0
