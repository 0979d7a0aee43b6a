"""Training: the paper's loss, metric, schedule and optimizer, `fit` under `tf.distribute`.

Public API:

- `MaskedSparseCategoricalCrossentropy`, `masked_label_smoothed_cross_entropy`: the
  label-smoothed cross-entropy over real (non-pad) tokens.
- `MaskedSparseCategoricalAccuracy`, `MaskedPerplexity`: token accuracy and perplexity over
  real tokens.
- `TransformerSchedule`: the warmup / inverse square-root learning rate.
- `make_strategy`, `resolve_jit_compile`, `is_chief`: strategies and XLA per strategy.
- `ResumableBackupAndRestore`, `make_callbacks`: resumable training, checkpoints, logs.
- `DistributedTrainingMixin` (`distributed.py`), `TrainingTransformer`: `fit` that works under
  `MultiWorkerMirroredStrategy` and with XLA under `MirroredStrategy`.
- `build_model`, `compile_model`, `make_datasets`, `train`, `TrainingResult`: a whole run.

Modules used on their own: `bleu` (validation BLEU while training, `read_bleu_log`),
`curves` (per-epoch curves from a History, TensorBoard events or `bleu.jsonl`, for
`keras_transformer.plotting`).

Example:

```python
from keras_transformer.config import load_config
from keras_transformer.training import train

config = load_config("multi30k_de_en", ["training.epochs=1"])
result = train(config)  # writes config.training.run_dir
```
"""

from keras_transformer.training.callbacks import ResumableBackupAndRestore, make_callbacks
from keras_transformer.training.distributed import DistributedTrainingMixin
from keras_transformer.training.losses import (
    MaskedSparseCategoricalCrossentropy,
    masked_label_smoothed_cross_entropy,
)
from keras_transformer.training.metrics import MaskedPerplexity, MaskedSparseCategoricalAccuracy
from keras_transformer.training.schedules import TransformerSchedule
from keras_transformer.training.strategies import (
    is_chief,
    make_strategy,
    resolve_jit_compile,
)
from keras_transformer.training.trainer import (
    TrainingResult,
    TrainingTransformer,
    build_model,
    compile_model,
    make_datasets,
    train,
)

__all__ = [
    "DistributedTrainingMixin",
    "MaskedPerplexity",
    "MaskedSparseCategoricalAccuracy",
    "MaskedSparseCategoricalCrossentropy",
    "ResumableBackupAndRestore",
    "TrainingResult",
    "TrainingTransformer",
    "TransformerSchedule",
    "build_model",
    "compile_model",
    "is_chief",
    "make_callbacks",
    "make_datasets",
    "make_strategy",
    "masked_label_smoothed_cross_entropy",
    "resolve_jit_compile",
    "train",
]
