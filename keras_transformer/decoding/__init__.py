"""Batched, cached decoding: greedy search, beam search and sampling.

Every search runs the whole generation as one `tf.while_loop` over fixed shapes: the
encoder runs once, the cross-attention keys/values are projected once
(`Transformer.init_decoding_cache`), and each step feeds one token per hypothesis through
`Transformer.decode_step`, which writes its keys/values into a self-attention cache of
fixed length `num_steps`. Token `t` of the output sits at decoder position `t + 1` (position
0 holds BOS).

The model is anything with `pad_id`, `max_length`, `encode`, `init_decoding_cache` and
`decode_step`: the `Transformer`, or the decoder-only `TransformerDecoderModel`, whose
"source" is the prompt (each output then holds the prompt, then its continuation).

Two layers of API:

- Graph functions, usable inside any `tf.function` (with or without XLA) and in an exported
  SavedModel: `greedy_search`, `sample`, `beam_search` and `max_decode_lengths`. They take
  padded source ids and return padded target ids (no BOS; EOS kept; `pad_id` after EOS)
  and scores.
- `BatchDecoder`: a callable that pads a batch up to a few fixed shape buckets (batch size,
  source length, target length), compiles one function per bucket (XLA when it works,
  plain `tf.function` otherwise) and caches it, so a stream of batches of different shapes
  traces only a handful of times and never returns to Python between tokens.

Scores are sums of the model's log-probabilities of the emitted tokens (EOS included)
divided by the GNMT length penalty `((5 + length) / 6) ** alpha` (Wu et al. 2016), where
`length` counts the emitted tokens; `alpha=0` gives plain log-probabilities.

Each sentence stops at EOS or at its own maximum length
`min(max_length, max_length_a * source_length + max_length_b)` (a sentence cut there has no
EOS). PAD and BOS are never generated. `no_repeat_ngram_size=n` forbids every token that
would repeat an n-gram of the output (fairseq's `--no-repeat-ngram-size`; 0, the default,
does not).

Example:

```python
decoder = BatchDecoder(model, method="beam", beam_size=4, length_penalty=0.6)
output = decoder(source_ids)  # source_ids: int (B, S) padded with model.pad_id
output.tokens  # np.ndarray (B, 4, T): the n-best, best first
output.scores  # np.ndarray (B, 4)
```

Modules: `search` (the shared pieces, `greedy_search`, `sample`), `beam` (`beam_search`),
`ngrams` (repeated n-gram blocking) and `runtime` (`BatchDecoder`, `DecodeOutput`, `bucket`).
"""

from keras_transformer.decoding.beam import beam_search
from keras_transformer.decoding.runtime import (
    DEFAULT_LENGTH_BUCKETS,
    BatchDecoder,
    DecodeOutput,
    bucket,
)
from keras_transformer.decoding.search import (
    gnmt_length_penalty,
    greedy_search,
    max_decode_lengths,
    sample,
)

__all__ = [
    "DEFAULT_LENGTH_BUCKETS",
    "BatchDecoder",
    "DecodeOutput",
    "beam_search",
    "bucket",
    "gnmt_length_penalty",
    "greedy_search",
    "max_decode_lengths",
    "sample",
]
