"""R-Drop (`keras_transformer.training.rdrop`, `training.rdrop_alpha`): each batch trained
twice, the two passes' predictions pulled together by a symmetric KL term."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_own_data import _config, corpus  # noqa: F401  (a fixture)
from test_real_positions import RowsAndWeights, RowsOfTheLoss, batch, tiny
from test_training_fit import dataset, tiny_config

from keras_transformer.config import ExperimentConfig, TrainingConfig
from keras_transformer.config.sections import validate_training
from keras_transformer.models.transformer import Transformer
from keras_transformer.runner.train import _optimizer_options
from keras_transformer.training import compile_model
from keras_transformer.training.budget import TimeBudget
from keras_transformer.training.losses import (
    LOGIT_ROWS_MULTIPLE,
    MaskedSparseCategoricalCrossentropy,
)
from keras_transformer.training.metrics import MaskedSparseCategoricalAccuracy
from keras_transformer.training.models import (
    TrainingDecoderModel,
    TrainingTransformer,
    build_transformer,
)
from keras_transformer.training.rdrop import _symmetric_kl, consistency_loss, twice


def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def symmetric_kl(a, b):
    log_p, log_q = log_softmax(a), log_softmax(b)
    return 0.5 * ((np.exp(log_p) - np.exp(log_q)) * (log_p - log_q)).sum(-1)


def test_consistency_loss_is_the_mean_symmetric_kl_over_counted_labels():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 5, 11)).astype("float32") * 3  # 2 passes of (3, 5)
    labels = rng.integers(1, 11, (3, 5)).astype("int32")
    labels[0, 3:] = 0
    labels[2, 1:] = 0
    weights = np.array([1.0, 2.0, 0.5], "float32")
    kl = symmetric_kl(logits[:3], logits[3:])  # (3, 5)
    counted = (labels != 0) * weights[:, None]
    expected = (kl * counted).sum() / counted.sum()
    got = consistency_loss(
        np.concatenate([labels, labels]), logits, np.concatenate([weights, weights]), pad_id=0
    )
    np.testing.assert_allclose(float(got), expected, rtol=1e-5)
    # Without a pad id or weights every label counts; identical passes give 0.
    got = consistency_loss(np.concatenate([labels, labels]), logits)
    np.testing.assert_allclose(float(got), kl.mean(), rtol=1e-5)
    same = np.concatenate([logits[:3], logits[:3]])
    assert float(consistency_loss(np.concatenate([labels, labels]), same)) == pytest.approx(0.0)


@pytest.mark.parametrize("compiled", [True, False])
def test_the_kl_kernels_gradient_is_autodiffs(compiled):
    """The hand-written gradient (XLA-compiled alone, or the plain body that joins a compiled
    step) equals autodiff's through log-softmax, for both passes' logits, in float32; in
    bfloat16 it comes back in the logits' dtype, close to float32's."""
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(6, 3, 50)).astype("float32") * 3  # 2 passes of (3, 3)
    upstream = rng.uniform(0.5, 2.0, size=(3, 3)).astype("float32")

    def reference(z):
        log_p, log_q = tf.nn.log_softmax(z[:3]), tf.nn.log_softmax(z[3:])
        return 0.5 * tf.reduce_sum((tf.exp(log_p) - tf.exp(log_q)) * (log_p - log_q), -1)

    def value_and_gradient(function, z):
        z = tf.constant(z)
        with tf.GradientTape() as tape:
            tape.watch(z)
            kl = function(z)
            total = tf.reduce_sum(tf.cast(kl, tf.float32) * upstream)
        return kl.numpy(), tape.gradient(total, z)

    expected_kl, expected = value_and_gradient(reference, logits)
    kl, gradient = value_and_gradient(lambda z: _symmetric_kl(z, compiled=compiled), logits)
    np.testing.assert_allclose(kl, symmetric_kl(logits[:3], logits[3:]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kl, expected_kl, rtol=1e-5, atol=1e-6)
    # both passes' rows get a gradient, so the comparison below tests both halves
    assert min(np.abs(expected.numpy()[:3]).max(), np.abs(expected.numpy()[3:]).max()) > 0.1
    np.testing.assert_allclose(gradient.numpy(), expected.numpy(), rtol=1e-4, atol=1e-6)
    low = tf.cast(logits, tf.bfloat16).numpy()
    kl, gradient = value_and_gradient(lambda z: _symmetric_kl(z, compiled=compiled), low)
    assert kl.dtype == np.float32 and gradient.dtype == tf.bfloat16
    np.testing.assert_allclose(
        tf.cast(gradient, tf.float32).numpy(), expected.numpy(), rtol=0.05, atol=0.02
    )


def step(model, x, labels, loss, metrics, jit_compile, rdrop_alpha, initial):
    model(x)
    model.set_weights(initial)
    # SGD: its update is the gradient (see test_real_positions).
    model.compile(
        optimizer=keras.optimizers.SGD(0.5),
        loss=loss,
        metrics=metrics,
        jit_compile=jit_compile,
        rdrop_alpha=rdrop_alpha,
    )
    logs = model.train_on_batch(x, labels, return_dict=True)
    return logs, model.get_weights()


@pytest.mark.parametrize(
    "cls, jit_compile, masked",
    [
        (TrainingTransformer, False, True),  # the real positions' step
        (TrainingDecoderModel, False, True),
        (TrainingTransformer, True, True),  # Keras' step, XLA-compiled, every position
        (TrainingTransformer, False, False),  # Keras' step for another loss
    ],
)
def test_without_dropout_the_step_is_the_plain_one(cls, jit_compile, masked):
    """Without dropout both passes predict the same: the KL term is 0, the loss over the
    doubled batch is the loss of one, and the update, the loss and the metrics (one pass's
    rows) equal a step without R-Drop, on every training path."""
    x, labels = batch(cls, seed=3)
    keras.utils.set_random_seed(4)
    initial = tiny(cls)
    initial(x)
    outcomes = []
    for alpha in (0.0, 5.0):
        model = tiny(cls)
        rows = RowsAndWeights()
        accuracy = MaskedSparseCategoricalAccuracy(pad_id=0)
        loss = (
            MaskedSparseCategoricalCrossentropy(pad_id=0)
            if masked
            else keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        logs, weights = step(
            model, x, labels, loss, [accuracy, rows], jit_compile, alpha, initial.get_weights()
        )
        assert model.rdrop_alpha == alpha
        outcomes.append((logs, weights, float(rows.result()[0]), float(accuracy.count)))
    (plain, plain_weights, plain_rows, plain_count), (rdrop, rdrop_weights, rows, count) = outcomes
    np.testing.assert_allclose(rdrop["loss"], plain["loss"], rtol=1e-5)
    np.testing.assert_allclose(rdrop["accuracy"], plain["accuracy"], rtol=1e-6)
    assert (rows, count) == (plain_rows, plain_count)  # one pass's predictions
    for after, expected in zip(rdrop_weights, plain_weights):
        np.testing.assert_allclose(after, expected, rtol=1e-4, atol=1e-6)


def test_the_passes_are_the_halves_of_the_rows_and_differ_under_dropout():
    """On the real positions, the second pass's rows repeat the first pass's positions in
    the second copy of the batch; with dropout the two passes' predictions differ."""
    keras.utils.set_random_seed(2)
    model = tiny(TrainingTransformer, dropout=0.3)
    x, labels = batch(Transformer, seed=5)
    model(x)
    compile_model(model, warmup_steps=10, jit_compile=False, rdrop_alpha=1.0)
    doubled = twice((x, labels))
    with model._passes_scope(2):
        real = model._real_positions_batch(doubled)
    positions = keras.ops.convert_to_numpy(real.arguments["logit_positions"])
    first, second = np.split(positions, 2)
    np.testing.assert_array_equal(second, first + labels.size)
    expected = np.flatnonzero(labels.reshape(-1) != 0)
    np.testing.assert_array_equal(first[: len(expected)], expected)
    logits = model(real.x, training=True, **real.arguments)  # (2N', V)
    kl = float(consistency_loss(real.y, logits, real.sample_weight, pad_id=0))
    assert kl > 1e-4
    logits = model(real.x, training=False, **real.arguments)
    assert float(consistency_loss(real.y, logits, real.sample_weight, pad_id=0)) < 1e-6


