"""Multi30k (task 1: German, English, French image descriptions) as a TFDS dataset builder.

Importing this module registers the builder `multi30k` with TensorFlow Datasets. It has one
config per ordered language pair, `multi30k/de-en`, `multi30k/en-de`, `multi30k/fr-en`,
`multi30k/en-fr`, `multi30k/de-fr` and `multi30k/fr-de`: the config name is
`<source>-<target>`, its features are a `tfds.features.Translation` of the two languages and
its `supervised_keys` are `(source, target)`, so `as_supervised=True` yields
`(source_text, target_text)`. Splits: `train` (29,000 pairs), `validation` (1,014) and `test`
(1,000, the "test_2016_flickr" set), each in the order of the published files.

Where the raw files come from, first match wins:

1. the builder's `local_dir` argument (`tfds.load(..., builder_kwargs={"local_dir": ...})`);
2. the environment variable `KERAS_TRANSFORMER_MULTI30K_DIR`;
3. TFDS's manual folder (`download_config=tfds.download.DownloadConfig(manual_dir=...)`,
   by default `<data_dir>/downloads/manual`), if it holds the files;
4. the published URLs, `https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/<split>.<lang>.gz`
   (TFDS verifies their sha256), unless the builder's `download` argument is False.

With no local copy, the builder first asks the host for the first file (HTTP HEAD,
`availability.HOST_TIMEOUT_S` seconds): offline, TFDS's downloader would retry each file for
minutes. When the host does not answer, or downloading is off, it raises
`availability.DataUnavailableError` with one line naming the files, the environment
variable, the config key `translation.local_dir` and what failed.

A local folder holds the files under their published names (`train.de.gz`, `val.en.gz`,
`test_2016_flickr.fr.gz`, ...); their sha256 checksums are verified as for a download, and a
mismatch raises a `ValueError` naming the file.

Public API:

- `Multi30k`: the `tfds.core.GeneratorBasedBuilder` (arguments `local_dir`, `download`).
- `ENV_VAR` (`"KERAS_TRANSFORMER_MULTI30K_DIR"`), `LANGUAGES`, `SPLITS`, `URL_TEMPLATE`,
  `CHECKSUMS`.
- `verify_multi30k_files(directory, languages=LANGUAGES) -> dict[str, str]`: checks a local
  copy, returns `{file name: path}`.

Example:

```python
import tensorflow_datasets as tfds
from etils import epath
import keras_transformer.data.multi30k  # registers "multi30k"

train = tfds.load("multi30k/de-en", split="train", as_supervised=True,
                  builder_kwargs={"local_dir": "/data/multi30k"})
```
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import os
from collections.abc import Iterator, Sequence

import tensorflow_datasets as tfds
from etils import epath

from keras_transformer.constants import MULTI30K_DIR_CONFIG_KEY
from keras_transformer.constants import MULTI30K_DIR_ENV_VAR as ENV_VAR
from keras_transformer.data.availability import DataUnavailableError, unreachable_reason

LANGUAGES = ("de", "en", "fr")
URL_TEMPLATE = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{}"
# TFDS split name -> the published file prefix.
SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
NUM_EXAMPLES = {"train": 29000, "validation": 1014, "test": 1000}
# File name -> (sha256, size in bytes), as published in the multi30k/dataset repository.
CHECKSUMS = {
    "test_2016_flickr.de.gz": (
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
        22890,
    ),
    "test_2016_flickr.en.gz": (
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
        21077,
    ),
    "test_2016_flickr.fr.gz": (
        "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
        22310,
    ),
    "train.de.gz": ("726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6", 637044),
    "train.en.gz": ("d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f", 568929),
    "train.fr.gz": ("622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c", 604242),
    "val.de.gz": ("f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a", 24681),
    "val.en.gz": ("14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28", 21650),
    "val.fr.gz": ("ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9", 23001),
}

_CITATION = """\
@inproceedings{elliott-etal-2016-multi30k,
  title = "{M}ulti30{K}: Multilingual {E}nglish-{G}erman Image Descriptions",
  author = "Elliott, Desmond and Frank, Stella and Sima'an, Khalil and Specia, Lucia",
  booktitle = "Proceedings of the 5th Workshop on Vision and Language",
  year = "2016",
  pages = "70--74",
}
"""

_DESCRIPTION = """\
Multi30k task 1: Flickr30k image descriptions in English with professional German and French
translations (raw, untokenized text). One config per ordered language pair.
"""


def _file_names(languages: Sequence[str]) -> list[str]:
    return [f"{prefix}.{lang}.gz" for prefix in SPLITS.values() for lang in languages]


def verify_multi30k_files(directory: str, languages: Sequence[str] = LANGUAGES) -> dict[str, str]:
    """Checks that a local Multi30k copy holds the published files, by sha256.

    Args:
        directory: the folder holding `train.de.gz`, `val.en.gz`, ... .
        languages: the languages whose files must be there.

    Returns:
        `{file name: path}` of the checked files.

    Raises:
        FileNotFoundError: the folder or a file is missing.
        ValueError: a file's sha256 differs from the published one.

    Example (not run as a doctest: it reads the Multi30k files):

    ```python
    verify_multi30k_files("/data/multi30k", ["de", "en"])
    # {'train.de.gz': '/data/multi30k/train.de.gz', ...}
    ```
    """
    for lang in languages:
        if lang not in LANGUAGES:
            raise ValueError(
                f"Received an invalid value for argument `languages`, expected languages "
                f"among {LANGUAGES}. Received: languages={list(languages)!r}"
            )
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"The Multi30k folder {directory} does not exist.")
    paths = {}
    for name in _file_names(languages):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"The Multi30k folder {directory} lacks {name}. Expected the files "
                f"{_file_names(languages)} (published at {URL_TEMPLATE.format('<name>')})."
            )
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                digest.update(chunk)
        expected = CHECKSUMS[name][0]
        if digest.hexdigest() != expected:
            raise ValueError(
                f"Checksum mismatch for the Multi30k file {path}: expected sha256 {expected}, "
                f"got {digest.hexdigest()}. Replace it with the published file "
                f"{URL_TEMPLATE.format(name)}."
            )
        paths[name] = path
    return paths


class Multi30kConfig(tfds.core.BuilderConfig):
    """A Multi30k language pair.

    Args:
        source_lang: the source language, one of `LANGUAGES`.
        target_lang: the target language, one of `LANGUAGES`.
    """

    def __init__(self, *, source_lang: str, target_lang: str, **kwargs) -> None:
        name = f"{source_lang}-{target_lang}"
        super().__init__(
            name=name,
            description=f"Multi30k task 1, {source_lang} to {target_lang}.",
            **kwargs,
        )
        self.source_lang = source_lang
        self.target_lang = target_lang


class Multi30k(tfds.core.GeneratorBasedBuilder):
    """TFDS builder of Multi30k task 1 (see the module docstring).

    Args:
        local_dir: a folder holding the published `.gz` files; read instead of downloading.
        download: whether to download the files when no local copy is found; when False,
            preparing without one raises `DataUnavailableError`.
        **kwargs: `tfds.core.DatasetBuilder` arguments (`config`, `data_dir`, ...).

    Example (not run as a doctest: it reads the Multi30k files):

    ```python
    builder = Multi30k(config="de-en", data_dir="/tmp/tfds",
                       local_dir="/data/multi30k")
    builder.download_and_prepare()
    train = builder.as_dataset(split="train", as_supervised=True)
    ```
    """

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release."}
    # A local copy first, then its host (`_check_downloadable`): `availability.load_tfds`
    # asks no host for it.
    CHECKS_ITS_OWN_HOSTS = True
    BUILDER_CONFIGS = [
        Multi30kConfig(source_lang=s, target_lang=t)
        for s, t in itertools.permutations(LANGUAGES, 2)
    ]
    MANUAL_DOWNLOAD_INSTRUCTIONS = f"""\
    Optional (the files are downloaded otherwise): place the published files
    {", ".join(CHECKSUMS)} from {URL_TEMPLATE.format("")} in the manual folder, or point
    the environment variable {ENV_VAR} (or the builder argument `local_dir`) at a folder
    holding them.
    """

    def __init__(self, *, local_dir: str | None = None, download: bool = True, **kwargs) -> None:
        self._local_dir = local_dir
        self._download = download
        super().__init__(**kwargs)

    @tfds.core.utils.classproperty
    @classmethod
    def url_infos(cls) -> dict[str, tfds.core.download.checksums.UrlInfo]:
        """The published URLs with their sizes and sha256 checksums."""
        return {
            URL_TEMPLATE.format(name): tfds.core.download.checksums.UrlInfo(
                size=tfds.core.utils.Size(size), checksum=sha256, filename=name
            )
            for name, (sha256, size) in CHECKSUMS.items()
        }

    def _info(self) -> tfds.core.DatasetInfo:
        config = self.builder_config
        return tfds.core.DatasetInfo(
            builder=self,
            description=_DESCRIPTION,
            features=tfds.features.Translation(languages=[config.source_lang, config.target_lang]),
            supervised_keys=(config.source_lang, config.target_lang),
            homepage="https://github.com/multi30k/dataset",
            citation=_CITATION,
            # Keep the files' line order (validation/test in the order of the references).
            disable_shuffling=True,
        )

    def _local_files(self, dl_manager) -> dict[str, str] | None:
        """`{file name: path}` from a local folder, or None to download."""
        languages = [self.builder_config.source_lang, self.builder_config.target_lang]
        for directory in (self._local_dir, os.environ.get(ENV_VAR)):
            if directory:
                return verify_multi30k_files(os.fspath(directory), languages)
        try:
            manual_dir = os.fspath(dl_manager.manual_dir)
        except (AssertionError, ValueError):
            return None
        if all(os.path.isfile(os.path.join(manual_dir, n)) for n in _file_names(languages)):
            return verify_multi30k_files(manual_dir, languages)
        return None

    def _split_generators(self, dl_manager):
        config = self.builder_config
        names = _file_names([config.source_lang, config.target_lang])
        paths = self._local_files(dl_manager)
        if paths is None:
            self._check_downloadable(names)
            paths = dl_manager.download({name: URL_TEMPLATE.format(name) for name in names})
        return {
            split: self._generate_examples(
                paths[f"{prefix}.{config.source_lang}.gz"],
                paths[f"{prefix}.{config.target_lang}.gz"],
                NUM_EXAMPLES[split],
            )
            for split, prefix in SPLITS.items()
        }

    def _check_downloadable(self, names: list[str]) -> None:
        """Raises `DataUnavailableError` when downloading is off or the host does not answer."""
        if self._download:
            url = URL_TEMPLATE.format(names[0])
            reason = unreachable_reason(url)
            if reason is None:
                return
            cause = f"{url} could not be reached ({reason})"
        else:
            cause = "downloading is off (download=False)"
        raise DataUnavailableError(
            f"Multi30k {self.builder_config.name} is not prepared in "
            f"{os.fspath(self.data_dir_root)}, no local copy was found, and {cause}. Put "
            f"{', '.join(names)} (published at {URL_TEMPLATE.format('')}) in a folder and name "
            f"it with the environment variable {ENV_VAR} or `{MULTI30K_DIR_CONFIG_KEY}` "
            f"(argument `local_dir`)."
        )

    def _generate_examples(self, source_path, target_path, num_examples: int):
        config = self.builder_config
        source = list(_read_gzip_lines(source_path))
        target = list(_read_gzip_lines(target_path))
        for path, lines in ((source_path, source), (target_path, target)):
            if len(lines) != num_examples:
                raise ValueError(
                    f"Expected {num_examples} lines in the Multi30k file {path}. "
                    f"Received: {len(lines)} lines"
                )
        for index, (s, t) in enumerate(zip(source, target)):
            yield index, {config.source_lang: s, config.target_lang: t}


def _read_gzip_lines(path) -> Iterator[str]:
    with epath.Path(path).open("rb") as raw:
        with gzip.GzipFile(fileobj=raw) as f:
            for number, line in enumerate(f, start=1):
                try:
                    yield line.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as e:
                    raise ValueError(
                        f"Expected UTF-8 text in {path}. Received: bytes that are not UTF-8 on "
                        f"line {number}"
                    ) from e
