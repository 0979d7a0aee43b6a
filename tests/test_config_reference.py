"""`docs/configuration.md` is what `tools/config_reference.py` generates from the config
dataclasses, and every key of them is documented."""

import dataclasses
import os

import pytest
from tool_modules import REPO, load_tool

config_reference = load_tool("config_reference")


def test_committed_reference_is_current():
    with open(os.path.join(REPO, config_reference.OUTPUT), encoding="utf-8") as f:
        committed = f.read()
    assert committed == config_reference.render(), (
        f"{config_reference.OUTPUT} is stale: run `{config_reference.COMMAND}` from the "
        "repository root to regenerate it."
    )


def test_every_key_of_every_section_has_a_row():
    from keras_transformer.config import DataConfig, ModelConfig, TrainingConfig
    from keras_transformer.config.task_sections import TASK_SECTIONS

    text = config_reference.render()
    sections = {"model": ModelConfig, "data": DataConfig, "training": TrainingConfig}
    for name, cls in {**sections, **TASK_SECTIONS}.items():
        for field in dataclasses.fields(cls):
            assert f"| `{name}.{field.name}` |" in text
    assert '| `task` | `str` | `"translation"` |' in text
    rows = {row[0]: row for row in config_reference.section_rows(TrainingConfig, "training.")}
    assert rows["training.devices"][1:3] == ("list[str] | None", "null")
    assert rows["training.beta_2"][3] == rows["training.epsilon"][3]  # documented together
    assert "(None: off)" in rows["training.early_stopping_patience"][3]  # wrapped lines joined


def test_an_undocumented_field_is_an_error():
    @dataclasses.dataclass
    class Section:
        """A section.

        Attributes:
            size: documented, over
                two lines.
        """

        size: int = 1
        forgotten: str | None = None

    with pytest.raises(ValueError, match=r"`demo\.forgotten`.*`Section`"):
        config_reference.section_table(Section, "demo.")


def test_an_entry_naming_no_field_is_an_error():
    @dataclasses.dataclass
    class Section:
        """A section.

        Attributes:
            size: documented.
            removed: a key that no longer exists.
        """

        size: int = 1

    with pytest.raises(ValueError, match=r"names no field of `Section`.*'removed'"):
        config_reference.section_rows(Section)


def test_rows_of_a_small_dataclass():
    @dataclasses.dataclass
    class Base:
        """A base.

        Attributes:
            width: inherited entry.
        """

        width: float = 0.5

    @dataclasses.dataclass
    class Section(Base):
        """A section.

        Attributes:
            a, b: two keys
                documented together.
            names (list): a list.
        """

        a: int | None = None
        b: bool = True
        names: list[str] = dataclasses.field(default_factory=lambda: ["x", "y"])

    assert config_reference.section_rows(Section, "s.") == [
        ("s.width", "float", "0.5", "inherited entry."),
        ("s.a", "int | None", "null", "two keys documented together."),
        ("s.b", "bool", "true", "two keys documented together."),
        ("s.names", "list[str]", '["x", "y"]', "a list."),
    ]
    assert "| `s.a` | `int \\| None` | `null` |" in config_reference.section_table(Section, "s.")
