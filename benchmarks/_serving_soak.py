"""`serving.py --soak-minutes M`: mixed REST and gRPC traffic for a given time against the
stand-in as its own process, a new version published halfway.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import numpy as np
from _serving_measure import MODEL_NAME, build_translator, read_lines


def rss_mb(pid: int) -> float:
    """Resident memory of a process, in MiB (Linux /proc)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def start_server_process(base: str, batching_file: str) -> tuple[subprocess.Popen, int, int]:
    """The stand-in as its own process (so its memory is its own); (process, REST, gRPC)."""
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "keras_transformer.serving",
            "--model_base_path", base, "--model_name", MODEL_NAME,
            "--rest_api_port", "0", "--port", "0", "--file_system_poll_wait_seconds", "1",
            "--enable_batching", "--batching_parameters_file", batching_file,
            "--log_level", "INFO",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    ports: dict[str, int] = {}
    patterns = {
        "rest": re.compile(r"Exporting HTTP/REST API at:[\d.]+:(\d+)"),
        "grpc": re.compile(r"Running gRPC ModelServer at [\d.]+:(\d+)"),
    }
    deadline = time.monotonic() + 300
    while len(ports) < 2 and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        for key, pattern in patterns.items():
            m = pattern.search(line)
            if m:
                ports[key] = int(m.group(1))
    if len(ports) < 2:
        proc.kill()
        sys.exit("the server did not start")
    # Keep reading its log so it never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return proc, ports["rest"], ports["grpc"]


