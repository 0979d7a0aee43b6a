"""Argument checks shared by layers, models, decoding and configs: the one home of checks.

Each raises `ValueError` in Keras core's wording: what was wrong, what was expected, and the
value received, naming the argument. A dotted name (`model.d_model`) is a config key and is
named as such.

`check_architecture` holds the rules of a Transformer's architecture (positive sizes, rates
in [0, 1), `d_model` a multiple of `num_heads`), which the layers, the model, the
architecture config and the experiment config all apply.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any


def _invalid(name: str, expected: str, value: Any) -> ValueError:
    what = f"`{name}`" if "." in name else f"argument `{name}`"
    return ValueError(
        f"Received an invalid value for {what}, expected {expected}. Received: {name}={value!r}"
    )


def _is_number(value: Any) -> bool:
    """A finite int or float (not a bool; inf and nan are no values of a setting)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def check_int(name: str, value: Any) -> int:
    """Returns `value` if it is an integer (not a bool), else raises `ValueError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(name, "an integer", value)
    return value


def check_positive_int(name: str, value: Any) -> int:
    """Returns `value` if it is a positive integer, else raises `ValueError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _invalid(name, "a positive integer", value)
    return value


def check_non_negative_int(name: str, value: Any) -> int:
    """Returns `value` if it is an integer >= 0, else raises `ValueError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _invalid(name, "a non-negative integer", value)
    return value


def check_rate(name: str, value: Any) -> float:
    """Returns `value` if it is a float in [0, 1), else raises `ValueError`."""
    if not _is_number(value) or not 0 <= value < 1:
        raise _invalid(name, "a float in [0, 1)", value)
    return float(value)


def check_probability(name: str, value: Any) -> float:
    """Returns `value` if it is a float in (0, 1], else raises `ValueError`."""
    if not _is_number(value) or not 0 < value <= 1:
        raise _invalid(name, "a float in (0, 1]", value)
    return float(value)


def check_positive_float(name: str, value: Any) -> float:
    """Returns `value` if it is a number > 0, else raises `ValueError`."""
    if not _is_number(value) or not value > 0:
        raise _invalid(name, "a positive number", value)
    return float(value)


def check_non_negative_float(name: str, value: Any) -> float:
    """Returns `value` if it is a number >= 0, else raises `ValueError`."""
    if not _is_number(value) or not value >= 0:
        raise _invalid(name, "a non-negative number", value)
    return float(value)


def check_holdout(name: str, value: Any) -> float | int:
    """Returns `value` if it is a fraction in (0, 1) (a float) or a positive number of
    examples (an int), else raises `ValueError`."""
    if isinstance(value, float) and 0 < value < 1:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid(name, "a fraction in (0, 1) or a positive number of examples", value)
    return value


def check_one_of(name: str, value: Any, options: Sequence[Any]) -> Any:
    """Returns `value` if it is one of `options` (`True` is not `1`), else raises.

    Example:
    >>> check_one_of("method", "beam", ("greedy", "beam"))
    'beam'
    """
    if not any(value is o or (type(value) is type(o) and value == o) for o in options):
        raise _invalid(name, f"one of {tuple(options)}", value)
    return value


def check_optional(check: Callable[[str, Any], Any], name: str, value: Any) -> Any:
    """`None`, or `check(name, value)`."""
    return None if value is None else check(name, value)


def check_lengths(name: str, values: Any, increasing: bool = False) -> tuple[int, ...]:
    """Returns `values` as a tuple if it is a non-empty sequence of positive integers
    (strictly increasing with `increasing`), else raises `ValueError`."""
    ok = isinstance(values, (list, tuple)) and len(values) > 0
    ok = ok and all(not isinstance(v, bool) and isinstance(v, int) and v > 0 for v in values)
    if ok and increasing:
        ok = all(a < b for a, b in zip(values, values[1:]))
    if not ok:
        order = "increasing " if increasing else ""
        raise _invalid(name, f"a non-empty {order}sequence of positive integers", values)
    return tuple(values)


def check_divisible(name: str, value: int, divisor_name: str, divisor: int) -> None:
    """Raises `ValueError` unless `value` is divisible by `divisor`."""
    if value % divisor:
        raise _invalid(name, f"a multiple of `{divisor_name}`={divisor}", value)


def check_tokenizer_pad_id(tokenizer: Any, model: Any) -> None:
    """Raises `ValueError` unless the tokenizer pads with the model's `pad_id` (the model
    masks its padding by that id, so another one would be read as real tokens)."""
    if int(tokenizer.pad_id) != int(model.pad_id):
        raise ValueError(
            "Received a tokenizer whose pad id differs from the model's, expected "
            f"pad_id={model.pad_id}. Received: pad_id={tokenizer.pad_id}"
        )


# The rule of each architecture argument, wherever it is given (layer, model or config).
def check_vocab_size(name: str, value: Any) -> int:
    """Returns `value` if it is an integer of at least `MIN_VOCAB_SIZE` (the special pieces
    and one more), else raises `ValueError`."""
    from keras_transformer.constants import MIN_VOCAB_SIZE

    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_VOCAB_SIZE:
        raise _invalid(
            name, f"an integer of at least {MIN_VOCAB_SIZE} (4 special pieces and text)", value
        )
    return value


