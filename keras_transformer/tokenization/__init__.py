"""SentencePiece subword tokenizers that run in the TensorFlow graph.

Training uses the `sentencepiece` Python trainer (in memory, no temporary files); tokenizing
and detokenizing use `tensorflow_text.SentencepieceTokenizer`, so they run inside
`tf.function`, `tf.data` and a SavedModel. The serialized SentencePiece model is a constant
of the graph: a SavedModel that holds a `SubwordTokenizer` carries the model with it and
loads with only `tensorflow` and `tensorflow_text` imported (the ops used are TensorFlow core
ops plus tensorflow-text's `SentencepieceOp`, `SentencepieceTokenizeOp`,
`SentencepieceDetokenizeOp` and `SentencepieceIdToStringOp`, all shipped by TF Serving).

Special ids are fixed for every model of this package: pad=0, unk=1, bos=2, eos=3.

Public API:

- `SubwordTokenizer(model_proto, name=None, *, sampling_alpha=None)`: a `tf.Module` with
  `tokenize(strings)`, `detokenize(ids)`, `id_to_piece(ids)`, `save(directory)`,
  `with_sampling(alpha)` (a copy that samples segmentations: subword regularisation),
  `SubwordTokenizer.load(path)` and the properties `vocab_size`, `pad_id`, `unk_id`,
  `bos_id`, `eos_id`, `model_proto`, `sampling_alpha`.
- `train_sentencepiece(texts, vocab_size=8000, ...) -> SubwordTokenizer`: one model over an
  iterable (or `tf.data.Dataset`) of sentences.
- `train_tokenizers(pairs, vocab_size=8000, shared=True, ...)`: the source and target
  tokenizers of a parallel corpus, one shared model or one per language.
- `append_eos(ids, eos_id=EOS_ID)`: each row of ragged ids followed by EOS (targets, and
  sources when a model is trained with `source_eos`).
- `PAD_ID`, `UNK_ID`, `BOS_ID`, `EOS_ID`, `MODEL_FILENAME` (`"spm.model"`).

Modules: `tokenizer` (`SubwordTokenizer`, `append_eos`) and `training` (SentencePiece
training: `train_sentencepiece`, `train_tokenizers`).

Example:

```python
pairs = keras_transformer.data.load_parallel_dataset("multi30k", split="train")
source_tokenizer, target_tokenizer = train_tokenizers(pairs, vocab_size=8000)
source_tokenizer.save("runs/de-en/tokenizer")
ids = source_tokenizer.tokenize(["Ein Hund läuft."])  # tf.RaggedTensor int32
source_tokenizer.detokenize(ids)  # [b"Ein Hund l\xc3\xa4uft."]
```
"""

from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.tokenization.tokenizer import (
    MODEL_FILENAME,
    VOCAB_FILENAME,
    SubwordTokenizer,
    append_eos,
)
from keras_transformer.tokenization.training import train_sentencepiece, train_tokenizers

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "MODEL_FILENAME",
    "PAD_ID",
    "UNK_ID",
    "VOCAB_FILENAME",
    "SubwordTokenizer",
    "append_eos",
    "train_sentencepiece",
    "train_tokenizers",
]
