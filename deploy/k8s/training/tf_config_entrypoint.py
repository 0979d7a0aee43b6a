"""The training image's entrypoint: sets `TF_CONFIG` for this worker, then runs the command.

`MultiWorkerMirroredStrategy` (`--set training.strategy=multi_worker`) reads the cluster and
this process' place in it from the `TF_CONFIG` environment variable.

* Under a Kubeflow `TFJob` the operator sets `TF_CONFIG`: it is used as it is.
* Outside an Indexed Job (no `JOB_COMPLETION_INDEX`, e.g. the export Job) the command runs
  as a single process, without `TF_CONFIG`.
* Under an Indexed `Job` (`completionMode: Indexed`) with a headless `Service`, worker `i` is
  the pod with `JOB_COMPLETION_INDEX=i` (set by the Job controller), and its stable name is
  `<JOB_NAME>-<i>.<SERVICE_NAME>` (the pod's hostname and the Service's subdomain). From
  `NUM_WORKERS`, `JOB_NAME`, `SERVICE_NAME` and `TF_WORKER_PORT` this writes

      {"cluster": {"worker": ["<job>-0.<svc>:<port>", ..., "<job>-<N-1>.<svc>:<port>"]},
       "task": {"type": "worker", "index": i}}

  With only "worker" tasks, worker 0 is the chief (`MultiWorkerMirroredStrategy`'s
  convention, `keras_transformer.training.strategies.is_chief`): it writes the run
  directory's shared files.

A peer's DNS record appears only once its pod exists, so before running the command this
waits (up to `PEER_DNS_TIMEOUT_S`, default 600 s) until every worker's name resolves.

    python tf_config_entrypoint.py keras-transformer train ... --set training.strategy=multi_worker
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence

INDEXED_JOB_VARIABLES = (
    "JOB_COMPLETION_INDEX",
    "NUM_WORKERS",
    "JOB_NAME",
    "SERVICE_NAME",
    "TF_WORKER_PORT",
)


def indexed_job_tf_config(
    index: int, num_workers: int, job_name: str, service_name: str, port: int
) -> dict:
    """`TF_CONFIG` of worker `index` of an Indexed Job whose pods sit behind a headless Service.

    Example:
    >>> indexed_job_tf_config(1, 2, "train", "train", 2222)["cluster"]
    {'worker': ['train-0.train:2222', 'train-1.train:2222']}
    """
    if num_workers < 1:
        raise ValueError(f"Expected NUM_WORKERS >= 1. Received: NUM_WORKERS={num_workers}")
    if not 0 <= index < num_workers:
        raise ValueError(
            "Expected 0 <= JOB_COMPLETION_INDEX < NUM_WORKERS (the Job's completions and "
            f"parallelism must equal NUM_WORKERS). Received: JOB_COMPLETION_INDEX={index}, "
            f"NUM_WORKERS={num_workers}"
        )
    hosts = [f"{job_name}-{i}.{service_name}:{port}" for i in range(num_workers)]
    return {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}


def tf_config_from_env(env: Mapping[str, str]) -> str | None:
    """The `TF_CONFIG` to set from an Indexed Job's variables.

    None when `TF_CONFIG` is already set (a TFJob) or when this is not an Indexed Job's pod (no
    `JOB_COMPLETION_INDEX`: a single process, e.g. the export Job).
    """
    if env.get("TF_CONFIG") or "JOB_COMPLETION_INDEX" not in env:
        return None
    missing = [name for name in INDEXED_JOB_VARIABLES if not env.get(name)]
    if missing:
        raise ValueError(
            "TF_CONFIG is not set, and deriving it for an Indexed Job needs "
            f"{', '.join(INDEXED_JOB_VARIABLES)}. Missing: {', '.join(missing)}"
        )
    config = indexed_job_tf_config(
        int(env["JOB_COMPLETION_INDEX"]),
        int(env["NUM_WORKERS"]),
        env["JOB_NAME"],
        env["SERVICE_NAME"],
        int(env["TF_WORKER_PORT"]),
    )
    return json.dumps(config)


def wait_for_peers(
    tf_config: str,
    timeout_s: float,
    resolve: Callable[[str, int], object] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> None:
    """Waits until every task address of `tf_config` resolves; TimeoutError after `timeout_s`.

    `resolve` and `sleep` default to `socket.getaddrinfo` and `time.sleep`.
    """
    resolve = resolve or socket.getaddrinfo
    sleep = sleep or time.sleep
    cluster = json.loads(tf_config).get("cluster", {})
    addresses = [address for tasks in cluster.values() for address in tasks]
    deadline = time.monotonic() + timeout_s
    for address in addresses:
        host, port = address.rsplit(":", 1)
        while True:
            try:
                resolve(host, int(port))
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{host} did not resolve within {timeout_s:g} s ({e}); is the headless "
                        "Service's name the pods' subdomain?"
                    ) from e
                sleep(2.0)


def main(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    if not argv:
        sys.stderr.write("usage: tf_config_entrypoint.py COMMAND [ARG ...]\n")
        return 2
    tf_config = tf_config_from_env(env)
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
        sys.stderr.write(f"TF_CONFIG={tf_config}\n")
    if env.get("TF_CONFIG"):
        wait_for_peers(env["TF_CONFIG"], float(env.get("PEER_DNS_TIMEOUT_S", "600")))
    sys.stderr.flush()
    os.execvpe(argv[0], list(argv), env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
