"""REST serving latency and throughput of the exported Multi30k-sized Transformer, and a soak.

Exports a `Translator` with `keras_transformer.export.export_predictor`, serves it with the
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
import os
import platform
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import _machine  # noqa: F401, E402  (first: sets the package's oneDNN default before TF)
from _serving_measure import (  # noqa: E402
    DEFAULT_DATA_DIR,
    MODEL_NAME,
    build_translator,
    combine,
    decode_limits,
    read_lines,
    run_cell,
    session_ceiling,
)
from _serving_soak import soak  # noqa: E402


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

    from keras_transformer.export import export_predictor
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
        export_predictor(translator, tmp, MODEL_NAME, version=1)
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


if __name__ == "__main__":
    main()
