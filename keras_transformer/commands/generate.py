"""`keras-transformer generate RUN_DIR [TEXT ...]`: `predict` for a language_modeling run only.

Continue prompts with a language-modelling run (`keras_transformer.commands.predict`; a run of
another task is refused).

Example:

    keras-transformer generate runs/lm "The old dog" --max-new-tokens 30
"""

from keras_transformer.commands.predict import task_command

add_arguments, run = task_command("language_modeling")
