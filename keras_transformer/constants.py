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

# Tokenizers (`tokenization.train_sentencepiece`, `data.tokenizer_model_type`).
TOKENIZER_MODEL_TYPES = ("unigram", "bpe")
NORMALIZATIONS = ("nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity")

# Data: the folder of the offline Multi30k copy (`data.multi30k`), and the length policies of
# `data.pipeline.make_batches`.
MULTI30K_DIR_ENV_VAR = "KERAS_TRANSFORMER_MULTI30K_DIR"
LENGTH_POLICIES = ("drop", "truncate")

# Training (`training.strategy`, `training.dtype_policy`, `training.jit_compile`,
# `training.lr_decay`).
STRATEGIES = ("default", "mirrored", "multi_worker")
DTYPE_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
JIT_COMPILE_OPTIONS = (True, False, "auto")
LR_DECAYS = ("inverse_sqrt", "linear", "cosine")

# Decoding (`decoding.BatchDecoder`, the `translate`/`evaluate`/`export` commands).
DECODING_METHODS = ("greedy", "beam", "sample")
