"""The pieces of `serving.py`'s REST benchmark: the model, the Multi30k sentences, the
client cells and the session-run ceiling.
"""

from __future__ import annotations

import argparse
import gzip
import os
import queue
import sys
import threading
import time

import numpy as np

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