def check_activation(name: str, value: Any) -> Any:
    """Returns `value` if Keras knows it as an activation (`keras.activations.get`: a name
    such as "relu" or "gelu", or a callable), else raises `ValueError`."""
    import keras

    try:
        keras.activations.get(value)
    except (ValueError, TypeError):
        raise _invalid(
            name, 'an activation name Keras knows, such as "relu" or "gelu"', value
        ) from None
    return value


_ARCHITECTURE_RULES: dict[str, Callable[[str, Any], Any]] = {
    "source_vocab_size": check_positive_int,
    "target_vocab_size": check_positive_int,
    "vocabulary_size": check_positive_int,
    "num_encoder_layers": check_positive_int,
    "num_decoder_layers": check_positive_int,
    "num_layers": check_positive_int,
    "d_model": check_positive_int,
    "num_heads": check_positive_int,
    "d_ff": check_positive_int,
    "dropout": check_rate,
    "attention_dropout": check_rate,
    "ffn_dropout": functools.partial(check_optional, check_rate),
    "max_length": check_positive_int,
    "layer_norm_epsilon": check_positive_float,
    "pad_id": check_non_negative_int,
    "activation": check_activation,
}


def check_decay_horizon(
    decay: str,
    total_steps: Any,
    warmup_steps: int,
    names: tuple[str, str, str] = ("decay", "total_steps", "warmup_steps"),
) -> None:
    """A learning rate that decays to zero (`decay` other than `"inverse_sqrt"`) needs its
    horizon, `total_steps`, a positive integer past the warm-up's `warmup_steps`.

    Args:
        decay: the decay (`constants.LR_DECAYS`).
        total_steps: the step at which it reaches zero.
        warmup_steps: the warm-up's steps.
        names: the three values' names in errors (the config's: `training.lr_decay`, ...).
    """
    if decay == "inverse_sqrt":
        return
    decay_name, total_name, warmup_name = names
    check_positive_int(total_name, total_steps)
    if total_steps <= warmup_steps:
        expected = f"more than `{warmup_name}`={warmup_steps} with {decay_name}={decay!r}"
        raise _invalid(total_name, expected, total_steps)


def check_rdrop(
    alpha: Any, start_epoch: Any = 0, min_epochs: Any = None, prefix: str = ""
) -> tuple[float, int, int | None]:
    """Checks R-Drop's options (`keras_transformer.training.rdrop`): `alpha` >= 0,
    `start_epoch` a non-negative integer, and `min_epochs` None or a positive integer,
    given with `start_epoch` > 0 when R-Drop is on (the plain epochs before the start are
    the ones it times). With `alpha` 0 (off) the other two do nothing, as Keras' optimizers
    take `ema_momentum` without `use_ema`: a recipe's R-Drop is turned off by `alpha` alone.

    Args:
        alpha: R-Drop's weight (0: off).
        start_epoch: the first epoch (counted from 0, as `fit` does) trained with R-Drop.
        min_epochs: R-Drop starts only if at least this many of its epochs fit in the run
            (`rdrop.RDropStart`); None: it starts regardless.
        prefix: put before each name in errors (`"training."` for the experiment config).

    Returns:
        `(alpha, start_epoch, min_epochs)`, alpha as a float.
    """
    alpha = check_non_negative_float(prefix + "rdrop_alpha", alpha)
    start_epoch = check_non_negative_int(prefix + "rdrop_start_epoch", start_epoch)
    if min_epochs is not None:
        min_epochs = check_positive_int(prefix + "rdrop_min_epochs", min_epochs)
        if alpha and not start_epoch:
            raise ValueError(
                f"Received `{prefix}rdrop_min_epochs` without plain epochs before R-Drop, "
                f"expected {prefix}rdrop_start_epoch > 0 (R-Drop starts only if the time "
                f"left after the plain epochs holds {prefix}rdrop_min_epochs of its epochs) "
                f"or {prefix}rdrop_min_epochs=None. Received: "
                f"{prefix}rdrop_start_epoch={start_epoch}, "
                f"{prefix}rdrop_min_epochs={min_epochs}"
            )
    return alpha, start_epoch, min_epochs


def check_architecture(prefix: str = "", **values: Any) -> dict[str, Any]:
    """Checks the architecture arguments given (any subset); returns them, normalized.

    Args:
        prefix: put before each name in errors (`"model."` for the experiment config).
        **values: architecture arguments: vocabulary sizes, layer counts, `d_model`,
            `num_heads`, `d_ff`, dropout rates, `max_length`, `layer_norm_epsilon`,
            `pad_id`, `activation`. Others (`norm_first`, ...) are returned unchecked.

    Returns:
        The values, rates as floats.

    Example:
    >>> check_architecture(d_model=512, num_heads=8, dropout=0)
    {'d_model': 512, 'num_heads': 8, 'dropout': 0.0}
    >>> check_architecture(d_model=500, num_heads=8)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: Received an invalid value for argument `d_model`, expected a multiple...
    """
    checked = {
        name: _ARCHITECTURE_RULES[name](prefix + name, value)
        if name in _ARCHITECTURE_RULES
        else value
        for name, value in values.items()
    }
    if "d_model" in checked and "num_heads" in checked:
        check_divisible(
            prefix + "d_model", checked["d_model"], prefix + "num_heads", checked["num_heads"]
        )
    return checked