def test_rdrop_trains_and_logs_a_loss_above_the_cross_entropy():
    """With dropout the training loss includes the KL term; validation's does not."""
    keras.utils.set_random_seed(7)
    x, labels = batch(Transformer, seed=9)
    losses = {}
    for alpha in (0.0, 50.0):
        keras.utils.set_random_seed(7)
        model = tiny(TrainingTransformer, dropout=0.3)
        model(x)
        compile_model(model, warmup_steps=10, jit_compile=False, rdrop_alpha=alpha)
        trained = model.train_on_batch(x, labels, return_dict=True)
        evaluated = model.test_on_batch(x, labels, return_dict=True)
        losses[alpha] = (trained["loss"], evaluated["loss"])
    assert np.all(np.isfinite(list(losses.values())))
    # The same initial weights and dropout seed: the KL term (weighted 25) adds to the loss.
    assert losses[50.0][0] > losses[0.0][0] + 0.01


def test_invalid_rdrop_alpha_is_refused():
    with pytest.raises(ValueError, match="training.rdrop_alpha"):
        validate_training(TrainingConfig(rdrop_alpha=-1.0))
    with pytest.raises(ValueError, match="rdrop_alpha"):
        compile_model(tiny(Transformer), rdrop_alpha=5.0)  # a plain model: no R-Drop step
    model = tiny(TrainingTransformer)
    with pytest.raises(ValueError, match="rdrop_alpha"):
        model.compile(optimizer="sgd", loss="mse", rdrop_alpha=-0.5)
    # A start epoch: a non-negative integer (with R-Drop off it does nothing, so that a
    # recipe's R-Drop is turned off by `rdrop_alpha=0` alone).
    off = TrainingConfig(rdrop_start_epoch=3, rdrop_min_epochs=4)
    validate_training(off)
    compile_model(tiny(Transformer), **_optimizer_options(ExperimentConfig(training=off)))
    trained = tiny(TrainingTransformer)
    compile_model(trained, **_optimizer_options(ExperimentConfig(training=off)))
    assert not trained.rdrop_on
    with pytest.raises(ValueError, match="training.rdrop_start_epoch"):
        validate_training(TrainingConfig(rdrop_alpha=5.0, rdrop_start_epoch=-1))
    with pytest.raises(ValueError, match="rdrop_start_epoch"):
        model.compile(optimizer="sgd", loss="mse", rdrop_alpha=1.0, rdrop_start_epoch=1.5)
    with pytest.raises(ValueError, match="rdrop_start_epoch"):
        compile_model(tiny(TrainingTransformer), rdrop_start_epoch=-2)
    # The epochs R-Drop needs to start: a positive integer, after plain epochs to time.
    with pytest.raises(ValueError, match="training.rdrop_min_epochs.*rdrop_start_epoch > 0"):
        validate_training(TrainingConfig(rdrop_alpha=5.0, rdrop_min_epochs=4))
    with pytest.raises(ValueError, match="training.rdrop_min_epochs"):
        validate_training(TrainingConfig(rdrop_alpha=5.0, rdrop_start_epoch=2, rdrop_min_epochs=0))
    with pytest.raises(ValueError, match="rdrop_min_epochs"):
        model.compile(
            optimizer="sgd", loss="mse", rdrop_alpha=1.0, rdrop_start_epoch=1, rdrop_min_epochs=-2
        )
    with pytest.raises(ValueError, match="rdrop_min_epochs=3"):
        compile_model(tiny(TrainingTransformer), rdrop_alpha=5.0, rdrop_min_epochs=3)


