"""`ExperimentConfig`: the shared `model`, `data`, `training` sections, the `task` and that
task's own section (`config.task_sections`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from keras_transformer.config.building import config_from_dict
from keras_transformer.config.sections import (
    DataConfig,
    ModelConfig,
    TrainingConfig,
    validate_data,
    validate_model,
    validate_training,
)
from keras_transformer.config.task_sections import (
    TASK_SECTIONS,
    ClassificationConfig,
    LanguageModelingConfig,
    TaggingConfig,
    TranslationConfig,
)
from keras_transformer.constants import TASKS
from keras_transformer.validation import check_one_of


@dataclass
class ExperimentConfig:
    """A training experiment: the `model`, `data` and `training` sections every task reads,
    the `task` (one of `constants.TASKS`) and the section of that task only.

    Load one with `keras_transformer.config.load_config(path, overrides)`; `validate()`
    checks the values. The run's task section is created with its defaults when absent;
    a section of another task is an error, as is a shared key the task does not read
    (the section's `unread_keys`) set to anything but its default.

    Attributes:
        model: the architecture (`ModelConfig`).
        data: the corpus, tokenizers and batching (`DataConfig`).
        training: optimization, distribution and the run directory (`TrainingConfig`).
        task: what the run trains: `"translation"`, `"tagging"`, `"classification"` or
            `"language_modeling"`; it picks the `Task` and the one task section read.
        translation: translation's section (`TranslationConfig`).
        tagging: tagging's section (`TaggingConfig`).
        classification: classification's section (`ClassificationConfig`).
        language_modeling: language modelling's section (`LanguageModelingConfig`).
    """

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    task: str = "translation"
    translation: TranslationConfig | None = None
    tagging: TaggingConfig | None = None
    classification: ClassificationConfig | None = None
    language_modeling: LanguageModelingConfig | None = None

    def __post_init__(self) -> None:
        if self.task in TASK_SECTIONS and getattr(self, self.task) is None:
            setattr(self, self.task, TASK_SECTIONS[self.task]())

    @property
    def section(self) -> Any:
        """The run's task section (`config.translation` for a translation run, ...)."""
        return getattr(self, self.task)

    def to_dict(self) -> dict[str, Any]:
        """The config as `save_config` writes it: the run's task section only."""
        values = dataclasses.asdict(self)
        for task in TASKS:
            if values.get(task) is None:
                del values[task]
        return values

    def changes_from(self, other: ExperimentConfig) -> dict[str, tuple[Any, Any]]:
        """The keys whose values differ from `other`'s, by their dotted names, in the
        config's order: `{"model.d_model": (32, 64)}` (`other`'s value first)."""
        mine, theirs = _dotted(self.to_dict()), _dotted(other.to_dict())
        keys = list(theirs) + [key for key in mine if key not in theirs]
        return {
            key: (theirs.get(key), mine.get(key))
            for key in keys
            if theirs.get(key) != mine.get(key)
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ExperimentConfig:
        """Builds and validates a config; `ValueError` on unknown keys or bad values."""
        return config_from_dict(cls, values)

    def validate(self) -> ExperimentConfig:
        """Checks values beyond their types; raises `ValueError` naming the key."""
        task = check_one_of("task", self.task, TASKS)
        self.__post_init__()
        for other in TASKS:
            if other != task and getattr(self, other) is not None:
                raise ValueError(
                    f"Received the `{other}` section for task {task!r}, which reads only its "
                    f"own section `{task}`; remove `{other}` or set `task: {other}`."
                )
        validate_model(self.model)
        validate_data(self.data)
        validate_training(self.training)
        section = self.section
        for key in section.unread_keys:
            name, field = key.split(".")
            value = getattr(getattr(self, name), field)
            default = _DEFAULTS[name][field]
            if value != default:
                raise ValueError(
                    f"Received `{key}` for task {task!r}, which does not read it; remove it "
                    f"(default: {default!r}). Received: {key}={value!r}"
                )
        section.validate(self)
        return self


def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: getattr(cls(), f.name) for f in dataclasses.fields(cls)}


_DEFAULTS = {
    "model": _defaults(ModelConfig),
    "data": _defaults(DataConfig),
    "training": _defaults(TrainingConfig),
}


def _dotted(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"model": {"d_model": 32}}` as `{"model.d_model": 32}`."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
