"""REST serving latency and throughput of the exported Multi30k-sized Transformer, and a soak.

Exports a `Translator` with `keras_transformer.export.export_translator`, serves it with the
development stand-in (`keras_transformer.serving.server.start_server`, TF Serving's REST
contract, SignatureDefs run through the TF1 session loader) on loopback, and sends real
Multi30k validation German sentences, one sentence per `:predict` request (`instances` of
length 1), from 1 and 8 client threads (each with its own `ServingClient`). Three servers run
side by side: batching `off`, `on` (TF Serving's batching: merge whatever is queued) and
`grouped` (the stand-in's: batches grouped by length, leaving out requests that would pad more
than `--max-padding`). The modes take turns on chunks of the sentences (`--rounds`), so a
change in the machine's load falls on all of them. Prints p50/p95 latency, sentences per
second, sentences per CPU-second of this process and the CPU other processes took, then ratios,
and the ceiling: the same sentences as direct session runs of the export (no server), one per
run from as many threads as clients against full batches from the batch threads, which is the
most batching can give on the machine.

The model is a trained run (`--run-dir`, one that emits EOS) or, by default, the architecture
of `keras_transformer/configs/multi30k_de_en.yaml` (3+3 layers, d_model 256, 4 heads, d_ff
1024, shared vocabulary) with random weights and a SentencePiece tokenizer trained here on
Multi30k's training text (German + English, `--vocab-size`, 8000 like the config). A random
model almost never emits EOS, so every request decodes to its length limit
`min(max_length, a * source_tokens + b)` (`--max-length-a/--max-length-b`): the numbers are
worst-case (full-length) decodes.

Every cell sends the same `--requests` sentences (the first ones of val.de.gz); each server
first answers `--warmup` unmeasured requests.

Soak mode (`--soak-minutes M`, 10 for the full soak) starts the stand-in as its own process
(REST and gRPC, batching on) and sends mixed traffic from `--soak-clients` threads for M
minutes: REST and gRPC half each, `--soak-bad-fraction` bad requests of six kinds (each must
get its expected status), and publishes a new version halfway. It reports requests, failed
valid requests (must be 0), p50/p95, and the server's resident memory at start and end
(growth must stay under 10%); the start is taken after `--soak-warmup-seconds` of the same
traffic, unmeasured. Run:

    python benchmarks/serving.py [--run-dir RUN] [--beam-size 4] [--requests 256]
    python benchmarks/serving.py --run-dir RUN --soak-minutes 10
"""

from __future__ import annotations

import argparse
import collections
import gzip
import os
import platform
import queue
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

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA_DIR = os.environ.get("KERAS_TRANSFORMER_MULTI30K_DIR") or os.path.join(
    os.path.dirname(ROOT), "shared", "data", "multi30k"
)
MODEL_NAME = "transformer"


def read_lines(data_dir: str, filename: str) -> list[str]:
    path = os.path.join(data_dir, filename)
    if not os.path.exists(path):
        sys.exit(f"Missing {path}: pass --data-dir with the Multi30k files (train.de.gz, ...).")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def build_translator(args: argparse.Namespace):
    """(translator, description of the model) for a run dir or a random Multi30k model."""
    from keras_transformer.predictors import Translator

    decoding = {
        "beam_size": args.beam_size,
        "max_length_a": args.max_length_a,
        "max_length_b": args.max_length_b,
        "jit_compile": False,  # the export's graph has no XLA anyway
    }
    if args.run_dir:
        return Translator.from_run_dir(args.run_dir, **decoding), f"trained run {args.run_dir}"

    import keras

    from keras_transformer import Transformer
    from keras_transformer.config import load_config
    from keras_transformer.tokenization import train_sentencepiece

    keras.utils.set_random_seed(args.seed)
    config = load_config(args.config)
    texts = read_lines(args.data_dir, "train.de.gz") + read_lines(args.data_dir, "train.en.gz")
    start = time.perf_counter()
    tokenizer = train_sentencepiece(texts, vocab_size=args.vocab_size, seed=args.seed)
    spm_seconds = time.perf_counter() - start
    vocab = tokenizer.vocab_size
    model = Transformer(**config.model.to_transformer_config(vocab, vocab).to_dict())
    model.build(((None, None), (None, None)))
    translator = Translator(model, tokenizer, tokenizer, **decoding)
    description = (
        f"RANDOM weights, architecture of config {args.config!r}; shared SentencePiece vocab "
        f"{vocab} trained on {len(texts)} Multi30k train sentences (de+en) in {spm_seconds:.0f} s"
    )
    return translator, description


