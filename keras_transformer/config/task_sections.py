"""Each task's own section of the experiment config: `translation`, `tagging`,
`classification` and `language_modeling`.

A config has the section of its `task` only (`ExperimentConfig.section`); each section
validates its own values and names the keys of the shared sections (`model`, `data`,
`training`) that its task does not read (`unread_keys`): setting one of those is an error
that names it, never silently dropped. Its `tokenizer_keys` are its keys that choose the texts
the run's tokenizers learn from (a run directory's tokenizers are reused only for the same
values: `keras_transformer.training.tokenizer_files`), its `model_keys` those that change the
model it builds beside the `model` section (an interrupted run resumes only with the same:
`keras_transformer.runner.resuming`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from keras_transformer.constants import POOLINGS
from keras_transformer.validation import (
    check_one_of,
    check_optional,
    check_positive_int,
)


def _check_max_length(key: str, value: int, model_max_length: int, least: int = 1) -> None:
    check_positive_int(key, value)
    if value < least:
        raise ValueError(
            f"Received an invalid value for `{key}`, expected at least {least}. "
            f"Received: {key}={value}"
        )
    if value > model_max_length:
        raise ValueError(
            f"Received a sequence limit longer than the model's positional table, expected "
            f"{key} <= model.max_length={model_max_length}. Received: {key}={value}"
        )


@dataclass
class TranslationConfig:
    """The `translation` section: a parallel corpus and validation BLEU.

    Attributes:
        source_lang: source language (or TFDS feature key); None: the dataset's default.
        target_lang: target language.
        target_path: the target file of line-aligned local training files
            (`data.source` is then the source file).
        validation_target_path: the target file of `data.validation_source`.
        local_dir: Multi30k's offline copy; when None the environment variable
            `KERAS_TRANSFORMER_MULTI30K_DIR` is used.
        shared_vocab: one tokenizer for both languages.
        source_eos: end every source with EOS (training and translation alike); a run
            directory whose config lacks this key was trained without it.
        max_source_length: the most source ids (EOS included); longer pairs are dropped.
        max_target_length: the most target ids (+1 for BOS/EOS).
        bleu_every: score the validation split with sacreBLEU every N epochs (and after
            the last), logging `val_bleu` and keeping the best-BLEU weights (None: off).
        bleu_beam_size: the beam size of that scoring (1: greedy).
        bleu_max_sentences: score only the first N validation sentences (None: all).
    """

    source_lang: str | None = None
    target_lang: str | None = None
    target_path: str | None = None
    validation_target_path: str | None = None
    local_dir: str | None = None
    shared_vocab: bool = True
    source_eos: bool = True
    max_source_length: int = 128
    max_target_length: int = 128
    bleu_every: int | None = None
    bleu_beam_size: int = 1
    bleu_max_sentences: int | None = None

    unread_keys: ClassVar[tuple[str, ...]] = ()
    tokenizer_keys: ClassVar[tuple[str, ...]] = ("source_lang", "target_lang", "target_path")
    model_keys: ClassVar[tuple[str, ...]] = ("source_eos",)

    def validate(self, config: Any) -> None:
        m = config.model
        least_source = 2 if self.source_eos else 1
        _check_max_length(
            "translation.max_source_length", self.max_source_length, m.max_length, least_source
        )
        _check_max_length("translation.max_target_length", self.max_target_length, m.max_length, 2)
        for key in ("bleu_every", "bleu_max_sentences"):
            check_optional(check_positive_int, f"translation.{key}", getattr(self, key))
        check_positive_int("translation.bleu_beam_size", self.bleu_beam_size)
        if m.share_embeddings and not self.shared_vocab:
            raise ValueError(
                "Received `model.share_embeddings=True` with `translation.shared_vocab=False`; "
                "sharing embeddings needs one shared vocabulary."
            )

    @property
    def longest(self) -> int:
        """The longest sequence of a training example (the length buckets' range)."""
        return max(self.max_source_length, self.max_target_length)


# The keys of the shared sections that the encoder-only and decoder-only tasks do not read.
_ENCODER_UNREAD = (
    "model.num_decoder_layers",
    "model.share_embeddings",
    "model.tie_output_embeddings",
    "data.validation_source",
)
_DECODER_UNREAD = ("model.num_encoder_layers", "model.share_embeddings", "data.validation_source")


@dataclass
class TaggingConfig:
    """The `tagging` section: one tag per word.

    Attributes:
        words_feature: the TFDS feature with a sentence's words (a sequence of strings).
        tags_feature: the TFDS feature with their tags (a sequence of class labels).
        fallback: use the offline `synthetic_pos` set when TFDS cannot load `data.source`.
        max_length: the most subword ids of a sentence (longer ones are truncated).
    """

    words_feature: str = "tokens"
    tags_feature: str = "pos"
    fallback: bool = True
    max_length: int = 128

    unread_keys: ClassVar[tuple[str, ...]] = _ENCODER_UNREAD
    tokenizer_keys: ClassVar[tuple[str, ...]] = ("words_feature",)
    model_keys: ClassVar[tuple[str, ...]] = ()

    def validate(self, config: Any) -> None:
        _check_max_length("tagging.max_length", self.max_length, config.model.max_length)

    @property
    def longest(self) -> int:
        return self.max_length


@dataclass
class ClassificationConfig:
    """The `classification` section: one label per text.

    Attributes:
        text_feature: the TFDS feature with the text (None: the first supervised key).
        label_feature: the TFDS feature with the label (None: the second supervised key).
        pooling: the sequence head, `"mean"` (over the real tokens) or `"first"` (a
            pooler over the first token, BOS).
        fallback: use the offline `synthetic_sentiment` set when TFDS cannot load
            `data.source`.
        max_length: the most ids of a text (BOS included; longer ones are truncated).
    """

    text_feature: str | None = None
    label_feature: str | None = None
    pooling: str = "mean"
    fallback: bool = True
    max_length: int = 128

    unread_keys: ClassVar[tuple[str, ...]] = _ENCODER_UNREAD
    tokenizer_keys: ClassVar[tuple[str, ...]] = ("text_feature",)
    model_keys: ClassVar[tuple[str, ...]] = ("pooling",)

    def validate(self, config: Any) -> None:
        check_one_of("classification.pooling", self.pooling, POOLINGS)
        _check_max_length("classification.max_length", self.max_length, config.model.max_length)

    @property
    def longest(self) -> int:
        return self.max_length


@dataclass
class LanguageModelingConfig:
    """The `language_modeling` section: a causal language model over documents.

    Attributes:
        text_feature: the TFDS feature with the text.
        document_separator: split each text into documents at this separator (blank lines
            by default: Tiny Shakespeare's splits are one text each); null keeps texts
            whole.
        fallback: use the offline `synthetic_text` set when TFDS cannot load `data.source`.
        max_length: the window of the language model (BOS included): documents are cut
            into windows of this many ids.
    """

    text_feature: str = "text"
    document_separator: str | None = "\n\n"
    fallback: bool = True
    max_length: int = 128

    unread_keys: ClassVar[tuple[str, ...]] = _DECODER_UNREAD
    tokenizer_keys: ClassVar[tuple[str, ...]] = ("text_feature", "document_separator")
    model_keys: ClassVar[tuple[str, ...]] = ()

    def validate(self, config: Any) -> None:
        _check_max_length(
            "language_modeling.max_length", self.max_length, config.model.max_length, 2
        )

    @property
    def longest(self) -> int:
        return self.max_length


# Each task's section, by the task's name (`constants.TASKS`, in that order).
TASK_SECTIONS: dict[str, type] = {
    "translation": TranslationConfig,
    "tagging": TaggingConfig,
    "classification": ClassificationConfig,
    "language_modeling": LanguageModelingConfig,
}
