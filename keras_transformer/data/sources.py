"""Raw parallel corpora as `tf.data.Dataset`s of `(source_text, target_text)` string pairs.

Public API:

- `load_parallel_dataset(source, split="train", *, source_lang=None, target_lang=None,
  target_path=None, data_dir=None, local_dir=None, download=True, skip_empty=True)`: one entry
  point for `"multi30k"`, any TFDS translation dataset and local files.
- `load_tfds_translation(name, split="train", *, source_lang=None, target_lang=None,
  data_dir=None, download=True, builder_kwargs=None)`: a TFDS dataset with translation
  features (`ted_hrlr_translate/pt_to_en`, `wmt14_translate/de-en`, ...), via `tfds.load`.
- `load_multi30k(split="train", source_lang="de", target_lang="en", *, data_dir=None,
  local_dir=None, download=True)`: Multi30k task 1 through the package's TFDS builder.

Every dataset yields `(source_text, target_text)`, two scalar `tf.string` tensors.

Example:

```python
train = load_parallel_dataset("multi30k", split="train", source_lang="de", target_lang="en")
train = load_parallel_dataset("ted_hrlr_translate/pt_to_en", split="train")
train = load_parallel_dataset("corpus/train.de.gz", target_path="corpus/train.en.gz")
```
"""

from __future__ import annotations

import logging
import os
from typing import Any

import tensorflow as tf

from keras_transformer.data import multi30k as multi30k_lib
from keras_transformer.data.availability import load_tfds
from keras_transformer.data.text_files import load_text_files

logger = logging.getLogger(__name__)

_FILE_SUFFIXES = (".gz", ".txt", ".tsv")
_MULTI30K_SPLIT_ALIASES = {"val": "validation", "test_2016_flickr": "test"}


