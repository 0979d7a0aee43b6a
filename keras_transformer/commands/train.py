"""`keras-transformer train --config FILE [--set key=value ...]`: train from a config.

The config's `task` (translation by default; `tagging`, `classification`,
`language_modeling`) picks what is trained: `--config imdb_reviews`, or `--set
task=classification` on a config of one's own.
"""

from __future__ import annotations

import argparse
import logging

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


def run(args: argparse.Namespace) -> int:
    from keras_transformer.config import load_config

    overrides = list(args.overrides)
    if args.run_dir:
        overrides.append(f"training.run_dir={args.run_dir}")
    try:
        config = load_config(args.config, overrides)
    except (ValueError, FileNotFoundError) as e:
        logger.error("%s", e)
        return 2

    from keras_transformer.runner import train

    result = train(config)
    final = {k: v[-1] for k, v in result.history.history.items() if v}
    logger.info(
        "Done: %s; run directory %s",
        ", ".join(f"{k}={v:.4g}" for k, v in sorted(final.items())) or "no epoch was left to train",
        result.paths.root,
    )
    return 0
