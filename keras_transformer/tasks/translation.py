"""Translation: the encoder-decoder `Transformer` on `(source, target)` sentence pairs, with
validation BLEU, sacreBLEU evaluation and a string-in/string-out export.

Its config section is `translation` (`config.task_sections.TranslationConfig`).

Export signatures (named inputs, dict outputs of dense tensors):

| signature | inputs | outputs |
| --- | --- | --- |
| `serving_default` | `sentences` str (N,) | `translations` str (N,), `scores` float32 (N,) |
| `translate_nbest` | `sentences` str (N,) | `translations` str (N, K), `scores` float32 (N, K) |
| `tokenize` | `sentences` str (N,) | `token_ids` int32 (N, S) 0-padded, `lengths` int32 (N,) |
| `detokenize` | `token_ids` int32 (N, T) | `sentences` str (N,) |

`tokenize` uses the source tokenizer and `detokenize` the target one. Decoding uses the
translator's method, beam size (K), length penalty and length limits at export time.
Scores are the decoder's (length-penalized log-probabilities; higher is better).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.constants import MULTI30K_DIR_ENV_VAR, PAD_ID
from keras_transformer.data.examples import TEXT_PAIRS
from keras_transformer.data.task_sources import TaskData
from keras_transformer.data.text_files import read_lines
from keras_transformer.evaluation import EvaluationResult, evaluate_translator
from keras_transformer.predictors import Translator
from keras_transformer.run_dir import RunPaths
from keras_transformer.tasks.base import Task
from keras_transformer.tasks.registry import register_task
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedSparseCategoricalAccuracy
from keras_transformer.training.models import build_transformer
from keras_transformer.training.strategies import resolve_dtype_policy


@register_task
class TranslationTask(Task):
    """Translation of sentence pairs (`data.source`: Multi30k, a TFDS name or local files)."""

    name = "translation"
    model_name = "transformer"
    predictor_class = Translator
    main_metric = "bleu"
    decodes = True
    example_spec = TEXT_PAIRS

    # Data.

    def load_data(self, split: str, *, validation: bool = False) -> TaskData:
        from keras_transformer.data import load_parallel_dataset

        d, s = self.config.data, self.section
        source, target_path = d.source, s.target_path
        if validation and d.validation_source is not None:
            source, target_path = d.validation_source, s.validation_target_path
        pairs = load_parallel_dataset(
            source,
            split=split,
            source_lang=s.source_lang,
            target_lang=s.target_lang,
            target_path=target_path,
            data_dir=d.data_dir,
            local_dir=s.local_dir or os.environ.get(MULTI30K_DIR_ENV_VAR) or None,
            download=d.download,
        )
        return TaskData(pairs, None, source)

    @property
    def reads_local_files(self) -> bool:
        from keras_transformer.data.sources import names_local_files

        return names_local_files(self.config.data.source, self.section.target_path)

    def has_validation_data(self) -> bool:
        d = self.config.data
        if self.reads_local_files:
            return d.validation_source is not None
        return d.validation_split is not None

    def tokenizer_texts(self, data: TaskData) -> tf.data.Dataset:
        return data.dataset

    @property
    def shared_vocab(self) -> bool:
        return self.section.shared_vocab

    def encode(
        self,
        dataset: tf.data.Dataset,
        tokenizers: tuple[Any, Any],
        *,
        labels: tuple[str, ...] | None = None,
        origin: str = "the data",
    ) -> tf.data.Dataset:
        """`((source_ids, target_in), target_out)`: the source ids (EOS last with
        `source_eos`), `[BOS] + target ids` and `target ids + [EOS]`; pairs over a length
        limit or with an empty side are dropped (`data.pipeline.encode_pairs`)."""
        from keras_transformer.data import encode_pairs

        s = self.section
        return encode_pairs(
            dataset,
            *tokenizers,
            max_source_length=s.max_source_length,
            max_target_length=s.max_target_length,
            source_eos=s.source_eos,
        )

    def build_model(
        self,
        tokenizers: tuple[Any, Any],
        labels: tuple[str, ...] | None,
        *,
        remat: bool | None = None,
        dtype_policy: str | None = None,
    ) -> keras.Model:
        m = self.config.model
        return build_transformer(
            m.to_transformer_config(tokenizers[0].vocab_size, tokenizers[1].vocab_size),
            remat=m.remat if remat is None else remat,
            fast_dropout=m.fast_dropout,
            dtype_policy=resolve_dtype_policy(dtype_policy or self.config.training.dtype_policy),
            source_eos=self.section.source_eos,
        )

    @classmethod
    def loss_and_metrics(cls, label_smoothing: float) -> tuple[Any, list[Any]]:
        loss = MaskedSparseCategoricalCrossentropy(label_smoothing=label_smoothing, pad_id=PAD_ID)
        return loss, [MaskedSparseCategoricalAccuracy(pad_id=PAD_ID, name="accuracy")]

    def callbacks(
        self,
        validation: TaskData | None,
        tokenizers: tuple[Any, Any],
        paths: RunPaths,
        *,
        start: float,
        chief: bool,
    ) -> list[keras.callbacks.Callback]:
        """Validation BLEU every `translation.bleu_every` epochs (first `bleu_max_sentences`)."""
        from keras_transformer.training.bleu import BleuCallback

        s = self.section
        if not s.bleu_every or validation is None:
            return []
        pairs = validation.dataset
        if s.bleu_max_sentences:
            pairs = pairs.take(s.bleu_max_sentences)
        sources, references = [], []
        for source, reference in pairs.as_numpy_iterator():
            sources.append(source.decode("utf-8"))
            references.append(reference.decode("utf-8"))
        best = os.path.join(paths.checkpoints, "best_bleu.weights.h5")
        return [
            BleuCallback(
                sources,
                references,
                *tokenizers,
                every=s.bleu_every,
                beam_size=s.bleu_beam_size,
                source_eos=s.source_eos,
                best_weights_path=best if chief else None,
                log_path=paths.bleu_log if chief else None,
                start=start,
            )
        ]

    # After training.

    def evaluate(
        self,
        run_dir: str,
        split: str,
        *,
        max_examples: int | None = None,
        predictor: Any = None,
        source_file: str | None = None,
        reference_file: str | None = None,
        metrics: Sequence[str] = ("bleu", "chrf"),
        lowercase: bool = False,
        tokenize: str | None = None,
        output_file: str | None = None,
        details_file: str | None = None,
        progress: bool = False,
        data: TaskData | None = None,
        **decoding: Any,
    ) -> EvaluationResult:
        """Translates a split (or `data`'s pairs, or `source_file`, scored against
        `reference_file`) and scores it with sacreBLEU (`evaluation.evaluate_translator`).

        Args:
            run_dir: the run directory.
            split: the split of the config's data.
            max_examples: only the first N sentences.
            predictor: a `Translator` to use (default: the run's, with `decoding`).
            source_file, reference_file: line-aligned test files instead of the split.
            metrics, lowercase, tokenize: what to score and how (`score_corpus`).
            output_file: write the translations there, one a line.
            details_file: write per-sentence JSON lines there.
            progress: show a progress bar.
            data: `(source, reference)` string pairs to score instead of the split.
            **decoding: `Translator` arguments.
        """
        if (source_file is None) != (reference_file is None):
            raise ValueError("Pass both --source-file and --reference-file, or neither.")
        if source_file is not None:
            sources, references = _read_lines(source_file), _read_lines(reference_file)
            if len(sources) != len(references):
                raise ValueError(
                    f"Received files of different lengths: {len(sources)} source lines in "
                    f"{source_file} and {len(references)} reference lines in "
                    f"{reference_file}."
                )
            origin = source_file
        else:
            data = data or self.load_evaluation_data(split, limit=max_examples)
            sources, references = [], []
            for source, reference in data.dataset.as_numpy_iterator():
                sources.append(source.decode("utf-8"))
                references.append(reference.decode("utf-8"))
            origin = f"{data.origin}:{split}"
        if max_examples is not None:
            sources, references = sources[:max_examples], references[:max_examples]
        translator = predictor or self.load_predictor(run_dir, **decoding)
        result = evaluate_translator(
            translator,
            sources,
            references,
            metrics,
            output_file=output_file,
            details_file=details_file,
            lowercase=lowercase,
            tokenize=tokenize,
            progress=progress,
        )
        result.task, result.data = self.name, origin
        result.settings = {
            "method": translator.method,
            "beam_size": translator.beam_size,
            "length_penalty": translator.length_penalty,
            "no_repeat_ngram_size": translator.decoder.no_repeat_ngram_size,
        }
        return result

    @classmethod
    def serving_endpoints(cls, predictor: Any) -> dict[str, tf.types.experimental.GenericFunction]:
        sentences_spec = tf.TensorSpec([None], tf.string, name="sentences")
        source, target = predictor.source_tokenizer, predictor.target_tokenizer
        pad_id = int(predictor.model.pad_id)

        @tf.function(input_signature=[sentences_spec])
        def serving_default(sentences):
            translations, scores = predictor.translate_strings(sentences)
            return {"translations": translations, "scores": scores}

        @tf.function(input_signature=[sentences_spec])
        def translate_nbest(sentences):
            translations, scores = predictor.translate_strings_nbest(sentences)
            return {"translations": translations, "scores": scores}

        @tf.function(input_signature=[sentences_spec])
        def tokenize(sentences):
            ragged = tf.cast(source.tokenize(sentences), tf.int32)  # (N, None)
            return {
                "token_ids": ragged.to_tensor(default_value=pad_id),  # (N, S)
                "lengths": tf.cast(ragged.row_lengths(), tf.int32),  # (N,)
            }

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="token_ids")])
        def detokenize(token_ids):
            return {"sentences": target.detokenize(token_ids)}

        return {
            "serving_default": serving_default,
            "translate_nbest": translate_nbest,
            "tokenize": tokenize,
            "detokenize": detokenize,
        }

    @classmethod
    def export_info(cls, predictor: Any) -> dict[str, Any]:
        return {
            "decoding": predictor.decoder.settings(),
            "source_eos": predictor.source_eos,
            "model": predictor.model.transformer_config().to_dict(),
        }

    @classmethod
    def predict_lines(
        cls,
        predictor: Any,
        texts: Sequence[str],
        *,
        nbest: int | None = None,
        progress: bool = False,
    ) -> Iterator[str]:
        """A translation a line; with `nbest`, `index<TAB>score<TAB>translation` lines."""
        if nbest is not None:
            results = predictor.translate_nbest(texts, n=nbest, progress=progress)
            for index, hypotheses in enumerate(results):
                for text, score in hypotheses:
                    yield f"{index}\t{score:.4f}\t{text}"
        else:
            yield from predictor.translate(texts, progress=progress)


def _read_lines(path: str) -> list[str]:
    return [text for _, text in read_lines(path)]
