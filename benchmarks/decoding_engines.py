"""Decoding against CTranslate2 on the same weights: float32, bfloat16 and int8, greedy and
beam 4, batch 1 and 32, our XLA path and the export's path (no XLA, what TF Serving runs).

Two model sizes with random weights (4+4 layers d_model 128, and 6+6 d_model 512, "base"),
V=8000, random 32-token sources, 64 target tokens forced (EOS forbidden before the 64th), the
model ported tensor by tensor into a CTranslate2 `TransformerSpec`
(`keras_transformer.ctranslate2_export.transformer_spec`). Each engine runs in its own process
(CTranslate2's never imports TensorFlow), one after the other; each cell is the median of
`--repeats` calls after a first, tracing call, with the fastest and slowest call beside it.
Every process's line gives the share of the machine's CPU time that other processes took
while it ran (from /proc/stat); a share over 10% marks its figures as disturbed.

With `--run-dir`, the same engines translate Multi30k's validation split with the trained
model (beam 4 at batch 32, each engine's defaults otherwise) and print sentences per second
and sacreBLEU.

    python benchmarks/decoding_engines.py [--sizes small,base] [--repeats 3]
    python benchmarks/decoding_engines.py --sizes none --run-dir runs/de-en
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata

from _machine import commit, cpu_model, machine_cpu_seconds

VOCAB = 8000
SOURCE_LENGTH = 32
TARGET_TOKENS = 64
SIZES = {
    "small": {"num_encoder_layers": 4, "num_decoder_layers": 4, "d_model": 128, "d_ff": 512},
    "base": {"num_encoder_layers": 6, "num_decoder_layers": 6, "d_model": 512, "d_ff": 2048},
}
LABELS = {"small": "4+4, d128", "base": "6+6, d512"}
# (label, engine, weight type, XLA): the rows of each table, in order.
OURS = (
    ("ours XLA fp32", None, True),
    ("ours export path fp32", None, False),
    ("ours export path bf16", "bfloat16", False),
    ("ours export path int8", "int8", False),
)
THEIRS = (("CTranslate2 fp32", "float32"), ("CTranslate2 int8", "int8"))
CELLS = (("greedy", 1, 1), ("beam", 4, 1), ("greedy", 1, 32), ("beam", 4, 32))
BUSY_LIMIT = 0.10


def _run_child(args: list[str]) -> tuple[list[dict], float]:
    """Runs this script as a child; (its JSON lines, other processes' CPU share while it
    ran: the machine's busy time less the child's own, over the machine's total)."""
    busy, total = machine_cpu_seconds()
    process = subprocess.run([sys.executable, __file__, *args], stdout=subprocess.PIPE)
    busy2, total2 = machine_cpu_seconds()
    if process.returncode:
        raise SystemExit(f"{args[:2]} failed with exit code {process.returncode}")
    rows = [json.loads(line) for line in process.stdout.decode().splitlines() if line[:1] == "{"]
    own = sum(r["cpu_s"] for r in rows if "cpu_s" in r)
    other = max(0.0, (busy2 - busy) - own) / max(1, total2 - total)
    return [r for r in rows if "cpu_s" not in r], other


def _timed(fn, repeats: int) -> list[float]:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _own_cpu() -> None:
    """The child's own CPU seconds, for the parent's other-processes share."""
    t = os.times()
    print(json.dumps({"cpu_s": t.user + t.system}), flush=True)


def _sources(batch_size: int):
    import numpy as np

    rng = np.random.default_rng(batch_size)
    return rng.integers(4, VOCAB, size=(batch_size, SOURCE_LENGTH)).astype(np.int32)


def _pieces() -> list[str]:
    return ["<pad>", "<unk>", "<s>", "</s>"] + [f"p{i}" for i in range(4, VOCAB)]


def child_ours(size: str, workdir: str, repeats: int) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np

    from keras_transformer import Transformer
    from keras_transformer.ctranslate2_export import transformer_spec
    from keras_transformer.decoding import BatchDecoder
    from keras_transformer.quantization import quantize_model

    keras.utils.set_random_seed(0)
    model = Transformer(VOCAB, VOCAB, num_heads=8, dropout=0.0, max_length=128, **SIZES[size])
    model((np.ones((1, 4), "int32"), np.ones((1, 4), "int32")))
    for _, quantization in THEIRS:  # the same weights for CTranslate2
        spec = transformer_spec(model, _pieces(), _pieces(), source_eos=False)
        spec.optimize(quantization=None if quantization == "float32" else quantization)
        directory = os.path.join(workdir, f"{size}-{quantization}")
        os.makedirs(directory)
        spec.save(directory)
    for label, quantize, jit in OURS:
        decoding_model = quantize_model(model, quantize)
        for method, beam_size, batch_size in CELLS:
            decoder = BatchDecoder(
                decoding_model,
                method=method,
                beam_size=beam_size,
                max_length=TARGET_TOKENS,
                max_length_a=0.0,
                max_length_b=TARGET_TOKENS,
                min_length=TARGET_TOKENS,
                jit_compile=jit,
            )
            source = _sources(batch_size)
            times = _timed(lambda d=decoder, s=source: d(s), repeats)
            if (decoder(source).tokens[:, 0] != 0).sum(-1).min() != TARGET_TOKENS:
                raise RuntimeError("Expected every sentence to decode 64 tokens.")
            print(json.dumps({"row": label, "cell": [method, batch_size], "times": times}))
    _own_cpu()


def child_ct2(size: str, workdir: str, repeats: int) -> None:
    import ctranslate2

    pieces = _pieces()
    for label, quantization in THEIRS:
        translator = ctranslate2.Translator(
            os.path.join(workdir, f"{size}-{quantization}"),
            device="cpu",
            intra_threads=os.cpu_count() or 1,
        )
        for method, beam_size, batch_size in CELLS:
            source = [[pieces[i] for i in row] for row in _sources(batch_size).tolist()]

            def run(t=translator, s=source, k=beam_size, b=batch_size):
                return t.translate_batch(
                    s,
                    beam_size=k,
                    max_batch_size=b,
                    min_decoding_length=TARGET_TOKENS,
                    max_decoding_length=TARGET_TOKENS,
                )

            times = _timed(run, repeats)
            if min(len(r.hypotheses[0]) for r in run()) != TARGET_TOKENS:
                raise RuntimeError("Expected every sentence to decode 64 tokens.")
            print(json.dumps({"row": label, "cell": [method, batch_size], "times": times}))
    _own_cpu()


def _validation(run_dir: str) -> tuple[list[str], list[str]]:
    import gzip

    from keras_transformer.constants import MULTI30K_DIR_ENV_VAR

    directory = os.environ.get(MULTI30K_DIR_ENV_VAR)
    if not directory:
        raise SystemExit(f"Set {MULTI30K_DIR_ENV_VAR} to the folder of Multi30k's files.")
    lines = []
    for name in ("val.de.gz", "val.en.gz"):
        with gzip.open(os.path.join(directory, name), "rt", encoding="utf-8") as f:
            lines.append(f.read().rstrip("\n").split("\n"))
    return lines[0], lines[1]


def child_recipe_ours(run_dir: str, workdir: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from keras_transformer.ctranslate2_export import export_ctranslate2
    from keras_transformer.evaluation import score_corpus
    from keras_transformer.predictors import Translator

    sources, references = _validation(run_dir)
    for _, quantization in THEIRS:
        export_ctranslate2(
            run_dir,
            os.path.join(workdir, f"recipe-{quantization}"),
            quantization=None if quantization == "float32" else quantization,
        )
    for label, quantize, jit in OURS:
        translator = Translator.from_run_dir(
            run_dir, quantize=quantize, jit_compile=jit, beam_size=4, batch_size=32
        )
        translator.translate(sources)  # traces every shape bucket
        start = time.perf_counter()
        hypotheses = translator.translate(sources)
        seconds = time.perf_counter() - start
        bleu = score_corpus(hypotheses, references, ("bleu",)).scores["bleu"]
        print(json.dumps({"row": label, "seconds": seconds, "bleu": bleu, "n": len(sources)}))
    _own_cpu()


def child_recipe_ct2(run_dir: str, workdir: str) -> None:
    import ctranslate2
    import sentencepiece

    from keras_transformer.ctranslate2_export import SOURCE_SPM_FILENAME, TARGET_SPM_FILENAME
    from keras_transformer.evaluation import score_corpus

    sources, references = _validation(run_dir)
    for label, quantization in THEIRS:
        directory = os.path.join(workdir, f"recipe-{quantization}")
        source = sentencepiece.SentencePieceProcessor(
            model_file=os.path.join(directory, SOURCE_SPM_FILENAME)
        )
        target = sentencepiece.SentencePieceProcessor(
            model_file=os.path.join(directory, TARGET_SPM_FILENAME)
        )
        translator = ctranslate2.Translator(directory, intra_threads=os.cpu_count() or 1)

        with open(os.path.join(directory, "export_info.json")) as f:
            max_length = json.load(f)["max_length"]  # positions, the model's table

        def run(t=translator, s=source, g=target, n=max_length):
            results = t.translate_batch(
                s.encode(sources, out_type=str),
                beam_size=4,
                max_batch_size=32,
                max_input_length=n,
                max_decoding_length=n - 1,  # BOS takes position 0
            )
            return [g.decode(r.hypotheses[0]) for r in results]

        run()
        start = time.perf_counter()
        hypotheses = run()
        seconds = time.perf_counter() - start
        bleu = score_corpus(hypotheses, references, ("bleu",)).scores["bleu"]
        print(json.dumps({"row": label, "seconds": seconds, "bleu": bleu, "n": len(sources)}))
    _own_cpu()


def _cell(times: list[float]) -> str:
    ms = sorted(t * 1e3 for t in times)
    return f"{statistics.median(ms):,.1f} ({ms[0]:,.0f}-{ms[-1]:,.0f})"


def _share(other: float) -> str:
    return f"{other:.0%}" + (" (disturbed)" if other > BUSY_LIMIT else "")


def print_size(size: str, repeats: int, workdir: str) -> None:
    rows: dict[str, dict[tuple, list[float]]] = {}
    shares = []
    for engine in ("ours", "ct2"):
        results, other = _run_child([f"--child-{engine}", size, workdir, str(repeats)])
        shares.append(f"{engine}: {_share(other)}")
        for r in results:
            rows.setdefault(r["row"], {})[tuple(r["cell"])] = r["times"]
    header = " | ".join(f"{m} {'4 ' if m == 'beam' else ''}b{b}" for m, _, b in CELLS)
    print(f"\n{LABELS[size]}, ms per batch, median (fastest-slowest) of {repeats} calls; ")
    print(f"other processes' CPU share: {', '.join(shares)}\n")
    print(f"| model, path | {header} |")
    print("| --- |" + " --- |" * len(CELLS))
    for label, cells in rows.items():
        values = " | ".join(_cell(cells[(m, b)]) for m, _, b in CELLS)
        print(f"| {LABELS[size]}: {label} | {values} |")
    median = {k: {c: statistics.median(t) for c, t in v.items()} for k, v in rows.items()}
    print()
    for ours, theirs in (
        ("ours export path bf16", "CTranslate2 int8"),
        ("ours export path int8", "CTranslate2 int8"),
        ("ours export path fp32", "CTranslate2 fp32"),
        ("ours XLA fp32", "CTranslate2 fp32"),
    ):
        ratios = ", ".join(
            f"{m}{' 4' if m == 'beam' else ''} b{b} "
            f"{median[theirs][(m, b)] / median[ours][(m, b)]:.2f}x"
            for m, _, b in CELLS
        )
        print(f"{ours} vs {theirs} (>1: ours faster): {ratios}")


def print_recipe(run_dir: str, workdir: str) -> None:
    print(f"\nThe trained model of {run_dir} on Multi30k's validation split, beam 4, batch 32\n")
    print("| engine, path | sentences/s | seconds | validation BLEU | other CPU share |")
    print("| --- | --- | --- | --- | --- |", flush=True)
    for engine in ("ours", "ct2"):
        results, other = _run_child([f"--child-recipe-{engine}", run_dir, workdir])
        for r in results:
            print(
                f"| {r['row']} | {r['n'] / r['seconds']:.1f} | {r['seconds']:.1f} | "
                f"{r['bleu']:.2f} | {_share(other)} |",
                flush=True,
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1].startswith("--child-"):
        name, *rest = sys.argv[1:]
        if name == "--child-ours":
            child_ours(rest[0], rest[1], int(rest[2]))
        elif name == "--child-ct2":
            child_ct2(rest[0], rest[1], int(rest[2]))
        elif name == "--child-recipe-ours":
            child_recipe_ours(*rest)
        else:
            child_recipe_ct2(*rest)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,base", help="small, base, both or none")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--run-dir", default=None, help="a trained translation run")
    args = parser.parse_args()
    sizes = [s for s in args.sizes.split(",") if s and s != "none"]
    versions = ", ".join(f"{n} {metadata.version(n)}" for n in ("tensorflow", "ctranslate2"))
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; Python {platform.python_version()}")
    print(f"{versions}; commit {commit()}")
    with tempfile.TemporaryDirectory() as workdir:
        for size in sizes:
            print_size(size, args.repeats, workdir)
        if args.run_dir:
            print_recipe(args.run_dir, workdir)


if __name__ == "__main__":
    main()
