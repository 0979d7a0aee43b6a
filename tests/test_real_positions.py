"""Training and evaluation on the real (non-pad) positions only: the models'
`logit_positions` and `skip_padding` (`keras_transformer.packing`), and the training
models' steps (`DistributedTrainingMixin`)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.models.decoder_model import TransformerDecoderModel
from keras_transformer.models.transformer import Transformer
from keras_transformer.training import compile_model
from keras_transformer.training.losses import (
    LOGIT_ROWS_MULTIPLE,
    MaskedSparseCategoricalCrossentropy,
)
from keras_transformer.training.metrics import MaskedSparseCategoricalAccuracy
from keras_transformer.training.models import TrainingDecoderModel, TrainingTransformer

VOCAB = 23


def padded_ids(rows, length, seed):
    """Random ids in [4, VOCAB), each row right-padded with 0 after a random length >= 1."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, VOCAB, (rows, length)).astype("int32")
    for row, real in enumerate(rng.integers(1, length + 1, rows)):
        ids[row, real:] = 0
    return ids


def tiny(cls, **overrides):
    arguments = {"d_model": 16, "num_heads": 2, "d_ff": 32, "dropout": 0.0, "max_length": 16}
    arguments.update(overrides)
    if issubclass(cls, Transformer):
        arguments.update(
            source_vocab_size=VOCAB,
            target_vocab_size=VOCAB,
            num_encoder_layers=1,
            num_decoder_layers=2,
        )
    else:
        arguments.update(vocabulary_size=VOCAB, num_layers=2)
    return cls(**arguments)


def batch(cls, seed=0):
    """`(x, y)` of a batch of 6 with padding, for `cls`'s call."""
    target = padded_ids(6, 9, seed)
    labels = np.roll(target, -1, axis=1)
    labels[:, -1] = 0
    labels[target == 0] = 0
    if issubclass(cls, Transformer):
        return (padded_ids(6, 7, seed + 1), target), labels
    return target, labels


@pytest.mark.parametrize("cls", [Transformer, TransformerDecoderModel])
def test_logit_positions_give_the_full_logits_at_those_positions(cls):
    keras.utils.set_random_seed(1)
    model = tiny(cls)
    x, labels = batch(cls)
    full = keras.ops.convert_to_numpy(model(x))  # (B, T, V)
    positions = np.flatnonzero(labels.reshape(-1) != 0).astype("int32")
    assert 0 < len(positions) < labels.size
    part = keras.ops.convert_to_numpy(model(x, logit_positions=positions))  # (N, V)
    assert part.shape == (len(positions), VOCAB)
    np.testing.assert_allclose(part, full.reshape(-1, VOCAB)[positions], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls", [Transformer, TransformerDecoderModel])
def test_skip_padding_gives_the_same_logits_at_real_positions(cls):
    keras.utils.set_random_seed(5)
    model = tiny(cls, num_heads=4)
    x, labels = batch(cls, seed=6)
    if cls is Transformer:
        x[0][2] = 0  # an empty source: its row is all padding
        target = x[1]
    else:
        target = x
    real = target.reshape(-1) != 0
    assert 0 < real.sum() < real.size
    full = keras.ops.convert_to_numpy(model(x)).reshape(-1, VOCAB)  # (B * T, V)
    skipped = keras.ops.convert_to_numpy(model(x, skip_padding=True)).reshape(-1, VOCAB)
    np.testing.assert_allclose(skipped[real], full[real], rtol=1e-5, atol=1e-5)
    positions = np.flatnonzero(real).astype("int32")
    both = model(x, skip_padding=True, logit_positions=positions)  # (N, V)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(both), full[real], rtol=1e-5, atol=1e-5)


def test_skip_padding_is_refused_with_a_decoding_cache():
    model = tiny(TransformerDecoderModel)
    ids = padded_ids(2, 5, seed=7)
    model(ids)
    cache = model.decoder.init_cache(2, 8)
    with pytest.raises(ValueError, match="skip_padding=True"):
        model.decoder(ids[:, :1], cache=cache, cache_update_index=0, skip_padding=True)


class LogitRanks(keras.metrics.Metric):
    """Records the rank of the predictions it is given (while the step is traced)."""

    def __init__(self, **kwargs):
        super().__init__(name="ranks", **kwargs)
        self.ranks = []
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.ranks.append(len(y_pred.shape))
        self.total.assign_add(0.0)

    def result(self):
        return self.total


@pytest.mark.parametrize(
    "plain_cls, training_cls",
    [(Transformer, TrainingTransformer), (TransformerDecoderModel, TrainingDecoderModel)],
)
@pytest.mark.parametrize("per_example_weights", [False, True])
def test_steps_on_real_positions_match_keras_steps_on_every_position(
    plain_cls, training_cls, per_example_weights
):
    """Keras' own train/test steps (the plain model: logits at every position, the loss
    masking padding) and the training model's (logits at the real positions only) give
    the same loss, accuracy and updated weights."""
    x, labels = batch(plain_cls, seed=3)
    sample_weight = np.linspace(0.5, 2.0, len(labels)).astype("float32")
    sample_weight = sample_weight if per_example_weights else None
    keras.utils.set_random_seed(4)
    initial = tiny(plain_cls)
    initial(x)
    outcomes = {}
    for cls in (plain_cls, training_cls):
        model = tiny(cls)
        model(x)
        model.set_weights(initial.get_weights())
        ranks = LogitRanks()
        metrics = [MaskedSparseCategoricalAccuracy(pad_id=0), ranks]
        # SGD: its update is the gradient. (Adam's first update is lr * sign(gradient),
        # which turns rounding noise into whole steps where the gradient is zero in exact
        # arithmetic, as for the self-attention key biases.)
        model.compile(
            optimizer=keras.optimizers.SGD(0.5),
            loss=MaskedSparseCategoricalCrossentropy(pad_id=0),
            metrics=metrics,
            jit_compile=False,
        )
        trained = model.train_on_batch(x, labels, sample_weight=sample_weight, return_dict=True)
        evaluated = model.test_on_batch(x, labels, sample_weight=sample_weight, return_dict=True)
        outcomes[cls] = (trained, evaluated, model.get_weights(), ranks.ranks)
    plain, real = outcomes[plain_cls], outcomes[training_cls]
    for logs in (0, 1):
        for name in ("loss", "accuracy"):
            np.testing.assert_allclose(real[logs][name], plain[logs][name], rtol=1e-5)
    for after, expected in zip(real[2], plain[2]):
        np.testing.assert_allclose(after, expected, rtol=1e-5, atol=1e-6)
    assert set(plain[3]) == {3}  # (B, T, V)
    # The training model builds its metrics first (Keras' symbolic build, from the model's
    # output, (B, T, V)), then its train and test steps give them the real positions only.
    assert real[3] == [3, 2, 2]  # (N, V)


def test_xla_steps_keep_every_position():
    """XLA needs static shapes: a compiled step projects every position."""
    x, labels = batch(Transformer)
    model = tiny(TrainingTransformer)
    model(x)
    ranks = LogitRanks()
    compile_model(model, warmup_steps=10, jit_compile=True, metrics=[ranks])
    logs = model.train_on_batch(x, labels, return_dict=True)
    assert np.isfinite(logs["loss"])
    assert set(ranks.ranks) == {3}


def test_other_losses_keep_every_position():
    """With a loss that is not the masked cross-entropy the step is Keras' own."""
    x, labels = batch(Transformer)
    model = tiny(TrainingTransformer)
    model(x)
    ranks = LogitRanks()
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[ranks],
    )
    model.train_on_batch(x, labels)
    assert set(ranks.ranks) == {3}
    assert model.real_label_positions(labels) is None


