"""The sections every task shares: `model`, `data` and `training`, and their checks.

What only one task reads lives in that task's section (`config.task_sections`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from keras_transformer.constants import (
    DTYPE_POLICIES,
    JIT_COMPILE_OPTIONS,
    LR_DECAYS,
    STRATEGIES,
    TOKENIZER_MODEL_TYPES,
)
from keras_transformer.model_config import ArchitectureConfig, TransformerConfig
from keras_transformer.validation import (
    check_architecture,
    check_decay_horizon,
    check_holdout,
    check_non_negative_int,
    check_one_of,
    check_optional,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_rate,
    check_rdrop,
    check_vocab_size,
)

# `model` options that change how a model trains, not what it computes.
TRAINING_ONLY = ("remat", "fast_dropout")


@dataclass
class ModelConfig(ArchitectureConfig):
    """The `model` section: a `TransformerConfig` without the vocabulary sizes.

    The vocabulary sizes come from the tokenizers trained (or loaded) for the run. Fields
    and defaults are those of `ArchitectureConfig`; the training-only options (how the
    model trains, not what it computes: `TRAINING_ONLY`) are not part of the architecture.

    Attributes:
        remat: recompute each encoder/decoder layer's activations in the backward pass
            (`keras.RematScope`, i.e. `tf.recompute_grad`) to save memory.
        fast_dropout: draw the dropout masks as 16-bit random integers, two per 32-bit
            draw (`layers.dropout`: the same keep probability to 1/65536, a cheaper mask)
            instead of Keras' float uniforms.
    """

    remat: bool = False
    fast_dropout: bool = False

    def to_transformer_config(
        self, source_vocab_size: int, target_vocab_size: int
    ) -> TransformerConfig:
        """The full architecture once the vocabulary sizes are known."""
        values = {k: v for k, v in dataclasses.asdict(self).items() if k not in TRAINING_ONLY}
        return TransformerConfig(
            source_vocab_size=source_vocab_size, target_vocab_size=target_vocab_size, **values
        )


# The two batch sizes are alternatives: setting one (to a value) clears the other.
BATCH_SIZE_ALTERNATIVES = {"batch_size": "tokens_per_batch", "tokens_per_batch": "batch_size"}


@dataclass
class DataConfig:
    """The `data` section: corpus, tokenizers and batching.

    Attributes:
        source: the data the task loads. Translation: `"multi30k"`, a TFDS name
            (`"ted_hrlr_translate/pt_to_en"`) or a local file (`data.load_parallel_dataset`);
            the other tasks: a TFDS name (`"conll2003"`) or the task's offline set
            (`constants.OFFLINE_DATASETS`, such as `"synthetic_pos"`).
        train_split: the training split.
        validation_split: the validation split (None: no validation). Local files have no
            splits: their validation data is `validation_source` or a holdout.
        validation_source: for local files, the validation source (or TSV) file
            (translation).
        validation_holdout: hold out the last part of the training split as the validation
            data instead, as Keras' `fit(validation_split=...)` does: a fraction in (0, 1)
            or a number of examples, taken before `max_train_examples` (None: off). The
            run's evaluation of `validation_split` scores the same examples.
        data_dir: the TFDS data folder (TFDS's default when None).
        download: whether TFDS may download and prepare data.
        max_train_examples: use only the first N training examples.
        max_validation_examples: use only the first N validation examples.
        vocab_size: SentencePiece pieces per tokenizer.
        tokenizer_model_type: `"unigram"` or `"bpe"`.
        tokenizer_max_sentences: sentences sampled to train a tokenizer.
        batch_size: sentences per batch (global, over all replicas).
        tokens_per_batch: batch by tokens instead (then `batch_size` must be None).
            The two are alternatives: setting one to a value, as an override or as an
            attribute (`config.data.batch_size = 64`), clears the other.
        bucket_step: the spacing of the length buckets (sentences of lengths within one
            step share batches). 2 pads 11% of the target tokens of Multi30k's batches and
            8 pads 24%, but with 4,096-token batches the Multi30k recipe learned far more
            slowly at 2 (validation BLEU 3.2 against 21.5 after 4 epochs). Part of it is
            the order of the batches (`batch_shuffle_buffer_size`); on a smaller model,
            shuffling them did not close the gap at the end of training
            (docs/recipe_choices.md). 8 is the default.
        pad_to_bucket: pad batches to bucket lengths (fixed shapes, good for XLA).
        shuffle_buffer_size: the shuffle buffer, in examples.
        batch_shuffle_buffer_size: also shuffle the training batches, in a buffer of this
            many batches (None: batches in the order their length buckets fill, which ends
            every epoch with each bucket's last, smaller batch, shortest bucket first: the
            last 7 of the Multi30k recipe's 149 batches at bucket step 8, the last 26 of 141,
            of 2 to 331 sentences, at step 2).
        drop_remainder: drop each length bucket's last, smaller batch from every training
            pass, so every step sees a full batch (validation keeps every example). Each
            pass reshuffles, so the examples dropped change from pass to pass. False (the
            default) trains on them too.
        subword_sampling: subword regularisation (Kudo 2018): each training epoch
            tokenizes the training text anew with a segmentation sampled per sentence
            (`SubwordTokenizer.with_sampling`), a float in (0, 1]: a unigram model's
            smoothing (smaller is more varied), a BPE model's merge
            dropout (BPE-dropout; larger is more varied). None (the default): the one best
            segmentation, tokenized once and cached. Validation, evaluation and the export
            always use the best segmentation. Sampling is not seeded (tf-text's kernel draws
            its own random numbers), and the number of batches changes from pass to pass: an
            epoch is the first pass's count. Under multi-worker training each worker samples
            its own segmentations, so the workers' shards of a pass no longer partition it.
    """

    source: str = "multi30k"
    train_split: str = "train"
    validation_split: str | None = "validation"
    validation_source: str | None = None
    validation_holdout: int | float | None = None
    data_dir: str | None = None
    download: bool = True
    max_train_examples: int | None = None
    max_validation_examples: int | None = None
    vocab_size: int = 8000
    tokenizer_model_type: str = "unigram"
    tokenizer_max_sentences: int = 2_000_000
    batch_size: int | None = 64
    tokens_per_batch: int | None = None
    bucket_step: int = 8
    pad_to_bucket: bool = False
    shuffle_buffer_size: int = 20_000
    batch_shuffle_buffer_size: int | None = None
    drop_remainder: bool = False
    subword_sampling: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_built", True)

    def __setattr__(self, name: str, value: object) -> None:
        alternative = BATCH_SIZE_ALTERNATIVES.get(name)
        if alternative and value is not None and self.__dict__.get("_built"):
            object.__setattr__(self, alternative, None)
        object.__setattr__(self, name, value)


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
            to zero at the end of the last epoch (`TransformerSchedule`): their runs must
            last longer than the warmup (checked with the config when `steps_per_epoch` is
            set, else once the data's steps are counted).
        max_minutes: a wall-clock budget for the whole run (data, tokenizers, training):
            training stops at the first step boundary past it, then validates and saves as
            after a last epoch (None: no budget).
        average_last: the saved model is the average of the weights at the end of the last
            N epochs (checkpoint averaging; None or 1: the last weights). The per-epoch
            weights are kept in `checkpoints/` for `keras-transformer average`.
        use_ema: keep an exponential moving average of the weights (Keras' optimizer
            `use_ema`); validation and the saved model use it.
        ema_momentum: the EMA's momentum.
        beta_1, beta_2, epsilon: Adam's parameters (0.9, 0.98, 1e-9 in the paper).
        clipnorm: clip each gradient's norm (None: no clipping).
        global_clipnorm: clip the global gradient norm (None: no clipping).
        rdrop_alpha: R-Drop (`keras_transformer.training.rdrop`): each batch is trained
            twice, with different dropout masks, and the loss adds half this weight times
            the mean symmetric KL divergence of the two passes' predictions (fairseq's
            weighting; 0: off, and the two options below do nothing; 5 in the paper for
            IWSLT'14 de-en). A step costs about twice as much.
        rdrop_start_epoch: the first epoch (counted from 0) trained with R-Drop; the
            epochs before it train without, at half the cost of a step (0: every epoch).
        rdrop_min_epochs: with `max_minutes`, R-Drop starts at `rdrop_start_epoch` only if
            the time budget left then holds at least this many of its epochs (each its
            steps at twice the plain epochs' measured time a step, plus their validation)
            within `epochs`; otherwise the run trains plain to its end
            (`training.rdrop.RDropStart`; the decision is logged and kept in the run's
            backup). Without a budget, and under `multi_worker`, only `epochs` counts.
            None: R-Drop starts regardless. With R-Drop on, it needs
            `rdrop_start_epoch > 0` (the plain epochs it times).
        strategy: `"default"`, `"mirrored"` or `"multi_worker"` (TF_CONFIG).
        devices: the devices of `"mirrored"` (None: all local GPUs).
        jit_compile: `"auto"` (XLA on a single GPU only), `true` or `false`.
        dtype_policy: `"float32"`, `"mixed_float16"` (loss scaling added by Keras),
            `"mixed_bfloat16"` or `"auto"` (`"mixed_bfloat16"` where the hardware computes
            in bf16: a CPU with AVX512_BF16 or AMX, GPUs of compute capability 8.0 or more;
            else `"float32"`).
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
    beta_1: float = 0.9
    beta_2: float = 0.98
    epsilon: float = 1e-9
    clipnorm: float | None = None
    global_clipnorm: float | None = None
    rdrop_alpha: float = 0.0
    rdrop_start_epoch: int = 0
    rdrop_min_epochs: int | None = None
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


def validate_model(m: ModelConfig) -> None:
    """Checks the `model` section; raises `ValueError` naming the key."""
    architecture = {k: v for k, v in dataclasses.asdict(m).items() if k not in TRAINING_ONLY}
    check_architecture("model.", **architecture)
    if m.pad_id != 0:
        raise ValueError(
            "Received an invalid value for `model.pad_id`, expected 0 (the tokenizers' "
            f"padding id). Received: model.pad_id={m.pad_id}"
        )


def validate_data(d: DataConfig) -> None:
    """Checks the `data` section; raises `ValueError` naming the key."""
    check_vocab_size("data.vocab_size", d.vocab_size)
    for key in ("shuffle_buffer_size", "tokenizer_max_sentences", "bucket_step"):
        check_positive_int(f"data.{key}", getattr(d, key))
    for key in (
        "max_train_examples",
        "max_validation_examples",
        "tokens_per_batch",
        "batch_shuffle_buffer_size",
    ):
        check_optional(check_positive_int, f"data.{key}", getattr(d, key))
    check_optional(check_positive_int, "data.batch_size", d.batch_size)
    check_optional(check_holdout, "data.validation_holdout", d.validation_holdout)
    check_optional(check_probability, "data.subword_sampling", d.subword_sampling)
    if d.validation_holdout is not None and d.validation_source is not None:
        raise ValueError(
            "Expected at most one of `data.validation_source` and `data.validation_holdout`. "
            f"Received: data.validation_source={d.validation_source!r}, "
            f"data.validation_holdout={d.validation_holdout!r}"
        )
    if (d.batch_size is None) == (d.tokens_per_batch is None):
        raise ValueError(
            "Expected exactly one of `data.batch_size` and `data.tokens_per_batch`. "
            f"Received: data.batch_size={d.batch_size}, "
            f"data.tokens_per_batch={d.tokens_per_batch}"
        )
    check_one_of("data.tokenizer_model_type", d.tokenizer_model_type, TOKENIZER_MODEL_TYPES)


def validate_training(t: TrainingConfig) -> None:
    """Checks the `training` section; raises `ValueError` naming the key."""
    for key in ("epochs", "warmup_steps", "steps_per_execution", "backup_freq"):
        check_positive_int(f"training.{key}", getattr(t, key))
    for key in ("steps_per_epoch", "validation_steps", "average_last"):
        check_optional(check_positive_int, f"training.{key}", getattr(t, key))
    check_rate("training.label_smoothing", t.label_smoothing)
    check_one_of("training.lr_decay", t.lr_decay, LR_DECAYS)
    check_optional(check_positive_float, "training.max_minutes", t.max_minutes)
    check_rate("training.ema_momentum", t.ema_momentum)
    check_positive_float("training.learning_rate_scale", t.learning_rate_scale)
    check_positive_float("training.epsilon", t.epsilon)
    for key in ("beta_1", "beta_2"):
        check_rate(f"training.{key}", getattr(t, key))
    for key in ("clipnorm", "global_clipnorm"):
        check_optional(check_positive_float, f"training.{key}", getattr(t, key))
    check_rdrop(t.rdrop_alpha, t.rdrop_start_epoch, t.rdrop_min_epochs, prefix="training.")
    if t.steps_per_epoch is not None:  # else the steps are counted from the data
        check_decay_horizon(
            t.lr_decay,
            t.epochs * t.steps_per_epoch,
            t.warmup_steps,
            (
                "training.lr_decay",
                "training.epochs * training.steps_per_epoch",
                "training.warmup_steps",
            ),
        )
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
