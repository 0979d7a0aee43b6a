"""The recipe's training features: counted epochs, decaying schedules, a time budget,
per-epoch weights and checkpoint averaging, the optimizer EMA, and BLEU while training."""

import json
import os

import keras
import numpy as np
import pytest
from test_cli_train import _args

from keras_transformer.cli import main
from keras_transformer.config import load_config
from keras_transformer.data import count_batches
from keras_transformer.run_dir import RunPaths, load_run
from keras_transformer.runner import train
from keras_transformer.training.averaging import average_weights
from keras_transformer.training.budget import epoch_weight_files

# Small enough to train in seconds: 300 pairs, batches of 64 sentences (5 steps an epoch).
SMALL = [
    "data.max_train_examples=300",
    "data.batch_size=64",
    "training.steps_per_epoch=null",
    "training.warmup_steps=4",
    "translation.bleu_max_sentences=16",
    "training.early_stopping_patience=null",
]


def _config(tmp_path, multi30k_dir, *extra):
    args = _args(str(tmp_path / "run"), multi30k_dir, str(tmp_path / "tfds"), *SMALL, *extra)
    overrides = [a for a in args[3:] if a != "--set"]
    return load_config("multi30k_de_en", overrides)


def _weights(model):
    return [np.asarray(w) for w in model.get_weights()]


def test_count_batches_is_the_same_every_epoch(tmp_path, multi30k_dir):
    from keras_transformer.runner import training_data
    from keras_transformer.tasks import get_task

    config = _config(tmp_path, multi30k_dir)
    task = get_task(config)
    pairs, tokenizers = training_data(task, RunPaths(str(tmp_path / "run")))
    data = task.make_batches(pairs, tokenizers, shuffle=True)
    counted = count_batches(data)
    epochs = [sum(1 for _ in data) for _ in range(3)]  # reshuffled every epoch
    assert epochs == [counted] * 3 and counted >= 5


@pytest.mark.slow
def test_subword_sampling_resegments_each_epoch_and_trains(tmp_path, multi30k_dir):
    from keras_transformer.runner import training_data
    from keras_transformer.tasks import get_task

    config = _config(tmp_path, multi30k_dir, "data.subword_sampling=0.1", "training.epochs=2")
    task = get_task(config)
    pairs, tokenizers = training_data(task, RunPaths(str(tmp_path / "run")))
    data = task.make_batches(pairs, tokenizers, shuffle=False, sample_subwords=True)

    def targets(batches):  # each pass's target ids, and the texts they spell
        ids = [tuple(t[t != 0]) for _, y in batches for t in y.numpy()]
        return sorted(ids), sorted(tokenizers[1].detokenize(list(t)).numpy() for t in ids)

    (first_ids, first_texts), (second_ids, second_texts) = targets(data), targets(data)
    assert first_ids != second_ids
    # The same sentences, resegmented (a pair whose sampled pieces pass the length limit
    # is dropped from that pass).
    _, best_texts = targets(task.make_batches(pairs, tokenizers, shuffle=False))
    for texts in (first_texts, second_texts):
        assert set(texts) <= set(best_texts) and len(texts) >= 0.9 * len(best_texts)

    result = train(config)
    steps = int(result.model.optimizer.iterations.numpy())
    assert steps % 2 == 0 and steps >= 10  # two epochs of the first pass's count of batches
    assert result.tokenizers[0].sampling_alpha is None  # the run keeps the best segmentation
    assert np.isfinite(result.history.history["loss"]).all()


@pytest.mark.slow
def test_drop_remainder_trains_on_full_batches_only(tmp_path, multi30k_dir, recwarn):
    from keras_transformer.runner import training_data
    from keras_transformer.tasks import get_task

    # Wide buckets (step 64): the 300 pairs make full batches of 64 and smaller last ones.
    overrides = ["data.drop_remainder=true", "data.bucket_step=64", "training.warmup_steps=1"]
    overrides.append("training.validation_steps=null")  # every validation batch
    config = _config(tmp_path, multi30k_dir, *overrides, "training.epochs=1")
    task = get_task(config)
    pairs, tokenizers = training_data(task, RunPaths(str(tmp_path / "run")))
    full = task.make_batches(pairs, tokenizers, shuffle=True, drop_remainder=True)
    every = task.make_batches(pairs, tokenizers, shuffle=True)
    assert {len(y) for _, y in full} == {64}  # y: the target ids (B, T)
    assert 0 < count_batches(full) < count_batches(every)
    result = train(config)
    epochs = len(result.history.history["loss"])
    assert int(result.model.optimizer.iterations.numpy()) == epochs * count_batches(full)
    # The validation batches have a known length: Keras does not warn that they ran out.
    assert not [w for w in recwarn if "ran out of data" in str(w.message)]


