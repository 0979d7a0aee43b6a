"""keras_transformer: the encoder-decoder Transformer for machine translation in Keras 3, and
the encoder-only and decoder-only models built from the same layers.

The workflow from Python, one import:

```python
from keras_transformer import load_config, train, evaluate_run, export_run, Translator

config = load_config("multi30k_de_en", training={"max_minutes": 10})
result = train(config, "runs/de-en")  # or train(config, run_dir, train_data=pairs)
translator = result.predictor(beam_size=4)  # Translator.from_run_dir("runs/de-en")
translator.translate(["Ein Hund läuft durch den Schnee."])
evaluate_run("runs/de-en", "test").format()
export_run("runs/de-en", "exports")  # a SavedModel that TF Serving serves
```
"""

import importlib

from keras_transformer.onednn import use_onednn_by_default

use_onednn_by_default()  # before the imports below bring in TensorFlow

from keras_transformer import layers, masks  # noqa: E402
from keras_transformer.model_config import TransformerConfig  # noqa: E402
from keras_transformer.models import (  # noqa: E402
    PRESETS,
    Transformer,
    TransformerDecoderModel,
    TransformerEncoderModel,
)

__version__ = "0.1.0"

# Imported on first use: they pull in tensorflow-datasets / tensorflow-text.
_LAZY_MODULES = (
    "config",
    "data",
    "decoding",
    "evaluation",
    "export",
    "plotting",
    "predictors",
    "runner",
    "serving",
    "tasks",
    "tokenization",
    "training",
)


# The workflow's functions and classes, imported on first use too: name -> module.
_LAZY_ATTRIBUTES = {
    "load_config": "config",
    "train": "runner",
    "evaluate_run": "runner",
    "export_run": "export",
    "export_predictor": "export",
    "Translator": "predictors",
    "TextGenerator": "predictors",
    "TextTagger": "predictors",
    "TextClassifier": "predictors",
}


def __getattr__(name: str):
    if name in _LAZY_MODULES:
        return importlib.import_module(f"keras_transformer.{name}")
    if name in _LAZY_ATTRIBUTES:
        module = importlib.import_module(f"keras_transformer.{_LAZY_ATTRIBUTES[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'keras_transformer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY_MODULES, *_LAZY_ATTRIBUTES})


__all__ = [
    "TextClassifier",
    "TextGenerator",
    "PRESETS",
    "TextTagger",
    "Translator",
    "Transformer",
    "TransformerConfig",
    "TransformerDecoderModel",
    "TransformerEncoderModel",
    "__version__",
    "evaluate_run",
    "export_predictor",
    "export_run",
    "layers",
    "load_config",
    "masks",
    "train",
]
