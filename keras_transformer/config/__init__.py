"""The experiment config that `keras-transformer train` reads.

`load_config(path, overrides)` reads YAML or JSON (or a packaged config by name, from
`keras_transformer/configs/`), applies `section.key=value` overrides, builds the dataclasses
with `dacite` (unknown keys and values of the wrong type are errors that name the key) and
checks the values (`ExperimentConfig.validate`, with the rules of
`keras_transformer.validation`).

- `sections.py`: `model` (the architecture of `keras_transformer.model_config` without the
  vocabulary sizes, which come from the tokenizers), `data` and `training`, which every
  task reads.
- `task_sections.py`: each task's own section (`translation`, `tagging`,
  `classification`, `language_modeling`); a config holds its `task`'s only.
- `experiment.py`: `ExperimentConfig`.
- `building.py`: building one from nested dicts, and the layout before the task sections.
- `loading.py`: `load_config`, `save_config`, `packaged_configs`.
"""

from keras_transformer.config.experiment import ExperimentConfig
from keras_transformer.config.loading import (
    CONFIGS_DIR,
    load_config,
    packaged_configs,
    save_config,
)
from keras_transformer.config.sections import DataConfig, ModelConfig, TrainingConfig
from keras_transformer.config.task_sections import (
    TASK_SECTIONS,
    ClassificationConfig,
    LanguageModelingConfig,
    TaggingConfig,
    TranslationConfig,
)

__all__ = [
    "CONFIGS_DIR",
    "TASK_SECTIONS",
    "ClassificationConfig",
    "DataConfig",
    "ExperimentConfig",
    "LanguageModelingConfig",
    "ModelConfig",
    "TaggingConfig",
    "TrainingConfig",
    "TranslationConfig",
    "load_config",
    "packaged_configs",
    "save_config",
]
