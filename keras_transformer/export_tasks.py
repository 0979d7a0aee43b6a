"""Export the tagging, classification and language-modelling models for TF Serving.

SavedModels with string inputs, written like the translator's
(`export.publish_saved_model`: versioned, atomic, the tokenizer inside the graph, checked
against TF Serving's op allow-list and for XLA):

- classifier, `serving_default`: `sentences` str (N,) -> `labels` str (N,),
  `probabilities` float32 (N, C);
- tagger, `serving_default`: `sentences` str (N,) -> `words` str (N, W), `tags` str (N, W)
  (padded with `""`);
- generator, `serving_default`: `prompts` str (N,) -> `continuations` str (N,), `texts`
  str (N,) (prompt and continuation), `scores` float32 (N,); `generate_nbest`: the same,
  (N, K).

`probabilities` columns follow `export_info.json`'s `labels`; a generator's decoding
settings are baked in and recorded there.

Example (not run as a doctest: it needs trained run directories):

```python
export_run("runs/sentiment", "exports")  # 'exports/classifier/1'
export_run("runs/lm", "exports", method="sample", top_p=0.9, max_new_tokens=40)
```
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tensorflow as tf

from keras_transformer.export import publish_saved_model
from keras_transformer.predictors import TextClassifier, TextGenerator, TextTagger
from keras_transformer.run_dir import run_task


def _model_info(model) -> dict[str, Any]:
    config = model.get_config()
    return {k: v for k, v in config.items() if k not in ("name", "trainable", "dtype")}


def export_classifier(
    classifier: TextClassifier | TextTagger,
    base_path: str,
    model_name: str | None = None,
    version: int | None = None,
    check_ops: bool = True,
    allowed_ops: Iterable[str] | None = None,
) -> str:
    """Writes a `TextClassifier` or `TextTagger` as `base_path/model_name/version`.

    Args:
        classifier: what to export.
        base_path: the parent of the model's folder.
        model_name: TF Serving's model name (`"classifier"` or `"tagger"` by default).
        version: a positive integer (default: the next free one); never overwritten.
        check_ops: refuse ops that TF Serving does not ship, and XLA.
        allowed_ops: the allow-list for that check; defaults to the packaged one.

    Returns:
        The path of the published version folder.
    """
    tagger = isinstance(classifier, TextTagger)
    function = classifier.serving_function()

    if tagger:

        @tf.function(input_signature=function.input_signature)
        def serving_default(sentences):
            words, tags = function(sentences)
            return {"words": words, "tags": tags}
    else:

        @tf.function(input_signature=function.input_signature)
        def serving_default(sentences):
            labels, probabilities = function(sentences)
            return {"labels": labels, "probabilities": probabilities}

    return publish_saved_model(
        base_path,
        model_name or ("tagger" if tagger else "classifier"),
        version,
        track=[classifier.model, classifier.tokenizer],
        endpoints={"serving_default": serving_default},
        info={
            "task": "tagging" if tagger else "classification",
            "labels": list(classifier.labels),
            "model": _model_info(classifier.model),
        },
        check_ops=check_ops,
        allowed_ops=allowed_ops,
    )


def export_generator(
    generator: TextGenerator,
    base_path: str,
    model_name: str = "generator",
    version: int | None = None,
    check_ops: bool = True,
    allowed_ops: Iterable[str] | None = None,
) -> str:
    """Writes a `TextGenerator` as `base_path/model_name/version` (no XLA in the graph:
    build the generator with `jit_compile=False`, TF Serving does not compile).

    Args and return value as `export_classifier`'s.
    """
    spec = tf.TensorSpec([None], tf.string, name="prompts")

    @tf.function(input_signature=[spec])
    def serving_default(prompts):
        return generator.generate_strings(prompts)

    @tf.function(input_signature=[spec])
    def generate_nbest(prompts):
        return generator.generate_strings_nbest(prompts)

    decoder = generator.decoder
    return publish_saved_model(
        base_path,
        model_name,
        version,
        track=[generator.model, generator.tokenizer],
        endpoints={"serving_default": serving_default, "generate_nbest": generate_nbest},
        info={
            "task": "language_modeling",
            "decoding": {
                "method": decoder.method,
                "beam_size": decoder.beam_size,
                "length_penalty": decoder.length_penalty,
                "max_length": decoder.max_length,
                "max_new_tokens": generator.max_new_tokens,
                "temperature": decoder.temperature,
                "top_k": decoder.top_k,
                "top_p": decoder.top_p,
                "seed": decoder.seed,
            },
            "model": _model_info(generator.model),
        },
        check_ops=check_ops,
        allowed_ops=allowed_ops,
    )


def export_run(
    run_dir: str,
    base_path: str,
    model_name: str | None = None,
    version: int | None = None,
    check_ops: bool = True,
    max_new_tokens: int | None = None,
    **decoding: Any,
) -> str:
    """Exports a tagging, classification or language-modelling run directory.

    Args:
        run_dir: the run directory.
        base_path: the parent of the model's folder.
        model_name: TF Serving's model name (by default `"tagger"`, `"classifier"` or
            `"generator"`).
        version: a positive integer (default: the next free one).
        check_ops: refuse ops that TF Serving does not ship, and XLA.
        max_new_tokens: a generator's most new tokens (language models only).
        **decoding: a generator's search settings (`TextGenerator`).

    Returns:
        The path of the published version folder.
    """
    task = run_task(run_dir)
    if task == "language_modeling":
        if max_new_tokens is not None:
            decoding["max_new_tokens"] = max_new_tokens
        generator = TextGenerator.from_run_dir(run_dir, jit_compile=False, **decoding)
        return export_generator(generator, base_path, model_name or "generator", version, check_ops)
    if max_new_tokens is not None:
        decoding["max_new_tokens"] = max_new_tokens
    if decoding:
        raise ValueError(
            f"Received decoding options for a {task} run ({run_dir}); only a language "
            f"model decodes. Received: {sorted(decoding)}"
        )
    if task not in ("tagging", "classification"):
        raise ValueError(
            f"Received a {task} run directory ({run_dir}), expected a tagging, "
            "classification or language-modelling run; export translation runs with "
            "`export_translator`."
        )
    cls = TextTagger if task == "tagging" else TextClassifier
    return export_classifier(cls.from_run_dir(run_dir), base_path, model_name, version, check_ops)
