"""`tf.distribute` strategies from a config, and the per-strategy choice of XLA."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence

import tensorflow as tf

from keras_transformer.compat import in_multi_worker_mode
from keras_transformer.constants import BF16_MIN_COMPUTE_CAPABILITY, STRATEGIES
from keras_transformer.hardware import native_bf16_cpu
from keras_transformer.training.distributed import is_distributed
from keras_transformer.validation import check_one_of

logger = logging.getLogger(__name__)


def make_strategy(name: str = "default", devices: Sequence[str] | None = None):
    """Creates a distribution strategy.

    Args:
        name: `"default"` (TensorFlow's default strategy: one device), `"mirrored"`
            (`tf.distribute.MirroredStrategy`: synchronous data parallelism over `devices`,
            all local GPUs when None) or `"multi_worker"`
            (`tf.distribute.MultiWorkerMirroredStrategy`, configured by the `TF_CONFIG`
            environment variable of each worker process).
        devices: the devices of a `"mirrored"` strategy, e.g. `["/gpu:0", "/gpu:1"]` or
            `["/cpu:0", "/cpu:1"]` (two logical CPUs).

    Returns:
        A `tf.distribute.Strategy`.

    Example:
    >>> strategy = make_strategy("mirrored", devices=["/cpu:0"])
    >>> strategy.num_replicas_in_sync
    1
    """
    check_one_of("strategy", name, STRATEGIES)
    if devices is not None and name != "mirrored":
        raise ValueError(
            "Received `devices` for a strategy that does not take them; devices are only "
            f"used by strategy='mirrored'. Received: strategy={name!r}, devices={devices!r}"
        )
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if devices is not None and (
            isinstance(devices, str) or not devices or not all(isinstance(d, str) for d in devices)
        ):
            raise ValueError(
                "Received an invalid value for argument `devices`, expected a non-empty list "
                f"of device names such as ['/gpu:0', '/gpu:1']. Received: devices={devices!r}"
            )
        if devices:
            _check_devices_exist(devices)
        strategy = tf.distribute.MirroredStrategy(list(devices) if devices else None)
    else:
        if "TF_CONFIG" not in os.environ:
            logger.warning(
                "strategy='multi_worker' without the TF_CONFIG environment variable runs a "
                "single worker."
            )
        else:
            _check_tf_config(os.environ["TF_CONFIG"])
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    logger.info(
        "Using %s with %d replica(s).", type(strategy).__name__, strategy.num_replicas_in_sync
    )
    return strategy


def _check_devices_exist(devices: Sequence[str]) -> None:
    """Refuses a device this process does not have (a MirroredStrategy over one waits
    forever in its first step)."""
    local = tf.config.list_logical_devices()
    have = {(d.device_type, tf.DeviceSpec.from_string(d.name).device_index) for d in local}
    missing = []
    for name in devices:
        spec = tf.DeviceSpec.from_string(name)
        if (
            spec.device_type is not None
            and (spec.device_type.upper(), spec.device_index or 0) not in have
        ):
            missing.append(name)
    if missing:
        raise ValueError(
            f"Received devices that this machine does not have: {missing}. Expected some of "
            f"{[d.name for d in local]} (more CPU devices: split the CPU with "
            "`tf.config.set_logical_device_configuration` before TensorFlow starts). "
            f"Received: devices={list(devices)!r}"
        )


def _check_tf_config(value: str) -> None:
    """Refuses a `TF_CONFIG` that is not a JSON object, naming it."""
    try:
        parsed = json.loads(value)
    except ValueError as e:
        raise ValueError(
            f"Received an invalid TF_CONFIG environment variable, expected a JSON object such "
            f'as {{"cluster": {{"worker": [...]}}, "task": {{"type": "worker", "index": 0}}}}: '
            f"{e}. Received: TF_CONFIG={value!r}"
        ) from None
    if not isinstance(parsed, dict):
        raise ValueError(
            "Received an invalid TF_CONFIG environment variable, expected a JSON object. "
            f"Received: TF_CONFIG={value!r}"
        )


def resolve_jit_compile(jit_compile: bool | str, strategy=None) -> bool:
    """Turns `jit_compile` (`True`, `False` or `"auto"`) into a bool for `compile`.

    `"auto"` enables XLA only on a single GPU: not on CPU-only machines (XLA compiles slowly
    there and gains little) and not under a distribution strategy. `True` under a strategy
    XLA-compiles each replica's step (see `keras_transformer.training.distributed`).

    Args:
        jit_compile: the requested setting.
        strategy: the strategy training runs under (the current one when None).

    Returns:
        Whether to compile with XLA.
    """
    if isinstance(jit_compile, bool):
        return jit_compile
    if jit_compile != "auto":
        raise ValueError(
            "Received an invalid value for argument `jit_compile`, expected True, False or "
            f"'auto'. Received: jit_compile={jit_compile!r}"
        )
    strategy = strategy if strategy is not None else tf.distribute.get_strategy()
    if is_distributed(strategy):
        return False
    return bool(tf.config.list_physical_devices("GPU"))


def resolve_dtype_policy(dtype_policy: str) -> str:
    """Turns `training.dtype_policy` into a Keras dtype policy name.

    `"auto"` is `"mixed_bfloat16"` where the hardware computes in bf16, else `"float32"`:
    with GPUs, when every visible GPU has compute capability 8.0 or more (Ampere on); without,
    when the CPU has AVX512_BF16 or AMX (`keras_transformer.hardware`). Where bf16 is emulated
    it is slower than float32 (on a 2-core AVX2 EPYC, KerasHub's bf16 warm-up pass took 247 s);
    where it is native the recipe's step is about 1.4x as fast, with the same validation BLEU
    at equal steps (README, Results). Other names are returned as given.

    Args:
        dtype_policy: `"float32"`, `"mixed_float16"`, `"mixed_bfloat16"` or `"auto"`.

    Returns:
        The policy to build the model with.
    """
    if dtype_policy != "auto":
        return dtype_policy
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        capabilities = [
            tuple(tf.config.experimental.get_device_details(gpu).get("compute_capability", ()))
            for gpu in gpus
        ]
        native = all(c >= BF16_MIN_COMPUTE_CAPABILITY for c in capabilities)
        hardware = f"GPU compute capabilities {capabilities}"
    else:
        native = bool(native_bf16_cpu())
        hardware = f"a CPU with{'' if native else 'out'} AVX512_BF16 or AMX"
    policy = "mixed_bfloat16" if native else "float32"
    logger.info("training.dtype_policy auto: %s (%s).", policy, hardware)
    return policy


def is_chief(strategy=None) -> bool:
    """Whether this process writes the run's files (always True outside multi-worker).

    Under `MultiWorkerMirroredStrategy` the chief is the task of type `"chief"`, or worker
    0 when the cluster has no chief.
    """
    strategy = strategy if strategy is not None else tf.distribute.get_strategy()
    if not in_multi_worker_mode(strategy):
        return True
    resolver = strategy.cluster_resolver
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    return task_type == "worker" and task_id == 0 and "chief" not in cluster


def sync_workers(strategy) -> None:
    """Returns once every worker has called it (an all-reduce of one number across the
    workers; nothing to wait for outside multi-worker training)."""
    if not in_multi_worker_mode(strategy):
        return

    @tf.function
    def all_reduce():
        ones = strategy.run(lambda: tf.constant(1.0))  # (), on each replica
        return strategy.reduce(tf.distribute.ReduceOp.SUM, ones, axis=None)

    all_reduce()


def worker_id(strategy=None) -> int:
    """The worker's task index under multi-worker training (0 otherwise)."""
    strategy = strategy if strategy is not None else tf.distribute.get_strategy()
    if not in_multi_worker_mode(strategy):
        return 0
    return int(strategy.cluster_resolver.task_id or 0)
