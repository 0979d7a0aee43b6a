"""The tasks by name: `register_task` (a class decorator) and `get_task`.

Each task module registers its class when imported; `keras_transformer.tasks` imports them
all, so the registry is full wherever the package is imported.
"""

from __future__ import annotations

from typing import Any

from keras_transformer.constants import TASKS
from keras_transformer.validation import check_one_of

_TASKS: dict[str, type] = {}


def register_task(cls: type) -> type:
    """Registers a `Task` subclass under its `name` (one of `constants.TASKS`)."""
    check_one_of("name", cls.name, TASKS)
    _TASKS[cls.name] = cls
    return cls


def task_class(name: str) -> type:
    """The `Task` subclass of the task `name`."""
    check_one_of("task", name, TASKS)
    return _TASKS[name]


def get_task(config: Any) -> Any:
    """The `Task` of an `ExperimentConfig` (its `task`)."""
    return task_class(config.task)(config)
