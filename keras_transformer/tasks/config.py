"""The experiment config's sections of the tasks other than translation.

`ExperimentConfig.task` (one of `constants.TASKS`) picks the task; `tagging`,
`classification` and `language_modeling` hold each task's own options. The other
sections keep their meaning, read as follows by these tasks:

- `model`: the architecture; the encoder-only model (tagging, classification) takes
  `num_encoder_layers` as its number of layers, the decoder-only one (language modelling)
  `num_decoder_layers` and `tie_output_embeddings`; `share_embeddings` is not used.
- `data`: `source` is a TFDS name or the task's offline set
  (`constants.OFFLINE_DATASETS`); splits, `data_dir`, `download`, `max_*_examples`,
  the tokenizer and `batch_size`, `bucket_step`, `shuffle_buffer_size` as for
  translation; `max_source_length` is the longest input of the encoder tasks and
  `max_target_length` the window of the language model (BOS included).
- `training`: as for translation, but BLEU (`bleu_*`) is translation's only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from keras_transformer.constants import POOLINGS, TASKS
from keras_transformer.validation import check_one_of


@dataclass
class TaggingConfig:
    """The `tagging` section: one tag per word.

    Attributes:
        words_feature: the TFDS feature with a sentence's words (a sequence of strings).
        tags_feature: the TFDS feature with their tags (a sequence of class labels).
        fallback: use the offline `synthetic_pos` set when TFDS cannot load `data.source`.
    """

    words_feature: str = "tokens"
    tags_feature: str = "pos"
    fallback: bool = True


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
    """

    text_feature: str | None = None
    label_feature: str | None = None
    pooling: str = "mean"
    fallback: bool = True


@dataclass
class LanguageModelingConfig:
    """The `language_modeling` section: a causal language model over documents.

    Attributes:
        text_feature: the TFDS feature with the text.
        document_separator: split each text into documents at this separator (blank lines
            by default: Tiny Shakespeare's splits are one text each); null keeps texts
            whole.
        fallback: use the offline `synthetic_text` set when TFDS cannot load `data.source`.
    """

    text_feature: str = "text"
    document_separator: str | None = "\n\n"
    fallback: bool = True


def validate_task(config: Any) -> None:
    """Checks `config.task` and what its task needs of the other sections.

    Raises:
        ValueError: naming the key.
    """
    task = check_one_of("task", config.task, TASKS)
    if task == "translation":
        return
    d, t = config.data, config.training
    if d.tokens_per_batch is not None:
        raise ValueError(
            f"Received `data.tokens_per_batch` for task {task!r}, whose batches are counted "
            "in examples; set `data.batch_size` instead. Received: "
            f"data.tokens_per_batch={d.tokens_per_batch}"
        )
    if t.bleu_every is not None:
        raise ValueError(
            f"Received `training.bleu_every` for task {task!r}; BLEU scores translations "
            f"only. Received: training.bleu_every={t.bleu_every}"
        )
    if task == "classification":
        check_one_of("classification.pooling", config.classification.pooling, POOLINGS)
    key = "max_target_length" if task == "language_modeling" else "max_source_length"
    length = getattr(d, key)
    if length > config.model.max_length:
        raise ValueError(
            f"Received a sequence limit longer than the model's positional table, expected "
            f"data.{key} <= model.max_length={config.model.max_length}. Received: "
            f"data.{key}={length}"
        )
    if task == "language_modeling" and length < 2:
        raise ValueError(
            "Received an invalid value for `data.max_target_length`, expected at least 2 for "
            f"language modelling (BOS and a token). Received: data.max_target_length={length}"
        )
