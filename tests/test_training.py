"""Unit tests of the training pieces: loss, metric, schedule, configs, save/load."""

import json
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer
from keras_transformer.config import ExperimentConfig, load_config
from keras_transformer.training import (
    MaskedSparseCategoricalAccuracy,
    MaskedSparseCategoricalCrossentropy,
    TransformerSchedule,
    compile_model,
    make_strategy,
    resolve_jit_compile,
)


def _reference_loss(y_true, logits, smoothing):
    """The smoothed cross-entropy by the definition, with explicit one-hot targets."""
    vocab = logits.shape[-1]
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    targets = np.eye(vocab)[y_true] * (1 - smoothing) + smoothing / vocab
    per_token = -(targets * log_probs).sum(-1)
    mask = y_true != 0
    return (per_token * mask).sum() / mask.sum(), per_token * mask


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_loss_matches_numpy_reference(smoothing):
    rng = np.random.default_rng(0)
    y_true = np.array([[5, 7, 3, 0, 0], [4, 9, 2, 6, 3]], "int32")
    logits = rng.normal(size=(2, 5, 11)).astype("float32") * 3
    expected_mean, expected_tokens = _reference_loss(y_true, logits, smoothing)
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=smoothing)
    np.testing.assert_allclose(float(loss(y_true, logits)), expected_mean, rtol=1e-5)
    per_token = MaskedSparseCategoricalCrossentropy(label_smoothing=smoothing, reduction=None)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(per_token(y_true, logits)), expected_tokens, rtol=1e-5
    )


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_loss_gradient_is_softmax_minus_targets_in_a_graph_of_unknown_shapes(
    smoothing, jit_compile
):
    # The loss's own gradient inside a step traced once for any (B, T, V), as `fit` traces
    # it for bucketed batches of several shapes: an uncompiled step (the loss's own XLA
    # kernel) and one that XLA compiles (the kernel's plain body inside it).
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=smoothing)
    spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None, None], tf.float32)]

    @tf.function(input_signature=spec, jit_compile=jit_compile)
    def value_and_gradient(y_true, logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            value = loss(y_true, logits)
        return value, tape.gradient(value, logits)

    rng = np.random.default_rng(3)
    for shape in [(2, 5, 11), (3, 4, 7)]:
        y_true = rng.integers(0, shape[-1], shape[:2]).astype("int32")
        y_true[0, -1] = 0  # at least one padding position
        logits = rng.normal(size=shape).astype("float32") * 3
        value, gradient = value_and_gradient(y_true, logits)
        shifted = np.exp(logits - logits.max(-1, keepdims=True))
        softmax = shifted / shifted.sum(-1, keepdims=True)
        targets = np.eye(shape[-1])[y_true] * (1 - smoothing) + smoothing / shape[-1]
        mask = (y_true != 0)[..., None]
        expected = (softmax - targets) * mask / mask.sum()
        np.testing.assert_allclose(
            float(value), _reference_loss(y_true, logits, smoothing)[0], rtol=1e-5
        )
        np.testing.assert_allclose(gradient.numpy(), expected, atol=1e-6)


def test_padding_positions_do_not_contribute():
    rng = np.random.default_rng(1)
    y_true = np.array([[5, 7, 3, 0, 0, 0]], "int32")
    logits = rng.normal(size=(1, 6, 10)).astype("float32")
    changed = logits.copy()
    changed[:, 3:] = rng.normal(size=(1, 3, 10)) * 100  # garbage at the padding
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    np.testing.assert_allclose(float(loss(y_true, logits)), float(loss(y_true, changed)))
    # The mean is over the 3 real tokens, not the 6 positions.
    trimmed = float(loss(y_true[:, :3], logits[:, :3]))
    np.testing.assert_allclose(float(loss(y_true, logits)), trimmed, rtol=1e-6)


def test_loss_is_float32_under_float16_logits_and_gradients_skip_padding():
    y_true = np.array([[5, 0]], "int32")
    logits = tf.Variable(np.zeros((1, 2, 8), "float32"))
    loss = MaskedSparseCategoricalCrossentropy()
    with tf.GradientTape() as tape:
        value = loss(y_true, tf.cast(logits, "float16"))
    assert value.dtype == tf.float32
    gradient = tape.gradient(value, logits).numpy()
    assert np.all(gradient[0, 1] == 0) and np.any(gradient[0, 0] != 0)


def test_loss_under_mirrored_strategy_matches_single_device(two_cpu_strategy):
    # Two replicas with the same number of real tokens: the summed per-replica losses
    # equal the single-device token mean.
    rng = np.random.default_rng(2)
    y_true = np.array([[5, 6, 0], [4, 0, 0], [7, 8, 0], [9, 0, 0]], "int32")
    logits = rng.normal(size=(4, 3, 12)).astype("float32")
    loss = MaskedSparseCategoricalCrossentropy()
    expected = float(loss(y_true, logits))
    dataset = tf.data.Dataset.from_tensor_slices((y_true, logits)).batch(4)
    dist = two_cpu_strategy.experimental_distribute_dataset(dataset)
    per_replica = two_cpu_strategy.run(lambda y, p: loss(y, p), args=next(iter(dist)))
    total = two_cpu_strategy.reduce("SUM", per_replica, axis=None)
    np.testing.assert_allclose(float(total), expected, rtol=1e-5)


def test_masked_accuracy():
    metric = MaskedSparseCategoricalAccuracy()
    y_true = np.array([[4, 5, 6, 0], [7, 3, 0, 0]], "int32")
    predicted = np.array([[4, 1, 6, 9], [7, 2, 0, 0]], "int32")
    metric.update_state(y_true, keras.ops.one_hot(predicted, 10))
    np.testing.assert_allclose(float(metric.result()), 3 / 5)
    metric.update_state(np.array([[8]], "int32"), keras.ops.one_hot(np.array([[8]]), 10))
    np.testing.assert_allclose(float(metric.result()), 4 / 6)
    metric.reset_state()
    assert float(metric.result()) == 0.0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_masked_accuracy_is_numpys_first_argmax(dtype):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 11)).astype("float32")
    logits[0, 0] = 0.0  # a tie: the first largest (id 0) is the prediction, not id 2
    logits[0, 1, [3, 7]] = 9.0  # id 3, not 7
    y_true = rng.integers(1, 11, size=(3, 5)).astype("int32")
    y_true[0, :2] = [2, 7]
    y_true[2, 3:] = 0  # padding
    logits[1, :, 0] = -9.0
    y_true[1] = logits[1].argmax(-1)  # a row of right predictions
    predicted = np.asarray(keras.ops.cast(keras.ops.cast(logits, dtype), "float32")).argmax(-1)
    real = y_true != 0
    metric = MaskedSparseCategoricalAccuracy()
    metric.update_state(y_true, keras.ops.cast(logits, dtype))
    assert float(metric.result()) == pytest.approx((predicted == y_true)[real].mean())


