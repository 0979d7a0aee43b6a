"""Building an `ExperimentConfig` from nested dicts (what YAML gives): strict keys named
with their section, `dacite` types, and the layout of configs written before the task
sections (translation's keys in `data` and `training`), read as the new one."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import dacite

from keras_transformer.config.sections import DataConfig, ModelConfig, TrainingConfig
from keras_transformer.config.task_sections import TASK_SECTIONS

# Configs written before the task sections (keras_transformer 0.1, and every run directory
# it trained) kept translation's keys in `data` and `training`, and the other tasks read
# their length limit from `data`; `upgrade_layout` moves them (old key: new key in the
# task's section; None: not read by that task, only its old default is accepted).
OLD_TRANSLATION_KEYS = {
    ("data", "source_lang"): None,
    ("data", "target_lang"): None,
    ("data", "target_path"): None,
    ("data", "validation_target_path"): None,
    ("data", "local_dir"): None,
    ("data", "shared_vocab"): True,
    ("data", "source_eos"): True,
    ("data", "max_source_length"): 128,
    ("data", "max_target_length"): 128,
    ("training", "bleu_every"): None,
    ("training", "bleu_beam_size"): 1,
    ("training", "bleu_max_sentences"): None,
}
_OLD_LENGTH_KEY = {
    "tagging": "max_source_length",
    "classification": "max_source_length",
    "language_modeling": "max_target_length",
}


def config_from_dict(cls: type, values: dict[str, Any]) -> Any:
    """Builds and validates an `ExperimentConfig` (`cls`) from nested dicts: unknown keys
    and values of the wrong type are errors that name the key."""
    values = upgrade_layout(values)
    _check_keys(cls, values, "")
    try:
        config = dacite.from_dict(cls, values, config=_DACITE_CONFIG)
    except dacite.DaciteFieldError as e:
        raise ValueError(
            f"Received an invalid value for `{e.field_path}`, expected "
            f"{_type_name(getattr(e, 'field_type', None))}. "
            f"Received: {e.field_path}={_value_at(values, e.field_path)!r}"
        ) from None
    return config.validate()


def upgrade_layout(values: dict[str, Any]) -> dict[str, Any]:
    """Moves the keys of the layout before the task sections into the task's section."""
    old = [
        (section, key)
        for section, key in OLD_TRANSLATION_KEYS
        if isinstance(values.get(section), dict) and key in values[section]
    ]
    if not old:
        return values
    values = {k: dict(v) if isinstance(v, dict) else v for k, v in values.items()}
    task = values.get("task", "translation")
    if task not in TASK_SECTIONS:
        return values  # `validate` names the bad task
    for other in TASK_SECTIONS:
        # The old writer saved every task's section; one that holds only its defaults was
        # written, not set, and says nothing (a section set otherwise is still refused).
        if other != task and _only_defaults(other, values.get(other)):
            del values[other]
    target = values.get(task)
    target = dict(target) if isinstance(target, dict) else {}
    for section, key in old:
        value = values[section].pop(key)
        new = new_key(task, section, key)
        if new is None:
            if value != OLD_TRANSLATION_KEYS[(section, key)]:
                raise ValueError(
                    f"Received `{section}.{key}` for task {task!r}, which does not read it. "
                    f"Received: {section}.{key}={value!r}"
                )
            continue
        name = new.split(".")[1]
        if name in target and target[name] != value:
            raise ValueError(
                f"Received both `{section}.{key}` (the layout before the task sections) and "
                f"`{new}`; keep `{new}`. Received: {section}.{key}={value!r}, "
                f"{new}={target[name]!r}"
            )
        target[name] = value
    values[task] = target
    return values


def _only_defaults(task: str, section: Any) -> bool:
    """Whether ``section`` is a mapping of ``task``'s own keys at their defaults."""
    if not isinstance(section, dict):
        return False
    defaults = {
        f.name: f.default
        for f in dataclasses.fields(TASK_SECTIONS[task])
        if f.default is not dataclasses.MISSING
    }
    return all(key in defaults and defaults[key] == value for key, value in section.items())


def new_key(task: str, section: str, key: str) -> str | None:
    """Where an old-layout key lives now for `task` (None: the task does not read it)."""
    if task == "translation":
        return f"translation.{key}"
    if section == "data" and key == _OLD_LENGTH_KEY.get(task):
        return f"{task}.max_length"
    return None


def _check_keys(cls: type, values: Any, prefix: str) -> None:
    """Unknown keys and non-mapping sections, named with their section (dacite says less)."""
    if not isinstance(values, dict):
        where = f"`{prefix.rstrip('.')}`" if prefix else "the config"
        raise ValueError(
            f"Received an invalid value for {where}, expected a mapping (a config section). "
            f"Received: {values!r}"
        )
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        where = f"section `{prefix.rstrip('.')}`" if prefix else "the config"
        raise ValueError(
            f"Received unknown key(s) {[prefix + k for k in unknown]} in {where}, expected "
            f"some of {sorted(fields)}."
        )
    for name, value in values.items():
        field_type = _SECTIONS.get(name) if not prefix else None
        if field_type is not None and value is not None:
            _check_keys(field_type, value, f"{name}.")


def _float_from_number(value: Any) -> Any:
    """YAML's `1` and `1e-9` (a string to YAML 1.1) where a float is expected."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(h) for h in typing.get_args(hint))
    if origin is list:
        return f"a list of {_type_name(typing.get_args(hint)[0])}"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    return names.get(hint, "null" if hint is type(None) else getattr(hint, "__name__", str(hint)))


def _value_at(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


# Strict: unknown keys are errors (`_check_keys` names them first, with their section).
_DACITE_CONFIG = dacite.Config(strict=True, type_hooks={float: _float_from_number})
_SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "data": DataConfig,
    "training": TrainingConfig,
    **TASK_SECTIONS,
}
