"""A translation run as a CTranslate2 model directory (`keras-transformer export --format
ctranslate2`), for deploying it where CTranslate2 translates (fast CPU inference, int8).

The `Transformer` is written into CTranslate2's `TransformerSpec` weight by weight
(`transformer_spec`); nothing is approximated:

- token embeddings times sqrt(d_model) (`scale_embeddings`), one matrix for both sides when
  the model shares them (CTranslate2 stores a repeated weight once);
- our positional table (`layers.positional_encoding.sinusoidal_table`: sin and cos
  interleaved, as in the paper) written as CTranslate2's `position_encodings`: CTranslate2's
  own sinusoidal table (src/layers/common.cc, `generate_sinusoidal_position_encoding`) puts
  all sines before all cosines, counts positions from 1 and spaces the frequencies by
  `d_model / 2 - 1`, so it is not ours. The table has the model's `max_length` rows, so
  CTranslate2 refuses positions past it ("No position encodings are defined for positions
  >= ...") as our model does;
- queries, keys and values fused as CTranslate2 expects (q|k|v for self-attention, q and
  k|v for cross-attention), with their biases; the feed-forward layers; the LayerNorms and
  their epsilon (`layer_norm_epsilon` in `config.json`: CTranslate2's default, 1e-5, is
  not ours, 1e-6); pre- or post-norm and the pre-norm stacks' final LayerNorms;
- the output projection: the target embedding (tied) or its own matrix, without a bias;
- the vocabularies: the SentencePiece pieces in id order (`shared_vocabulary.json` when both
  sides have the same); `unk_token`, `bos_token` (the decoder's start) and `eos_token` are
  our tokenizers' pieces of ids 1, 2 and 3, and `add_source_eos` is the model's
  `source_eos`, so a source is the tokenizer's pieces, without EOS (CTranslate2 adds it);
- the SentencePiece models beside them, `source_spm.model` and `target_spm.model`, and
  `export_info.json` (versions, quantization, `max_length`, `source_eos`, the architecture).

A model that the spec cannot express is refused with a ValueError naming what: an activation
CTranslate2 lacks (`SUPPORTED_ACTIVATIONS` lists the ones it has), a model that is not an
encoder-decoder `Transformer` (a run of another task is refused as every command refuses
it, `predictors.base.check_run_task`).

The directory is written into a hidden temporary folder beside `output_dir` and renamed
into place at the end, so a failed export leaves nothing; an existing `output_dir` is never
written over. CTranslate2 reads local folders only: an object-store `output_dir`
(`gs://...`) is refused (the run directory itself may be on one).

Decoding: CTranslate2's greedy search gives our greedy ids and scores (summed
log-probabilities, EOS's included) with the options that make its search ours:
`beam_size=1`, `length_penalty=0` (CTranslate2 divides greedy scores by length **
`length_penalty` too; ours with `length_penalty=0.0` are plain sums), `min_decoding_length=0`
(its default, 1, forbids EOS as the first token, which raises that token's log-probability),
`max_input_length` our `max_length` (CTranslate2 then truncates a long source keeping EOS
last, as `Translator.encode_sources` does) and `max_decoding_length` the output limit (EOS
counted in both; `min(max_length, a * source + b)` per sentence in ours, so translate one
sentence at a time, or set `max_length_a=0`, for one limit). Beam search differs in its
length normalization (CTranslate2 divides by length ** `length_penalty`, ours by the GNMT
`((5 + length) / 6) ** alpha`), and CTranslate2 does not forbid `<pad>` and `<s>` as outputs,
which ours does (`suppress_sequences=[["<pad>"], ["<s>"]]` forbids them, renormalizing by
their tiny probabilities); a blank source translates to whatever the model says after EOS,
where `Translator` returns an empty string.

Example (not run as a doctest: it needs a trained run and the `ctranslate2` extra):

```python
export_ctranslate2("runs/de-en", "exports/de-en-ct2", quantization="int8")
import ctranslate2, sentencepiece
translator = ctranslate2.Translator("exports/de-en-ct2")
source = sentencepiece.SentencePieceProcessor(model_file="exports/de-en-ct2/source_spm.model")
target = sentencepiece.SentencePieceProcessor(model_file="exports/de-en-ct2/target_spm.model")
results = translator.translate_batch(
    source.encode(["Ein Hund läuft."], out_type=str), beam_size=4, max_input_length=128)
target.decode(results[0].hypotheses[0])  # 'A dog is running.'
```
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from typing import Any

import keras
import numpy as np

from keras_transformer import storage
from keras_transformer.constants import BOS_ID, CTRANSLATE2_QUANTIZATIONS, EOS_ID, UNK_ID
from keras_transformer.layers.positional_encoding import sinusoidal_table

logger = logging.getLogger(__name__)

# The optional extra that installs ctranslate2 (setup.cfg).
CTRANSLATE2_EXTRA = "ctranslate2"
# Keras activation (as `keras.activations.serialize` names it) -> the name of CTranslate2's
# `specs.common_spec.Activation` member. Keras' `gelu` is the exact (erf) one, CTranslate2's
# `GELU`; `silu` is Keras' name of swish.
SUPPORTED_ACTIVATIONS = {
    "relu": "RELU",
    "gelu": "GELU",
    "silu": "SWISH",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
}
SOURCE_SPM_FILENAME = "source_spm.model"
TARGET_SPM_FILENAME = "target_spm.model"
INFO_FILENAME = "export_info.json"
_TMP_PREFIX = ".tmp-ctranslate2-"


def import_ctranslate2():
    """`ctranslate2`, or an ImportError naming the extra that installs it."""
    try:
        import ctranslate2
        import ctranslate2.specs  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "The CTranslate2 export needs ctranslate2, an optional dependency: install the "
            f'`{CTRANSLATE2_EXTRA}` extra, `pip install "keras-transformer-nmt'
            f'[{CTRANSLATE2_EXTRA}]"` (in a checkout: `pip install -e ".[{CTRANSLATE2_EXTRA}]"`).'
        ) from e
    return ctranslate2


def _array(variable) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(variable), np.float32)


def _activation(model) -> Any:
    from ctranslate2.specs import common_spec

    name = keras.activations.serialize(keras.activations.get(model.activation))
    if name not in SUPPORTED_ACTIVATIONS:
        raise ValueError(
            f"Received a model with activation={name!r}, which CTranslate2's Transformer "
            f"cannot express; expected one of {sorted(SUPPORTED_ACTIVATIONS)}."
        )
    return common_spec.Activation[SUPPORTED_ACTIVATIONS[name]]


def _set_linear(spec, *denses) -> None:
    """`spec` (a `LinearSpec`) as the Keras `Dense` layers side by side: their (in, out)
    kernels transposed to CTranslate2's (out, in) and concatenated, with their biases."""
    spec.weight = np.concatenate([_array(d.kernel).T for d in denses], axis=0)
    if any(d.use_bias for d in denses):
        spec.bias = np.concatenate(
            [_array(d.bias) if d.use_bias else np.zeros(d.units, np.float32) for d in denses]
        )


