"""A whole run on TensorFlow's `ram://` file system, standing in for a bucket: train on
Multi30k, be interrupted, resume from the backup, average, load the run and export it,
with nothing on the local disk but the data and TFDS' cache."""

import uuid

import pytest
import tensorflow as tf
import yaml
from crash import CrashAt

from keras_transformer import Transformer, storage
from keras_transformer.cli import main
from keras_transformer.config import load_config
from keras_transformer.export import export_predictor
from keras_transformer.predictors import Translator
from keras_transformer.run_dir import RunPaths, load_run
from keras_transformer.runner import train
from keras_transformer.training.tokenizer_files import ready_marker

STEPS, EPOCHS = 3, 2


def _config(run_dir, multi30k_dir, tfds_dir):
    overrides = [
        f"training.run_dir={run_dir}",
        f"translation.local_dir={multi30k_dir}",
        f"data.data_dir={tfds_dir}",
        "data.max_train_examples=1000",
        "data.max_validation_examples=32",
        "data.vocab_size=600",
        "data.batch_size=16",
        "model.num_encoder_layers=1",
        "model.num_decoder_layers=1",
        "model.d_model=32",
        "model.num_heads=2",
        "model.d_ff=64",
        f"training.epochs={EPOCHS}",
        f"training.steps_per_epoch={STEPS}",
        "training.warmup_steps=2",  # the recipe's linear decay needs more steps than warmup
        "training.validation_steps=1",
        "training.backup_freq=2",
        "training.verbose=0",
    ]
    return load_config("multi30k_de_en", overrides)


def test_train_resume_average_load_and_export_on_ram(tmp_path, multi30k_dir):
    root = f"ram://run-{uuid.uuid4().hex[:8]}"
    paths = RunPaths(root)
    config = _config(root, multi30k_dir, str(tmp_path / "tfds"))

    with pytest.raises(KeyboardInterrupt):
        # Backups at step 2, at the end of epoch 1 and after step 1 of epoch 2 (step 4, the
        # last one before the crash).
        train(config, extra_callbacks=[CrashAt(STEPS + 1)])
    assert storage.exists(ready_marker(paths))
    assert yaml.safe_load(storage.read_text(paths.config))["training"]["epochs"] == EPOCHS
    assert storage.exists(f"{paths.backup}/latest.weights.h5")
    state = yaml.safe_load(storage.read_text(f"{paths.backup}/resume_state.json"))
    assert state == {"epoch": 1, "steps": 1}
    assert not storage.exists(paths.model)

    result = train(config)  # resumes: the tokenizers and the backup come from ram://
    assert int(result.model.optimizer.iterations) == EPOCHS * STEPS
    assert result.history.epoch == [1]
    assert not storage.exists(paths.backup)  # removed once training finished
    assert storage.exists(f"{paths.checkpoints}/last.weights.h5")
    assert len(storage.glob(f"{paths.checkpoints}/epoch-*.weights.h5")) == EPOCHS
    assert storage.glob(f"{paths.logs}/train/events.out.tfevents.*")

    assert main(["average", root, "--last", "2"]) == 0
    assert yaml.safe_load(storage.read_text(f"{root}/averaged.json"))["output"] == paths.model

    model, source, _ = load_run(root)
    assert type(model) is Transformer and source.vocab_size == 600
    translator = Translator.from_run_dir(root, beam_size=1, max_length=12, jit_compile=False)
    sentences = tf.constant(["Ein Hund läuft.", "Zwei Männer."])
    expected = translator.translate_strings(sentences)[0].numpy().tolist()

    base = f"ram://exports-{uuid.uuid4().hex[:8]}"
    version_dir = export_predictor(translator, base)
    assert version_dir == f"{base}/transformer/1"
    info = yaml.safe_load(storage.read_text(f"{version_dir}/assets.extra/export_info.json"))
    assert info["version"] == 1
    loaded = tf.saved_model.load(version_dir)
    got = loaded.signatures["serving_default"](sentences=sentences)["translations"]
    assert got.numpy().tolist() == expected
