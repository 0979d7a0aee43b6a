"""The four tasks behind one interface (`base.Task`), found by name (`get_task`).

- `base.py`: `Task`, what a task owns (data, encoding, model, loss, callbacks,
  evaluation, predictor, export signatures).
- `translation.py`, `tagging.py`, `classification.py`, `language_modeling.py`: the tasks;
  `labelled.py`: what tagging and classification share.
- `registry.py`: `register_task`, `get_task(config)`, `task_class(name)`.

Example:

```python
from keras_transformer.config import load_config
from keras_transformer.tasks import get_task

task = get_task(load_config("conll2003_pos"))
task.name, task.model_name  # ("tagging", "tagger")
```
"""

# Each task module registers its task on import.
from keras_transformer.tasks import classification, language_modeling, tagging, translation
from keras_transformer.tasks.base import Task
from keras_transformer.tasks.registry import get_task, register_task, task_class

__all__ = [
    "Task",
    "classification",
    "get_task",
    "language_modeling",
    "register_task",
    "tagging",
    "task_class",
    "translation",
]