class RowsPerStep(keras.callbacks.Callback):
    """Records, per epoch, the rows of logits the loss got in each step."""

    def on_train_begin(self, logs=None):
        self.epochs = {}

    def on_train_batch_end(self, batch, logs=None):
        self.epochs.setdefault(self.epoch, []).append(int(RowsOfTheLoss.rows.numpy()))

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch


def compiled_for_rows(start_epoch, min_epochs=None):
    """A tiny training model compiled with R-Drop from `start_epoch` (if `min_epochs` of it
    fit), its loss recording the rows of logits of each step; with a batch repeated and one
    pass's rows."""
    x, labels = batch(Transformer, seed=11)
    one_pass = int(np.ceil((labels != 0).sum() / LOGIT_ROWS_MULTIPLE)) * LOGIT_ROWS_MULTIPLE
    model = tiny(TrainingTransformer, dropout=0.1)
    model(x)
    model.compile(
        optimizer="sgd",
        loss=RowsOfTheLoss(pad_id=0),
        jit_compile=False,
        rdrop_alpha=1.0,
        rdrop_start_epoch=start_epoch,
        rdrop_min_epochs=min_epochs,
    )
    return model, tf.data.Dataset.from_tensors((x, labels)).repeat(), one_pass


def gated():
    """R-Drop from epoch 1 if 2 of its epochs fit (`compiled_for_rows`)."""
    return compiled_for_rows(start_epoch=1, min_epochs=2)