def _set_norm(spec, norm) -> None:
    spec.gamma = _array(norm.gamma)
    spec.beta = _array(norm.beta)


def _set_attention(spec, attention, norm, self_attention: bool) -> None:
    q, k, v = attention.query_dense, attention.key_dense, attention.value_dense
    if self_attention:
        _set_linear(spec.linear[0], q, k, v)
    else:
        _set_linear(spec.linear[0], q)
        _set_linear(spec.linear[1], k, v)
    _set_linear(spec.linear[-1], attention.output_dense)
    _set_norm(spec.layer_norm, norm)


def _set_feed_forward(spec, layer) -> None:
    _set_linear(spec.linear_0, layer.feed_forward.inner_dense)
    _set_linear(spec.linear_1, layer.feed_forward.output_dense)
    _set_norm(spec.layer_norm, layer.feed_forward_norm)


def _set_stack(spec, stack, cross_attention: bool) -> None:
    """Embedding, positions, layers and (pre-norm) final norm of an `Encoder` or `Decoder`."""
    embedding = stack.embedding
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(embedding.token_embedding.embeddings)  # (V, D)
    spec.scale_embeddings = True  # x sqrt(d_model), as `TransformerEmbedding`
    # The table `PositionalEncoding` adds, `max_length` rows.
    spec.position_encodings.encodings = sinusoidal_table(embedding.max_length, embedding.d_model)
    for layer_spec, layer in zip(spec.layer, stack.layers_):
        _set_attention(
            layer_spec.self_attention, layer.self_attention, layer.self_attention_norm, True
        )
        if cross_attention:
            _set_attention(
                layer_spec.attention, layer.cross_attention, layer.cross_attention_norm, False
            )
        _set_feed_forward(layer_spec.ffn, layer)
    if stack.final_norm is not None:
        _set_norm(spec.layer_norm, stack.final_norm)


