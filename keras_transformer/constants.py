"""Fixed ids and the names that configs and arguments accept, stated once.

Every module that needs one of these imports it from here.
"""

from __future__ import annotations

# The special ids of every vocabulary of this package (`tokenization.train_sentencepiece`
# makes them so; `SubwordTokenizer` refuses models with others).
PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
# A vocabulary holds the four special pieces and at least one piece of text.
MIN_VOCAB_SIZE = 5
# Tagging labels (`data.encoding`): tag k of a dataset is label id k + 1, and id 0 marks
# what has no tag (the pieces after a word's first one, and padding), as PAD_ID does.
NO_TAG_ID = 0

# Tokenizers (`tokenization.train_sentencepiece`, `data.tokenizer_model_type`).
TOKENIZER_MODEL_TYPES = ("unigram", "bpe")
NORMALIZATIONS = ("nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity")

# Data: the folder of the offline Multi30k copy (`data.multi30k`): the environment variable
# and the config key that name it; the config key of TFDS's data folder; and the length
# policies of `data.pipeline.make_batches`.
MULTI30K_DIR_ENV_VAR = "KERAS_TRANSFORMER_MULTI30K_DIR"
MULTI30K_DIR_CONFIG_KEY = "translation.local_dir"
TFDS_DATA_DIR_CONFIG_KEY = "data.data_dir"
LENGTH_POLICIES = ("drop", "truncate")

# Training (`training.strategy`, `training.dtype_policy`, `training.jit_compile`,
# `training.lr_decay`).
STRATEGIES = ("default", "mirrored", "multi_worker")
DTYPE_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16", "auto")
# `training.dtype_policy: auto`: bf16 where every device computes in it (`hardware`), on GPUs
# from this compute capability (Ampere) on; float32 elsewhere.
BF16_MIN_COMPUTE_CAPABILITY = (8, 0)
JIT_COMPILE_OPTIONS = (True, False, "auto")
LR_DECAYS = ("inverse_sqrt", "linear", "cosine")

# Logging levels of the command lines (`keras-transformer --log-level`, `serve --log_level`),
# in any case.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_LOG_LEVEL = "INFO"

# Decoding (`decoding.BatchDecoder`, the `translate`/`evaluate`/`export` commands).
DECODING_METHODS = ("greedy", "beam", "sample")
# `decoding.BatchDecoder`'s generic defaults (and its graph functions'): the GNMT length
# penalty of beam search and each sentence's limit `a * source_length + b`.
DEFAULT_LENGTH_PENALTY = 0.6
DEFAULT_MAX_LENGTH_A = 1.0
DEFAULT_MAX_LENGTH_B = 50
# Translation's decoding defaults (`Translator`, so the `translate`/`evaluate`/`export`
# commands and exports; `decoding.BatchDecoder` itself keeps generic ones, as a language
# model's `max_length_b` counts new tokens at `max_length_a=1`), chosen on Multi30k's
# validation split with the packaged recipe's model (README, Results): the GNMT length
# penalty of beam search, and each sentence's limit `a * source_length + b` (1.0 and 50 let
# a model that fails to stop run 50 tokens on).
TRANSLATION_DECODING_DEFAULTS = {"length_penalty": 1.0, "max_length_a": 1.2, "max_length_b": 10}

# `keras-transformer export --format`: a SavedModel for TF Serving (the default, any task) or
# a CTranslate2 model directory (translation runs).
EXPORT_FORMATS = ("savedmodel", "ctranslate2")
# `--quantize` of `translate`/`evaluate`/`predict`/`export` and every predictor's `quantize`:
# the post-training weight types of `keras_transformer.quantization.quantize_model`.
QUANTIZATIONS = ("int8", "bfloat16")
# `keras-transformer export --format ctranslate2 --quantization ...`: the weight types a
# CTranslate2 model directory may be saved with (ctranslate2 4.x's
# `specs.model_spec.ACCEPTED_MODEL_TYPES`; tests/test_ctranslate2_export.py checks they match).
CTRANSLATE2_QUANTIZATIONS = (
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)

# Encoder-only models (`TransformerEncoderModel(pooling=...)`): a per-token head when None,
# else a sequence head over the mean of the real tokens or over the first token.
POOLINGS = ("mean", "first")

# The experiment's task (`task` in the experiment config, `keras-transformer train`).
TASKS = ("translation", "tagging", "classification", "language_modeling")
# The generated offline dataset of each task but translation (`data.synthetic`): a config's
# `data.source` may name it, and it is the fallback when TFDS cannot load the source.
OFFLINE_DATASETS = {
    "tagging": "synthetic_pos",
    "classification": "synthetic_sentiment",
    "language_modeling": "synthetic_text",
}
