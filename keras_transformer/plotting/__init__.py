"""Figures of the Transformer: positional encodings, masks, attention, training curves.

Every `plot_*` function returns a matplotlib `Figure` (made without `pyplot`: no global figure
state, no GUI backend, nothing shown); save it with `figure.savefig("x.png")`, or let a
notebook display it. matplotlib is imported when a function is called; it is the optional
extra `plot` (`pip install "keras-transformer-nmt[plot]"`).

- `plot_positional_curves`, `plot_positional_heatmap`: the sinusoidal table of
  `keras_transformer.layers.positional_encoding`.
- `plot_masks`: the padding, look-ahead and combined masks of `keras_transformer.masks`
  for a padded batch.
- `translation_attention`: the attention weights behind a translation, with the
  SentencePiece pieces that label their axes; `plot_attention`, `plot_attention_heads`,
  `plot_translation_attention` draw them.
- `plot_training_curves`, `plot_bleu_over_time`: loss, accuracy, learning rate and
  validation BLEU (`keras_transformer.training.curves`, `bleu.jsonl`).

Example:

```python
source, target, weights = translation_attention(translator, "Ein Hund läuft.")
for name, figure in plot_translation_attention(source, target, weights).items():
    figure.savefig(f"{name}.png")
```
"""

from keras_transformer.plotting._figure import PLOT_EXTRA
from keras_transformer.plotting.architecture import (
    plot_masks,
    plot_positional_curves,
    plot_positional_heatmap,
)
from keras_transformer.plotting.attention import (
    ATTENTION_KINDS,
    plot_attention,
    plot_attention_heads,
    plot_translation_attention,
    translation_attention,
)
from keras_transformer.plotting.training import plot_bleu_over_time, plot_training_curves

__all__ = [
    "ATTENTION_KINDS",
    "PLOT_EXTRA",
    "plot_attention",
    "plot_attention_heads",
    "plot_bleu_over_time",
    "plot_masks",
    "plot_positional_curves",
    "plot_positional_heatmap",
    "plot_training_curves",
    "plot_translation_attention",
    "translation_attention",
]