def transformer_spec(
    model: Any,
    source_pieces: list[str],
    target_pieces: list[str],
    *,
    source_eos: bool,
):
    """The `ctranslate2.specs.TransformerSpec` of a `Transformer`, with its vocabularies.

    Args:
        model: a built `keras_transformer.Transformer`.
        source_pieces: the source vocabulary in id order (`SubwordTokenizer.pieces`), with
            the package's special ids (unk 1, bos 2, eos 3).
        target_pieces: the target vocabulary in id order.
        source_eos: whether sources end with EOS (`Translator.source_eos`): CTranslate2's
            `add_source_eos`.

    Returns:
        The spec, validated, not yet optimized or saved (`spec.optimize(quantization)`,
        `spec.save(directory)`).

    Raises:
        ValueError: naming what CTranslate2's Transformer cannot express, or vocabularies
            that do not fit the model.
    """
    import_ctranslate2()
    from ctranslate2.specs import transformer_spec as ct2_transformer

    from keras_transformer.models import Transformer

    if not isinstance(model, Transformer):
        raise ValueError(
            f"Received a {type(model).__name__}, expected an encoder-decoder `Transformer` "
            "(a translation model): CTranslate2's TransformerSpec has an encoder and a decoder."
        )
    for side, pieces, size in (
        ("source", source_pieces, model.source_vocab_size),
        ("target", target_pieces, model.target_vocab_size),
    ):
        if len(pieces) != size:
            raise ValueError(
                f"Received {len(pieces)} {side} pieces for a model whose {side} vocabulary has "
                f"{size}; expected the pieces of the run's {side} tokenizer."
            )
    activation = _activation(model)
    common = {"pre_norm": model.norm_first, "activation": activation}
    spec = ct2_transformer.TransformerSpec(
        ct2_transformer.TransformerEncoderSpec(model.num_encoder_layers, model.num_heads, **common),
        ct2_transformer.TransformerDecoderSpec(model.num_decoder_layers, model.num_heads, **common),
    )
    _set_stack(spec.encoder, model.encoder, cross_attention=False)
    _set_stack(spec.decoder, model.decoder, cross_attention=True)
    token_embedding = model.decoder.embedding.token_embedding
    spec.decoder.projection.weight = (
        _array(token_embedding.embeddings)  # (V, D): tied
        if model.tie_output_embeddings
        else _array(token_embedding.reverse_embeddings).T  # (D, V) -> (V, D)
    )

    config = spec.config
    config.layer_norm_epsilon = float(model.layer_norm_epsilon)
    config.add_source_bos = False
    config.add_source_eos = bool(source_eos)
    config.unk_token = target_pieces[UNK_ID]
    config.bos_token = target_pieces[BOS_ID]
    config.eos_token = target_pieces[EOS_ID]
    config.decoder_start_token = target_pieces[BOS_ID]
    for name, token_id in (("unk", UNK_ID), ("bos", BOS_ID), ("eos", EOS_ID)):
        if source_pieces[token_id] != target_pieces[token_id]:
            raise ValueError(
                f"Received source and target vocabularies whose {name} pieces differ "
                f"({source_pieces[token_id]!r} and {target_pieces[token_id]!r}); CTranslate2 "
                "has one of each for both sides."
            )
    spec.register_source_vocabulary(list(source_pieces))
    spec.register_target_vocabulary(list(target_pieces))
    spec.validate()
    return spec


