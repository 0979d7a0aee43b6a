"""Predictors: texts in, predictions out, with a trained run's model and tokenizers.

- `Predictor` (`predictors.base`): what they share (text coercion, length-sorted batches
  with an optional progress bar, `from_run_dir` checking the run's task,
  `serving_function` for the exports);
- `Translator` (translation), `TextGenerator` (language modelling), `TextClassifier`
  (classification), `TextTagger` (tagging).

They encode text with `data.encoding`, as their training data was encoded.

Example (not run as a doctest: it needs trained run directories):

```python
from keras_transformer.predictors import TextClassifier, Translator

Translator.from_run_dir("runs/de-en", beam_size=4).translate(["Ein Hund."])
TextClassifier.from_run_dir("runs/sentiment").classify(["A wonderful film."])
```
"""

from keras_transformer.predictors.base import Predictor
from keras_transformer.predictors.classifier import TextClassifier
from keras_transformer.predictors.generator import TextGenerator
from keras_transformer.predictors.tagger import TextTagger
from keras_transformer.predictors.translator import Translator

__all__ = ["Predictor", "TextClassifier", "TextGenerator", "TextTagger", "Translator"]
