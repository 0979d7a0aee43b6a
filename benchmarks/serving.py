"""REST serving latency and throughput of the exported Multi30k-sized Transformer.

Exports a `Translator` with `keras_transformer.export.export_translator`, serves it with the
development stand-in (`keras_transformer.serving.server.start_server`, TF Serving's REST
contract, SignatureDefs run through the TF1 session loader) on loopback, and sends real
Multi30k validation German sentences, one sentence per `:predict` request (`instances` of
length 1), from 1 and 8 client threads (each with its own `ServingClient`), with dynamic
batching off and on. Prints p50/p95 latency and sentences per second side by side, then
ratios.

The model is a trained run (`--run-dir`) or, by default, the architecture of
`keras_transformer/configs/multi30k_de_en.yaml` (3+3 layers, d_model 256, 4 heads,
d_ff 1024, shared vocabulary) with random weights and a SentencePiece tokenizer trained
here on Multi30k's training text (German + English, `--vocab-size`, 8000 like the config).
A random model almost never emits EOS, so every request decodes to its length limit
`min(max_length, a * source_tokens + b)` (`--max-length-a/--max-length-b`): the numbers
are worst-case (full-length) decodes.

Every cell sends the same `--requests` sentences (the first ones of val.de.gz); each server
first answers `--warmup` unmeasured requests. Run:

    python benchmarks/serving.py [--run-dir RUN] [--beam-size 4] [--requests 64]
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import queue
import shutil
import sys
import tempfile
import threading
import time

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
    from keras_transformer.translator import Translator

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
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=deadline_s + timeout + 5)
    wall = time.perf_counter() - start
    return {
        "concurrency": concurrency,
        "sent": len(sentences),
        "ok": len(latencies),
        "errors": errors,
        "wall": wall,
        "p50": float(np.percentile(latencies, 50)) * 1e3 if latencies else float("nan"),
        "p95": float(np.percentile(latencies, 95)) * 1e3 if latencies else float("nan"),
        "throughput": len(latencies) / wall if wall > 0 else float("nan"),
        "truncated": len(latencies) + len(errors) < len(sentences),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", help="a trained run (Translator.from_run_dir); default: random")
    p.add_argument("--config", default="multi30k_de_en", help="architecture of the random model")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="offline Multi30k (*.gz) folder")
    p.add_argument("--vocab-size", type=int, default=8000, help="random model's vocabulary")
    p.add_argument("--beam-size", type=int, default=4, help="beam size baked into the export")
    p.add_argument("--max-length-a", type=float, default=1.0)
    p.add_argument("--max-length-b", type=int, default=10)
    p.add_argument("--requests", type=int, default=64, help="measured requests per cell")
    p.add_argument("--warmup", type=int, default=8, help="unmeasured requests per server")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument("--max-batch-size", type=int, default=8)
    p.add_argument("--batch-timeout-micros", type=int, default=5000)
    p.add_argument("--num-batch-threads", type=int, default=1)
    p.add_argument("--request-timeout", type=float, default=120.0, help="seconds per request")
    p.add_argument("--cell-timeout", type=float, default=150.0, help="stop sending after this")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.requests < 1 or args.warmup < 0 or min(args.concurrency) < 1:
        p.error("--requests and --concurrency must be positive, --warmup non-negative")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    began = time.perf_counter()

    import tensorflow as tf

    from keras_transformer.export import export_translator
    from keras_transformer.serving.server import BatchingParameters, start_server

    translator, description = build_translator(args)
    validation = read_lines(args.data_dir, "val.de.gz")
    if len(validation) < args.requests + args.warmup:
        sys.exit(f"val.de.gz has {len(validation)} sentences; lower --requests/--warmup.")
    sentences = validation[: args.requests]
    warmup = validation[-args.warmup :] if args.warmup else []
    limits = decode_limits(translator, sentences, args.max_length_a, args.max_length_b)
    batching = BatchingParameters(
        max_batch_size=args.max_batch_size,
        batch_timeout_micros=args.batch_timeout_micros,
        num_batch_threads=args.num_batch_threads,
    )

    tmp = tempfile.mkdtemp(prefix="bench-serving-")
    rows: list[tuple[str, dict]] = []
    merged: dict[str, float] = {}
    try:
        start = time.perf_counter()
        export_translator(translator, tmp, MODEL_NAME, version=1)
        export_seconds = time.perf_counter() - start
        for mode in ("off", "on"):
            server = start_server(
                os.path.join(tmp, MODEL_NAME),
                MODEL_NAME,
                port=0,
                poll_interval=0,
                enable_batching=mode == "on",
                batching_parameters=batching,
            )
            try:
                if warmup:
                    run_cell(
                        server.url,
                        warmup,
                        max(args.concurrency),
                        args.request_timeout,
                        args.cell_timeout,
                    )
                before = server.batching_stats(MODEL_NAME)
                for concurrency in args.concurrency:
                    cell = run_cell(
                        server.url, sentences, concurrency, args.request_timeout, args.cell_timeout
                    )
                    rows.append((mode, cell))
                    print(
                        f"  [batching {mode}, concurrency {concurrency}: "
                        f"{cell['ok']}/{cell['sent']} in {cell['wall']:.1f} s]",
                        flush=True,
                    )
                after = server.batching_stats(MODEL_NAME)
                if mode == "on" and after["batches"] > before["batches"]:
                    merged["runs"] = after["batches"] - before["batches"]
                    merged["tasks"] = after["tasks"] - before["tasks"]
            finally:
                server.stop()
    finally:
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
        f"batching on  : max_batch_size {batching.max_batch_size}, batch_timeout_micros "
        f"{batching.batch_timeout_micros}, num_batch_threads {batching.num_batch_threads}, "
        f"max_enqueued_batches {batching.max_enqueued_batches}"
    )
    if merged:
        print(
            f"               measured, all batching-on cells together: {merged['tasks']:.0f} "
            f"requests in {merged['runs']:.0f} session runs "
            f"(mean {merged['tasks'] / merged['runs']:.2f} per run)"
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
        f"{'sentences/s':>11}"
    )
    print(header)
    print("-" * len(header))
    for mode, cell in rows:
        done = f"{cell['ok']}" if cell["ok"] == cell["sent"] else f"{cell['ok']}/{cell['sent']}"
        print(
            f"{mode:>8}  {cell['concurrency']:>11}  {done:>8}  {cell['p50']:>8.0f}  "
            f"{cell['p95']:>8.0f}  {cell['throughput']:>11.2f}"
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
        for mode in ("off", "on"):
            a, b = table[(mode, high)], table[(mode, low)]
            print(
                f"  batching {mode:>3}: throughput c={high} / c={low} = "
                f"{a['throughput'] / b['throughput']:.2f}x, p50 c={high} / c={low} = "
                f"{a['p50'] / b['p50']:.2f}x"
            )
    for concurrency in args.concurrency:
        on, off = table[("on", concurrency)], table[("off", concurrency)]
        print(
            f"  concurrency {concurrency}: throughput on / off = "
            f"{on['throughput'] / off['throughput']:.2f}x, p50 on / off = "
            f"{on['p50'] / off['p50']:.2f}x, p95 on / off = {on['p95'] / off['p95']:.2f}x"
        )
    print(f"total time   : {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
