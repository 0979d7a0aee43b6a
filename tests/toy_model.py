"""A tiny SavedModel with the translation serving contract, for the serving tests (test code,
not part of the installed package).

Signatures (all batch-major, like the real export):

* ``serving_default``: ``sentences`` string [None] -> ``translations`` string [None]
  (``prefix`` + upper-cased input) and ``scores`` float32 [None] (characters / 10; decoding
  is strict, so invalid UTF-8 is an InvalidArgument error);
* ``tokenize``: ``sentences`` -> ``token_ids`` int32 [None, None] (Unicode code points,
  0-padded) and ``lengths`` int32 [None];
* ``pair``: ``a``, ``b`` string [None] -> ``joined_bytes`` string [None] (``a|b``; the
  ``_bytes`` suffix makes TF Serving answer base64);
* ``detokenize``: ``token_ids`` int32 [None, None] -> ``sentences`` string [None] (the code
  points as text, trailing 0s dropped: the inverse of ``tokenize``) and ``widths`` int32
  [None] (the inner dim of the ``token_ids`` the session ran on, which batching may pad).

    python tests/toy_model.py /tmp/models/toy/1 [--prefix v1:]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def save_toy_model(export_dir: str | os.PathLike[str], prefix: str = "") -> str:
    """Write the toy SavedModel to ``export_dir`` (a version directory); returns the path."""
    import tensorflow as tf

    spec = tf.TensorSpec([None], tf.string)

    class Toy(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.prefix = tf.constant(prefix)

        @tf.function(input_signature=[spec])
        def serve(self, sentences):
            chars = tf.strings.unicode_decode(sentences, "UTF-8", errors="strict")
            translations = tf.strings.join(
                [tf.fill(tf.shape(sentences), self.prefix), tf.strings.upper(sentences)]
            )
            scores = tf.cast(chars.row_lengths(), tf.float32) / 10.0
            return {"translations": translations, "scores": scores}

        @tf.function(input_signature=[spec])
        def tokenize(self, sentences):
            chars = tf.strings.unicode_decode(sentences, "UTF-8", errors="strict")
            return {
                "token_ids": tf.cast(chars.to_tensor(0), tf.int32),
                "lengths": tf.cast(chars.row_lengths(), tf.int32),
            }

        @tf.function(input_signature=[spec, spec])
        def pair(self, a, b):
            return {"joined_bytes": tf.strings.join([a, b], separator="|")}

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
        def detokenize(self, token_ids):
            codes = tf.RaggedTensor.from_tensor(token_ids, padding=0)
            rows = tf.shape(token_ids)[0]
            return {
                "sentences": tf.strings.unicode_encode(codes, "UTF-8"),
                "widths": tf.fill([rows], tf.shape(token_ids)[1]),
            }

    module = Toy()
    path = os.fspath(export_dir)
    tf.saved_model.save(
        module,
        path,
        signatures={
            "serving_default": module.serve.get_concrete_function(),
            "tokenize": module.tokenize.get_concrete_function(),
            "pair": module.pair.get_concrete_function(),
            "detokenize": module.detokenize.get_concrete_function(),
        },
    )
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export_dir", help="version directory to write, e.g. BASE/NAME/1")
    parser.add_argument("--prefix", default="", help="prepended to every translation")
    args = parser.parse_args(argv)
    sys.stdout.write(save_toy_model(args.export_dir, args.prefix) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