def decode_limits(translator, sentences: list[str], a: float, b: int) -> np.ndarray:
    """Each sentence's output-length limit (what a random model decodes to)."""
    ragged = translator.source_tokenizer.tokenize(sentences)
    lengths = np.minimum(ragged.row_lengths().numpy(), int(translator.model.max_length))
    limit = int(translator.decoder.max_length)
    return np.maximum(np.minimum(np.floor(a * lengths).astype(int) + b, limit), 1)


def machine_cpu_seconds() -> float:
    """CPU time all processes have used (Linux /proc/stat: user + nice + system + irq +
    softirq + steal), in seconds."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = f.readline().split()[1:]
    ticks = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / ticks


def combine(parts: list[dict]) -> dict:
    """One cell from its chunks: latencies pooled, time and CPU added up."""
    latencies = [x for part in parts for x in part["latencies"]]
    wall = sum(part["wall"] for part in parts)
    cpu = sum(part["cpu"] for part in parts)
    others = sum(part["others_cpu_seconds"] for part in parts)
    return {
        "concurrency": parts[0]["concurrency"],
        "sent": sum(part["sent"] for part in parts),
        "ok": len(latencies),
        "errors": [e for part in parts for e in part["errors"]],
        "wall": wall,
        "p50": float(np.percentile(latencies, 50)) * 1e3 if latencies else float("nan"),
        "p95": float(np.percentile(latencies, 95)) * 1e3 if latencies else float("nan"),
        "throughput": len(latencies) / wall if wall > 0 else float("nan"),
        "per_cpu_second": len(latencies) / cpu if cpu > 0 else float("nan"),
        "others_cpu": others / wall if wall > 0 else float("nan"),
        "truncated": any(part["truncated"] for part in parts),
    }


def run_cell(
    url: str,
    sentences: list[str],
    concurrency: int,
    timeout: float,
    deadline_s: float,
) -> dict:
    """Sends every sentence once from `concurrency` threads; latencies of the answered ones."""
    from keras_transformer.serving.client import ServingClient

    work: queue.SimpleQueue[str] = queue.SimpleQueue()
    for sentence in sentences:
        work.put(sentence)
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + deadline_s

    def worker() -> None:
        client = ServingClient(url, MODEL_NAME, timeout=timeout, retries=0)
        while time.monotonic() < stop_at:
            try:
                sentence = work.get_nowait()
            except queue.Empty:
                return
            start = time.perf_counter()
            try:
                predictions = client.predict([sentence])
                if len(predictions) != 1 or "translations" not in predictions[0]:
                    raise ValueError(f"unexpected answer {str(predictions)[:100]}")
            except Exception as e:  # counted and reported, the cell goes on
                with lock:
                    errors.append(f"{type(e).__name__}: {e}"[:200])
                continue
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)

    threads = [
        threading.Thread(target=worker, name=f"client-{i}", daemon=True) for i in range(concurrency)
    ]
    machine_start, cpu_start = machine_cpu_seconds(), time.process_time()
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=deadline_s + timeout + 5)
    wall = time.perf_counter() - start
    ours = time.process_time() - cpu_start
    others = max(machine_cpu_seconds() - machine_start - ours, 0.0)
    return {
        "concurrency": concurrency,
        "latencies": latencies,
        "cpu": ours,
        "others_cpu_seconds": others,
        "sent": len(sentences),
        "ok": len(latencies),
        "errors": errors,
        "wall": wall,
        "p50": float(np.percentile(latencies, 50)) * 1e3 if latencies else float("nan"),
        "p95": float(np.percentile(latencies, 95)) * 1e3 if latencies else float("nan"),
        "throughput": len(latencies) / wall if wall > 0 else float("nan"),
        "per_cpu_second": len(latencies) / ours if ours > 0 else float("nan"),
        "others_cpu": others / wall if wall > 0 else float("nan"),
        "truncated": len(latencies) + len(errors) < len(sentences),
    }


def session_ceiling(
    version_dir: str, sentences: list[str], concurrency: int, batch_size: int, threads: int
) -> dict[str, float]:
    """Sentences/s of direct session runs of the export (no server, no HTTP, no batcher):
    `concurrency` threads of one-sentence runs (what unbatched serving does at best) against
    `threads` threads of `batch_size`-sentence runs, in arrival order and sorted by length
    (the most any batching, and any grouping, can give on this machine)."""
    from keras_transformer.serving.servable import Servable

    servable = Servable(MODEL_NAME, 1, version_dir)

    def rate(chunks: list[list[str]], workers: int) -> float:
        pending: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
        for chunk in chunks:
            pending.put(chunk)

        def work() -> None:
            while True:
                try:
                    chunk = pending.get_nowait()
                except queue.Empty:
                    return
                servable.run("serving_default", {"sentences": np.array(chunk, dtype=object)})

        pool = [threading.Thread(target=work) for _ in range(workers)]
        start = time.perf_counter()
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        return len(sentences) / (time.perf_counter() - start)

    def batches(ordered: list[str]) -> list[list[str]]:
        return [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]

    try:
        rate(batches(sentences[:batch_size]), threads)  # warm-up
        return {
            "unbatched": rate([[s] for s in sentences], concurrency),
            "arrival": rate(batches(sentences), threads),
            "sorted": rate(batches(sorted(sentences, key=len)), threads),
        }
    finally:
        servable.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", help="a trained run (Translator.from_run_dir); default: random")
    p.add_argument("--config", default="multi30k_de_en", help="architecture of the random model")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="offline Multi30k (*.gz) folder")
    p.add_argument("--vocab-size", type=int, default=8000, help="random model's vocabulary")
    p.add_argument("--beam-size", type=int, default=4, help="beam size baked into the export")
    p.add_argument("--max-length-a", type=float, default=1.0)
    p.add_argument("--max-length-b", type=int, default=10)
    p.add_argument("--requests", type=int, default=256, help="measured requests per cell")
    p.add_argument("--warmup", type=int, default=16, help="unmeasured requests per server")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument("--max-batch-size", type=int, default=8)
    p.add_argument("--batch-timeout-micros", type=int, default=5000)
    p.add_argument(
        "--num-batch-threads",
        type=int,
        default=os.cpu_count() or 1,
        help="default: one per CPU, TF Serving's advice for CPU-only serving",
    )
    p.add_argument(
        "--max-padding",
        type=float,
        default=0.3,
        help="'grouped' leaves out requests that would pad more than this fraction",
    )
    p.add_argument("--rounds", type=int, default=2, help="turns the modes take per cell")
    p.add_argument("--request-timeout", type=float, default=120.0, help="seconds per request")
    p.add_argument("--cell-timeout", type=float, default=150.0, help="stop sending after this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--soak-minutes",
        type=float,
        default=None,
        help="soak mode: mixed REST/gRPC traffic for this long (10 for the full soak)",
    )
    p.add_argument("--soak-clients", type=int, default=4, help="soak client threads")
    p.add_argument(
        "--soak-warmup-seconds",
        type=float,
        default=60.0,
        help="unmeasured traffic before the start RSS is taken",
    )
    p.add_argument("--soak-bad-fraction", type=float, default=0.2, help="share of bad requests")
    args = p.parse_args(argv)
    if args.requests < 1 or args.warmup < 0 or min(args.concurrency) < 1:
        p.error("--requests and --concurrency must be positive, --warmup non-negative")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.soak_minutes is not None:
        soak(args)
        return
    began = time.perf_counter()
    load_start = os.getloadavg()

    import tensorflow as tf

    from keras_transformer.export import export_translator
    from keras_transformer.serving.server import BatchOptions, start_server

    translator, description = build_translator(args)
    validation = read_lines(args.data_dir, "val.de.gz")
    if len(validation) < args.requests + args.warmup:
        sys.exit(f"val.de.gz has {len(validation)} sentences; lower --requests/--warmup.")
    sentences = validation[: args.requests]
    warmup = validation[-args.warmup :] if args.warmup else []
    limits = decode_limits(translator, sentences, args.max_length_a, args.max_length_b)
    options = {
        "off": None,
        # TF Serving's batching: merge whatever is queued (max_padding 1).
        "on": BatchOptions(
            max_batch_size=args.max_batch_size,
            batch_timeout_micros=args.batch_timeout_micros,
            num_batch_threads=args.num_batch_threads,
            max_padding=1.0,
        ),
        # The stand-in's: group by length, leave out what pads more than max_padding.
        "grouped": BatchOptions(
            max_batch_size=args.max_batch_size,
            batch_timeout_micros=args.batch_timeout_micros,
            num_batch_threads=args.num_batch_threads,
            max_padding=args.max_padding,
        ),
    }
    batching = options["grouped"]

    tmp = tempfile.mkdtemp(prefix="bench-serving-")
    rows: list[tuple[str, dict]] = []
    merged: dict[str, dict[str, int]] = {}
    servers = {}
    try:
        start = time.perf_counter()
        export_translator(translator, tmp, MODEL_NAME, version=1)
        export_seconds = time.perf_counter() - start
        for mode, batch_options in options.items():
            servers[mode] = start_server(
                os.path.join(tmp, MODEL_NAME),
                MODEL_NAME,
                port=0,
                grpc_port=None,
                poll_interval=0,
                enable_batching=batch_options is not None,
                batching_parameters=batch_options,
            )
            if warmup:
                run_cell(
                    servers[mode].url,
                    warmup,
                    max(args.concurrency),
                    args.request_timeout,
                    args.cell_timeout,
                )
        before = {m: servers[m].batching_stats(MODEL_NAME) for m in options if options[m]}
        # The modes take turns on chunks of the sentences, so that a change in the machine's
        # load while the benchmark runs falls on every mode alike.
        chunks = [sentences[i :: args.rounds] for i in range(args.rounds)]
        for concurrency in args.concurrency:
            parts: dict[str, list[dict]] = {mode: [] for mode in options}
            for chunk in chunks:
                for mode in options:
                    parts[mode].append(
                        run_cell(
                            servers[mode].url,
                            chunk,
                            concurrency,
                            args.request_timeout,
                            args.cell_timeout,
                        )
                    )
            for mode in options:
                cell = combine(parts[mode])
                rows.append((mode, cell))
                print(
                    f"  [batching {mode}, concurrency {concurrency}: "
                    f"{cell['ok']}/{cell['sent']} in {cell['wall']:.1f} s]",
                    flush=True,
                )
        for mode in before:
            after = servers[mode].batching_stats(MODEL_NAME)
            merged[mode] = {k: after[k] - before[mode][k] for k in after}
        for server in servers.values():
            server.stop()
        servers = {}
        ceiling = session_ceiling(
            os.path.join(tmp, MODEL_NAME, "1"),
            sentences,
            max(args.concurrency),
            args.max_batch_size,
            args.num_batch_threads,
        )
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    # Report.
    print()
    print("REST serving benchmark (keras_transformer.serving.server stand-in, loopback)")
    print(f"model        : {description}")
    print(f"parameters   : {translator.model.count_params():,}")
    print(
        f"decoding     : {translator.method}, beam size {translator.beam_size}, length penalty "
        f"{translator.length_penalty}, limit min({int(translator.decoder.max_length)}, "
        f"{args.max_length_a:g} * source tokens + {args.max_length_b})"
    )
    if not args.run_dir:
        print(
            "               WORST CASE: a random model rarely emits EOS, so every request "
            "decodes to its full length limit"
        )
    print(
        f"requests     : first {len(sentences)} sentences of val.de.gz, 1 sentence per request; "
        f"decode limit mean {limits.mean():.1f}, max {limits.max()} tokens; "
        f"{len(warmup)} warm-up requests per server"
    )
    print(
        f"batching     : max_batch_size {batching.max_batch_size}, batch_timeout_micros "
        f"{batching.batch_timeout_micros}, num_batch_threads {batching.num_batch_threads}, "
        f"max_enqueued_batches {batching.max_enqueued_batches}, max_padding "
        f"{batching.max_padding:g} (length grouping)"
    )
    print("               'on' merges whatever is queued (TF Serving); 'grouped' groups by length")
    for mode, counts in merged.items():
        if counts["batches"]:
            print(
                f"               {mode}, all cells: {counts['tasks']} requests in "
                f"{counts['batches']} session runs (mean {counts['tasks'] / counts['batches']:.2f}"
                " per run)"
            )
    print(
        f"machine      : os.cpu_count()={os.cpu_count()}, {platform.machine()}, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"TensorFlow {tf.__version__}; server and clients in one process, intra/inter-op "
        "threads default"
    )
    print(f"export       : {export_seconds:.1f} s")
    print()
    header = (
        f"{'batching':>8}  {'concurrency':>11}  {'requests':>8}  {'p50 ms':>8}  {'p95 ms':>8}  "
        f"{'sentences/s':>11}  {'per CPU-s':>9}  {'others CPUs':>11}"
    )
    print(header)
    print("-" * len(header))
    for mode, cell in rows:
        done = f"{cell['ok']}" if cell["ok"] == cell["sent"] else f"{cell['ok']}/{cell['sent']}"
        print(
            f"{mode:>8}  {cell['concurrency']:>11}  {done:>8}  {cell['p50']:>8.0f}  "
            f"{cell['p95']:>8.0f}  {cell['throughput']:>11.2f}  {cell['per_cpu_second']:>9.2f}  "
            f"{cell['others_cpu']:>11.2f}"
        )
    for mode, cell in rows:
        if cell["errors"] or cell["truncated"]:
            print(
                f"  batching {mode}, concurrency {cell['concurrency']}: {len(cell['errors'])} "
                f"errors{', stopped at --cell-timeout' if cell['truncated'] else ''}"
                + (f"; first: {cell['errors'][0]}" if cell["errors"] else "")
            )

    table = {(mode, cell["concurrency"]): cell for mode, cell in rows}
    low, high = min(args.concurrency), max(args.concurrency)
    print()
    print("ratios")
    if low != high:
        for mode in ("off", "on", "grouped"):
            a, b = table[(mode, high)], table[(mode, low)]
            print(
                f"  batching {mode:>3}: throughput c={high} / c={low} = "
                f"{a['throughput'] / b['throughput']:.2f}x, p50 c={high} / c={low} = "
                f"{a['p50'] / b['p50']:.2f}x"
            )
    for concurrency in args.concurrency:
        off = table[("off", concurrency)]
        for mode in ("on", "grouped"):
            cell = table[(mode, concurrency)]
            print(
                f"  concurrency {concurrency}: {mode} / off: throughput "
                f"{cell['throughput'] / off['throughput']:.2f}x, "
                f"p50 {cell['p50'] / off['p50']:.2f}x, p95 {cell['p95'] / off['p95']:.2f}x, "
                "sentences per CPU-second "
                f"{cell['per_cpu_second'] / off['per_cpu_second']:.2f}x"
            )
        on, grouped = table[("on", concurrency)], table[("grouped", concurrency)]
        print(
            f"  concurrency {concurrency}: grouped / on: throughput "
            f"{grouped['throughput'] / on['throughput']:.2f}x, p95 "
            f"{grouped['p95'] / on['p95']:.2f}x"
        )
    print(
        f"  ceiling (session runs, no server): {high} threads x 1 sentence "
        f"{ceiling['unbatched']:.2f}/s; {args.num_batch_threads} threads x "
        f"{args.max_batch_size} sentences {ceiling['arrival']:.2f}/s in arrival order "
        f"({ceiling['arrival'] / ceiling['unbatched']:.2f}x), {ceiling['sorted']:.2f}/s sorted "
        f"by length ({ceiling['sorted'] / ceiling['unbatched']:.2f}x): the most batching can "
        "give here"
    )
    print(
        "per CPU-s    : sentences per CPU-second this process used (server and clients); "
        "'others CPUs' is the CPU time other processes used per second of the cell (a "
        "2-CPU machine is full at 2.0): where others are busy, wall-clock sentences/s is "
        "not comparable between cells"
    )
    print(f"total time   : {time.perf_counter() - began:.0f} s")
    print(
        f"load average : {'/'.join(f'{x:.2f}' for x in load_start)} at start, "
        f"{'/'.join(f'{x:.2f}' for x in os.getloadavg())} at end (1/5/15 min, "
        f"{os.cpu_count()} CPUs; other processes share them)"
    )


# --------------------------------------------------------------------------------------------
# Soak: mixed REST and gRPC traffic for a given time, a new version published halfway
# --------------------------------------------------------------------------------------------


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

    from keras_transformer.export import export_translator
    from keras_transformer.serving.client import ServingClient

    load_start = os.getloadavg()
    translator, description = build_translator(args)
    sentences = read_lines(args.data_dir, "val.de.gz")
    tmp = tempfile.mkdtemp(prefix="soak-serving-")
    base = os.path.join(tmp, MODEL_NAME)
    export_translator(translator, tmp, MODEL_NAME, version=1)
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


if __name__ == "__main__":
    main()
