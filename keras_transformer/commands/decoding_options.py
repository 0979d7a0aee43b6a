"""The predictor options of `predict` (and its task aliases), `evaluate` and `export`,
defined once: the search (for the tasks that decode), `--quantize`, `--batch-size` and
`--jit`.

Options left unset keep the defaults of what takes them, so the command line predicts as
the library does unless told otherwise. Those defaults, and which options a task takes, are
read from the classes (`Arguments`): a predictor's signature, its `decoding_defaults` and
`fixed_decoding`, and `keras_transformer.decoding.BatchDecoder`'s signature, where the
predictor passes its `**decoding` on; for `evaluate`, the task's `evaluate`, whose
`**kwargs` go to its predictor. A command's help shows the defaults of the tasks whose runs
it takes (per task where they differ) and hides the options none of them takes; an option
a run does not take is refused, naming it.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from keras_transformer.constants import DECODING_METHODS, QUANTIZATIONS, TASKS

_JIT = {"auto": "auto", "on": True, "off": False}


@dataclass(frozen=True)
class _Option:
    """A predictor argument on the command line (`--` and its name with dashes)."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    choices: Sequence[str] | None = None
    # What the argument's default None means, for the help (None: no default shown).
    unset: str | None = None
    # Whether it is an option of decoding in this process (not of an export).
    runtime: bool = False
    # Whether it is a search option (in the "decoding" group, for the tasks that decode).
    search: bool = True


_OPTIONS = (
    _Option(
        "method",
        "Search method",
        choices=DECODING_METHODS,
        unset="beam when --beam-size > 1, else greedy",
    ),
    _Option("beam_size", "Beam size", int),
    _Option("length_penalty", "GNMT length penalty alpha, ((5 + len) / 6) ** alpha", float),
    _Option("max_length", "Absolute limit of output tokens", int, unset="the model's max_length"),
    _Option("max_length_a", "Per-sentence limit min(max_length, a * source_tokens + b): a", float),
    _Option("max_length_b", "The b of --max-length-a's limit", int),
    _Option(
        "no_repeat_ngram_size",
        "Forbid repeating any n-gram of the output: its size n, 0 for off",
        int,
    ),
    _Option("temperature", "Sampling temperature", float),
    _Option("top_k", "Sample among the k best", int, unset="off"),
    _Option("top_p", "Nucleus sampling mass", float, unset="off"),
    _Option("seed", "Sampling seed", int),
    _Option("max_new_tokens", "The most tokens generated after a prompt", int),
    _Option(
        "jit_compile",
        "XLA compilation of the decoding loop: auto (XLA, falling back to a plain "
        "tf.function), on, off",
        choices=tuple(sorted(_JIT)),
        runtime=True,
    ),
    _Option(
        "quantize",
        "Predict with the weights in a smaller type (keras_transformer.quantization): "
        "bfloat16 (fast where the CPU has AVX512_BF16 or AMX) or int8 (Keras's int8: 4x "
        "smaller weights)",
        choices=QUANTIZATIONS,
        unset="off, the trained float32 weights",
        search=False,
    ),
    _Option(
        "batch_size",
        "Texts per batch",
        int,
        unset="the run's data.batch_size or data.tokens_per_batch",
        runtime=True,
        search=False,
    ),
)


@dataclass(frozen=True)
class Arguments:
    """The keyword arguments that something a run's options go to takes.

    Attributes:
        owner: what takes them, for messages (`"TextGenerator"`, `"evaluation"`).
        names: the names it takes (None: any).
        defaults: the default of each name that has one.
    """

    owner: str
    names: frozenset[str] | None
    defaults: dict[str, Any]

    def takes(self, name: str) -> bool:
        return self.names is None or name in self.names


def _follow(functions: Sequence[Callable]) -> tuple[set[str] | None, dict[str, Any]]:
    """The keyword arguments of `functions[0]`, following its `**kwargs` to the next
    function (and so on), with their defaults (the first function's where several have one);
    None for the names when the last function takes any."""
    names: set[str] = set()
    defaults: dict[str, Any] = {}
    for function in functions:
        parameters = inspect.signature(function).parameters
        for name, parameter in parameters.items():
            if name == "self" or parameter.kind in (
                inspect.Parameter.VAR_KEYWORD,
                inspect.Parameter.VAR_POSITIONAL,
            ):
                continue
            names.add(name)
            if parameter.default is not inspect.Parameter.empty:
                defaults.setdefault(name, parameter.default)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            return names, defaults
    return None, defaults


def predictor_arguments(task: Any) -> Arguments:
    """What the run's predictor (`task.predictor_class`) takes: its own arguments and, where
    it passes `**decoding` on, `BatchDecoder`'s, less its `fixed_decoding`, with its
    `decoding_defaults` over `BatchDecoder`'s defaults."""
    from keras_transformer.decoding import BatchDecoder

    cls = task.predictor_class
    names, defaults = _follow((cls.__init__, BatchDecoder.__init__))
    own = inspect.signature(cls.__init__).parameters
    for name, value in getattr(cls, "decoding_defaults", {}).items():
        if name not in own:
            defaults[name] = value
    fixed = set(getattr(cls, "fixed_decoding", ()))
    return Arguments(
        owner=cls.__name__,
        names=None if names is None else frozenset(names - fixed),
        defaults={k: v for k, v in defaults.items() if k not in fixed},
    )


