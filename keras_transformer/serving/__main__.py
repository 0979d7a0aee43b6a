"""``python -m keras_transformer.serving``: the development stand-in server (see ``cli``)."""

import sys

from keras_transformer.serving.cli import main

if __name__ == "__main__":
    sys.exit(main())
