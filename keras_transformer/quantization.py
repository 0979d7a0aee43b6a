"""Post-training weight types for prediction and exports: `quantize_model(model, mode)`.

A trained model is copied with smaller weights; the original is left as it is. The modes
(`constants.QUANTIZATIONS`), as `translate`/`evaluate`/`predict`/`export --quantize` and every
predictor's `quantize` argument take them:

- `int8`: Keras's own `Model.quantize("int8")` on a copy. Every `Dense` and the token
  embeddings (`ReversibleEmbedding`, the tied output projection included) keep int8 weights
  with one float32 scale per output channel (symmetric abs-max); activations are quantised
  at run time, per token (abs-max of each row), and the int8 x int8 -> int32 matmul is
  rescaled to float. LayerNorm, softmax and the positional table stay float32. Weights are
  4x smaller; TensorFlow's int8 matmul is slower than its float32 one on CPU (TF 2.21's
  `BatchMatMulV3` int8 path: 0.16x-0.61x the speed on the AMD EPYC of
  `benchmarks/matmul_types.py`), so it decodes more slowly than float32: use it to shrink a
  model, not to speed it up. The copy computes in float32 whatever the training policy:
  Keras's int8 `Embedding` under `mixed_bfloat16` divides its bf16 lookup by the float32
  scales and returns float32 beside the bf16 positions, which fails (Keras 3.15).
- `bfloat16`: a copy whose weights and activations are bfloat16 (the Keras dtype policy
  `"bfloat16"`); attention softmax, LayerNorm statistics and the output log-probabilities stay
  float32, as under mixed precision. Weights are 2x smaller; on CPUs with AVX512_BF16 (or
  AMX) TensorFlow's oneDNN matmuls run 1.3x-2.0x as fast as float32, which makes it the fast
  CPU path of a SavedModel (no XLA needed). Elsewhere TensorFlow emulates bfloat16 slowly.

Both modes use only TensorFlow core ops, so an export passes the TF Serving op check.

Example (not run as a doctest: it needs a trained run directory):

```python
translator = Translator.from_run_dir("runs/de-en", quantize="bfloat16")
export_run("runs/de-en", "exports", quantize="int8")
```
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from typing import Any

from keras_transformer.constants import QUANTIZATIONS
from keras_transformer.validation import check_one_of

# The dtype policy each mode builds its copy under (int8: `int8_from_float32`).
_POLICIES = {"int8": "float32", "bfloat16": "bfloat16"}


def check_quantize(quantize: str | None) -> str | None:
    """`quantize` itself when it is None or one of `QUANTIZATIONS`.

    Raises:
        ValueError: for any other value, naming the accepted ones.
    """
    if quantize is None:
        return None
    return check_one_of("quantize", quantize, QUANTIZATIONS)


def quantize_model(model: Any, quantize: str | None) -> Any:
    """A copy of a built model with the weight type `quantize` (None: `model` itself).

    Args:
        model: a built model of this package (`Transformer`, `TransformerEncoderModel`,
            `TransformerDecoderModel`) in float32 (or mixed precision: its float32 weights).
        quantize: one of `constants.QUANTIZATIONS`, or None.

    Returns:
        A new model with the same weights in the new type; `model` is unchanged.

    Raises:
        ValueError: for an unknown mode, or a model that is already quantised.

    Example:

    >>> import numpy as np
    >>> from keras_transformer import Transformer
    >>> model = Transformer.from_preset("tiny", 50, 50)
    >>> _ = model((np.ones((1, 3), "int32"), np.ones((1, 2), "int32")))
    >>> small = quantize_model(model, "bfloat16")
    >>> str(small.weights[0].dtype), str(model.weights[0].dtype)
    ('bfloat16', 'float32')
    """
    if check_quantize(quantize) is None:
        return model
    if getattr(model.dtype_policy, "quantization_mode", None) or any(
        "int8" in str(w.dtype) for w in model.weights
    ):
        raise ValueError(
            f"Received a model that is already quantised ({model.name}); expected a float "
            "model: quantise the trained model once."
        )
    config = model.get_config()
    policy = _POLICIES[quantize]
    if policy is not None:
        config["dtype"] = policy
    copy = type(model).from_config(config)
    copy.build_from_config(model.get_build_config())
    copy.set_weights(model.get_weights())  # cast to the copy's variable dtype
    if quantize == "int8":
        with warnings.catch_warnings(), _young_collections_only():
            # Keras warns for every layer without weights to quantise (LayerNorm, Dropout).
            warnings.filterwarnings("ignore", message=".*does not have a `quantize` method")
            copy.quantize("int8")
    return copy


@contextlib.contextmanager
def _young_collections_only():
    """Keras's `Layer.__delattr__` runs `gc.collect()` for every float kernel it replaces:
    about 0.3 s each in a process holding TensorFlow (11.4 s for the tiny preset). Frozen,
    the objects that existed before are not scanned again (`gc.freeze`); still collected
    later, once unfrozen."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
