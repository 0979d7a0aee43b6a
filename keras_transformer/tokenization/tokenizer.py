"""`SubwordTokenizer`: a SentencePiece model whose `tokenize`/`detokenize` run in the
TensorFlow graph, and `append_eos` for ragged ids.

Tokenizing and detokenizing use `tensorflow_text.SentencepieceTokenizer`, so they run inside
`tf.function`, `tf.data` and a SavedModel. The serialized SentencePiece model is a constant
of the graph: a SavedModel that holds a `SubwordTokenizer` carries the model with it and
loads with only `tensorflow` and `tensorflow_text` imported (the ops used are TensorFlow core
ops plus tensorflow-text's `SentencepieceOp`, `SentencepieceTokenizeOp`,
`SentencepieceDetokenizeOp` and `SentencepieceIdToStringOp`, all shipped by TF Serving).
Models are trained by `keras_transformer.tokenization.training`.

Example:

```python
tokenizer = SubwordTokenizer.load("runs/de-en/tokenizer")
ids = tokenizer.tokenize(["Ein Hund läuft."])  # tf.RaggedTensor int32
tokenizer.detokenize(append_eos(ids))  # [b"Ein Hund l\xc3\xa4uft."]
```
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any

import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.compat import share_sentencepiece_resource
from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.validation import check_optional, check_probability

logger = logging.getLogger(__name__)

MODEL_FILENAME = "spm.model"
VOCAB_FILENAME = "spm.vocab"


def append_eos(ids: tf.RaggedTensor, eos_id: int = EOS_ID) -> tf.RaggedTensor:
    """Appends `eos_id` to every row of ragged ids `(B, None)`; graph-friendly.

    Example:

    >>> append_eos(tf.ragged.constant([[5, 6], []])).to_list()
    [[5, 6, 3], [3]]
    """
    column = tf.fill(tf.stack([ids.nrows(), 1]), tf.cast(eos_id, ids.dtype))  # (B, 1)
    return tf.concat([ids, tf.RaggedTensor.from_tensor(column)], axis=1)


class SubwordTokenizer(tf.Module):
    """A SentencePiece tokenizer whose `tokenize`/`detokenize` run in the TensorFlow graph.

    The tokenizer never adds BOS/EOS itself (the data pipeline and the decoder do).
    `detokenize` drops pad, bos and eos ids and everything after the first eos, so it reads
    the padded output of a decoder directly.

    Args:
        model_proto: the serialized SentencePiece model (the bytes of a `.model` file). Its
            special ids must be pad=0, unk=1, bos=2, eos=3 (as `train_sentencepiece` makes).
        name: name of the `tf.Module`.
        sampling_alpha: `None` (the default) for the one best segmentation; a float in
            (0, 1] to sample a segmentation of each string at every call (subword
            regularisation, Kudo 2018; SentencePiece's `enable_sampling` with
            `nbest_size=-1` and this `alpha`). For a unigram model it smooths the lattice's
            probabilities (smaller is more varied); for a BPE model it is BPE-dropout's
            merge-drop probability (larger is more varied). Sampling is for training data
            only, and it is not seeded: tf-text's kernel draws its own random numbers.
            `with_sampling` makes a sampling copy of a tokenizer.

    Example:

    ```python
    tokenizer = SubwordTokenizer.load("runs/de-en/tokenizer")
    ids = tokenizer.tokenize(tf.constant(["A dog runs."]))  # RaggedTensor (1, None) int32
    tokenizer.detokenize(ids.to_tensor())  # tf.Tensor([b"A dog runs."])
    tokenizer.with_sampling(0.1).tokenize(["A dog runs."])  # a sampled segmentation
    ```
    """

    def __init__(
        self, model_proto: bytes, name: str | None = None, *, sampling_alpha: float | None = None
    ) -> None:
        super().__init__(name=name)
        self._sampling_alpha = check_optional(check_probability, "sampling_alpha", sampling_alpha)
        if not isinstance(model_proto, bytes) or not model_proto:
            raise ValueError(
                "Received an invalid value for argument `model_proto`, expected the non-empty "
                f"bytes of a serialized SentencePiece model. Received: type={type(model_proto)}"
            )
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model_proto)
        except (RuntimeError, OSError) as e:
            raise ValueError(
                "Received an invalid value for argument `model_proto`, expected a serialized "
                f"SentencePiece model. SentencePiece could not parse it: {e}"
            ) from e
        received = {
            "pad": processor.pad_id(),
            "unk": processor.unk_id(),
            "bos": processor.bos_id(),
            "eos": processor.eos_id(),
        }
        expected = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}
        if received != expected:
            raise ValueError(
                "Received a SentencePiece model with unsupported special ids, expected "
                f"{_format_ids(expected)} (train it with `train_sentencepiece`). "
                f"Received: {_format_ids(received)}"
            )
        self._model_proto = model_proto
        self._vocab_size = int(processor.GetPieceSize())
        self._pieces = [processor.IdToPiece(i) for i in range(self._vocab_size)]
        self._scores = [processor.GetScore(i) for i in range(self._vocab_size)]
        with self.name_scope:
            sampling = self._sampling_alpha is not None
            self._sentencepiece = tf_text.SentencepieceTokenizer(
                model=model_proto,
                out_type=tf.int32,
                nbest_size=-1 if sampling else 0,
                alpha=self._sampling_alpha if sampling else 1.0,
                add_bos=False,
                add_eos=False,
            )
            # tf-text's resource is private to the kernel that creates it, so clearing the
            # eager kernel cache (`tf.random.set_seed` does) deletes it and the tokenizer
            # fails with "Resource ... does not exist". A `shared_name` keeps it in the
            # resource manager; naming it by the model's hash shares it only between
            # identical models.
            share_sentencepiece_resource(
                self._sentencepiece,
                model_proto,
                "keras_transformer_spm_" + hashlib.sha256(model_proto).hexdigest(),
            )

    @property
    def model_proto(self) -> bytes:
        """The serialized SentencePiece model."""
        return self._model_proto

    @property
    def sampling_alpha(self) -> float | None:
        """`None` for the best segmentation, else the `sampling_alpha` of sampled ones."""
        return self._sampling_alpha

    def with_sampling(self, alpha: float | None) -> SubwordTokenizer:
        """A tokenizer of the same model that samples segmentations with `alpha` (a float
        in (0, 1]), or gives the best one with `None`; `self` when it already does."""
        if alpha == self._sampling_alpha:
            return self
        return SubwordTokenizer(self._model_proto, name=self.name, sampling_alpha=alpha)

    @property
    def vocab_size(self) -> int:
        """The number of pieces, special ones included."""
        return self._vocab_size

    @property
    def pieces(self) -> list[str]:
        """Every piece, in id order (`pieces[i]` is id i's), special ones included."""
        return list(self._pieces)

    @property
    def pad_id(self) -> int:
        """The padding id (0)."""
        return PAD_ID

    @property
    def unk_id(self) -> int:
        """The unknown-piece id (1)."""
        return UNK_ID

    @property
    def bos_id(self) -> int:
        """The beginning-of-sentence id (2)."""
        return BOS_ID

    @property
    def eos_id(self) -> int:
        """The end-of-sentence id (3)."""
        return EOS_ID

    def tokenize(self, strings: Any) -> tf.RaggedTensor | tf.Tensor:
        """Splits UTF-8 strings into subword ids, without BOS/EOS.

        Args:
            strings: a `tf.string` tensor (or anything convertible to one) of shape `(B,)`, or
                a scalar.

        Returns:
            A `tf.RaggedTensor` of int32 ids of shape `(B, None)`; for a scalar input, a 1-D
            int32 `tf.Tensor`.

        Example (not run as a doctest: it trains or loads SentencePiece models):

        ```python
        tokenizer.tokenize(["A dog.", "A cat runs."])
        # <tf.RaggedTensor [[4, 51, 7], [4, 95, 310, 7]]>
        ```
        """
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        return self._sentencepiece.tokenize(strings)

    def detokenize(self, ids: Any) -> tf.Tensor:
        """Joins ids back into text.

        Pad, bos and eos ids are dropped, and so is everything after the first eos of each
        row, so a decoder's padded output `(B, T)` can be passed as is.

        Args:
            ids: int ids of shape `(B, T)`, dense (padded) or a `tf.RaggedTensor`, or a single
                sequence of shape `(T,)`.

        Returns:
            A `tf.string` tensor of shape `(B,)` (a scalar for a 1-D input).

        Example (not run as a doctest: it trains or loads SentencePiece models):

        ```python
        tokenizer.detokenize([[2, 4, 51, 7, 3, 0], [4, 95, 3, 310, 0, 0]])
        # <tf.Tensor: shape=(2,), dtype=string, numpy=array([b'A dog.', b'A cat'], dtype=object)>
        ```
        """
        if isinstance(ids, tf.RaggedTensor):
            if ids.shape.rank != 2:
                raise ValueError(
                    "Received an invalid value for argument `ids`, expected a RaggedTensor of "
                    f"rank 2. Received: ids.shape={ids.shape}"
                )
            dense = ids.to_tensor(default_value=tf.cast(PAD_ID, ids.dtype))
        else:
            dense = tf.convert_to_tensor(ids)
        if not dense.dtype.is_integer:
            raise ValueError(
                "Received an invalid value for argument `ids`, expected integer ids. "
                f"Received: ids.dtype={dense.dtype.name}"
            )
        dense = tf.cast(dense, tf.int32)
        rank = dense.shape.rank
        if rank not in (1, 2):
            raise ValueError(
                "Received an invalid value for argument `ids`, expected a tensor of rank 1 or "
                f"2. Received: ids.shape={dense.shape}"
            )
        if rank == 1:
            return self.detokenize(dense[tf.newaxis])[0]
        after_eos = tf.cumsum(tf.cast(tf.equal(dense, EOS_ID), tf.int32), axis=1) > 0
        keep = tf.logical_and(
            tf.logical_not(after_eos),
            tf.logical_and(tf.not_equal(dense, PAD_ID), tf.not_equal(dense, BOS_ID)),
        )
        return self._sentencepiece.detokenize(tf.ragged.boolean_mask(dense, keep))

    def id_to_piece(self, ids: Any) -> tf.Tensor | tf.RaggedTensor:
        """Returns the SentencePiece piece of each id, e.g. `"▁dog"`, with the shape of `ids`.

        Args:
            ids: int32 ids of any shape, dense or ragged.

        Returns:
            `tf.string` pieces of the same shape.
        """
        if isinstance(ids, tf.RaggedTensor):
            return ids.with_flat_values(self.id_to_piece(ids.flat_values))
        return self._sentencepiece.id_to_string(tf.cast(tf.convert_to_tensor(ids), tf.int32))

    def save(self, directory: str, filename: str = MODEL_FILENAME) -> str:
        """Writes the model to `directory/filename` (and a readable `.vocab` file beside it).

        Args:
            directory: the folder, created if missing (any `tf.io.gfile` path).
            filename: the model's file name.

        Returns:
            The path of the model file.

        Example (not run as a doctest: it trains or loads SentencePiece models):

        ```python
        tokenizer.save("runs/de-en/tokenizer")
        # 'runs/de-en/tokenizer/spm.model'
        ```
        """
        tf.io.gfile.makedirs(directory)
        path = os.path.join(directory, filename)
        with tf.io.gfile.GFile(path, "wb") as f:
            f.write(self._model_proto)
        vocab_path = os.path.splitext(path)[0] + ".vocab"
        with tf.io.gfile.GFile(vocab_path, "w") as f:
            f.write("".join(f"{p}\t{s:g}\n" for p, s in zip(self._pieces, self._scores)))
        logger.info("Saved the SentencePiece model to %s", path)
        return path

    @classmethod
    def load(cls, path: str, filename: str = MODEL_FILENAME, name: str | None = None):
        """Reads a model written by `save` (or any compatible SentencePiece `.model` file).

        Args:
            path: a folder holding `filename`, or the path of the model file itself.
            filename: the model's file name inside a folder.
            name: name of the `tf.Module`.

        Returns:
            A `SubwordTokenizer`.

        Example (not run as a doctest: it trains or loads SentencePiece models):

        ```python
        tokenizer = SubwordTokenizer.load("runs/de-en/tokenizer")
        ```
        """
        model_path = os.path.join(path, filename) if tf.io.gfile.isdir(path) else path
        if not tf.io.gfile.exists(model_path):
            raise FileNotFoundError(f"No SentencePiece model found at {model_path}.")
        with tf.io.gfile.GFile(model_path, "rb") as f:
            model_proto = f.read()
        try:
            return cls(model_proto, name=name)
        except ValueError as e:
            raise ValueError(f"Could not load the SentencePiece model {model_path}: {e}") from e


def _format_ids(ids: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in ids.items())
