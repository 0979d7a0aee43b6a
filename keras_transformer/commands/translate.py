"""`keras-transformer translate RUN_DIR [TEXT ...]`: `predict` for a translation run only.

Translate sentences with a translation run (`keras_transformer.commands.predict`; a run of
another task is refused).

Example:

    keras-transformer translate runs/de-en "Ein Hund läuft." --beam-size 4
"""

from keras_transformer.commands.predict import task_command

add_arguments, run = task_command("translation")
