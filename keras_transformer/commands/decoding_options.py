"""The predictor options of `predict` (and its task aliases), `evaluate` and `export`,
defined once: the search (for the tasks that decode), `--batch-size` and `--jit`.

Options left unset keep the predictor's defaults (a translation's
`constants.TRANSLATION_DECODING_DEFAULTS`, else `keras_transformer.decoding.BatchDecoder`'s,
read from its signature), so the command line predicts as the library does unless told
otherwise; an option a run's predictor does not take is refused, naming it.
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
    group.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="Language models: the most tokens generated after a prompt (default: 50).",
    )
    if runtime:
        group.add_argument(
            "--batch-size", type=int, default=None, help="Texts per batch (default: 64)."
        )
        group.add_argument(
            "--jit",
            choices=sorted(_JIT),
            default=None,
            help="XLA compilation of the decoding loop: auto (the default: XLA, falling "
            "back), on, off.",
        )


def decoding_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The predictor arguments the user set (others keep their defaults)."""
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
        "max_new_tokens",
        "batch_size",
    )
    kwargs = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    if getattr(args, "jit", None) is not None:
        kwargs["jit_compile"] = _JIT[args.jit]
    return kwargs


def predictor_options(args: argparse.Namespace, task: Any) -> dict[str, Any]:
    """The options of `args` for the run's predictor (`task.predictor_class`).

    Raises:
        ValueError: naming the options the predictor does not take (a search option for a
            task that does not decode, `--max-new-tokens` for a translation, ...).
    """
    options = decoding_kwargs(args)
    cls = task.predictor_class
    accepted = _accepted_arguments(cls)
    refused = sorted(name for name in options if accepted is not None and name not in accepted)
    if refused:
        flags = ", ".join(_flag(name) for name in refused)
        raise ValueError(
            f"Received {flags} for a {task.name} run ({args.run_dir}), whose "
            f"{cls.__name__} does not take them."
        )
    return options


def _accepted_arguments(cls: type) -> set[str] | None:
    """The keyword arguments `cls.__init__` takes (None: any, through **kwargs), following
    **kwargs that the class passes on to its decoder (`BatchDecoder`)."""
    from keras_transformer.decoding import BatchDecoder

    names: set[str] = set()
    for function in (cls.__init__, BatchDecoder.__init__):
        parameters = inspect.signature(function).parameters
        names |= {n for n, p in parameters.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            return names - {"self", "model"}
    return None


def _flag(name: str) -> str:
    """The command-line flag of a predictor argument."""
    return "--jit" if name == "jit_compile" else "--" + name.replace("_", "-")
