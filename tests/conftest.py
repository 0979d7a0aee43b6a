"""Shared fixtures.

The two logical CPU devices for `MirroredStrategy` must be configured before TensorFlow
initializes its devices, so it happens here, at import time, before any test touches TF.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _intra_op_threads_per_worker() -> None:
    """Under pytest-xdist (`-n N`) each worker is a process with TensorFlow's own intra-op
    pool, sized to every core by default: N workers then run N times the cores' threads
    and compete for them. Each worker (and the processes it starts, which inherit
    the environment) gets its share of the cores instead; a value already set is kept.
    On a 2-core AVX2 AMD EPYC the suite took 20 min 13 s this way against 21 min 27 s
    (one run each; four of the heaviest files alone: 286 s against 324 s)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        share = max(1, len(os.sched_getaffinity(0)) // workers)
        os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(share))


_intra_op_threads_per_worker()

# The package before TensorFlow, as the CLI imports it: its oneDNN default (onednn.py) holds
# in the tests' processes too.
import keras_transformer  # noqa: E402, F401, I001  # isort: skip

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from multi30k_files import MULTI30K_DIR  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)


@pytest.fixture(scope="session")
def two_cpu_strategy() -> tf.distribute.MirroredStrategy:
    """A `MirroredStrategy` over two logical CPU devices, one for the whole session.

    Every new `MirroredStrategy` numbers its collective ops from the same keys, and the
    process' collective executor keeps what it learned of each key: a second strategy
    whose models differ from the first's then fails with "Shape mismatch in the collective
    instance 100". One strategy keeps numbering on.
    """
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
