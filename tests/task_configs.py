"""A task of a packaged recipe with test-sized options (`keras_transformer.tasks.Task`)."""

from keras_transformer.config import load_config
from keras_transformer.tasks import get_task

RECIPES = {
    "translation": "multi30k_de_en",
    "tagging": "conll2003_pos",
    "classification": "imdb_reviews",
    "language_modeling": "tiny_shakespeare",
}

# A model and a run small enough to train in seconds: two steps, to test a path, not learning.
TINY_TRAINING = [
    "model.d_model=32",
    "model.num_heads=2",
    "model.d_ff=64",
    "model.max_length=32",
    "training.epochs=1",
    "training.steps_per_epoch=2",
    "training.warmup_steps=1",
    "training.verbose=0",
]


def task_of(name, max_length, *overrides):
    """The `Task` of `name`'s packaged recipe with `max_length` (a one-tokenizer task) and
    more `section.key=value` overrides."""
    return get_task(load_config(RECIPES[name], [f"{name}.max_length={max_length}", *overrides]))
