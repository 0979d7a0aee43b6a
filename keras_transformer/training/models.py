"""The models every task trains: `Transformer`, `TransformerEncoderModel` and
`TransformerDecoderModel` with `fit` working under every `tf.distribute` strategy
(`DistributedTrainingMixin`), and `to_plain()` for the model a run saves.

`build_training_model(cls, arguments, ...)` creates and builds one under the current
strategy scope (eagerly, on a tiny batch: building inside `fit`'s symbolic build, which
Keras does under a strategy, would leave `PositionalEncoding`'s table a tensor of a
discarded graph), with gradient recomputation when asked.
"""

from __future__ import annotations

import contextlib
from typing import Any

import keras
import numpy as np

from keras_transformer.layers.dropout import fast_dropout_scope
from keras_transformer.model_config import TransformerConfig
from keras_transformer.models.decoder_model import TransformerDecoderModel
from keras_transformer.models.encoder_model import TransformerEncoderModel
from keras_transformer.models.transformer import Transformer
from keras_transformer.training.distributed import DistributedTrainingMixin


def _build(model: keras.Model) -> None:
    """Builds `model` eagerly on a tiny batch (of pairs for the encoder-decoder)."""
    dummy = np.full((1, 2), 4, "int32")
    model((dummy, dummy) if isinstance(model, Transformer) else dummy, training=False)


class _PlainCopy:
    """`to_plain()`: the plain model class (no training overrides) with a copy of the
    weights, what a run saves as `model.keras`."""

    plain_class: type

    def to_plain(self) -> keras.Model:
        plain = self.plain_class.from_config(self.get_config())
        _build(plain)
        plain.set_weights(self.get_weights())
        return plain


@keras.saving.register_keras_serializable(package="keras_transformer")
class TrainingTransformer(_PlainCopy, DistributedTrainingMixin, Transformer):
    """A `Transformer` whose `fit` works under every `tf.distribute` strategy.

    Same arguments and call as `Transformer`; `DistributedTrainingMixin` fixes Keras 3's
    `fit` under `MultiWorkerMirroredStrategy` and with `jit_compile=True` under
    `MirroredStrategy`, and logs the learning rate.

    Example:
    >>> model = TrainingTransformer.from_preset("tiny", source_vocab_size=100,
    ...                                         target_vocab_size=100)
    >>> ids = keras.ops.ones((1, 4), "int32")
    >>> logits = model((ids, ids))
    >>> type(model.to_plain()).__name__
    'Transformer'
    """

    plain_class = Transformer


@keras.saving.register_keras_serializable(package="keras_transformer")
class TrainingEncoderModel(_PlainCopy, DistributedTrainingMixin, TransformerEncoderModel):
    """A `TransformerEncoderModel` whose `fit` works under every `tf.distribute` strategy.

    Example:
    >>> model = TrainingEncoderModel.from_preset("tiny", vocabulary_size=50, num_classes=3)
    >>> logits = model(keras.ops.ones((1, 4), "int32"))
    >>> type(model.to_plain()).__name__
    'TransformerEncoderModel'
    """

    plain_class = TransformerEncoderModel


@keras.saving.register_keras_serializable(package="keras_transformer")
class TrainingDecoderModel(_PlainCopy, DistributedTrainingMixin, TransformerDecoderModel):
    """A `TransformerDecoderModel` whose `fit` works under every `tf.distribute` strategy.

    Example:
    >>> model = TrainingDecoderModel.from_preset("tiny", vocabulary_size=50)
    >>> logits = model(keras.ops.ones((1, 4), "int32"))
    >>> type(model.to_plain()).__name__
    'TransformerDecoderModel'
    """

    plain_class = TransformerDecoderModel


def build_training_model(
    cls: type, arguments: dict[str, Any], *, remat: bool = False, fast_dropout: bool = False
) -> keras.Model:
    """Creates `cls(**arguments)` and builds it, under the current strategy scope.

    Args:
        cls: `TrainingTransformer`, `TrainingEncoderModel` or `TrainingDecoderModel`.
        arguments: the model's constructor arguments (`dtype` among them, else float32).
        remat: recompute each layer's activations in the backward pass
            (`keras.RematScope`, i.e. `tf.recompute_grad`) to save memory.
        fast_dropout: the model's `Dropout` layers draw 16-bit masks
            (`layers.dropout.fast_dropout_scope`).

    Returns:
        The built model.

    Example:
    >>> from keras_transformer import TransformerConfig
    >>> config = TransformerConfig(source_vocab_size=40, target_vocab_size=40, d_model=16,
    ...                            num_heads=2, d_ff=32, num_encoder_layers=1,
    ...                            num_decoder_layers=1, max_length=16)
    >>> model = build_training_model(TrainingTransformer, config.to_dict(), remat=True)
    >>> model.count_params() > 0
    True
    """
    scopes = [fast_dropout_scope(fast_dropout)]
    if remat:
        # The layers of every stack are named layer_0, layer_1, ...
        num_layers = max(
            arguments.get(key, 0)
            for key in ("num_layers", "num_encoder_layers", "num_decoder_layers")
        )
        names = [f"layer_{i}" for i in range(num_layers)]
        scopes.append(keras.RematScope(mode="list_of_layers", layer_names=names))
    with contextlib.ExitStack() as stack:
        for scope in scopes:
            stack.enter_context(scope)
        model = cls(**arguments)
        _build(model)
    return model


def build_transformer(
    config: TransformerConfig,
    *,
    remat: bool = False,
    fast_dropout: bool = False,
    dtype_policy: str = "float32",
    source_eos: bool | None = None,
) -> TrainingTransformer:
    """The `TrainingTransformer` of an architecture, built (what translation trains).

    Args:
        config: the architecture and vocabulary sizes.
        remat: recompute each layer's activations in the backward pass.
        fast_dropout: 16-bit dropout masks (`build_training_model`).
        dtype_policy: e.g. `"mixed_float16"`, set on the model only (no global state).
        source_eos: whether the training sources end with EOS (saved with the model).

    Returns:
        The built model.

    Example:
    >>> from keras_transformer import TransformerConfig
    >>> model = build_transformer(TransformerConfig(source_vocab_size=40, target_vocab_size=40,
    ...     d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1, num_decoder_layers=1))
    >>> model.dtype_policy.name
    'float32'
    """
    arguments = {**config.to_dict(), "dtype": dtype_policy, "source_eos": source_eos}
    return build_training_model(
        TrainingTransformer, arguments, remat=remat, fast_dropout=fast_dropout
    )