def test_rdrop_start_epoch_trains_the_first_epochs_plain():
    """Compiled with `rdrop_start_epoch`, `fit`'s epochs before it run plain steps (the
    loss sees one pass's rows of logits) and the later ones doubled steps (two passes'); a
    run resumed past it (`initial_epoch`) doubles from its first step; after `fit` the
    model applies R-Drop again, as compiled."""
    model, data, one_pass = compiled_for_rows(start_epoch=2)
    x, labels = next(iter(data))
    assert model.rdrop_start_epoch == 2
    rows = RowsPerStep()
    model.fit(data, epochs=4, steps_per_epoch=3, callbacks=[rows], verbose=0)
    assert rows.epochs == {
        0: [one_pass] * 3,
        1: [one_pass] * 3,
        2: [2 * one_pass] * 3,
        3: [2 * one_pass] * 3,
    }
    assert model.rdrop_on
    model.fit(data, initial_epoch=3, epochs=4, steps_per_epoch=2, callbacks=[rows], verbose=0)
    assert rows.epochs == {3: [2 * one_pass] * 2}
    model.fit(data, epochs=1, steps_per_epoch=2, callbacks=[rows], verbose=0)
    assert rows.epochs == {0: [one_pass] * 2}
    # A `CallbackList`, and no callbacks at all, are extended alike (each `fit` ends in an
    # epoch before the start: plain, where the compiled model alone would double).
    model.fit(data, epochs=1, steps_per_epoch=1, callbacks=keras.callbacks.CallbackList([]))
    assert int(RowsOfTheLoss.rows.numpy()) == one_pass
    model.fit(data, epochs=2, steps_per_epoch=1, verbose=0)
    assert int(RowsOfTheLoss.rows.numpy()) == one_pass
    model.train_on_batch(x, labels)
    assert int(RowsOfTheLoss.rows.numpy()) == 2 * one_pass  # R-Drop on outside `fit`


class Switch:
    """A model stand-in that records `RDropStart`'s switch and keeps its decision."""

    def __init__(self, decision=None):
        self.states = []
        self.rdrop_decision = decision

    def set_rdrop_on(self, on):
        self.states.append(on)


