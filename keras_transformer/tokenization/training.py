"""SentencePiece training: `train_sentencepiece` (one model over a corpus) and
`train_tokenizers` (the source and target tokenizers of a parallel corpus).

Training uses the `sentencepiece` Python trainer in memory (no temporary files) and returns
a `SubwordTokenizer`; the special ids are fixed for every model of this package: pad=0,
unk=1, bos=2, eos=3.

Example:

```python
pairs = keras_transformer.data.load_parallel_dataset("multi30k", split="train")
source_tokenizer, target_tokenizer = train_tokenizers(pairs, vocab_size=8000)
```
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import sentencepiece as spm
import tensorflow as tf

from keras_transformer.constants import (
    BOS_ID,
    EOS_ID,
    NORMALIZATIONS,
    PAD_ID,
    TOKENIZER_MODEL_TYPES,
    UNK_ID,
)
from keras_transformer.tokenization.tokenizer import SubwordTokenizer
from keras_transformer.validation import (
    check_one_of,
    check_positive_int,
    check_probability,
    check_vocab_size,
)

logger = logging.getLogger(__name__)


def train_sentencepiece(
    texts: Iterable[str | bytes] | tf.data.Dataset,
    vocab_size: int = 8000,
    *,
    model_type: str = "unigram",
    normalization: str = "nmt_nfkc",
    character_coverage: float = 1.0,
    byte_fallback: bool = True,
    hard_vocab_limit: bool = True,
    max_sentences: int = 2_000_000,
    seed: int | None = None,
    num_threads: int | None = None,
    name: str | None = None,
) -> SubwordTokenizer:
    """Trains a SentencePiece model in memory and wraps it in a `SubwordTokenizer`.

    Empty sentences are skipped. The special ids are pad=0, unk=1, bos=2, eos=3.

    Args:
        texts: the training sentences: an iterable of `str`/`bytes`, or a `tf.data.Dataset`
            of scalar `tf.string`.
        vocab_size: the number of pieces, special ones included.
        model_type: `"unigram"` or `"bpe"`.
        normalization: SentencePiece's normalization rule. The default `"nmt_nfkc"` applies
            NFKC, collapses runs of whitespace and strips leading/trailing whitespace, so
            `detokenize(tokenize(s))` gives `s` in that normalized form; `"identity"` keeps
            text unchanged (whitespace runs are still collapsed).
        character_coverage: the share of characters the vocabulary covers as pieces.
        byte_fallback: whether characters outside the vocabulary become UTF-8 byte pieces
            (which detokenize exactly) instead of `<unk>`. Needs 256 ids of the vocabulary.
        hard_vocab_limit: the model has exactly `vocab_size` pieces (True), or at most that
            many, fewer when the corpus has too few distinct pieces (False, SentencePiece's
            soft limit).
        max_sentences: at most this many sentences, sampled at random, are used for training.
        seed: seed of SentencePiece's random generator (sampling of sentences).
        num_threads: trainer threads; defaults to the number of CPUs.
        name: name of the returned `tf.Module`.

    Returns:
        The trained `SubwordTokenizer`.

    Example (not run as a doctest: it trains SentencePiece models):

    ```python
    tokenizer = train_sentencepiece(["A dog runs.", "A cat sleeps."] * 500,
                                    vocab_size=300)
    ```
    """
    check_vocab_size("vocab_size", vocab_size)
    check_positive_int("max_sentences", max_sentences)
    check_one_of("model_type", model_type, TOKENIZER_MODEL_TYPES)
    check_one_of("normalization", normalization, NORMALIZATIONS)
    check_probability("character_coverage", character_coverage)
    if isinstance(texts, (str, bytes)):
        raise ValueError(
            "Received an invalid value for argument `texts`, expected an iterable of "
            "sentences, not a single string. Received: texts of type "
            f"{type(texts).__name__}"
        )
    counter = _Counter()
    if seed is not None:
        spm.set_random_generator_seed(int(seed))
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=counter.wrap(_iter_sentences(texts)),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            normalization_rule_name=normalization,
            character_coverage=float(character_coverage),
            byte_fallback=bool(byte_fallback),
            hard_vocab_limit=bool(hard_vocab_limit),
            input_sentence_size=max_sentences,
            shuffle_input_sentence=True,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_piece="<pad>",
            unk_piece="<unk>",
            bos_piece="<s>",
            eos_piece="</s>",
            num_threads=num_threads or os.cpu_count() or 1,
            minloglevel=2,
        )
    except RuntimeError as e:
        counter.raise_error()
        if counter.count == 0:
            raise ValueError(
                "Received an empty corpus: `texts` holds no non-empty sentence to train a "
                "SentencePiece model on."
            ) from e
        if "ocabulary size" in str(e):
            raise ValueError(
                f"Received an invalid value for argument `vocab_size` for this corpus of "
                f"{counter.count} sentences (byte_fallback={byte_fallback}). SentencePiece "
                f"says: {str(e).rstrip('.')}. Received: vocab_size={vocab_size}"
            ) from e
        raise
    counter.raise_error()
    if counter.count == 0:  # pragma: no cover - SentencePiece raises first.
        raise ValueError("Received an empty corpus: `texts` holds no non-empty sentence.")
    logger.info(
        "Trained a %s SentencePiece model of %d pieces on %d sentences.",
        model_type,
        vocab_size,
        counter.count,
    )
    return SubwordTokenizer(model.getvalue(), name=name)


def train_tokenizers(
    pairs: Iterable[tuple[Any, Any]] | tf.data.Dataset,
    vocab_size: int = 8000,
    *,
    shared: bool = True,
    **kwargs: Any,
) -> tuple[SubwordTokenizer, SubwordTokenizer]:
    """Trains the source and target tokenizers of a parallel corpus.

    Args:
        pairs: `(source, target)` sentence pairs: a `tf.data.Dataset` of two scalar strings
            (as `keras_transformer.data.load_parallel_dataset` returns) or an iterable.
        vocab_size: pieces per model.
        shared: one model over both languages (returned twice, the same object), or one
            model per language.
        **kwargs: passed to `train_sentencepiece`.

    Returns:
        `(source_tokenizer, target_tokenizer)`.

    Example (not run as a doctest: it trains or loads SentencePiece models):

    ```python
    src_tok, tgt_tok = train_tokenizers(pairs, vocab_size=8000)
    ```
    """
    if shared:
        tokenizer = train_sentencepiece(
            (s for pair in _iter_pairs(pairs) for s in pair), vocab_size, **kwargs
        )
        return tokenizer, tokenizer
    source = train_sentencepiece((p[0] for p in _iter_pairs(pairs)), vocab_size, **kwargs)
    target = train_sentencepiece((p[1] for p in _iter_pairs(pairs)), vocab_size, **kwargs)
    return source, target


class _Counter:
    """Counts the sentences handed to the trainer."""

    def __init__(self) -> None:
        self.count = 0
        self.error: Exception | None = None

    def wrap(self, sentences: Iterator[str]) -> Iterator[str]:
        # SentencePiece turns an exception of the iterator into a RuntimeError: keep it to
        # re-raise it as is.
        try:
            for sentence in sentences:
                self.count += 1
                yield sentence
        except Exception as e:  # noqa: BLE001
            self.error = e

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error


def _iter_sentences(texts: Iterable[Any] | tf.data.Dataset) -> Iterator[str]:
    """Yields the non-empty sentences of `texts` as `str` (one line each)."""
    if isinstance(texts, tf.data.Dataset):
        texts = texts.as_numpy_iterator()
    for i, text in enumerate(texts):
        if isinstance(text, np.ndarray) and text.shape == ():
            text = text.item()
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"Received a sentence that is not valid UTF-8 at index {i} of `texts`: {e}"
                ) from e
        if not isinstance(text, str):
            raise ValueError(
                "Received an invalid value in `texts`, expected str or bytes sentences. "
                f"Received: {type(text).__name__} at index {i}"
            )
        text = " ".join(text.split())
        if text:
            yield text


def _iter_pairs(pairs: Iterable[tuple[Any, Any]] | tf.data.Dataset) -> Iterator[tuple]:
    if isinstance(pairs, tf.data.Dataset):
        pairs = pairs.as_numpy_iterator()
    for i, pair in enumerate(pairs):
        if len(pair) != 2:
            raise ValueError(
                "Received an invalid value in `pairs`, expected (source, target) pairs. "
                f"Received: an element of length {len(pair)} at index {i}"
            )
        yield pair
