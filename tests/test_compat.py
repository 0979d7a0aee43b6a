"""`keras_transformer.compat`: every private API the package uses exists in the installed
Keras, TensorFlow and tensorflow-text, and no other module uses one."""

import os
import re

import keras
import pytest
import tensorflow_text as tf_text

from keras_transformer import compat

PACKAGE = os.path.join(os.path.dirname(__file__), "..", "keras_transformer")
PRIVATE_IMPORT = re.compile(
    r"^\s*(from|import)\s+(keras\.src|tensorflow\.python|tensorflow_text\.python)"
)


def test_every_private_symbol_exists():
    compat.check_private_apis()
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    assert hasattr(model, "_loss_tracker") and hasattr(model, "_initial_epoch")
    tokenizer = tf_text.SentencepieceTokenizer
    assert "_model_resource" in tokenizer.__init__.__code__.co_names


def test_a_missing_symbol_is_named(monkeypatch):
    monkeypatch.setattr(
        compat, "PRIVATE_SYMBOLS", (*compat.PRIVATE_SYMBOLS, ("keras", "Model._gone_in_keras_4"))
    )
    with pytest.raises(ImportError, match=r"`keras\.Model\._gone_in_keras_4`.*keras 3\.15"):
        compat.check_private_apis()


def test_no_other_module_imports_private_apis():
    offenders = []
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            path = os.path.join(root, name)
            if not name.endswith(".py") or os.path.samefile(path, compat.__file__):
                continue
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if PRIVATE_IMPORT.match(line):
                        offenders.append(f"{os.path.relpath(path, PACKAGE)}:{number}")
    assert offenders == [], offenders
