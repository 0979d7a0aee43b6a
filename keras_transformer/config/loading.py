"""Reading and writing experiment configs: YAML/JSON files, packaged configs by name and
`section.key=value` overrides (in the layout before the task sections too)."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

from keras_transformer import storage
from keras_transformer.config.building import OLD_TRANSLATION_KEYS, new_key, upgrade_layout
from keras_transformer.config.experiment import ExperimentConfig
from keras_transformer.config.sections import BATCH_SIZE_ALTERNATIVES

CONFIGS_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs")

Overrides = Sequence[str] | Mapping[str, Any]

# The sections an experiment config file holds (the shared ones and the tasks').
_SECTIONS = frozenset(f.name for f in dataclasses.fields(ExperimentConfig)) - {"task"}


def packaged_configs() -> list[str]:
    """The names of the configs packaged in `keras_transformer/configs`."""
    return sorted(
        name.removesuffix(".yaml") for name in os.listdir(CONFIGS_DIR) if name.endswith(".yaml")
    )


def load_config(
    path: str | None = None, overrides: Overrides | None = None, **sections: Any
) -> ExperimentConfig:
    """Reads an experiment config from YAML or JSON and applies overrides.

    Overrides come as strings, `["training.epochs=1"]` (the values parsed as YAML: `1`,
    `0.5`, `true`, `null`, `[a, b]`, text), as a dict of dotted keys,
    `{"training.epochs": 1}`, or as keyword arguments, one a section,
    `training={"epochs": 1}` (`task="classification"` for the top-level key); the keyword
    arguments apply last; a mapping value in any of them sets its keys one by one
    (`{"data": {"batch_size": 8}}` is `data.batch_size=8`), the rest of the section kept.
    Values are type-checked against the dataclass fields like the file's values; a file
    that gives a key twice in one mapping is refused. `data.batch_size` and
    `data.tokens_per_batch` are alternatives: an override that sets one clears the other.

    Args:
        path: a `.yaml`/`.yml`/`.json` file; None starts from the defaults. A bare name such
            as `"multi30k_de_en"` selects a config packaged in `keras_transformer/configs`
            (`packaged_configs()`).
        overrides: e.g. `["training.epochs=1", "data.max_train_examples=2000"]` or
            `{"training.epochs": 1}`.
        **sections: e.g. `training={"epochs": 1}, data={"batch_size": 32}`.

    Returns:
        The validated `ExperimentConfig`.

    Raises:
        ValueError: for an unknown key, a value of the wrong type or an invalid value.
        FileNotFoundError: when `path` does not exist.

    Example:
    >>> config = load_config("multi30k_de_en", ["training.epochs=1"])
    >>> config.training.epochs, config.model.d_model, config.translation.source_lang
    (1, 256, 'de')
    >>> load_config("multi30k_de_en", training={"epochs": 2}).training.epochs
    2
    """
    import yaml

    values: dict[str, Any] = {}
    if path is not None:
        resolved = _resolve_config_path(path)
        try:
            loaded = yaml.load(storage.read_text(resolved), Loader=_unique_key_loader())
        except yaml.YAMLError as e:
            raise ValueError(f"Could not parse the config file {resolved}: {e}") from e
        except UnicodeDecodeError as e:
            raise ValueError(f"Could not read the config file {resolved} as UTF-8: {e}") from e
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ValueError(
                f"Received an invalid config file {resolved}, expected a mapping of the "
                f"sections 'model', 'data', 'training'. Received: {type(loaded).__name__}"
            )
        # A section whose keys are all commented out (`training:`) reads as null: empty.
        values = {k: {} if v is None and k in _SECTIONS else v for k, v in loaded.items()}
        values = upgrade_layout(values)
    for key, value in _override_items(overrides, sections):
        parts = key.split(".")
        if tuple(parts) in OLD_TRANSLATION_KEYS:
            # An override in the old layout sets the key where it lives now.
            task = values.get("task", "translation")
            parts = (new_key(task, *parts) or key).split(".")
        _set_path(values, parts, value, key)
        alternative = BATCH_SIZE_ALTERNATIVES.get(key.removeprefix("data."))
        if key.startswith("data.") and alternative and value is not None:
            # The two batch sizes are alternatives: setting one replaces the other.
            values["data"][alternative] = None
    return ExperimentConfig.from_dict(values)


def override_keys(overrides: Overrides | None) -> list[str]:
    """The dotted keys that `overrides` set, in any form `load_config` takes them.

    Example:
    >>> override_keys({"data.source": "multi30k"}) == override_keys("data.source=multi30k")
    True
    """
    return [key for key, _ in _override_items(overrides, {})]


def _override_items(
    overrides: Overrides | None, sections: Mapping[str, Any]
) -> list[tuple[str, Any]]:
    """`(dotted key, value)` of the overrides (strings parsed as YAML) and of the keyword
    sections, in that order."""
    import yaml

    items: list[tuple[str, Any]] = []
    if isinstance(overrides, Mapping):
        items += [(str(key).strip(), value) for key, value in overrides.items()]
    else:
        if isinstance(overrides, str):
            overrides = [overrides]
        for override in overrides or []:
            key, sep, raw = str(override).partition("=")
            if not sep or not key.strip():
                raise ValueError(
                    "Received an invalid override, expected `section.key=value` such as "
                    f"`training.epochs=1`. Received: {override!r}"
                )
            try:
                value = yaml.safe_load(raw) if raw.strip() else ""
            except yaml.YAMLError:
                value = raw
            items.append((key.strip(), value))
    items += list(sections.items())
    # A mapping value sets its keys one by one (`{"data": {"batch_size": 8}}` is
    # `data.batch_size=8`): the rest of its section stays as it was.
    items = [pair for key, value in items for pair in _flatten(str(key).strip(), value)]
    for key, _ in items:
        if not key or "" in key.split("."):
            raise ValueError(
                "Received an invalid override key, expected `section.key` such as "
                f"`training.epochs`. Received: {key!r}"
            )
    return items


@functools.cache
def _unique_key_loader() -> type:
    """PyYAML's safe loader, refusing a key given twice in one mapping (a second
    `training:` block silently replaced the first)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict:
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found the key {key!r} twice",
                        key_node.start_mark,
                    )
                seen.add(key)
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def _flatten(key: str, value: Any) -> list[tuple[str, Any]]:
    """`(dotted key, value)` pairs of a value, a mapping's leaves one by one."""
    if not isinstance(value, Mapping) or not value:
        return [(key, value)]
    return [pair for inner, v in value.items() for pair in _flatten(f"{key}.{inner}", v)]


def save_config(config: ExperimentConfig, path: str) -> None:
    """Writes `config` as YAML (as `load_config` reads it)."""
    import yaml

    storage.write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))


def _resolve_config_path(path: str) -> str:
    if storage.exists(path):
        return path
    packaged = os.path.join(CONFIGS_DIR, f"{path}.yaml")
    if os.sep not in path and "/" not in path and os.path.exists(packaged):
        return packaged
    raise FileNotFoundError(f"No config file at {path!r} (nor a packaged config of that name).")


def _set_path(values: dict[str, Any], parts: list[str], value: Any, key: str) -> None:
    node = values
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ValueError(
                f"Received an invalid override key {key!r}: {part!r} is not a section."
            )
        node = child
    node[parts[-1]] = value
