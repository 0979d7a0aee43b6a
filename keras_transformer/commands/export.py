"""`keras-transformer export`: a trained run -> `BASE/NAME/VERSION/` SavedModel for TF Serving."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="the training run directory")
    parser.add_argument(
        "--base-path", required=True, help="exports land in BASE_PATH/MODEL_NAME/VERSION"
    )
    parser.add_argument("--model-name", default="transformer", help="TF Serving model name")
    parser.add_argument(
        "--version", type=int, default=None, help="integer version (default: next free one)"
    )
    parser.add_argument("--beam-size", type=int, default=4, help="1 = greedy")
    parser.add_argument("--length-penalty", type=float, default=0.6, help="GNMT alpha")
    parser.add_argument(
        "--max-length", type=int, default=None, help="most output tokens (default: model's)"
    )
    parser.add_argument(
        "--no-check-ops",
        action="store_true",
        help="skip the TF Serving op allow-list check (not recommended)",
    )


def run(args: argparse.Namespace) -> int:
    from keras_transformer.export import export_translator
    from keras_transformer.translator import Translator

    translator = Translator.from_run_dir(
        args.run_dir,
        beam_size=args.beam_size,
        length_penalty=args.length_penalty,
        max_length=args.max_length,
        jit_compile=False,
    )
    path = export_translator(
        translator,
        args.base_path,
        model_name=args.model_name,
        version=args.version,
        check_ops=not args.no_check_ops,
    )
    sys.stdout.write(path + "\n")
    return 0
