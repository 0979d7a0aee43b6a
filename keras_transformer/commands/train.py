"""`keras-transformer train --config FILE [--set key=value ...]`: train from a config.

The config's `task` (translation by default; `tagging`, `classification`,
`language_modeling`) picks what is trained: `--config imdb_reviews`, or `--set
task=classification` on a config of one's own.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from keras_transformer.config import packaged_configs

    parser.add_argument(
        "--config",
        required=True,
        help="YAML/JSON experiment config, or the name of a packaged one: "
        f"{', '.join(packaged_configs())}.",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a config value, e.g. --set training.epochs=1 (repeatable).",
    )
    parser.add_argument(
        "--run-dir", default=None, help="The run directory (overrides training.run_dir)."
    )


def experiment_config(args: argparse.Namespace) -> Any:
    """The `ExperimentConfig` of `--config`, `--set` and `--run-dir`.

    The run directory is a path, set as written: a `--set` value would be read as YAML
    (`runs/exp #2` cut at the comment, `2024-05-01` a date).
    """
    from keras_transformer.config import load_config

    sections = {}
    if args.run_dir is not None:
        if not args.run_dir.strip():
            raise ValueError(
                "Received an invalid value for --run-dir, expected a folder path. "
                f"Received: --run-dir={args.run_dir!r}"
            )
        sections["training"] = {"run_dir": args.run_dir}
    return load_config(args.config, args.overrides, **sections)


def run(args: argparse.Namespace) -> int:
    # A config error goes to `cli.main` like every command's: one line on stderr, status 2.
    config = experiment_config(args)

    from keras_transformer.runner import train

    result = train(config)
    final = {k: v[-1] for k, v in result.history.history.items() if v}
    logger.info(
        "Done: %s; run directory %s",
        ", ".join(f"{k}={v:.4g}" for k, v in sorted(final.items())) or "no epoch was left to train",
        result.paths.root,
    )
    return 0
