"""Shared fixtures.

The two logical CPU devices for `MirroredStrategy` must be configured before TensorFlow
initializes its devices, so it happens here, at import time, before any test touches TF.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from multi30k_files import MULTI30K_DIR  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)


@pytest.fixture
def two_cpu_strategy() -> tf.distribute.MirroredStrategy:
    """A `MirroredStrategy` over two logical CPU devices."""
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(scope="session")
def multi30k_dir() -> str:
    """The offline Multi30k copy (`$KERAS_TRANSFORMER_MULTI30K_DIR`, else
    `../shared/data/multi30k` beside the project root)."""
    if not os.path.isdir(MULTI30K_DIR):
        raise FileNotFoundError(f"Expected the Multi30k copy at {MULTI30K_DIR}.")
    return MULTI30K_DIR


@pytest.fixture(autouse=True)
def _seed_and_policy():
    """Every test starts from the same seed and the float32 policy, and restores it."""
    keras.utils.set_random_seed(1234)
    np.random.seed(1234)
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)
