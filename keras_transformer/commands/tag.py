"""`keras-transformer tag RUN_DIR [TEXT ...]`: `predict` for a tagging run only.

Tag the words of sentences with a tagging run (`keras_transformer.commands.predict`; a run of
another task is refused).

Example:

    keras-transformer tag runs/pos "The old dog barks ."
"""

from keras_transformer.commands.predict import task_command

add_arguments, run = task_command("tagging")
