"""Architecture presets: the paper's `base` and `big`, and a `tiny` one for tests.

A preset is an architecture, not a pretrained model: `from_preset` builds it with random
weights (unlike a KerasHub preset, which downloads trained ones); weights come from
training (`keras-transformer train`) and load from a run directory.

Each preset fixes the architecture; vocabulary sizes come from the tokenizer and are passed
separately (`Transformer.from_preset("base", source_vocab_size=..., ...)`). The encoder-only
and decoder-only models take the same presets, with the encoder's or the decoder's number
of layers (`stack_preset_config`).
"""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # Vaswani et al. 2017, Table 3, "base": N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1.
    "base": {
        "num_encoder_layers": 6,
        "num_decoder_layers": 6,
        "d_model": 512,
        "num_heads": 8,
        "d_ff": 2048,
        "dropout": 0.1,
    },
    # Table 3, "big": N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3 (EN-DE).
    "big": {
        "num_encoder_layers": 6,
        "num_decoder_layers": 6,
        "d_model": 1024,
        "num_heads": 16,
        "d_ff": 4096,
        "dropout": 0.3,
    },
    # Small enough to train in seconds on a CPU; used by the tests.
    "tiny": {
        "num_encoder_layers": 2,
        "num_decoder_layers": 2,
        "d_model": 32,
        "num_heads": 4,
        "d_ff": 64,
        "dropout": 0.0,
        "max_length": 64,
    },
}


def preset_config(name: str) -> dict[str, Any]:
    """A copy of preset `name`'s arguments; `ValueError` for an unknown name."""
    if name not in PRESETS:
        raise ValueError(
            f"Received an invalid value for argument `preset`, expected one of "
            f"{sorted(PRESETS)}. Received: preset={name!r}"
        )
    return dict(PRESETS[name])


def stack_preset_config(name: str, stack: str) -> dict[str, Any]:
    """Preset `name` for a single stack: `num_layers` is the preset's encoder (`stack=
    "encoder"`) or decoder (`stack="decoder"`) layer count.

    Example:
    >>> stack_preset_config("tiny", "decoder")["num_layers"]
    2
    """
    if stack not in ("encoder", "decoder"):
        raise ValueError(
            "Received an invalid value for argument `stack`, expected one of "
            f"('encoder', 'decoder'). Received: stack={stack!r}"
        )
    arguments = preset_config(name)
    layers = {s: arguments.pop(f"num_{s}_layers") for s in ("encoder", "decoder")}
    arguments["num_layers"] = layers[stack]
    return arguments
