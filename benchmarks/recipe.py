"""The Multi30k de->en recipe's results: train (or take a trained run), then score.

Trains `keras_transformer/configs/multi30k_de_en.yaml` as `keras-transformer train` does
(unless `--run-dir` already holds a trained model and `--skip-train` is given), then
translates Multi30k's validation split and test_2016_flickr with greedy search and beam
search, scores them with sacreBLEU (cased, detokenized, 13a) and prints a Markdown row for
the README's results table: BLEU, the length ratio of the beam outputs, the training minutes
(from the run's `bleu.jsonl`/log, else this process' clock), the real target tokens per
second of training, and the machine. Tuning happens on the validation split only; the test
set is scored here for the table.

    python benchmarks/recipe.py --run-dir runs/de-en [--set key=value ...] [--skip-train]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import _machine  # noqa: F401, E402  (first: sets the package's oneDNN default before TF)
import tensorflow as tf  # noqa: E402
from _machine import DEFAULT_MULTI30K_DIR, cpu_model  # noqa: E402

from keras_transformer.config import load_config  # noqa: E402
from keras_transformer.evaluation import score_corpus  # noqa: E402
from keras_transformer.predictors import Translator  # noqa: E402
from keras_transformer.run_dir import RunPaths  # noqa: E402

SETS = {
    "val": ("val.de.gz", "val.en.gz"),
    "test_2016": ("test_2016_flickr.de.gz", "test_2016_flickr.en.gz"),
}


def read(directory: str, name: str) -> list[str]:
    with gzip.open(os.path.join(directory, name), "rt", encoding="utf-8") as f:
        return f.read().rstrip("\n").split("\n")


def real_target_tokens_per_step(config, run_dir: str) -> float:
    """Real (non-pad) target tokens per training step, averaged over one epoch."""
    from keras_transformer.runner import training_data
    from keras_transformer.tasks import get_task

    task = get_task(config)
    pairs, tokenizers = training_data(task, RunPaths(run_dir))
    data = task.make_batches(
        pairs, tokenizers, shuffle=True, drop_remainder=config.data.drop_remainder
    )
    steps, tokens = data.reduce(
        (tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
        lambda state, batch: (state[0] + 1, state[1] + tf.math.count_nonzero(batch[1])),
    )
    return int(tokens) / int(steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--skip-train", action="store_true", help="score the run as it is")
    parser.add_argument("--beam-size", type=int, default=None, help="default: the decoder's")
    parser.add_argument("--multi30k-dir", default=DEFAULT_MULTI30K_DIR)
    args = parser.parse_args()
    multi30k = os.path.abspath(args.multi30k_dir)
    config = load_config(
        "multi30k_de_en",
        [f"translation.local_dir={multi30k}", f"training.run_dir={args.run_dir}", *args.overrides],
    )
    paths = RunPaths(args.run_dir)
    minutes = None
    if not args.skip_train:
        from keras_transformer.runner import train

        start = time.monotonic()
        train(config)
        minutes = (time.monotonic() - start) / 60
    epochs = steps = None
    if os.path.exists(paths.bleu_log):
        with open(paths.bleu_log, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
        if records:
            epochs, steps = records[-1]["epoch"], records[-1]["step"]
            minutes = minutes or records[-1]["minutes"]
    tokens_per_second = None
    if minutes and steps:  # the last epoch may stop early (the time budget): count steps
        tokens = real_target_tokens_per_step(config, args.run_dir) * steps
        tokens_per_second = tokens / (minutes * 60)

    results = {}
    for method, beam in (("greedy", 1), ("beam", args.beam_size)):
        kwargs = {"beam_size": beam} if beam else {}
        translator = Translator.from_run_dir(args.run_dir, batch_size=128, **kwargs)
        for name, (source_file, reference_file) in SETS.items():
            sources, references = read(multi30k, source_file), read(multi30k, reference_file)
            hypotheses = translator.translate(sources)
            result = score_corpus(hypotheses, references, metrics=("bleu",))
            results[f"{name}_{method}"] = result.scores["bleu"]
            results[f"{name}_{method}_detail"] = result.details["bleu"]
            print(f"{name} {method}: {result.details['bleu']}", flush=True)
    machine = f"{os.cpu_count()} CPUs ({cpu_model()}), TF {tf.__version__}"
    print(
        json.dumps(
            {
                "minutes": minutes,
                "epochs": epochs,
                "steps": steps,
                "tokens_per_second": tokens_per_second,
                **results,
            },
            indent=1,
        )
    )
    print(
        f"| {results['val_greedy']:.1f} / {results['val_beam']:.1f} "
        f"| {results['test_2016_greedy']:.1f} / {results['test_2016_beam']:.1f} "
        f"| {minutes:.1f} | {tokens_per_second or float('nan'):,.0f} | {machine} |"
        if minutes
        else "(no training time recorded)"
    )


if __name__ == "__main__":
    main()