def bad_requests(rest_url: str, grpc_target: str) -> list[tuple[str, Callable[[], object], str]]:
    """(name, call, expected code) for requests a server must refuse and survive."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(grpc_target))

    def rest(body: bytes, path: str = f"/v1/models/{MODEL_NAME}:predict") -> Callable[[], int]:
        def call() -> int:
            request = urllib.request.Request(rest_url + path, data=body, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=60) as reply:  # noqa: S310
                    return reply.status
            except urllib.error.HTTPError as e:
                e.read()
                return e.code

        return call

    def grpc_call(signature: str, values: object, name: str = MODEL_NAME) -> Callable[[], str]:
        def call() -> str:
            request = predict_pb2.PredictRequest()
            request.model_spec.name = name
            request.model_spec.signature_name = signature
            request.inputs["sentences"].CopyFrom(tf.make_tensor_proto(values))
            try:
                stub.Predict(request, timeout=60)
                return "OK"
            except grpc.RpcError as e:
                return e.code().name

        return call

    return [
        ("rest_malformed_json", rest(b'{"instances": ["a"'), "400"),
        ("rest_numbers", rest(b'{"instances": [1, 2]}'), "400"),
        (
            "rest_unknown_version",
            rest(b'{"instances": ["a"]}', f"/v1/models/{MODEL_NAME}/versions/99:predict"),
            "404",
        ),  # noqa: E501
        ("grpc_wrong_dtype", grpc_call("serving_default", [1.5]), "INVALID_ARGUMENT"),
        ("grpc_unknown_signature", grpc_call("nope", ["a"]), "FAILED_PRECONDITION"),
        ("grpc_unknown_model", grpc_call("serving_default", ["a"], "nope"), "NOT_FOUND"),
    ]


def soak(args: argparse.Namespace) -> None:
    """Mixed traffic for --soak-minutes; a new version is published halfway."""
    import random

    import tensorflow as tf

    from keras_transformer.export import export_predictor
    from keras_transformer.serving.client import ServingClient

    load_start = os.getloadavg()
    translator, description = build_translator(args)
    sentences = read_lines(args.data_dir, "val.de.gz")
    tmp = tempfile.mkdtemp(prefix="soak-serving-")
    base = os.path.join(tmp, MODEL_NAME)
    export_predictor(translator, tmp, MODEL_NAME, version=1)
    batching_file = os.path.join(tmp, "batching.config")
    with open(batching_file, "w", encoding="utf-8") as f:
        f.write(
            f"max_batch_size {{ value: {args.max_batch_size} }}\n"
            f"batch_timeout_micros {{ value: {args.batch_timeout_micros} }}\n"
            f"num_batch_threads {{ value: {args.num_batch_threads} }}\n"
        )
    proc, rest_port, grpc_port = start_server_process(base, batching_file)
    rest_url, grpc_target = f"http://127.0.0.1:{rest_port}", f"127.0.0.1:{grpc_port}"
    bad = bad_requests(rest_url, grpc_target)
    lock = threading.Lock()
    latencies: dict[str, list[float]] = {"rest": [], "grpc": []}
    counts = collections.Counter()
    failures: list[str] = []
    duration = args.soak_minutes * 60

    def client(index: int, stop_at: float, counts: collections.Counter, record: bool) -> None:
        rng = random.Random(args.seed + index + (0 if record else 1000))
        clients = {
            "rest": ServingClient(rest_url, MODEL_NAME, timeout=args.request_timeout, retries=0),
            "grpc": ServingClient(
                f"grpc://{grpc_target}", MODEL_NAME, timeout=args.request_timeout, retries=0
            ),
        }
        while time.monotonic() < stop_at:
            if rng.random() < args.soak_bad_fraction:
                name, call, expected = rng.choice(bad)
                got = str(call())
                with lock:
                    counts["bad"] += 1
                    if got != expected:
                        counts["bad_unexpected"] += 1
                        failures.append(f"{name}: got {got}, expected {expected}")
                continue
            protocol = "rest" if rng.random() < 0.5 else "grpc"
            start = time.perf_counter()
            try:
                (answer,) = clients[protocol].predict([rng.choice(sentences)])
                if not isinstance(answer.get("translations"), str):
                    raise ValueError(f"unexpected answer {answer!r}"[:200])
            except Exception as e:  # a failed valid request: counted, reported
                with lock:
                    counts["valid_failed"] += 1
                    failures.append(f"{protocol}: {type(e).__name__}: {e}"[:300])
                continue
            with lock:
                counts["valid"] += 1
                if record:
                    latencies[protocol].append(time.perf_counter() - start)

    def run_clients(stop_at: float, counts: collections.Counter, record: bool) -> list:
        threads = [
            threading.Thread(target=client, args=(i, stop_at, counts, record))
            for i in range(args.soak_clients)
        ]
        for thread in threads:
            thread.start()
        return threads

    try:
        warm = ServingClient(rest_url, MODEL_NAME, timeout=args.request_timeout)
        warm.predict([sentences[0]])
        loaded_mb = rss_mb(proc.pid)
        # Warm-up: the same traffic, unmeasured, so that the start figure already holds what
        # serving allocates once (batch shapes, oneDNN primitive caches, thread arenas) and
        # the growth that follows is what the soak is after.
        warm_counts = collections.Counter()
        for thread in run_clients(time.monotonic() + args.soak_warmup_seconds, warm_counts, False):
            thread.join()
        for key in ("valid_failed", "bad_unexpected"):  # a failure in the warm-up still counts
            counts[key] += warm_counts[key]
        rss = [(0.0, rss_mb(proc.pid))]
        began = time.monotonic()
        threads = run_clients(began + duration, counts, True)
        published = available = None
        while any(t.is_alive() for t in threads):
            time.sleep(5)
            elapsed = time.monotonic() - began
            rss.append((elapsed, rss_mb(proc.pid)))
            if published is None and elapsed >= duration / 2:
                shutil.copytree(os.path.join(base, "1"), os.path.join(tmp, "staging"))
                os.rename(os.path.join(tmp, "staging"), os.path.join(base, "2"))
                published = elapsed
            if published is not None and available is None:
                status = warm.status()["model_version_status"]
                if any(s["version"] == "2" and s["state"] == "AVAILABLE" for s in status):
                    available = elapsed
        for thread in threads:
            thread.join()
        serving_version = warm.metadata()["model_spec"]["version"]
        rss.append((time.monotonic() - began, rss_mb(proc.pid)))
    finally:
        proc.send_signal(signal.SIGTERM)
        exit_code = proc.wait(timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)

    every = latencies["rest"] + latencies["grpc"]
    print()
    print("Soak (keras_transformer.serving stand-in as its own process, loopback)")
    print(f"model        : {description}")
    print(f"decoding     : beam size {translator.beam_size}")
    print(
        f"traffic      : {args.soak_minutes:g} min, {args.soak_clients} client threads, REST and "
        f"gRPC half each, {args.soak_bad_fraction:.0%} bad requests ({len(bad)} kinds), "
        "one sentence per valid request; batching on"
    )
    print(
        f"new version  : published at {published or float('nan'):.0f} s, AVAILABLE at "
        f"{available or float('nan'):.0f} s; serving version {serving_version} at the end"
    )
    print(
        f"requests     : {counts['valid'] + counts['valid_failed'] + counts['bad']} "
        f"({counts['valid'] + counts['valid_failed']} valid, {counts['bad']} bad)"
    )
    print(f"valid failed : {counts['valid_failed']} (must be 0)")
    print(f"bad, wrong answer: {counts['bad_unexpected']} (must be 0)")
    for label, values in (("all", every), ("rest", latencies["rest"]), ("grpc", latencies["grpc"])):
        if values:
            print(
                f"latency {label:<4} : p50 {np.percentile(values, 50) * 1e3:.0f} ms, p95 "
                f"{np.percentile(values, 95) * 1e3:.0f} ms ({len(values)} requests)"
            )
    start_mb, end_mb = rss[0][1], rss[-1][1]
    print(
        f"warm-up      : {args.soak_warmup_seconds:g} s of the same traffic "
        f"({warm_counts['valid'] + warm_counts['bad']} requests, not counted above); server RSS "
        f"{loaded_mb:.0f} MiB after its first request, {start_mb:.0f} MiB after the warm-up"
    )
    print(
        f"server RSS   : start {start_mb:.0f} MiB (after warm-up), end {end_mb:.0f} MiB, max "
        f"{max(m for _, m in rss):.0f} MiB; growth {100 * (end_mb / start_mb - 1):+.1f}% "
        "(must stay under 10%)"
    )
    step = max(1, len(rss) // 8)
    timeline = ", ".join(f"{t:.0f} s {m:.0f}" for t, m in rss[::step] + rss[-1:])
    print(f"RSS timeline : {timeline} (MiB)")
    print(f"server exit  : {exit_code} after SIGTERM")
    print(
        f"load average : {'/'.join(f'{x:.2f}' for x in load_start)} at start, "
        f"{'/'.join(f'{x:.2f}' for x in os.getloadavg())} at end (1/5/15 min; "
        f"{os.cpu_count()} CPUs, TensorFlow {tf.__version__})"
    )
    for failure in failures[:5]:
        print(f"  failure: {failure}")