def load_tfds_translation(
    name: str,
    split: str = "train",
    *,
    source_lang: str | None = None,
    target_lang: str | None = None,
    data_dir: str | None = None,
    download: bool = True,
    builder_kwargs: dict[str, Any] | None = None,
) -> tf.data.Dataset:
    """Loads a TFDS translation dataset with `tfds.load` as string pairs.

    Args:
        name: the TFDS name with its config, e.g. `"ted_hrlr_translate/pt_to_en"` or
            `"wmt14_translate/de-en"`.
        split: a TFDS split, slicing included (`"train[:10%]"`).
        source_lang: the feature key of the source text; defaults to the dataset's first
            supervised key.
        target_lang: the feature key of the target text; defaults to the second one.
        data_dir: TFDS data folder (TFDS's default when None).
        download: whether to download and prepare the dataset if missing.
        builder_kwargs: passed to the builder (e.g. `{"local_dir": ...}` for Multi30k).

    Returns:
        A `tf.data.Dataset` of `(source_text, target_text)` scalar `tf.string` tensors.

    Raises:
        DataUnavailableError: `download` is False and the dataset is not prepared.

    Example (not run as a doctest: it reads a corpus):

    ```python
    pairs = load_tfds_translation("ted_hrlr_translate/pt_to_en", "validation")
    ```
    """
    if not isinstance(name, str) or not name:
        raise ValueError(
            "Received an invalid value for argument `name`, expected a TFDS dataset name. "
            f"Received: name={name!r}"
        )
    dataset, info = load_tfds(
        name, split, data_dir=data_dir, download=download, builder_kwargs=builder_kwargs
    )
    keys = list(info.features.keys()) if hasattr(info.features, "keys") else []
    supervised = info.supervised_keys
    if source_lang is None or target_lang is None:
        if not (isinstance(supervised, tuple) and len(supervised) == 2):
            raise ValueError(
                f"The TFDS dataset {name!r} has no (source, target) supervised keys; pass "
                f"`source_lang` and `target_lang` among its features {keys}."
            )
        source_lang = supervised[0] if source_lang is None else source_lang
        target_lang = supervised[1] if target_lang is None else target_lang
    for arg, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
        spec = dataset.element_spec.get(lang) if isinstance(dataset.element_spec, dict) else None
        if spec is None:
            raise ValueError(
                f"Received an invalid value for argument `{arg}`, expected a text feature of "
                f"{name!r} among {keys}. Received: {arg}={lang!r}"
            )
        if spec.dtype != tf.string or spec.shape.rank != 0:
            raise ValueError(
                f"Received an invalid value for argument `{arg}`, expected a scalar text "
                f"feature of {name!r}. Received: {arg}={lang!r} with spec {spec}"
            )
    if source_lang == target_lang:
        raise ValueError(
            "Received the same language for `source_lang` and `target_lang`. "
            f"Received: source_lang={source_lang!r}, target_lang={target_lang!r}"
        )
    return dataset.map(
        lambda example: (example[source_lang], example[target_lang]),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def load_multi30k(
    split: str = "train",
    source_lang: str = "de",
    target_lang: str = "en",
    *,
    data_dir: str | None = None,
    local_dir: str | None = None,
    download: bool = True,
) -> tf.data.Dataset:
    """Loads Multi30k task 1 through the package's TFDS builder.

    Args:
        split: `"train"`, `"validation"` (or `"val"`), `"test"` (or `"test_2016_flickr"`);
            TFDS slicing works (`"train[:1000]"`).
        source_lang: `"de"`, `"en"` or `"fr"`.
        target_lang: `"de"`, `"en"` or `"fr"`, not `source_lang`.
        data_dir: TFDS data folder (TFDS's default when None).
        local_dir: a folder with the published `.gz` files, read instead of downloading; the
            environment variable `KERAS_TRANSFORMER_MULTI30K_DIR` serves when None.
        download: whether to download the files when the dataset is not prepared and no
            local copy is found (a local copy is prepared either way).

    Returns:
        A `tf.data.Dataset` of `(source_text, target_text)` scalar `tf.string` tensors, in the
        published files' order.

    Raises:
        DataUnavailableError: the dataset is not prepared, no local copy is found, and
            `download` is False or the files' host does not answer; its one-line message
            names the files, the environment variable and `translation.local_dir`.

    Example (not run as a doctest: it reads a corpus):

    ```python
    val = load_multi30k("validation", "de", "en", local_dir="/data/multi30k")
    ```
    """
    for arg, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
        if lang not in multi30k_lib.LANGUAGES:
            raise ValueError(
                f"Received an invalid value for argument `{arg}`, expected one of "
                f"{multi30k_lib.LANGUAGES}. Received: {arg}={lang!r}"
            )
    if source_lang == target_lang:
        raise ValueError(
            "Received the same language for `source_lang` and `target_lang`. "
            f"Received: source_lang={source_lang!r}, target_lang={target_lang!r}"
        )
    base, sep, rest = split.partition("[")
    split = _MULTI30K_SPLIT_ALIASES.get(base, base) + sep + rest
    # The builder decides whether to download (it prepares a local copy either way), so TFDS
    # may always prepare.
    builder_kwargs = {
        "local_dir": os.fspath(local_dir) if local_dir else None,
        "download": download,
    }
    return load_tfds_translation(
        f"multi30k/{source_lang}-{target_lang}",
        split,
        source_lang=source_lang,
        target_lang=target_lang,
        data_dir=data_dir,
        download=True,
        builder_kwargs=builder_kwargs,
    )


def names_local_files(source: str, target_path: str | None = None) -> bool:
    """Whether `load_parallel_dataset(source, target_path=target_path)` reads local files
    (which have no splits) rather than a TFDS dataset."""
    looks_like_file = source.endswith(_FILE_SUFFIXES) or source.startswith(("/", "./", "../"))
    return target_path is not None or looks_like_file or os.path.isfile(source)


def load_parallel_dataset(
    source: str,
    split: str = "train",
    *,
    source_lang: str | None = None,
    target_lang: str | None = None,
    target_path: str | None = None,
    data_dir: str | None = None,
    local_dir: str | None = None,
    download: bool = True,
    skip_empty: bool = True,
) -> tf.data.Dataset:
    """Loads a parallel corpus as `(source_text, target_text)` string pairs.

    `source` selects the kind:

    - `"multi30k"` or `"multi30k/<src>-<tgt>"`: Multi30k task 1 (`load_multi30k`);
      languages from the name, else `source_lang`/`target_lang`, else de-en.
    - an existing file, a path (starting with `/`, `./`, `../` or ending with `.gz`, `.txt`,
      `.tsv`; a missing one raises `FileNotFoundError`), or anything when `target_path` is
      given: local text files
      (`load_text_files`; `split` is ignored): line-aligned `source`/`target_path`, or a TSV
      file `source` when `target_path` is None.
    - anything else: a TFDS dataset name (`load_tfds_translation`).

    Args:
        source: what to load, as above.
        split: the split (`"train"`, `"validation"`, `"test"`, TFDS slicing allowed).
        source_lang: the source language (feature key for TFDS).
        target_lang: the target language.
        target_path: the target file for local line-aligned files.
        data_dir: TFDS data folder.
        local_dir: Multi30k's offline copy (see `load_multi30k`).
        download: whether TFDS may download and prepare data.
        skip_empty: for local files, drop pairs with an empty side.

    Returns:
        A `tf.data.Dataset` of `(source_text, target_text)` scalar `tf.string` tensors.

    Example (not run as a doctest: it reads a corpus):

    ```python
    pairs = load_parallel_dataset("multi30k/de-en", split="validation")
    ```
    """
    if not isinstance(source, str) or not source:
        raise ValueError(
            'Received an invalid value for argument `source`, expected "multi30k", a TFDS '
            f"dataset name or a file path. Received: source={source!r}"
        )
    if names_local_files(source, target_path):
        return load_text_files(source, target_path, skip_empty=skip_empty)
    if source == "multi30k" or source.startswith("multi30k/"):
        if "/" in source:
            pair = source.split("/", 1)[1].split("-")
            if len(pair) != 2:
                raise ValueError(
                    "Received an invalid value for argument `source`, expected "
                    f'"multi30k/<src>-<tgt>", e.g. "multi30k/de-en". Received: source={source!r}'
                )
            if source_lang not in (None, pair[0]) or target_lang not in (None, pair[1]):
                raise ValueError(
                    f"Received languages that contradict `source`={source!r}. Received: "
                    f"source_lang={source_lang!r}, target_lang={target_lang!r}"
                )
            source_lang, target_lang = pair
        return load_multi30k(
            split,
            source_lang or "de",
            target_lang or "en",
            data_dir=data_dir,
            local_dir=local_dir,
            download=download,
        )
    return load_tfds_translation(
        source,
        split,
        source_lang=source_lang,
        target_lang=target_lang,
        data_dir=data_dir,
        download=download,
    )
