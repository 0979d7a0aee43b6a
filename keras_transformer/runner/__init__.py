"""One path for every task: `train(config)`, `evaluate_run(run_dir)` and, in
`keras_transformer.export`, `export_run(run_dir)`; each asks the run's `Task`
(`keras_transformer.tasks`) and never branches on a task's name.

Example (not run as a doctest: it trains a model):

```python
from keras_transformer.config import load_config
from keras_transformer.runner import evaluate_run, train

result = train(load_config("multi30k_de_en", ["training.epochs=1"]))
print(evaluate_run(result.paths.root, "test").format())
```
"""

from keras_transformer.runner.evaluate import evaluate_run, run_config
from keras_transformer.runner.train import (
    TrainingResult,
    build_and_compile,
    train,
    training_data,
)

__all__ = [
    "TrainingResult",
    "build_and_compile",
    "evaluate_run",
    "run_config",
    "train",
    "training_data",
]
