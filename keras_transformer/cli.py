"""The `keras-transformer` command line: subcommands that only call library functions.

Each subcommand lives in `keras_transformer/commands/<name>.py` and defines
`add_arguments(parser)` and `run(args) -> int`. Modules are imported only when their
subcommand runs, so `keras-transformer --help` stays fast.

The global options (`--log-level`) go before the subcommand or after it (a value after it
wins), and each subcommand's `--help` lists them.

A user's mistake (bad data, a missing file, an incomplete run directory, a bad option or
config value: `USER_ERRORS`) is reported as one line on stderr with exit status 2; the
traceback only with `--log-level DEBUG`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from keras_transformer.constants import DEFAULT_LOG_LEVEL, LOG_LEVELS

# name -> one-line help. Each module is keras_transformer.commands.<name>.
COMMANDS: dict[str, str] = {}

# What the library raises for a mistake in its input (its own checks raise ValueError).
USER_ERRORS = (ValueError, OSError, UnicodeError)
USER_ERROR_STATUS = 2

logger = logging.getLogger("keras_transformer")


def _register_available_commands() -> None:
    """Fills `COMMANDS` from the modules present in `keras_transformer/commands`."""
    from keras_transformer import commands

    for name, summary in commands.SUMMARIES.items():
        COMMANDS[name] = summary


def add_global_arguments(parser: argparse.ArgumentParser, after_command: bool = False) -> None:
    """Adds the options of every subcommand: to the main parser (before the subcommand, with
    their defaults) and, with `after_command`, to a subcommand's parser without defaults
    (`argparse.SUPPRESS`), so that a value given after the subcommand wins and their absence
    there keeps the value given before it."""
    group = parser.add_argument_group("global options (before or after the command)")
    group.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        metavar="LEVEL",
        default=argparse.SUPPRESS if after_command else DEFAULT_LOG_LEVEL,
        help=f"Python logging level: {', '.join(LOG_LEVELS)}, in any case "
        f"(default: {DEFAULT_LOG_LEVEL}).",
    )


def build_parser() -> argparse.ArgumentParser:
    _register_available_commands()
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="Train, evaluate, export and serve Transformer models: translation, "
        "tagging, classification and language modeling.",
    )
    add_global_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, summary in COMMANDS.items():
        sub.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    known, rest = parser.parse_known_args(argv)
    module = importlib.import_module(f"keras_transformer.commands.{known.command}")
    command_parser = argparse.ArgumentParser(
        prog=f"keras-transformer {known.command}", description=COMMANDS[known.command]
    )
    module.add_arguments(command_parser)
    add_global_arguments(command_parser, after_command=True)
    # Parsed into `known`: the global options given after the command replace those before.
    args = command_parser.parse_args(rest, namespace=known)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(module.run(args) or 0)
    except USER_ERRORS as e:
        if logger.isEnabledFor(logging.DEBUG):
            logger.exception("keras-transformer %s failed", args.command)
        message = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
        sys.stderr.write(
            f"keras-transformer {args.command}: error: {message or type(e).__name__}\n"
        )
        return USER_ERROR_STATUS


if __name__ == "__main__":
    sys.exit(main())