@pytest.mark.parametrize("step", [0, 1, 99, 3999, 4000, 10000, 100000])
def test_schedule_matches_formula(step):
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000, scale=2.0)
    n = step + 1  # the optimizer's iterations count from 0, the paper's steps from 1
    expected = 2.0 * 512**-0.5 * min(n**-0.5, n * 4000**-1.5)
    np.testing.assert_allclose(float(schedule(step)), expected, rtol=1e-5)


def test_schedule_peaks_at_warmup_and_round_trips():
    schedule = TransformerSchedule(d_model=128, warmup_steps=100)
    values = [float(schedule(s)) for s in range(300)]
    assert int(np.argmax(values)) == 99
    restored = TransformerSchedule.from_config(schedule.get_config())
    assert restored.get_config() == {
        "d_model": 128,
        "warmup_steps": 100,
        "scale": 1.0,
        "decay": "inverse_sqrt",
        "total_steps": None,
    }
    again = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    np.testing.assert_allclose(float(again(50)), values[50])


@pytest.mark.parametrize("decay", ["linear", "cosine"])
def test_decays_to_zero_at_total_steps(decay):
    schedule = TransformerSchedule(d_model=256, warmup_steps=100, decay=decay, total_steps=1100)
    values = np.array([float(schedule(s)) for s in range(1200)])
    peak = 256**-0.5 * 100**-0.5
    assert int(np.argmax(values)) == 99 and values[99] == pytest.approx(peak, rel=1e-5)
    np.testing.assert_allclose(values[:100], np.arange(1, 101) / 100 * peak, rtol=1e-5)
    # Half way through the decay: half the peak for both shapes.
    assert values[599] == pytest.approx(peak / 2, rel=1e-4)
    assert np.all(np.diff(values[99:]) <= 1e-12) and np.all(values[1099:] == 0.0)
    if decay == "cosine":  # flatter than linear near the peak, steeper in the middle
        assert values[199] > peak * 0.9 and values[199] > peak * (1 - 100 / 1000)
    restored = TransformerSchedule.from_config(schedule.get_config())
    assert float(restored(700)) == pytest.approx(values[700])


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"d_model": 64, "warmup_steps": 0}, "warmup_steps"),
        ({"d_model": 0}, "d_model"),
        ({"d_model": 64, "scale": -1.0}, "scale"),
        ({"d_model": 64, "decay": "step"}, "decay"),
        ({"d_model": 64, "decay": "linear"}, "total_steps"),
        ({"d_model": 64, "warmup_steps": 10, "decay": "cosine", "total_steps": 10}, "total_steps"),
    ],
)
def test_schedule_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=f"argument `{name}`"):
        TransformerSchedule(**kwargs)