class Clock:
    """`time.monotonic` for `rdrop`, moved by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Budget:
    """A time budget of `seconds` from the clock's start (`TimeBudget`'s reading)."""

    def __init__(self, clock, seconds):
        self.clock, self.end = clock, clock.now + seconds

    def remaining_seconds(self):
        return self.end - self.clock()


def run_epochs(callback, clock, first, last, train=None, rest=None, steps=None, model=None):
    """`fit`'s epochs `first`..`last - 1` of 10 steps: `train[epoch]` seconds of steps
    (default 60), `steps[epoch]` of them (default 10: fewer for a resumed epoch), then
    validation's `rest[epoch]` (default 0). Returns the switch's states, one per epoch."""
    train, rest, steps = train or {}, rest or {}, steps or {}
    callback.set_model(model or Switch())
    callback.set_params({"epochs": last, "steps": 10})
    callback.on_train_begin()
    for epoch in range(first, last):
        callback.on_epoch_begin(epoch)
        count = steps.get(epoch, 10)
        for step in range(count):
            clock.now += train.get(epoch, 60.0) / count
            callback.on_train_batch_end(step)
        callback.on_test_begin()
        clock.now += rest.get(epoch, 0.0)
    callback.on_train_end()
    return callback.model.states[:-1]  # on_train_end turns it back on


@pytest.mark.parametrize(
    "budget_minutes, min_epochs, expected_on",
    [
        # 3 plain epochs of 60 s (the first, 150 s, traces: left out of the estimate), so
        # 330 s of the budget are left, holding (budget - 270 s) // 120 s R-Drop epochs,
        # at most the 7 epochs left.
        (10.0, 2, True),  # 330 s left: 2 epochs of 120 s fit
        (10.0, 3, False),  # only 2 fit
        (60.0, 7, True),  # 3330 s left: capped by the 7 epochs left
        (60.0, 8, False),  # 7 epochs left, whatever the time
    ],
)
def test_rdrop_start_waits_for_enough_budget(monkeypatch, budget_minutes, min_epochs, expected_on):
    """With `min_epochs`, R-Drop starts at `start_epoch` only if that many of its epochs
    (twice the plain steps' time) fit in the time and the epochs left; else never."""
    from keras_transformer.training import rdrop

    clock = Clock()
    monkeypatch.setattr(rdrop.time, "monotonic", clock)
    budget = Budget(clock, budget_minutes * 60)
    start = rdrop.RDropStart(3, min_epochs=min_epochs, epochs=10, budget=budget)
    model = Switch()
    states = run_epochs(start, clock, 0, 10, train={0: 150.0}, model=model)
    assert states == [False] * 3 + [expected_on] * 7
    assert model.rdrop_decision is expected_on


def test_rdrop_start_doubles_the_steps_not_the_validation(monkeypatch):
    """Validation and the epoch's end (BLEU, saving) are not doubled by R-Drop: epochs of
    60 s of steps and 60 s of validation make R-Drop epochs of 180 s, not 240."""
    from keras_transformer.training import rdrop

    clock = Clock()
    monkeypatch.setattr(rdrop.time, "monotonic", clock)
    budget = Budget(clock, 210.0 + 240.0 + 600.0)  # 600 s left at the start: 3 x 180 s
    start = rdrop.RDropStart(3, min_epochs=3, epochs=10, budget=budget)
    rest = {epoch: 60.0 for epoch in range(10)}
    states = run_epochs(start, clock, 0, 10, train={0: 150.0}, rest=rest)
    assert states == [False] * 3 + [True] * 7


def test_rdrop_start_without_a_budget_counts_epochs_and_times_a_resumed_run(monkeypatch):
    from keras_transformer.training import rdrop

    clock = Clock()
    monkeypatch.setattr(rdrop.time, "monotonic", clock)
    # No budget: the epochs left alone decide (5 from epoch 3 of 8).
    for min_epochs, expected in [(5, True), (6, False)]:
        start = rdrop.RDropStart(3, min_epochs=min_epochs, epochs=8)
        assert run_epochs(start, clock, 0, 8) == [False] * 3 + [expected] * 5
    # Without `min_epochs` R-Drop starts whatever the budget left (none here).
    spent = Budget(clock, 0.0)
    start = rdrop.RDropStart(3, epochs=8, budget=spent)
    assert run_epochs(start, clock, 0, 8) == [False] * 3 + [True] * 5
    # Resumed at epoch 5, past the start, without a decision: its first epoch trains
    # plain, timed (its 100 s alone), then 1000 s left hold 5 R-Drop epochs of 200 s.
    for budget_seconds, expected in [(1100.0, True), (1000.0, False)]:
        budget = Budget(clock, budget_seconds)
        start = rdrop.RDropStart(3, min_epochs=5, epochs=20, budget=budget)
        states = run_epochs(start, clock, 5, 12, train={5: 100.0})
        assert states == [False] + [expected] * 6, budget_seconds
    # Resumed 7 steps into epoch 2 (3 left, 18 s): timed by the step, its 10 steps at 6 s
    # and its 60 s of validation make 180-s R-Drop epochs, 4 in the 850 s left, not 5 (at
    # twice the partial epoch's 78 s they would be 156 s, 5 of them).
    budget = Budget(clock, 18.0 + 60.0 + 850.0)
    start = rdrop.RDropStart(3, min_epochs=5, epochs=20, budget=budget)
    states = run_epochs(start, clock, 2, 8, train={2: 18.0}, rest={2: 60.0}, steps={2: 3})
    assert states == [False] * 6


def test_rdrop_start_keeps_a_resumed_runs_decision(monkeypatch):
    """A decision the model holds (restored from the run's backup) stands past the start,
    whatever the budget left; a run that starts before the start epoch checks anew."""
    from keras_transformer.training import rdrop

    clock = Clock()
    monkeypatch.setattr(rdrop.time, "monotonic", clock)
    for decision in (True, False):
        start = rdrop.RDropStart(3, min_epochs=5, epochs=20, budget=Budget(clock, 0.0))
        states = run_epochs(start, clock, 12, 15, model=Switch(decision))
        assert states == [decision] * 3
    start = rdrop.RDropStart(3, min_epochs=5, epochs=20, budget=Budget(clock, 3600.0))
    model = Switch(decision=False)  # another run's
    assert run_epochs(start, clock, 0, 6, model=model) == [False] * 3 + [True] * 3
    assert model.rdrop_decision is True


class Spent(TimeBudget):
    """An hour's `TimeBudget` that reads as spent (so it stops nothing)."""

    def remaining_seconds(self):
        return 0.0


def test_fit_reads_the_time_budget_among_its_callbacks():
    """`fit` hands R-Drop's check the run's `TimeBudget`: a budget with no time left keeps
    the epochs after the start plain (one pass's rows), one with time doubles them."""
    for budget, doubled in [(Spent(60.0), False), (TimeBudget(60.0), True)]:
        model, data, one_pass = gated()
        rows_after = 2 * one_pass if doubled else one_pass
        rows = RowsPerStep()
        model.fit(data, epochs=3, steps_per_epoch=2, callbacks=[rows, budget], verbose=0)
        assert rows.epochs == {0: [one_pass] * 2, 1: [rows_after] * 2, 2: [rows_after] * 2}
        assert model.rdrop_on  # as compiled, after fit


def test_the_runner_compiles_rdrop_start_epoch():
    """`training.rdrop_start_epoch` reaches the model, as `training.rdrop_alpha` does."""
    options = _optimizer_options(
        ExperimentConfig(
            training=TrainingConfig(rdrop_alpha=5.0, rdrop_start_epoch=6, rdrop_min_epochs=10)
        )
    )
    model = tiny(TrainingTransformer)
    compile_model(model, **options)
    assert (model.rdrop_alpha, model.rdrop_start_epoch, model.rdrop_min_epochs) == (5.0, 6, 10)


def test_under_multi_worker_the_check_counts_epochs_only(monkeypatch):
    """Workers would time their own epochs and could disagree: under multi-worker training
    the check ignores the time budget (spent here) and counts the epochs left (2 of 2)."""
    from keras_transformer.training import distributed

    monkeypatch.setattr(distributed, "in_multi_worker_mode", lambda strategy: True)
    model, data, one_pass = gated()
    rows = RowsPerStep()
    model.fit(data, epochs=3, steps_per_epoch=1, callbacks=[[Spent(60.0)], rows], verbose=0)
    assert rows.epochs == {0: [one_pass], 1: [2 * one_pass], 2: [2 * one_pass]}


def test_a_resumed_run_keeps_rdrops_decision(tmp_path):
    """The run's backup keeps R-Drop's decision: killed in its R-Drop epochs and resumed
    with no budget left, the run doubles its steps from the first one after the restore (a
    new check would have timed a plain epoch, then kept R-Drop off)."""
    import json

    from crash import CrashAt

    from keras_transformer.training import make_callbacks

    backup = str(tmp_path / "backup")

    def run(budget, *extra):
        model, data, one_pass = gated()
        callbacks = make_callbacks(backup_dir=backup, backup_freq=1, steps_per_epoch=2)
        rows = RowsPerStep()
        fit = dict(epochs=4, steps_per_epoch=2, verbose=0)
        model.fit(data, callbacks=[*callbacks, budget, rows, *extra], **fit)
        return model, rows, one_pass

    with pytest.raises(KeyboardInterrupt):  # killed after step 5: epoch 3, its first step
        run(TimeBudget(60.0), CrashAt(5))
    with open(os.path.join(backup, "resume_state.json")) as f:
        assert json.load(f)["rdrop_decision"] is True
    model, rows, one_pass = run(Spent(60.0))
    assert rows.epochs == {2: [2 * one_pass], 3: [2 * one_pass] * 2}
    assert model.rdrop_decision is True


def test_the_runner_gates_rdrop_on_its_time_budget(corpus, tmp_path, caplog):  # noqa: F811
    """`keras-transformer train` hands R-Drop's check the run's time budget (an hour here,
    so the two epochs left bound it)."""
    import logging

    from keras_transformer.runner import train

    for min_epochs, decision in [(2, "R-Drop on"), (3, "the run trains without it to its end")]:
        config = _config(
            str(tmp_path / f"run_{min_epochs}"),
            corpus,
            "training.epochs=3",
            "training.max_minutes=60",
            "training.rdrop_alpha=1.0",
            "training.rdrop_start_epoch=1",
            f"training.rdrop_min_epochs={min_epochs}",
        )
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="keras_transformer.training.rdrop"):
            train(config)
        [line] = [r.getMessage() for r in caplog.records if r.name.endswith("rdrop")]
        assert line.startswith("R-Drop from epoch 2: the 5") and "minutes left hold 2 " in line
        assert line.endswith(f"at least {min_epochs} asked: {decision}."), line


@pytest.mark.slow
def test_rdrop_under_mirrored_strategy_with_xla(two_cpu_strategy):
    """Each replica doubles its own slice of the batch in its XLA-compiled step (the path
    the single-device tests above do not take); the replicas stay identical and the
    validation loss (cross-entropy alone) falls."""
    with two_cpu_strategy.scope():
        model = build_transformer(tiny_config(dropout=0.1))
        compile_model(model, warmup_steps=20, jit_compile=True, rdrop_alpha=1.0)
    assert model.per_replica_jit_compile
    validation = dataset(128, 32, seed=1, repeat=False)
    untrained = model.evaluate(validation, verbose=0, return_dict=True)["loss"]
    history = model.fit(
        dataset(1024, 32), epochs=3, steps_per_epoch=15, validation_data=validation, verbose=0
    )
    assert np.all(np.isfinite(history.history["loss"]))
    assert history.history["val_loss"][-1] < untrained - 0.2
    for variable in model.weights:
        first, second = two_cpu_strategy.experimental_local_results(variable.value)
        np.testing.assert_array_equal(first.numpy(), second.numpy())
