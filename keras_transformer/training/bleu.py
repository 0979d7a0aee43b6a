"""sacreBLEU on the validation split while training, and the log it writes (`bleu.jsonl`)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence

import keras

from keras_transformer import storage
from keras_transformer.validation import check_positive_int

logger = logging.getLogger(__name__)


class BleuCallback(keras.callbacks.Callback):
    """Translates the validation sources every `every` epochs and logs their sacreBLEU.

    The translation is batched, cached decoding (`keras_transformer.predictors.Translator`
    over the model being trained: greedy, or beam search with `beam_size > 1`), scored
    with `keras_transformer.evaluation.score_corpus` (cased, detokenized, 13a). The score
    goes into the epoch's logs as `val_bleu`, so Keras' `History`, `TensorBoard` (placed
    after this callback) and `EarlyStopping(monitor="val_bleu", mode="max")` see it. The
    last epoch (also one cut short by a time budget) is always scored.

    Args:
        sources: the validation source sentences.
        references: their references.
        source_tokenizer: the source `SubwordTokenizer`.
        target_tokenizer: the target `SubwordTokenizer`.
        every: score every N epochs.
        beam_size: 1 for greedy search, more for beam search.
        source_eos: sources end with EOS, as in training.
        best_weights_path: where the weights of the best score so far are saved (None: not
            kept).
        log_path: a JSON-lines file that gets one line per score: epoch, optimizer step,
            minutes since `start`, BLEU and sacreBLEU's signature (None: not written).
        start: `time.monotonic()` at the start of the run (defaults to training's start).
        batch_size: sentences decoded at once.
        **translator_kwargs: more `Translator` arguments (`length_penalty`, `max_length_a`,
            ...).

    Example (not run as a doctest: it needs validation data and tokenizers):

    ```python
    callback = BleuCallback(sources, references, tokenizer, tokenizer,
                            every=2, best_weights_path="best_bleu.weights.h5")
    ```
    """

    def __init__(
        self,
        sources: Sequence[str],
        references: Sequence[str],
        source_tokenizer,
        target_tokenizer,
        *,
        every: int = 1,
        beam_size: int = 1,
        source_eos: bool = True,
        best_weights_path: str | None = None,
        log_path: str | None = None,
        start: float | None = None,
        batch_size: int = 128,
        **translator_kwargs,
    ):
        super().__init__()
        self.sources = list(sources)
        self.references = list(references)
        if not self.sources or len(self.sources) != len(self.references):
            raise ValueError(
                "Expected as many validation sources as references, at least one. Received: "
                f"{len(self.sources)} sources, {len(self.references)} references"
            )
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.every = check_positive_int("every", every)
        self.beam_size = check_positive_int("beam_size", beam_size)
        self.source_eos = bool(source_eos)
        self.best_weights_path = best_weights_path
        self.log_path = log_path
        self.start = start
        self.batch_size = check_positive_int("batch_size", batch_size)
        self.translator_kwargs = translator_kwargs
        self.best: float | None = None
        self.scores: list[dict] = []
        self._translator = None

    def on_train_begin(self, logs=None):
        from keras_transformer.predictors import Translator

        if self.start is None:
            self.start = time.monotonic()
        # One translator for the whole run: its compiled decoding functions read the
        # model's variables, which training updates in place.
        self._translator = Translator(
            self.model,
            self.source_tokenizer,
            self.target_tokenizer,
            beam_size=self.beam_size,
            batch_size=self.batch_size,
            source_eos=self.source_eos,
            **self.translator_kwargs,
        )

    def score(self) -> tuple[float, str]:
        """The current model's BLEU on the validation sentences, and its signature."""
        from keras_transformer.evaluation import score_corpus

        hypotheses = self._translator.translate(self.sources)
        result = score_corpus(hypotheses, self.references, metrics=("bleu",))
        return result.scores["bleu"], result.signatures["bleu"]

    def on_epoch_end(self, epoch, logs=None):
        last = epoch + 1 >= self.params.get("epochs", epoch + 1) or self.model.stop_training
        if (epoch + 1) % self.every and not last:
            return
        started = time.monotonic()
        bleu, signature = self.score()
        if logs is not None:
            logs["val_bleu"] = bleu
        record = {
            "epoch": epoch + 1,
            "step": int(self.model.optimizer.iterations.numpy()),
            "minutes": round((started - self.start) / 60.0, 3),
            "bleu": round(bleu, 2),
            "seconds_to_score": round(time.monotonic() - started, 1),
            "signature": signature,
        }
        self.scores.append(record)
        logger.info("Epoch %d: validation BLEU %.2f (%s)", epoch + 1, bleu, signature)
        if self.log_path:
            storage.append_text(self.log_path, json.dumps(record) + "\n")
        if self.best is None or bleu > self.best:
            self.best = bleu
            if self.best_weights_path:
                with storage.written_beside(self.best_weights_path) as partial:
                    self.model.save_weights(partial)


# The fields of each line of a run's `bleu.jsonl` (`BleuCallback(log_path=...)`).
BLEU_LOG_FIELDS = ("epoch", "step", "minutes", "bleu", "seconds_to_score", "signature")


def read_bleu_log(path: str) -> list[dict]:
    """Reads a `bleu.jsonl` written by `BleuCallback`: one record per scored epoch.

    A resumed run appends to the file and may score an epoch again; the last record of
    each epoch is kept.

    Args:
        path: the file (`RunPaths(run_dir).bleu_log`).

    Returns:
        The records (`BLEU_LOG_FIELDS`), sorted by epoch.

    Raises:
        FileNotFoundError: when there is no such file.
        ValueError: naming the line that is not a record.

    Example (not run as a doctest: it needs a run that scored BLEU):

    ```python
    records = read_bleu_log("runs/de-en/bleu.jsonl")
    [(r["minutes"], r["bleu"]) for r in records]  # [(3.2, 12.41), (6.5, 20.02)]
    ```
    """
    by_epoch: dict[int, dict] = {}
    with storage.open_file(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict) or not {"epoch", "minutes", "bleu"} <= set(record):
                raise ValueError(
                    f"Received an invalid line {number} in {path}: expected a JSON object with "
                    f"the fields {BLEU_LOG_FIELDS}. Received: {line.strip()[:200]!r}"
                )
            by_epoch[int(record["epoch"])] = record
    return [by_epoch[epoch] for epoch in sorted(by_epoch)]
