"""`keras-transformer classify RUN_DIR [TEXT ...]`: `predict` for a classification run only.

Classify texts with a classification run (`keras_transformer.commands.predict`; a run of
another task is refused).

Example:

    keras-transformer classify runs/imdb "A wonderful film."
"""

from keras_transformer.commands.predict import task_command

add_arguments, run = task_command("classification")
