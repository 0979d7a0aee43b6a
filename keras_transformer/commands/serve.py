"""`keras-transformer serve`: the development stand-in with TF Serving's REST and gRPC APIs.

Same flags as `tensorflow_model_server` where they exist (`--model_base_path`,
`--model_name`, `--port`, `--rest_api_port`, `--enable_batching`, ...). For production, run TF
Serving itself (see `serving/README.md`).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from keras_transformer.serving.cli import build_arg_parser

    build_arg_parser(parser)


def run(args: argparse.Namespace) -> int:
    from keras_transformer.serving.cli import run_from_args

    return run_from_args(args)
