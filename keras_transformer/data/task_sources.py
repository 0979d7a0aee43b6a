"""Raw data of the tagging, classification and language-modelling tasks.

Each loader takes a TFDS dataset by name (`"conll2003"`, `"imdb_reviews"`,
`"tiny_shakespeare"`, ...) or the task's generated offline set
(`constants.OFFLINE_DATASETS`: `"synthetic_pos"`, `"synthetic_sentiment"`,
`"synthetic_text"`, from `data.synthetic`). With `fallback=True`, a TFDS dataset that cannot
be loaded (not prepared and no download, no network, a missing TFDS dependency) is replaced
by the offline set, with a warning naming the error (a name TFDS does not know, a bad split
or a local file is an error); with `fallback=False` a dataset that is not prepared while
downloading is off raises `availability.DataUnavailableError`.

Public API (each returns a `TaskData`):

- `load_tagging_data(source, split, *, words_feature, tags_feature, ...)`: elements
  `(words, tags)`, `tf.string` (W,) and int32 (W,) indexing `labels`.
- `load_classification_data(source, split, *, text_feature, label_feature, ...)`: elements
  `(text, label)`, scalar `tf.string` and int32 indexing `labels`.
- `load_language_modeling_data(source, split, *, text_feature, document_separator, ...)`:
  elements `text`, scalar `tf.string` documents.

Example:
>>> data = load_classification_data("synthetic_sentiment", "train[4:7]")
>>> data.origin, data.labels
('synthetic_sentiment', ('negative', 'positive'))
>>> [int(label) for _, label in data.dataset]
[1, 0, 1]
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from keras_transformer.constants import OFFLINE_DATASETS
from keras_transformer.data import synthetic
from keras_transformer.data.availability import load_tfds

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskData:
    """A task's raw split.

    Attributes:
        dataset: the `tf.data.Dataset` of examples (see the loaders).
        labels: the names of the class or tag ids (None for language modelling).
        origin: where it came from: `"tfds:<name>"` or the offline set's name.
    """

    dataset: tf.data.Dataset
    labels: tuple[str, ...] | None
    origin: str


def _load(
    task: str,
    source: str,
    split: str,
    from_tfds: Callable[[tf.data.Dataset, Any], TaskData],
    offline: Callable[[str], TaskData],
    *,
    data_dir: str | None,
    download: bool,
    fallback: bool,
) -> TaskData:
    offline_name = OFFLINE_DATASETS[task]
    if source == offline_name:
        return offline(split)
    if not isinstance(source, str) or not source:
        raise ValueError(
            "Received an invalid value for argument `source`, expected a TFDS dataset name "
            f"or {offline_name!r}. Received: source={source!r}"
        )
    if os.path.isfile(source):
        raise ValueError(
            f"Received a file as the {task} data source: {source!r}. Expected a TFDS "
            f"dataset name or {offline_name!r}; a {task} run trains on its own examples "
            "from Python: `train(config, run_dir, train_data=dataset, labels=...)`."
        )
    try:
        dataset, info = load_tfds(source, split, data_dir=data_dir, download=download)
    except _unavailable_errors() as e:
        if not fallback:
            raise
        logger.warning(
            "Could not load the TFDS dataset %r (%s: %s); using the offline dataset %r instead.",
            source,
            type(e).__name__,
            str(e).splitlines()[0] if str(e) else "",
            offline_name,
        )
        return offline(split)
    return from_tfds(dataset, info)


def _unavailable_errors() -> tuple[type[BaseException], ...]:
    """What TFDS raises when the data cannot be had here: not prepared while downloading is
    off (`DataUnavailableError`), no network (`requests`' errors are `OSError`s), a failed
    download, a missing dependency. Not a misspelt name (`DatasetNotFoundError`, a
    `ValueError`) or split: those are the user's to fix, never replaced by other data."""
    import tensorflow_datasets as tfds

    return (OSError, ImportError, tfds.download.DownloadError)


def _feature(info, name: str | None, what: str, default_index: int | None = None) -> str:
    keys = list(info.features.keys())
    if name is None and default_index is not None:
        supervised = info.supervised_keys
        if isinstance(supervised, tuple) and len(supervised) == 2:
            name = supervised[default_index]
    if name not in keys:
        raise ValueError(
            f"Received an invalid value for the {what} feature, expected one of {keys} of "
            f"the TFDS dataset {info.name!r}. Received: {name!r}"
        )
    return name


def _class_names(feature) -> tuple[str, ...]:
    names = getattr(feature, "names", None)
    if not names:
        raise ValueError(
            f"Received a label feature without class names, expected a ClassLabel. "
            f"Received: {feature}"
        )
    return tuple(names)


def load_tagging_data(
    source: str,
    split: str = "train",
    *,
    words_feature: str = "tokens",
    tags_feature: str = "pos",
    data_dir: str | None = None,
    download: bool = True,
    fallback: bool = True,
) -> TaskData:
    """Sentences with one tag per word: `(words (W,) tf.string, tags (W,) int32)`.

    Args:
        source: a TFDS name whose examples hold a sequence of words and a sequence of
            class labels (`"conll2003"`), or `"synthetic_pos"`.
        split: a split, TFDS slicing included (`"train[:10%]"`).
        words_feature: the TFDS feature of the words.
        tags_feature: the TFDS feature of the tags (`"pos"`, `"ner"`, `"chunks"` for
            CoNLL-2003).
        data_dir: the TFDS data folder.
        download: whether TFDS may download and prepare the data.
        fallback: use `"synthetic_pos"` when TFDS cannot load `source`.
    """

    def from_tfds(dataset, info):
        words = _feature(info, words_feature, "words")
        tags = _feature(info, tags_feature, "tags")
        names = _class_names(info.features[tags].feature)
        dataset = dataset.map(lambda e: (e[words], tf.cast(e[tags], tf.int32)))
        return TaskData(dataset, names, f"tfds:{source}")

    def offline(split):
        words, tags = synthetic.synthetic_tagging(split)
        dataset = tf.data.Dataset.from_tensor_slices(
            (tf.ragged.constant(words, tf.string), tf.ragged.constant(tags, tf.int32))
        ).map(lambda w, t: (w, t))  # ragged rows -> dense 1-D tensors
        return TaskData(dataset, synthetic.POS_TAGS, OFFLINE_DATASETS["tagging"])

    return _load(
        "tagging",
        source,
        split,
        from_tfds,
        offline,
        data_dir=data_dir,
        download=download,
        fallback=fallback,
    )


def load_classification_data(
    source: str,
    split: str = "train",
    *,
    text_feature: str | None = None,
    label_feature: str | None = None,
    data_dir: str | None = None,
    download: bool = True,
    fallback: bool = True,
) -> TaskData:
    """Texts with one label each: `(text tf.string, label int32)`.

    Args:
        source: a TFDS name with a text and a class label (`"imdb_reviews"`,
            `"ag_news_subset"`), or `"synthetic_sentiment"`.
        split: a split, TFDS slicing included.
        text_feature: the TFDS feature of the text; the dataset's first supervised key
            when None.
        label_feature: the TFDS feature of the label; the second supervised key when None.
        data_dir: the TFDS data folder.
        download: whether TFDS may download and prepare the data.
        fallback: use `"synthetic_sentiment"` when TFDS cannot load `source`.
    """

    def from_tfds(dataset, info):
        text = _feature(info, text_feature, "text", default_index=0)
        label = _feature(info, label_feature, "label", default_index=1)
        names = _class_names(info.features[label])
        dataset = dataset.map(lambda e: (e[text], tf.cast(e[label], tf.int32)))
        return TaskData(dataset, names, f"tfds:{source}")

    def offline(split):
        texts, labels = synthetic.synthetic_classification(split)
        dataset = tf.data.Dataset.from_tensor_slices(
            (tf.constant(texts, tf.string), tf.constant(labels, tf.int32))
        )
        return TaskData(
            dataset, synthetic.CLASSIFICATION_LABELS, OFFLINE_DATASETS["classification"]
        )

    return _load(
        "classification",
        source,
        split,
        from_tfds,
        offline,
        data_dir=data_dir,
        download=download,
        fallback=fallback,
    )


def load_language_modeling_data(
    source: str,
    split: str = "train",
    *,
    text_feature: str = "text",
    document_separator: str | None = "\n\n",
    data_dir: str | None = None,
    download: bool = True,
    fallback: bool = True,
) -> TaskData:
    """Documents of text: scalar `tf.string`, none empty.

    Args:
        source: a TFDS name with a text feature (`"tiny_shakespeare"`, whose splits are one
            text each; `"lm1b"`), or `"synthetic_text"`.
        split: a split, TFDS slicing included.
        text_feature: the TFDS feature of the text.
        document_separator: split each text at this separator into documents (blank lines
            for Tiny Shakespeare's speeches); None keeps each text whole.
        data_dir: the TFDS data folder.
        download: whether TFDS may download and prepare the data.
        fallback: use `"synthetic_text"` when TFDS cannot load `source`.
    """

    def from_tfds(dataset, info):
        text = _feature(info, text_feature, "text")
        dataset = dataset.map(lambda e: e[text])
        if document_separator:
            dataset = dataset.flat_map(
                lambda t: tf.data.Dataset.from_tensor_slices(
                    tf.strings.split(t, document_separator)
                )
            )
        dataset = dataset.map(tf.strings.strip).filter(lambda t: tf.strings.length(t) > 0)
        return TaskData(dataset, None, f"tfds:{source}")

    def offline(split):
        texts = synthetic.synthetic_text(split)
        dataset = tf.data.Dataset.from_tensor_slices(tf.constant(texts, tf.string))
        return TaskData(dataset, None, OFFLINE_DATASETS["language_modeling"])

    return _load(
        "language_modeling",
        source,
        split,
        from_tfds,
        offline,
        data_dir=data_dir,
        download=download,
        fallback=fallback,
    )