def _check_arguments(output_dir: str, quantization: str | None) -> None:
    if quantization is not None and quantization not in CTRANSLATE2_QUANTIZATIONS:
        raise ValueError(
            f"Received quantization={quantization!r}, expected None or one of "
            f"{list(CTRANSLATE2_QUANTIZATIONS)}."
        )
    _check_output_dir(output_dir)


def _check_output_dir(output_dir: str) -> None:
    if storage.is_object_store(output_dir):
        raise ValueError(
            f"Received output_dir={output_dir!r}, expected a local folder: CTranslate2 loads "
            "models from local folders only (copy the folder to a bucket afterwards)."
        )
    if os.path.lexists(output_dir):
        raise ValueError(
            f"Received output_dir={output_dir!r}, which already exists; expected a new folder "
            "(a CTranslate2 export is never written over another)."
        )


def export_translator_ctranslate2(
    translator: Any, output_dir: str, quantization: str | None = None
) -> str:
    """Writes a `Translator`'s model and tokenizers as a CTranslate2 model directory.

    Args:
        translator: a `keras_transformer.predictors.Translator` (its model, tokenizers and
            `source_eos`; its decoding settings do not apply: CTranslate2 takes them when it
            translates).
        output_dir: the new local folder.
        quantization: the weights' type, one of `constants.CTRANSLATE2_QUANTIZATIONS`
            (`int8`, `int16`, `float16`, ...); None keeps float32.

    Returns:
        `output_dir`.

    Raises:
        ValueError: for a model CTranslate2 cannot express (naming what), an unknown
            quantization, or an existing or non-local `output_dir`; nothing is left on disk.
    """
    _check_arguments(output_dir, quantization)
    ctranslate2 = import_ctranslate2()
    model = translator.model
    source, target = translator.source_tokenizer, translator.target_tokenizer
    spec = transformer_spec(
        model, source.pieces, target.pieces, source_eos=bool(translator.source_eos)
    )
    spec.optimize(quantization=quantization)

    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=parent)
    try:
        spec.save(staging)
        for filename, tokenizer in (
            (SOURCE_SPM_FILENAME, source),
            (TARGET_SPM_FILENAME, target),
        ):
            with open(os.path.join(staging, filename), "wb") as f:
                f.write(tokenizer.model_proto)
        _write_info(staging, model, ctranslate2.__version__, quantization, translator.source_eos)
        _check_output_dir(output_dir)  # nothing appeared there meanwhile
        os.rename(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("Exported a CTranslate2 model (%s) to %s", quantization or "float32", output_dir)
    return output_dir


def export_ctranslate2(run_dir: str, output_dir: str, quantization: str | None = None) -> str:
    """Converts a translation run into a CTranslate2 model directory.

    The run is loaded as `Translator.from_run_dir` loads it (which refuses a run of another
    task), then written by `export_translator_ctranslate2`.

    Args:
        run_dir: the translation run directory (any path `keras_transformer.storage` reads).
        output_dir: the new local folder.
        quantization: the weights' type (`constants.CTRANSLATE2_QUANTIZATIONS`); None keeps
            float32.

    Returns:
        `output_dir`.

    Example (not run as a doctest: it needs a trained run and the `ctranslate2` extra):

    ```python
    export_ctranslate2("runs/de-en", "exports/de-en-ct2", quantization="int8")
    # 'exports/de-en-ct2'
    ```
    """
    from keras_transformer.predictors import Translator

    _check_arguments(output_dir, quantization)
    import_ctranslate2()  # before loading the model
    translator = Translator.from_run_dir(run_dir, jit_compile=False)
    return export_translator_ctranslate2(translator, output_dir, quantization)


def _write_info(
    directory: str, model: Any, ctranslate2_version: str, quantization, source_eos
) -> None:
    from keras_transformer import __version__

    info = {
        "keras_transformer_version": __version__,
        "ctranslate2_version": ctranslate2_version,
        "quantization": quantization or "float32",
        "max_length": int(model.max_length),
        "source_eos": bool(source_eos),
        "tokenizers": {"source": SOURCE_SPM_FILENAME, "target": TARGET_SPM_FILENAME},
        "architecture": model.transformer_config().to_dict(),
    }
    with open(os.path.join(directory, INFO_FILENAME), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
