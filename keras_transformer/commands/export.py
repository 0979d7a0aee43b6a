"""`keras-transformer export`: a trained run -> `BASE/NAME/VERSION/` SavedModel for TF Serving.

Translation runs export a translator (`export.export_translator`); tagging, classification
and language-modelling runs a tagger, classifier or generator (`export_tasks.export_run`).
"""

from __future__ import annotations

import argparse
import sys

from keras_transformer.commands.decoding_options import (
    add_decoding_arguments,
    decoding_kwargs,
    translator_from_args,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="the training run directory")
    parser.add_argument(
        "--base-path", required=True, help="exports land in BASE_PATH/MODEL_NAME/VERSION"
    )
    parser.add_argument(
        "--model-name",
        default=None,
        help="TF Serving model name (default: transformer; tagger, classifier or generator "
        "for those runs)",
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
        "--max-new-tokens",
        type=int,
        default=None,
        help="language models: the most tokens generated after a prompt (default: 50)",
    )
    add_decoding_arguments(parser, runtime=False)


def run(args: argparse.Namespace) -> int:
    from keras_transformer.export import export_translator
    from keras_transformer.run_dir import run_task

    if run_task(args.run_dir) != "translation":
        from keras_transformer.export_tasks import export_run

        path = export_run(
            args.run_dir,
            args.base_path,
            model_name=args.model_name,
            version=args.version,
            check_ops=not args.no_check_ops,
            max_new_tokens=args.max_new_tokens,
            **decoding_kwargs(args),
        )
        sys.stdout.write(path + "\n")
        return 0
    if args.max_new_tokens is not None:
        raise ValueError(
            "Received --max-new-tokens for a translation run; it is for language models."
        )

    # No XLA: the exported graph runs on TF Serving, which does not compile it.
    translator = translator_from_args(args, jit_compile=False)
    path = export_translator(
        translator,
        args.base_path,
        model_name=args.model_name or "transformer",
        version=args.version,
        check_ops=not args.no_check_ops,
    )
    sys.stdout.write(path + "\n")
    return 0
