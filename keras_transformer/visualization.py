"""Attention weights of a translation, for plotting.

`translation_attention` translates one sentence, then runs the model teacher-forced on
`[BOS] + translation` with `return_attention_scores=True` and returns the weights as numpy
arrays next to the SentencePiece pieces that label their axes. The figures are drawn by
`keras_transformer.plotting` (`plot_translation_attention`, `plot_attention`).

Example:

```python
source, target, weights = translation_attention(translator, "Ein Hund läuft.")
weights["cross_attention"].shape  # (layers, heads, len(target), len(source))
figure = plot_attention(source, target, weights["cross_attention"][-1].mean(axis=0))
figure.savefig("attention.png")
```
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_transformer.constants import BOS_ID, EOS_ID


def _pieces(tokenizer, ids: np.ndarray) -> list[str]:
    if len(ids) == 0:
        return []
    pieces = tokenizer.id_to_piece(tf.constant(np.asarray(ids, np.int32))).numpy()
    return [p.decode("utf-8") for p in pieces]


def translation_attention(
    translator, sentence: str, hypothesis: int = 0
) -> tuple[list[str], list[str], dict[str, np.ndarray]]:
    """Translates `sentence` and returns the attention weights behind its translation.

    Args:
        translator: a `keras_transformer.predictors.Translator`.
        sentence: the source sentence.
        hypothesis: which of the translator's hypotheses (0 = best).

    Returns:
        `(source_pieces, target_pieces, weights)`: the S source pieces (EOS last when the
        translator appends it), the T emitted target
        pieces (EOS included when emitted) and a dict of float32 arrays:
        `"cross_attention"` (L, H, T, S), `"decoder_self_attention"` (L, H, T, T) and
        `"encoder_self_attention"` (L, H, S, S). Row t of the decoder weights belongs to the
        step that emitted target piece t.

    Example (not run as a doctest: it needs a trained translator):

    ```python
    src, tgt, w = translation_attention(translator, "Ein Hund.")
    w["cross_attention"].shape
    # (6, 8, 4, 3)
    ```
    """
    source_ids = translator.encode_sources([sentence])[0]  # EOS last with source_eos
    if len(source_ids) <= int(translator.source_eos):
        raise ValueError(
            "Received an invalid value for argument `sentence`, expected a sentence with at "
            f"least one token. Received: sentence={sentence!r}"
        )
    tokens, _ = translator.decode_ids([source_ids])
    target = np.asarray(tokens[0][hypothesis])  # (T_max,)
    eos_id = int(getattr(translator.target_tokenizer, "eos_id", EOS_ID))
    pad_id = int(translator.model.pad_id)
    ends = np.flatnonzero(target == eos_id)
    length = int(ends[0]) + 1 if ends.size else int(np.sum(target != pad_id))
    target = target[:length]  # (T,)
    bos_id = int(getattr(translator.target_tokenizer, "bos_id", BOS_ID))
    decoder_inputs = np.concatenate([[bos_id], target[:-1]]).astype(np.int32)  # (T,)
    _, attention = translator.model(
        (tf.constant(source_ids[None]), tf.constant(decoder_inputs[None])),
        return_attention_scores=True,
        training=False,
    )
    weights = {
        name: np.stack([np.asarray(w, np.float32)[0] for w in attention[name]])
        for name in ("cross_attention", "decoder_self_attention", "encoder_self_attention")
    }  # (L, H, ., .)
    return (
        _pieces(translator.source_tokenizer, source_ids),
        _pieces(translator.target_tokenizer, target),
        weights,
    )
