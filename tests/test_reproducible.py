"""The same config and seed train the same model, whether the run prepares its TFDS dataset
or finds it prepared (preparing draws from Python's `random`, which once shifted the weights
of a machine's first run)."""

from __future__ import annotations

import numpy as np
from task_configs import RECIPES, TINY_TRAINING

from keras_transformer import load_config, train
from keras_transformer.models import Transformer


def _weights(run_dir) -> list[np.ndarray]:
    import keras

    model = keras.saving.load_model(f"{run_dir}/model.keras", compile=False)
    assert isinstance(model, Transformer)
    return [np.asarray(w) for w in model.weights]


def test_a_run_that_prepares_its_dataset_trains_as_one_that_finds_it(tmp_path, multi30k_dir):
    def run(name: str):
        overrides = [
            f"training.run_dir={tmp_path / name}",
            f"data.data_dir={tmp_path / 'tfds'}",  # prepared by the first run only
            f"translation.local_dir={multi30k_dir}",
            "translation.max_source_length=32",
            "translation.max_target_length=32",
            "translation.bleu_every=null",
            "data.max_train_examples=200",
            "data.max_validation_examples=8",
            "data.vocab_size=500",
            "data.batch_size=16",
            "model.num_encoder_layers=1",
            "model.num_decoder_layers=1",
            *TINY_TRAINING,
        ]
        return train(load_config(RECIPES["translation"], overrides)).run_dir

    tfds_dir = tmp_path / "tfds" / "multi30k"
    assert not tfds_dir.exists()
    first = run("prepares")
    assert tfds_dir.is_dir()  # the first run prepared it; the second reads it
    second = run("finds")
    for a, b in zip(_weights(first), _weights(second), strict=True):
        np.testing.assert_array_equal(a, b)