def test_loss_and_metric_reject_bad_arguments():
    with pytest.raises(ValueError, match="label_smoothing"):
        MaskedSparseCategoricalCrossentropy(label_smoothing=1.0)
    with pytest.raises(ValueError, match="reduction"):
        MaskedSparseCategoricalCrossentropy(reduction="sum")
    with pytest.raises(ValueError, match="pad_id"):
        MaskedSparseCategoricalAccuracy(pad_id=-1)


def test_compiled_model_saves_and_loads(tmp_path):
    model = Transformer.from_preset("tiny", source_vocab_size=30, target_vocab_size=30)
    # Built eagerly: PositionalEncoding's table would otherwise belong to the traced graph.
    model((np.ones((1, 2), "int32"), np.ones((1, 2), "int32")))
    compile_model(model, warmup_steps=10, label_smoothing=0.1, jit_compile=False)
    rng = np.random.default_rng(0)
    source = rng.integers(4, 30, (8, 6)).astype("int32")
    target = rng.integers(4, 30, (8, 5)).astype("int32")
    target[:, -1] = 0
    model.fit((source, target), target, epochs=1, batch_size=4, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.loss, MaskedSparseCategoricalCrossentropy)
    assert loaded.loss.label_smoothing == pytest.approx(0.1)
    schedule = loaded.optimizer._learning_rate
    assert isinstance(schedule, TransformerSchedule) and schedule.warmup_steps == 10
    assert int(loaded.optimizer.iterations) == 2
    np.testing.assert_allclose(
        loaded.predict((source, target), verbose=0),
        model.predict((source, target), verbose=0),
        atol=1e-5,
    )
    logs = loaded.evaluate((source, target), target, verbose=0, return_dict=True)
    assert set(logs) == {"loss", "accuracy"}


def test_load_config_packaged_and_overrides(tmp_path):
    config = load_config(
        "multi30k_de_en",
        ["training.epochs=1", "data.max_train_examples=2000", "training.epsilon=1e-8"],
    )
    assert config.training.epochs == 1 and config.data.max_train_examples == 2000
    assert config.training.epsilon == pytest.approx(1e-8)
    assert config.model.d_model == 256 and config.data.source == "multi30k"
    ted = load_config("ted_hrlr_pt_en")
    assert (ted.model.num_encoder_layers, ted.model.d_model, ted.model.d_ff) == (4, 128, 512)
    assert ted.model.num_heads == 8 and ted.model.dropout == pytest.approx(0.1)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"training": {"epochs": 2, "devices": ["/cpu:0"]}}))
    with pytest.raises(ValueError, match="training.devices"):
        load_config(str(path))
    config = load_config(str(path), ["training.strategy=mirrored"])
    assert config.training.devices == ["/cpu:0"]


@pytest.mark.parametrize(
    "override, message",
    [
        ("training.epoch=1", r"unknown key\(s\) \['training.epoch'\]"),
        ("trainer.epochs=1", r"unknown key\(s\) \['trainer'\]"),
        ("training.epochs=0", r"`training.epochs`, expected a positive integer"),
        ("model.d_model=true", r"`model.d_model`, expected a positive integer. .*=True"),
        ("training.max_minutes=true", r"`training.max_minutes`, expected a positive number"),
        ("training.lr_decay=step", r"`training.lr_decay`, expected one of"),
        ("training.epochs=two", r"`training.epochs`, expected an integer"),
        ("training.epochs=1.5", r"`training.epochs`, expected an integer"),
        ("model.dropout=1.0", r"`model.dropout`, expected a float in \[0, 1\)"),
        ("model.num_heads=3", r"`model.d_model`, expected a multiple of `model.num_heads`"),
        # The recipe's linear decay needs more steps than its 400 warm-up steps.
        (
            "training.steps_per_epoch=13",
            r"`training.epochs \* training.steps_per_epoch`, expected more than "
            r"`training.warmup_steps`=400 with training.lr_decay='linear'\. Received: .*=390",
        ),
        ("training.strategy=tpu", r"`training.strategy`, expected one of"),
        ("training.jit_compile=maybe", r"`training.jit_compile`, expected one of"),
        ("training.dtype_policy=float16", r"`training.dtype_policy`"),
        ("data.tokens_per_batch=null", r"exactly one of `data.batch_size`"),
        ("data.max_source_length=1000", r"model.max_length"),
        ("translation.max_target_length=1", r"`translation.max_target_length`"),
        ("training.epochs", r"expected `section.key=value`"),
        ("training.epochs.x=1", r"'epochs' is not a section"),
        ("model=3", r"`model`, expected a mapping"),
        # Checked here, before a run directory is written (they failed in the model or in
        # SentencePiece after it), and inf is no setting (it trained to nan).
        ("model.activation=foo", r"`model.activation`, expected an activation name"),
        ("data.vocab_size=2", r"`data.vocab_size`, expected an integer of at least 5"),
        ("training.learning_rate_scale=.inf", r"`training.learning_rate_scale`, expected a pos"),
        ("model.layer_norm_epsilon=.inf", r"`model.layer_norm_epsilon`, expected a positive"),
    ],
)
def test_bad_config_values_raise_clear_errors(override, message):
    with pytest.raises(ValueError, match=message):
        load_config("multi30k_de_en", [override])