def evaluation_arguments(task: Any) -> Arguments:
    """What the task's `evaluate` takes: its own arguments and, where it takes `**kwargs`,
    its predictor's (`predictor_arguments`), which it passes them to."""
    names, defaults = _follow((task.evaluate,))
    if names is not None:
        return Arguments("evaluation", frozenset(names), defaults)
    predictor = predictor_arguments(task)
    own = inspect.signature(task.evaluate).parameters
    return Arguments(
        owner="evaluation",
        names=None if predictor.names is None else predictor.names | set(own),
        defaults={**predictor.defaults, **defaults},
    )


def decoding_tasks(tasks: Sequence[str]) -> list[str]:
    """The tasks among `tasks` that decode (`Task.decodes`)."""
    from keras_transformer.tasks import task_class

    return [name for name in tasks if task_class(name).decodes]


def add_decoding_arguments(
    parser: argparse.ArgumentParser,
    tasks: Sequence[str] = TASKS,
    runtime: bool = True,
    arguments: Callable[[Any], Arguments] = predictor_arguments,
) -> None:
    """Adds the search options; with `runtime`, also `--batch-size` and `--jit`.

    Each option's help gives the default of the tasks that take it, per task where they
    differ; an option that none of `tasks` takes is hidden (and refused, naming it, by
    `predictor_options`).

    Args:
        parser: the command's parser.
        tasks: the tasks whose runs the command takes.
        runtime: add the options of decoding in this process (`translate`, `evaluate`),
            which an export (whose graph TF Serving runs, batch by batch) does not take.
        arguments: what each task takes (`predictor_arguments`, `evaluation_arguments`).
    """
    from keras_transformer.tasks import task_class

    taken = {name: arguments(task_class(name)) for name in tasks}
    searches = [option.name for option in _OPTIONS if option.search]
    decoding = [name for name in tasks if any(map(taken[name].takes, searches))]
    title = "decoding"
    if decoding and len(decoding) < len(tasks):
        title += f" ({join_names(decoding)} runs)"
    group = parser.add_argument_group(title)
    for option in _OPTIONS:
        if option.runtime and not runtime:
            continue
        takers = [name for name in tasks if taken[name].takes(option.name)]
        scope = decoding if option.search else list(tasks)
        target = group if option.search else parser
        target.add_argument(
            _flag(option.name),
            type=option.type,
            choices=option.choices,
            default=None,
            help=_help(option, takers, scope, taken) if takers else argparse.SUPPRESS,
        )


def _help(option: _Option, takers: list[str], scope: list[str], taken: dict[str, Arguments]) -> str:
    """An option's help: what it is, the tasks that take it when not all of `scope` do,
    and its default for each of them."""
    shown: dict[str, list[str]] = {}
    for name in takers:
        value = taken[name].defaults.get(option.name)
        text = _shown(option, value)
        if text is not None:
            shown.setdefault(text, []).append(name)
    notes = []
    if len(scope) > 1 and set(takers) != set(scope):
        notes.append(f"{join_names(takers)} only")
    if len(shown) == 1:
        notes.append(f"default: {next(iter(shown))}")
    elif shown:
        per_task = (f"{text} for {join_names(names)}" for text, names in shown.items())
        notes.append("default: " + ", ".join(per_task))
    return option.help + (f" ({'; '.join(notes)})." if notes else ".")


def _shown(option: _Option, value: Any) -> str | None:
    """A default as the help writes it (None: none to write)."""
    if value is None:
        return option.unset
    if option.name == "jit_compile":
        return {v: k for k, v in _JIT.items()}[value]
    return str(value)


def join_names(names: Sequence[str]) -> str:
    """Names for a help text: `a`, `a and b`, `a, b and c`."""
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


def decoding_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The predictor arguments the user set (others keep their defaults)."""
    kwargs = {}
    for option in _OPTIONS:
        value = getattr(args, _dest(option.name), None)
        if value is not None:
            kwargs[option.name] = _JIT[value] if option.name == "jit_compile" else value
    return kwargs


def predictor_options(
    args: argparse.Namespace,
    task: Any,
    arguments: Callable[[Any], Arguments] = predictor_arguments,
) -> dict[str, Any]:
    """The options of `args` for the run's predictor (`task.predictor_class`), or for what
    `arguments` says takes them.

    Raises:
        ValueError: naming the options it does not take (a search option for a task that
            does not decode, `--max-new-tokens` for a translation, ...).
    """
    options = decoding_kwargs(args)
    taken = arguments(task)
    refused = sorted(name for name in options if not taken.takes(name))
    if refused:
        flags = ", ".join(_flag(name) for name in refused)
        raise ValueError(
            f"Received {flags} for a {task.name} run ({args.run_dir}), whose "
            f"{taken.owner} does not take {'it' if len(refused) == 1 else 'them'}."
        )
    return options


def _flag(name: str) -> str:
    """The command-line flag of a predictor argument."""
    return "--jit" if name == "jit_compile" else "--" + name.replace("_", "-")


def _dest(name: str) -> str:
    """The attribute of the parsed arguments that holds a predictor argument."""
    return _flag(name)[2:].replace("-", "_")
