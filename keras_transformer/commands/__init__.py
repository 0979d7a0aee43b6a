"""Subcommands of `keras-transformer` (see `keras_transformer.cli`).

Add a subcommand by writing `<name>.py` here with `add_arguments(parser)` and
`run(args) -> int`, and listing it in `SUMMARIES`.
"""

SUMMARIES: dict[str, str] = {
    "train": "Train a model for a task (translation, tagging, classification, language "
    "modeling) from a YAML/JSON config (--config FILE --set key=value).",
    "export": "Export a trained run as a string-in/string-out SavedModel for TF Serving, or "
    "a translation run as a CTranslate2 model (--format ctranslate2).",
    "serve": "Serve exports with TF Serving's REST and gRPC APIs (a development stand-in).",
    "predict": "Predict with a trained run of any task (texts from arguments, a file or "
    "stdin): translations, continuations, tags or labels.",
    "translate": "Translate sentences with a translation run (predict for translation).",
    "generate": "Continue prompts with a language model (predict for language modeling).",
    "tag": "Tag the words of sentences with a tagging run (predict for tagging).",
    "classify": "Classify texts with a classification run (predict for classification).",
    "evaluate": "Score a trained run on a test set: BLEU and chrF (translation), accuracy "
    "(tagging, classification) or perplexity (language modeling).",
    "average": "Average the weights of a run's last N epochs into its model.",
    "plot": "Draw a run's figures as PNGs: positional encoding, masks, attention, training.",
}
