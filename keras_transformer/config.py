"""The experiment config that `keras-transformer train` reads: `model`, `data` and `training`.

`load_config(path, overrides)` reads YAML or JSON (or a packaged config by name, from
`keras_transformer/configs/`), applies `section.key=value` overrides, builds the dataclasses
with `dacite` (unknown keys and values of the wrong type are errors that name the key) and
checks the values (`ExperimentConfig.validate`, with the rules of
`keras_transformer.validation`). The `model` section is the architecture of
`keras_transformer.model_config` without the vocabulary sizes, which come from the
tokenizers. `task` (default `"translation"`) picks the task; the `tagging`,
`classification` and `language_modeling` sections are those tasks' own options
(`keras_transformer.tasks.config`, which also says how they read the other sections).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import dacite

from keras_transformer import storage
from keras_transformer.constants import (
    DTYPE_POLICIES,
    JIT_COMPILE_OPTIONS,
    LR_DECAYS,
    STRATEGIES,
    TOKENIZER_MODEL_TYPES,
)
from keras_transformer.model_config import ArchitectureConfig, TransformerConfig
from keras_transformer.tasks.config import (
    ClassificationConfig,
    LanguageModelingConfig,
    TaggingConfig,
    validate_task,
)
from keras_transformer.validation import (
    check_architecture,
    check_non_negative_int,
    check_one_of,
    check_optional,
    check_positive_float,
    check_positive_int,
    check_rate,
)

CONFIGS_DIR = os.path.join(os.path.dirname(__file__), "configs")


@dataclass
class ModelConfig(ArchitectureConfig):
    """The `model` section: a `TransformerConfig` without the vocabulary sizes.

    The vocabulary sizes come from the tokenizers trained (or loaded) for the run. Fields
    and defaults are those of `ArchitectureConfig`; `remat` adds gradient recomputation.

    Attributes:
        remat: recompute each encoder/decoder layer's activations in the backward pass
            (`keras.RematScope`, i.e. `tf.recompute_grad`) to save memory.
    """

    remat: bool = False

    def to_transformer_config(
        self, source_vocab_size: int, target_vocab_size: int
    ) -> TransformerConfig:
        """The full architecture once the vocabulary sizes are known."""
        values = {k: v for k, v in dataclasses.asdict(self).items() if k != "remat"}
        return TransformerConfig(
            source_vocab_size=source_vocab_size, target_vocab_size=target_vocab_size, **values
        )


@dataclass
class DataConfig:
    """The `data` section: corpus, tokenizers and batching.

    Attributes:
        source: what `keras_transformer.data.load_parallel_dataset` loads: `"multi30k"`,
            a TFDS name (`"ted_hrlr_translate/pt_to_en"`) or a local file.
        source_lang: source language (or TFDS feature key); None: the dataset's default.
        target_lang: target language.
        target_path: the target file of line-aligned local training files.
        train_split: the training split.
        validation_split: the validation split (None: no validation).
        validation_source: for local files, the validation source (or TSV) file.
        validation_target_path: for local files, the validation target file.
        data_dir: the TFDS data folder (TFDS's default when None).
        local_dir: Multi30k's offline copy; when None the environment variable
            `KERAS_TRANSFORMER_MULTI30K_DIR` is used.
        download: whether TFDS may download and prepare data.
        max_train_examples: use only the first N training pairs.
        max_validation_examples: use only the first N validation pairs.
        vocab_size: SentencePiece pieces per tokenizer.
        shared_vocab: one tokenizer for both languages.
        tokenizer_model_type: `"unigram"` or `"bpe"`.
        tokenizer_max_sentences: sentences sampled to train a tokenizer.
        batch_size: sentences per batch (global, over all replicas).
        tokens_per_batch: batch by tokens instead (then `batch_size` must be None).
        max_source_length: the most source ids (EOS included); longer pairs are dropped.
        max_target_length: the most target ids (+1 for BOS/EOS).
        bucket_step: the spacing of the length buckets (sentences of lengths within one
            step share batches). 2 pads 11% of the target tokens of Multi30k's batches and
            8 pads 24%, but with 4,096-token batches the Multi30k recipe learned far more
            slowly at 2 (validation BLEU 3.2 against 21.5 after 4 epochs; the cause is not
            pinned down). 8 is the default.
        pad_to_bucket: pad batches to bucket lengths (fixed shapes, good for XLA).
        shuffle_buffer_size: the shuffle buffer, in examples.
        source_eos: end every source with EOS (training and translation alike); a run
            directory whose config lacks this key was trained without it.
    """

    source: str = "multi30k"
    source_lang: str | None = None
    target_lang: str | None = None
    target_path: str | None = None
    train_split: str = "train"
    validation_split: str | None = "validation"
    validation_source: str | None = None
    validation_target_path: str | None = None
    data_dir: str | None = None
    local_dir: str | None = None
    download: bool = True
    max_train_examples: int | None = None
    max_validation_examples: int | None = None
    vocab_size: int = 8000
    shared_vocab: bool = True
    tokenizer_model_type: str = "unigram"
    tokenizer_max_sentences: int = 2_000_000
    batch_size: int | None = 64
    tokens_per_batch: int | None = None
    max_source_length: int = 128
    max_target_length: int = 128
    bucket_step: int = 8
    pad_to_bucket: bool = False
    shuffle_buffer_size: int = 20_000
    source_eos: bool = True


@dataclass
class TrainingConfig:
    """The `training` section: optimization, distribution and the run directory.

    Attributes:
        run_dir: the run directory (layout in `keras_transformer.run_dir`).
        epochs: training epochs.
        steps_per_epoch: steps per epoch (the data repeats); None: one pass over the data.
        validation_steps: validation batches per evaluation (None: all).
        label_smoothing: label smoothing rate (0.1 in the paper).
        warmup_steps: warmup steps of the schedule (4000 in the paper).
        learning_rate_scale: factor on the paper's schedule.
        lr_decay: after the warmup, `"inverse_sqrt"` (the paper), or `"linear"` / `"cosine"`
            to zero at the end of the last epoch (`TransformerSchedule`).
        max_minutes: a wall-clock budget for the whole run (data, tokenizers, training):
            training stops at the first step boundary past it, then validates and saves as
            after a last epoch (None: no budget).
        average_last: the saved model is the average of the weights at the end of the last
            N epochs (checkpoint averaging; None or 1: the last weights). The per-epoch
            weights are kept in `checkpoints/` for `keras-transformer average`.
        use_ema: keep an exponential moving average of the weights (Keras' optimizer
            `use_ema`); validation and the saved model use it.
        ema_momentum: the EMA's momentum.
        bleu_every: score the validation split with sacreBLEU every N epochs (and after
            the last), logging `val_bleu` and keeping the best-BLEU weights (None: off).
        bleu_beam_size: the beam size of that scoring (1: greedy).
        bleu_max_sentences: score only the first N validation sentences (None: all).
        beta_1, beta_2, epsilon: Adam's parameters (0.9, 0.98, 1e-9 in the paper).
        clipnorm: clip each gradient's norm (None: no clipping).
        global_clipnorm: clip the global gradient norm (None: no clipping).
        strategy: `"default"`, `"mirrored"` or `"multi_worker"` (TF_CONFIG).
        devices: the devices of `"mirrored"` (None: all local GPUs).
        jit_compile: `"auto"` (XLA on a single GPU only), `true` or `false`.
        dtype_policy: `"float32"`, `"mixed_float16"` (loss scaling added by Keras) or
            `"mixed_bfloat16"`.
        steps_per_execution: steps run per call of the compiled train function.
        backup_freq: steps between `BackupAndRestore` backups (mid-epoch resume).
        early_stopping_patience: epochs without val_loss improving before stopping (None:
            off).
        tensorboard: write TensorBoard logs to `run_dir/logs`.
        seed: the random seed (weights, dropout, shuffling, tokenizer sampling).
        verbose: Keras' `fit` verbosity (`"auto"`, 0, 1 or 2).
    """

    run_dir: str = "runs/experiment"
    epochs: int = 10
    steps_per_epoch: int | None = None
    validation_steps: int | None = None
    label_smoothing: float = 0.1
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    lr_decay: str = "inverse_sqrt"
    max_minutes: float | None = None
    average_last: int | None = None
    use_ema: bool = False
    ema_momentum: float = 0.999
    bleu_every: int | None = None
    bleu_beam_size: int = 1
    bleu_max_sentences: int | None = None
    beta_1: float = 0.9
    beta_2: float = 0.98
    epsilon: float = 1e-9
    clipnorm: float | None = None
    global_clipnorm: float | None = None
    strategy: str = "default"
    devices: list[str] | None = None
    jit_compile: bool | str = "auto"
    dtype_policy: str = "float32"
    steps_per_execution: int = 1
    backup_freq: int = 200
    early_stopping_patience: int | None = None
    tensorboard: bool = True
    seed: int = 0
    verbose: int | str = "auto"


@dataclass
class ExperimentConfig:
    """A training experiment: `model`, `data` and `training` sections.

    Load one with `load_config(path, overrides)`; `validate()` checks the values. `task`
    is one of `constants.TASKS`; the sections named after the other tasks are read only by
    their task.
    """

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    task: str = "translation"
    tagging: TaggingConfig = dataclasses.field(default_factory=TaggingConfig)
    classification: ClassificationConfig = dataclasses.field(default_factory=ClassificationConfig)
    language_modeling: LanguageModelingConfig = dataclasses.field(
        default_factory=LanguageModelingConfig
    )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ExperimentConfig:
        """Builds and validates a config; `ValueError` on unknown keys or bad values."""
        _check_keys(cls, values, "")
        try:
            config = dacite.from_dict(cls, values, config=_DACITE_CONFIG)
        except dacite.DaciteFieldError as e:
            raise ValueError(
                f"Received an invalid value for `{e.field_path}`, expected "
                f"{_type_name(getattr(e, 'field_type', None))}. "
                f"Received: {e.field_path}={_value_at(values, e.field_path)!r}"
            ) from None
        return config.validate()

    def validate(self) -> ExperimentConfig:
        """Checks values beyond their types; raises `ValueError` naming the key."""
        m, d, t = self.model, self.data, self.training
        architecture = dataclasses.asdict(m)
        del architecture["remat"]
        check_architecture("model.", **architecture)
        if m.pad_id != 0:
            raise ValueError(
                "Received an invalid value for `model.pad_id`, expected 0 (the tokenizers' "
                f"padding id). Received: model.pad_id={m.pad_id}"
            )
        if m.share_embeddings and not d.shared_vocab:
            raise ValueError(
                "Received `model.share_embeddings=True` with `data.shared_vocab=False`; "
                "sharing embeddings needs one shared vocabulary."
            )
        for key in (
            "vocab_size",
            "max_source_length",
            "max_target_length",
            "shuffle_buffer_size",
            "tokenizer_max_sentences",
            "bucket_step",
        ):
            check_positive_int(f"data.{key}", getattr(d, key))
        for key in ("max_train_examples", "max_validation_examples", "tokens_per_batch"):
            check_optional(check_positive_int, f"data.{key}", getattr(d, key))
        check_optional(check_positive_int, "data.batch_size", d.batch_size)
        if (d.batch_size is None) == (d.tokens_per_batch is None):
            raise ValueError(
                "Expected exactly one of `data.batch_size` and `data.tokens_per_batch`. "
                f"Received: data.batch_size={d.batch_size}, "
                f"data.tokens_per_batch={d.tokens_per_batch}"
            )
        check_one_of("data.tokenizer_model_type", d.tokenizer_model_type, TOKENIZER_MODEL_TYPES)
        # (The other tasks read one of the two: `tasks.config.validate_task` checks it.)
        if self.task == "translation" and max(d.max_source_length, d.max_target_length) > (
            m.max_length
        ):
            raise ValueError(
                "Received sequence limits longer than the model's positional table, expected "
                "data.max_source_length and data.max_target_length <= model.max_length="
                f"{m.max_length}. Received: data.max_source_length={d.max_source_length}, "
                f"data.max_target_length={d.max_target_length}"
            )
        for key in ("epochs", "warmup_steps", "steps_per_execution", "backup_freq"):
            check_positive_int(f"training.{key}", getattr(t, key))
        for key in ("steps_per_epoch", "validation_steps"):
            check_optional(check_positive_int, f"training.{key}", getattr(t, key))
        check_rate("training.label_smoothing", t.label_smoothing)
        check_one_of("training.lr_decay", t.lr_decay, LR_DECAYS)
        check_optional(check_positive_float, "training.max_minutes", t.max_minutes)
        for key in ("average_last", "bleu_every", "bleu_max_sentences"):
            check_optional(check_positive_int, f"training.{key}", getattr(t, key))
        check_positive_int("training.bleu_beam_size", t.bleu_beam_size)
        check_rate("training.ema_momentum", t.ema_momentum)
        check_positive_float("training.learning_rate_scale", t.learning_rate_scale)
        check_positive_float("training.epsilon", t.epsilon)
        for key in ("beta_1", "beta_2"):
            check_rate(f"training.{key}", getattr(t, key))
        for key in ("clipnorm", "global_clipnorm"):
            check_optional(check_positive_float, f"training.{key}", getattr(t, key))
        if t.clipnorm is not None and t.global_clipnorm is not None:
            raise ValueError(
                "Expected at most one of `training.clipnorm` and `training.global_clipnorm`. "
                f"Received: training.clipnorm={t.clipnorm}, "
                f"training.global_clipnorm={t.global_clipnorm}"
            )
        check_one_of("training.strategy", t.strategy, STRATEGIES)
        if t.devices is not None and t.strategy != "mirrored":
            raise ValueError(
                "Received `training.devices` for a strategy other than 'mirrored'. Received: "
                f"training.strategy={t.strategy!r}, training.devices={t.devices!r}"
            )
        if t.devices is not None and not t.devices:
            raise ValueError(
                "Received an invalid value for `training.devices`, expected a non-empty list "
                "of device names or null. Received: training.devices=[]"
            )
        check_one_of("training.jit_compile", t.jit_compile, JIT_COMPILE_OPTIONS)
        check_one_of("training.dtype_policy", t.dtype_policy, DTYPE_POLICIES)
        check_one_of("training.verbose", t.verbose, ("auto", 0, 1, 2))
        check_optional(
            check_non_negative_int, "training.early_stopping_patience", t.early_stopping_patience
        )
        check_non_negative_int("training.seed", t.seed)
        if not t.run_dir:
            raise ValueError(
                "Received an invalid value for `training.run_dir`, expected a folder path. "
                f"Received: training.run_dir={t.run_dir!r}"
            )
        validate_task(self)
        return self


_BATCH_SIZE_ALTERNATIVES = {
    "data.batch_size": "tokens_per_batch",
    "data.tokens_per_batch": "batch_size",
}


def load_config(path: str | None = None, overrides: list[str] | None = None) -> ExperimentConfig:
    """Reads an experiment config from YAML or JSON and applies `key.sub=value` overrides.

    Values of overrides are parsed as YAML (`1`, `0.5`, `true`, `null`, `[a, b]`, text) and
    type-checked against the dataclass fields like the file's values. `data.batch_size` and
    `data.tokens_per_batch` are alternatives: an override that sets one clears the other.

    Args:
        path: a `.yaml`/`.yml`/`.json` file; None starts from the defaults. A bare name such
            as `"multi30k_de_en"` selects a config packaged in `keras_transformer/configs`.
        overrides: e.g. `["training.epochs=1", "data.max_train_examples=2000"]`.

    Returns:
        The validated `ExperimentConfig`.

    Raises:
        ValueError: for an unknown key, a value of the wrong type or an invalid value.
        FileNotFoundError: when `path` does not exist.

    Example:
    >>> config = load_config("multi30k_de_en", ["training.epochs=1"])
    >>> config.training.epochs, config.model.d_model
    (1, 256)
    """
    import yaml

    values: dict[str, Any] = {}
    if path is not None:
        resolved = _resolve_config_path(path)
        try:
            loaded = yaml.safe_load(storage.read_text(resolved))
        except yaml.YAMLError as e:
            raise ValueError(f"Could not parse the config file {resolved}: {e}") from e
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ValueError(
                f"Received an invalid config file {resolved}, expected a mapping of the "
                f"sections 'model', 'data', 'training'. Received: {type(loaded).__name__}"
            )
        values = loaded
    for override in overrides or []:
        key, sep, raw = str(override).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(
                "Received an invalid override, expected `section.key=value` such as "
                f"`training.epochs=1`. Received: {override!r}"
            )
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        _set_path(values, key.split("."), value, key)
        alternative = _BATCH_SIZE_ALTERNATIVES.get(key)
        if alternative and value is not None and isinstance(values.get("data"), dict):
            # The two batch sizes are alternatives: setting one replaces the other.
            values["data"][alternative] = None
    return ExperimentConfig.from_dict(values)


def save_config(config: ExperimentConfig, path: str) -> None:
    """Writes `config` as YAML (as `load_config` reads it)."""
    import yaml

    storage.write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))


def _resolve_config_path(path: str) -> str:
    if storage.exists(path):
        return path
    packaged = os.path.join(CONFIGS_DIR, f"{path}.yaml")
    if os.sep not in path and "/" not in path and os.path.exists(packaged):
        return packaged
    raise FileNotFoundError(f"No config file at {path!r} (nor a packaged config of that name).")


def _set_path(values: dict[str, Any], parts: list[str], value: Any, key: str) -> None:
    node = values
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ValueError(
                f"Received an invalid override key {key!r}: {part!r} is not a section."
            )
        node = child
    node[parts[-1]] = value


def _check_keys(cls: type, values: Any, prefix: str) -> None:
    """Unknown keys and non-mapping sections, named with their section (dacite says less)."""
    if not isinstance(values, dict):
        where = f"`{prefix.rstrip('.')}`" if prefix else "the config"
        raise ValueError(
            f"Received an invalid value for {where}, expected a mapping (a config section). "
            f"Received: {values!r}"
        )
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        where = f"section `{prefix.rstrip('.')}`" if prefix else "the config"
        raise ValueError(
            f"Received unknown key(s) {[prefix + k for k in unknown]} in {where}, expected "
            f"some of {sorted(fields)}."
        )
    for name, value in values.items():
        field_type = _SECTIONS.get(name) if not prefix else None
        if field_type is not None:
            _check_keys(field_type, {} if value is None else value, f"{name}.")


def _float_from_number(value: Any) -> Any:
    """YAML's `1` and `1e-9` (a string to YAML 1.1) where a float is expected."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _type_name(hint: Any) -> str:
    import types
    import typing

    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(h) for h in typing.get_args(hint))
    if origin is list:
        return f"a list of {_type_name(typing.get_args(hint)[0])}"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    return names.get(hint, "null" if hint is type(None) else getattr(hint, "__name__", str(hint)))


def _value_at(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


# Strict: unknown keys are errors (`_check_keys` names them first, with their section).
_DACITE_CONFIG = dacite.Config(strict=True, type_hooks={float: _float_from_number})
_SECTIONS: dict[str, type] = {}
_SECTIONS.update(model=ModelConfig, data=DataConfig, training=TrainingConfig)
_SECTIONS.update(
    tagging=TaggingConfig,
    classification=ClassificationConfig,
    language_modeling=LanguageModelingConfig,
)