@pytest.mark.parametrize("steps_per_epoch", ["null", "3"])
def test_drop_remainder_with_no_full_batch_is_an_error(tmp_path, multi30k_dir, steps_per_epoch):
    # 300 pairs, batches of 400; the epoch counted or given (3 steps: past a 1-step warm-up).
    overrides = ["data.drop_remainder=true", "data.batch_size=400", "training.warmup_steps=1"]
    overrides.append(f"training.steps_per_epoch={steps_per_epoch}")
    config = _config(tmp_path, multi30k_dir, *overrides)
    with pytest.raises(ValueError, match=r"no full batch .* a batch of 400 examples"):
        train(config)
    assert not os.path.exists(RunPaths(str(tmp_path / "run")).model)


def test_training_data_with_no_example_left_is_an_error(tmp_path, multi30k_dir):
    # Every source is a sentence: longer than two pieces (EOS included); the limit drops all.
    config = _config(tmp_path, multi30k_dir, "translation.max_source_length=2")
    with pytest.raises(ValueError, match=r"makes no batch: no training example is left"):
        train(config)
    assert not os.path.exists(RunPaths(str(tmp_path / "run")).model)


@pytest.mark.slow
def test_linear_decay_average_and_bleu_log(tmp_path, multi30k_dir):
    config = _config(
        tmp_path,
        multi30k_dir,
        "training.epochs=3",
        "training.lr_decay=linear",
        "training.average_last=2",
        "translation.bleu_every=1",
    )
    result = train(config)
    paths = result.paths
    steps = int(result.model.optimizer.iterations.numpy())
    assert steps % 3 == 0 and steps >= 15  # three whole, counted epochs
    # The learning rate reached zero exactly at the end of the last epoch.
    assert float(result.model.optimizer.learning_rate) == pytest.approx(0.0, abs=1e-12)
    assert result.history.history["learning_rate"][0] > 0

    # BLEU: in the History, and one line per epoch against minutes in the run directory.
    assert len(result.history.history["val_bleu"]) == 3
    with open(paths.bleu_log) as f:
        records = [json.loads(line) for line in f]
    assert [r["epoch"] for r in records] == [1, 2, 3]
    assert [r["step"] for r in records] == [steps // 3, 2 * steps // 3, steps]
    assert records[0]["minutes"] < records[1]["minutes"] < records[2]["minutes"]
    assert [r["bleu"] for r in records] == pytest.approx(
        result.history.history["val_bleu"], abs=0.01
    )
    assert records[0]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert os.path.isfile(os.path.join(paths.checkpoints, "best_bleu.weights.h5"))

    # The saved model is the mean of the last two epochs' weights.
    files = epoch_weight_files(paths.checkpoints)
    assert [os.path.basename(f) for f in files] == [
        "epoch-001.weights.h5",
        "epoch-002.weights.h5",
        "epoch-003.weights.h5",
    ]
    saved, _, _ = load_run(paths.root)
    probe = keras.models.clone_model(saved)
    probe.set_weights(saved.get_weights())
    probe.load_weights(files[1])
    second = _weights(probe)
    probe.load_weights(files[2])
    third = _weights(probe)
    for got, a, b in zip(_weights(saved), second, third):
        np.testing.assert_allclose(got, (a + b) / 2, rtol=1e-5, atol=1e-6)
    assert not all(np.array_equal(a, b) for a, b in zip(second, third))

    # The command does the same from the run directory.
    output = str(tmp_path / "avg.keras")
    assert main(["average", paths.root, "--last", "2", "--output", output]) == 0
    again = keras.models.load_model(output)
    for got, want in zip(_weights(again), _weights(saved)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert main(["average", paths.root, "--last", "9"]) == 2  # only 3 epochs kept


@pytest.mark.slow
def test_time_budget_stops_cleanly(tmp_path, multi30k_dir):
    # A budget spent after the first step: training stops there, validates, scores BLEU
    # and saves, although 50 epochs were planned.
    config = _config(
        tmp_path,
        multi30k_dir,
        "training.epochs=50",
        "training.max_minutes=0.0001",
        "translation.bleu_every=10",
    )
    result = train(config)
    assert int(result.model.optimizer.iterations.numpy()) == 1
    assert len(result.history.history["loss"]) == 1
    assert "val_loss" in result.history.history and "val_bleu" in result.history.history
    saved, _, _ = load_run(result.paths.root)
    for got, want in zip(_weights(saved), _weights(result.model)):
        np.testing.assert_array_equal(got, want)


class _StopAfter(keras.callbacks.Callback):
    def __init__(self, epochs):
        super().__init__()
        self.epochs = epochs

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.epochs:
            self.model.stop_training = True


class _RecordWeights(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps = []

    def on_train_batch_end(self, batch, logs=None):
        self.steps.append(_weights(self.model))


@pytest.mark.parametrize("stop_early", [False, True])
def test_ema_ends_in_the_model_when_training_stops_early(stop_early):
    """The model ends with the EMA of its weights also when a callback (a time budget)
    stops training before the last planned epoch."""
    from keras_transformer.training.callbacks import make_callbacks

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    momentum = 0.8
    model.compile(keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=momentum), "mse")
    x, y = np.random.rand(32, 4), np.random.rand(32, 3)
    recorder = _RecordWeights()
    stop = [_StopAfter(2)] if stop_early else []  # stands for TimeBudget or EarlyStopping
    callbacks = [recorder, *stop, *make_callbacks(use_ema=True)]
    model.fit(x, y, batch_size=8, epochs=5, callbacks=callbacks, verbose=0)
    assert len(recorder.steps) == (8 if stop_early else 20)
    ema = recorder.steps[0]  # Keras' EMA starts at the first updated weights
    for raw in recorder.steps[1:]:
        ema = [momentum * e + (1 - momentum) * r for e, r in zip(ema, raw)]
    for got, want, raw in zip(_weights(model), ema, recorder.steps[-1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert not np.allclose(got, raw)


def test_average_weights_means_floats_and_keeps_the_rest(tmp_path):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    paths = []
    for i in range(3):
        model.set_weights([np.full((4, 3), float(i)), np.full((3,), 10.0 * i)])
        paths.append(str(tmp_path / f"epoch-{i + 1:03d}.weights.h5"))
        model.save_weights(paths[-1])
    average_weights(model, paths[1:])
    kernel, bias = model.get_weights()
    np.testing.assert_allclose(kernel, 1.5) and np.testing.assert_allclose(bias, 15.0)
    with pytest.raises(ValueError, match="no weight files"):
        average_weights(model, [])


class _FakeClock:
    """`time.monotonic` for the budget callbacks: one second per training step."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class _Tick(keras.callbacks.Callback):
    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def on_train_batch_end(self, batch, logs=None):
        self.clock.now += 1.0


@pytest.mark.parametrize("decay", ["linear", "cosine"])
def test_decay_ends_with_the_time_budget(monkeypatch, decay):
    """With a budget of 30 steps' time and 500 planned steps, the rate reaches zero at the
    budget's end, not the plan's."""
    from keras_transformer.training import budget
    from keras_transformer.training.callbacks import make_callbacks
    from keras_transformer.training.schedules import TransformerSchedule

    clock = _FakeClock()
    monkeypatch.setattr(budget.time, "monotonic", clock)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    schedule = TransformerSchedule(64, warmup_steps=2, decay=decay, total_steps=500)
    model.compile(keras.optimizers.Adam(schedule), "mse")
    rates = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: rates.append(float(model.optimizer.learning_rate))
    )
    callbacks = [
        _Tick(clock),
        record,
        *make_callbacks(max_minutes=0.5, start=clock(), schedule=schedule, planned_steps=500),
    ]
    x, y = np.random.rand(40, 4), np.random.rand(40, 3)
    model.fit(x, y, batch_size=8, epochs=100, callbacks=callbacks, verbose=0)
    assert len(rates) == 30  # the budget: 30 one-second steps
    assert float(schedule.horizon.numpy()) == 30.0  # estimated after the first epoch
    assert max(rates) == pytest.approx(schedule.peak, rel=0.01)
    assert rates[-1] < 0.05 * schedule.peak  # the rate ends with the budget
    # The optimizer's rate after step i is the schedule's at i + 1, with the moved horizon.
    assert rates[14] == pytest.approx(float(schedule(15)), rel=1e-5)
    assert rates[14] < 0.75 * schedule.peak  # half way (with the plan's horizon: 0.97)