def test_a_section_given_whole_sets_only_its_keys(tmp_path):
    """A mapping value in any override form sets its keys one by one: the rest of the
    section stays the config's (it replaced the section: imdb's data.source became the
    default multi30k). A section whose keys are all commented out reads as empty."""
    for overrides in ({"data": {"batch_size": 8}}, ["data={batch_size: 8}"]):
        data = load_config("imdb_reviews", overrides).data
        assert (data.source, data.batch_size, data.tokens_per_batch) == ("imdb_reviews", 8, None)
    path = tmp_path / "c.yaml"
    path.write_text("training:\n  # epochs: 3\nmodel:\n", encoding="utf-8")
    assert load_config(str(path)).training == load_config(None).training
    # A key given twice is refused (a second `training:` block replaced the first).
    path.write_text("training:\n  epochs: 2\nmodel:\n  d_model: 64\ntraining:\n  seed: 1\n")
    with pytest.raises(ValueError, match=r"found the key 'training' twice\n.*line 5"):
        load_config(str(path))
    path.write_bytes(b"training:\n  run_dir: caf\xe9\n")  # Latin-1
    with pytest.raises(ValueError, match=f"config file {re.escape(str(path))} as UTF-8"):
        load_config(str(path))


def test_an_override_of_one_batch_size_replaces_the_other():
    data = load_config("multi30k_de_en").data
    assert (data.batch_size, data.tokens_per_batch) == (None, 4096)
    data = load_config("multi30k_de_en", ["data.batch_size=32"]).data
    assert (data.batch_size, data.tokens_per_batch) == (32, None)
    data = load_config("multi30k_de_en", ["data.batch_size=32", "data.tokens_per_batch=2048"]).data
    assert (data.batch_size, data.tokens_per_batch) == (None, 2048)


def test_config_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_config(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="expected a mapping"):
        load_config(str(bad))
    assert ExperimentConfig.from_dict({}).training.epochs == 10


def test_strategy_and_jit_resolution():
    with pytest.raises(ValueError, match="argument `strategy`"):
        make_strategy("tpu")
    with pytest.raises(ValueError, match="devices"):
        make_strategy("default", devices=["/cpu:0"])
    strategy = make_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    # A device this process does not have is refused (training over it hung in its first
    # step); conftest splits the CPU in two, so /cpu:2 is none.
    with pytest.raises(ValueError, match=r"does not have: \['/cpu:2'\]"):
        make_strategy("mirrored", devices=["/cpu:0", "/cpu:2"])
    assert resolve_jit_compile("auto", strategy) is False
    assert resolve_jit_compile(True, strategy) is True
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    assert resolve_jit_compile("auto") is on_gpu
    with pytest.raises(ValueError, match="jit_compile"):
        resolve_jit_compile("yes")
    assert os.environ.get("TF_CONFIG") is None


@pytest.mark.parametrize("value", ['{"cluster": {"worker": ["localhost:1"]', '["worker"]'])
def test_a_malformed_tf_config_is_refused_naming_it(monkeypatch, value):
    # It failed with json's "Expecting ',' delimiter: line 1 column 38", naming nothing.
    monkeypatch.setenv("TF_CONFIG", value)
    with pytest.raises(ValueError, match="invalid TF_CONFIG environment variable"):
        make_strategy("multi_worker")