class RowsAndWeights(keras.metrics.Metric):
    """Sums the rows of predictions it is given and their sample weights (-1 without)."""

    def __init__(self, **kwargs):
        super().__init__(name="rows", **kwargs)
        self.rows = self.add_variable(shape=(), initializer="zeros", name="rows")
        self.weight = self.add_variable(shape=(), initializer="zeros", name="weight")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.rows.assign_add(keras.ops.cast(keras.ops.shape(y_pred)[0], "float32"))
        if sample_weight is None:
            self.weight.assign_add(-1.0)
        else:
            self.weight.assign_add(keras.ops.sum(keras.ops.cast(sample_weight, "float32")))

    def result(self):
        return self.rows, self.weight


class RowsOfTheLoss(MaskedSparseCategoricalCrossentropy):
    """The masked loss, recording the number of rows of logits of its last call."""

    rows = tf.Variable(0)

    def call(self, y_true, y_pred):
        RowsOfTheLoss.rows.assign(tf.shape(y_pred)[0])
        return super().call(y_true, y_pred)


@pytest.mark.parametrize("per_example_weights", [False, True])
def test_the_loss_gets_a_multiple_of_rows_and_the_metrics_the_real_ones(per_example_weights):
    """The loss is compiled once per number of rows: the steps pad the real positions to a
    multiple of `LOGIT_ROWS_MULTIPLE` with rows that weigh 0, and give the metrics the real
    rows only, with the batch's sample weights if it has them."""
    x, labels = batch(Transformer, seed=8)
    real = int((labels != 0).sum())
    sample_weight = np.full(len(labels), 2.0, "float32") if per_example_weights else None
    model = tiny(TrainingTransformer)
    model(x)
    tracker = RowsAndWeights()
    model.compile(
        optimizer="sgd",
        loss=RowsOfTheLoss(pad_id=0),
        weighted_metrics=[tracker],  # Keras gives the sample weights to these only
        jit_compile=False,
    )
    logs = model.train_on_batch(x, labels, sample_weight=sample_weight, return_dict=True)
    rows, weight = (float(v) for v in tracker.result())
    assert rows == real
    assert weight == (2.0 * real if per_example_weights else -1.0)
    padded = LOGIT_ROWS_MULTIPLE * -(-real // LOGIT_ROWS_MULTIPLE)
    assert padded > real and int(RowsOfTheLoss.rows.numpy()) == padded
    # The extra rows weigh nothing: the loss is the plain model's on every position.
    plain = tiny(Transformer)
    plain(x)
    plain.set_weights(model.get_weights())  # the weights after the step; compare the loss
    expected = MaskedSparseCategoricalCrossentropy(pad_id=0)(labels, plain(x), sample_weight)
    after = model.test_on_batch(x, labels, sample_weight=sample_weight, return_dict=True)
    np.testing.assert_allclose(after["loss"], float(expected), rtol=1e-5)
    assert np.isfinite(logs["loss"])
