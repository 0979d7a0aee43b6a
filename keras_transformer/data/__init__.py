"""Parallel corpora and the input pipeline.

Raw data: every loader returns a `tf.data.Dataset` of `(source_text, target_text)` scalar
`tf.string` pairs.

- `load_parallel_dataset(source, split="train", *, source_lang=None, target_lang=None,
  target_path=None, data_dir=None, local_dir=None, download=True, skip_empty=True)`:
  `"multi30k"` / `"multi30k/de-en"`, a TFDS translation dataset name or local files.
- `load_multi30k(split, source_lang, target_lang, *, data_dir, local_dir, download)`:
  Multi30k task 1 through the `Multi30k` TFDS builder (registered as `multi30k/<src>-<tgt>`;
  offline from `local_dir`, `$KERAS_TRANSFORMER_MULTI30K_DIR` or TFDS's manual folder).
- `load_tfds_translation(name, split, *, source_lang, target_lang, data_dir, download,
  builder_kwargs)`: any TFDS dataset with translation features, via `tfds.load`.
- `load_text_files(source_path, target_path=None, *, skip_empty, validate)` and
  `check_text_files(...)`: line-aligned files or a TSV file, plain or gzipped.
- `DataUnavailableError` (an `OSError`, `data.availability`): a dataset that is neither
  prepared, nor in a local copy, nor downloadable (downloading is off, or its host does not
  answer within seconds).

Batches:

- `make_batches(dataset, source_tokenizer, target_tokenizer=None, ...)`: tokenized,
  length-filtered, bucketed and padded `((source_ids, target_in), target_out)` int32 batches.
- `encode_pairs(...)`: the per-example stage alone (its encodings: `data.encoding`, shared
  with the predictors).
- `bucket_batches(...)`, `default_bucket_lengths(...)`, `count_batches(...)`
  (`data.batching`): length-bucketed batching of any task's encoded examples.

Example:

```python
from keras_transformer.data import load_parallel_dataset, make_batches
from keras_transformer.tokenization import train_tokenizers

pairs = load_parallel_dataset("multi30k", split="train", local_dir="/data/multi30k")
source_tokenizer, target_tokenizer = train_tokenizers(pairs, vocab_size=8000)
train = make_batches(pairs, source_tokenizer, target_tokenizer, batch_size=128)
```
"""

from keras_transformer.data.availability import DataUnavailableError
from keras_transformer.data.batching import bucket_batches, count_batches, default_bucket_lengths
from keras_transformer.data.multi30k import ENV_VAR as MULTI30K_ENV_VAR
from keras_transformer.data.multi30k import Multi30k, verify_multi30k_files
from keras_transformer.data.pipeline import encode_pairs, make_batches
from keras_transformer.data.sources import (
    load_multi30k,
    load_parallel_dataset,
    load_tfds_translation,
)
from keras_transformer.data.text_files import check_text_files, load_text_files

__all__ = [
    "DataUnavailableError",
    "MULTI30K_ENV_VAR",
    "Multi30k",
    "bucket_batches",
    "check_text_files",
    "count_batches",
    "default_bucket_lengths",
    "encode_pairs",
    "load_multi30k",
    "load_parallel_dataset",
    "load_tfds_translation",
    "load_text_files",
    "make_batches",
    "verify_multi30k_files",
]
