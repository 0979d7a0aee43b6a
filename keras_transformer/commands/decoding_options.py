"""The decoding options of `translate`, `evaluate` and `export`, defined once.

Their defaults are the `Translator`'s: `constants.TRANSLATION_DECODING_DEFAULTS`, else
`keras_transformer.decoding.BatchDecoder`'s (read from its signature), so the command line
decodes as the library does unless told otherwise.
"""

from __future__ import annotations

import argparse
import inspect
from typing import Any

from keras_transformer.constants import DECODING_METHODS, TRANSLATION_DECODING_DEFAULTS

_JIT = {"auto": "auto", "on": True, "off": False}


def _default(name: str) -> Any:
    from keras_transformer.decoding import BatchDecoder

    if name in TRANSLATION_DECODING_DEFAULTS:
        return TRANSLATION_DECODING_DEFAULTS[name]
    return inspect.signature(BatchDecoder.__init__).parameters[name].default


def add_decoding_arguments(parser: argparse.ArgumentParser, runtime: bool = True) -> None:
    """Adds the search options; with `runtime`, also `--batch-size` and `--jit`.

    Args:
        parser: the command's parser.
        runtime: add the options of decoding in this process (`translate`, `evaluate`),
            which an export (whose graph TF Serving runs, batch by batch) does not take.
    """
    group = parser.add_argument_group("decoding")
    group.add_argument(
        "--method",
        choices=DECODING_METHODS,
        default=None,
        help="Search method (default: beam when --beam-size > 1, else greedy).",
    )
    group.add_argument(
        "--beam-size", type=int, default=None, help=f"Beam size (default: {_default('beam_size')})."
    )
    group.add_argument(
        "--length-penalty",
        type=float,
        default=None,
        help="GNMT length penalty alpha, ((5 + len) / 6) ** alpha "
        f"(default: {_default('length_penalty')}).",
    )
    group.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="Absolute limit of output tokens (default: the model's max_length).",
    )
    group.add_argument(
        "--max-length-a",
        type=float,
        default=None,
        help="Per-sentence limit min(max_length, a * source_tokens + b): a "
        f"(default: {_default('max_length_a')}).",
    )
    group.add_argument(
        "--max-length-b", type=int, default=None, help=f"b (default: {_default('max_length_b')})."
    )
    group.add_argument("--temperature", type=float, default=None, help="Sampling temperature.")
    group.add_argument("--top-k", type=int, default=None, help="Sample among the k best.")
    group.add_argument("--top-p", type=float, default=None, help="Nucleus sampling mass.")
    group.add_argument("--seed", type=int, default=None, help="Sampling seed (default: 0).")
    if runtime:
        group.add_argument(
            "--batch-size", type=int, default=64, help="Sentences per batch (default: 64)."
        )
        group.add_argument(
            "--jit",
            choices=sorted(_JIT),
            default="auto",
            help="XLA compilation of the decoding loop: auto (XLA, falling back), on, off.",
        )


def decoding_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The `Translator`/`BatchDecoder` arguments the user set (others keep their defaults)."""
    names = (
        "method",
        "beam_size",
        "length_penalty",
        "max_length",
        "max_length_a",
        "max_length_b",
        "temperature",
        "top_k",
        "top_p",
        "seed",
    )
    kwargs = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if hasattr(args, "batch_size"):
        kwargs["batch_size"] = args.batch_size
    if hasattr(args, "jit"):
        kwargs["jit_compile"] = _JIT[args.jit]
    return kwargs


def translator_from_args(args: argparse.Namespace, **overrides: Any):
    """A `Translator` for `args.run_dir` with the decoding options of `args`."""
    from keras_transformer.predictors import Translator

    return Translator.from_run_dir(args.run_dir, **{**decoding_kwargs(args), **overrides})
