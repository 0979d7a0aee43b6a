"""`keras-transformer average RUN_DIR --last N`: checkpoint averaging of a trained run."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from keras_transformer import storage

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        help="the training run directory; one interrupted before saving model.keras too (its "
        "model built from its config.yaml; the run still resumes from its backup)",
    )
    parser.add_argument(
        "--last",
        type=int,
        required=True,
        help="average the weights saved at the end of the last N epochs",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="where to write the averaged model, a .keras file (default: RUN_DIR/model.keras, "
        "replaced atomically; the last epoch's weights stay in RUN_DIR/checkpoints)",
    )


def run(args: argparse.Namespace) -> int:
    from keras_transformer.run_dir import RunPaths, check_run_dir
    from keras_transformer.training.averaging import average_weights
    from keras_transformer.training.budget import epoch_weight_files

    if args.last < 1:
        raise ValueError(f"Received --last {args.last}, expected a positive number of epochs.")
    check_run_dir(args.run_dir)
    paths = RunPaths(args.run_dir)
    files = epoch_weight_files(paths.checkpoints)
    if len(files) < args.last:
        raise ValueError(
            f"Received --last {args.last}, but {paths.checkpoints} holds the weights of "
            f"{len(files)} epoch(s) (epoch-NNN.weights.h5); train with "
            f"training.average_last >= {args.last} to keep more."
        )
    output = args.output or paths.model
    storage.check_file(output, reading=False)
    if not output.endswith(".keras"):
        # Checked before the work: Keras saves a model with our layers as .keras only (an .h5
        # one does not load back; other names fail in `save` after the averaging).
        raise ValueError(
            f"Received --output {output!r}, expected a path ending in .keras (the Keras "
            "model format of the run's model.keras)."
        )
    model = _run_model(paths)
    average_weights(model, files[-args.last :])
    storage.makedirs(storage.parent(output))
    with storage.written_beside(output) as partial:  # never a half-written model at `output`
        model.save(partial)
    storage.write_text(
        os.path.join(paths.root, "averaged.json"),
        json.dumps({"output": output, "checkpoints": files[-args.last :]}, indent=2),
    )
    sys.stdout.write(
        f"{output}: the average of {', '.join(map(os.path.basename, files[-args.last :]))}\n"
    )
    return 0


def _run_model(paths):
    """The run's plain model: its `model.keras`, else (a run interrupted before its end) the
    model as its training builds it, from its `config.yaml` and tokenizers."""
    from keras_transformer.run_dir import load_run, read_labels
    from keras_transformer.runner import run_config
    from keras_transformer.tasks import get_task
    from keras_transformer.training.tokenizer_files import load_tokenizers

    if storage.exists(paths.model):
        return load_run(paths.root)[0]
    logger.info("No %s (an unfinished run): the model is built from its config.", paths.model)
    task = get_task(run_config(paths.root))
    labels = read_labels(paths.root) if task.labelled else None
    return task.build_model(load_tokenizers(paths), labels).to_plain()
