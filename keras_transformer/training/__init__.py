"""Training: the paper's loss, metric, schedule and optimizer, `fit` under `tf.distribute`.

Public API:

- `MaskedSparseCategoricalCrossentropy`, `masked_label_smoothed_cross_entropy`: the
  label-smoothed cross-entropy over real (non-pad) tokens.
- `MaskedSparseCategoricalAccuracy`, `MaskedPerplexity`: token accuracy and perplexity over
  real tokens.
- `TransformerSchedule`: the warmup / inverse square-root learning rate.
- `make_strategy`, `resolve_jit_compile`, `resolve_dtype_policy`, `is_chief`: strategies,
  XLA per strategy and the dtype policy per hardware (`training.dtype_policy: auto`).
- `ResumableBackupAndRestore`, `make_callbacks`: resumable training, checkpoints, logs.
- `DistributedTrainingMixin` (`distributed.py`); `TrainingTransformer`,
  `TrainingEncoderModel`, `TrainingDecoderModel`, `build_training_model`,
  `build_transformer` (`models.py`):
  `fit` that works under `MultiWorkerMirroredStrategy` and with XLA under
  `MirroredStrategy`, and `to_plain()` for the saved model.
- `compile_model` (`compile.py`): Adam with the schedule, a task's loss and metrics.
- `fit_and_save` (`run_loop.py`): the run loop every task shares.

A whole run of any task is `keras_transformer.runner.train(config)`, which asks the
run's task (`keras_transformer.tasks`) for its data, model, loss and callbacks.

Modules used on their own: `bleu` (validation BLEU while training, `read_bleu_log`),
`curves` (per-epoch curves from a History, TensorBoard events or `bleu.jsonl`, for
`keras_transformer.plotting`).

Example:

```python
from keras_transformer.config import load_config
from keras_transformer.runner import train

config = load_config("multi30k_de_en", ["training.epochs=1"])
result = train(config)  # writes config.training.run_dir
```
"""

from keras_transformer.training.callbacks import ResumableBackupAndRestore, make_callbacks
from keras_transformer.training.compile import compile_model
from keras_transformer.training.distributed import DistributedTrainingMixin
from keras_transformer.training.losses import (
    MaskedSparseCategoricalCrossentropy,
    masked_label_smoothed_cross_entropy,
)
from keras_transformer.training.metrics import MaskedPerplexity, MaskedSparseCategoricalAccuracy
from keras_transformer.training.models import (
    TrainingDecoderModel,
    TrainingEncoderModel,
    TrainingTransformer,
    build_training_model,
    build_transformer,
)
from keras_transformer.training.schedules import TransformerSchedule
from keras_transformer.training.strategies import (
    is_chief,
    make_strategy,
    resolve_dtype_policy,
    resolve_jit_compile,
)

__all__ = [
    "DistributedTrainingMixin",
    "MaskedPerplexity",
    "MaskedSparseCategoricalAccuracy",
    "MaskedSparseCategoricalCrossentropy",
    "ResumableBackupAndRestore",
    "TrainingDecoderModel",
    "TrainingEncoderModel",
    "TrainingTransformer",
    "TransformerSchedule",
    "build_training_model",
    "build_transformer",
    "compile_model",
    "is_chief",
    "make_callbacks",
    "make_strategy",
    "masked_label_smoothed_cross_entropy",
    "resolve_dtype_policy",
    "resolve_jit_compile",
]
