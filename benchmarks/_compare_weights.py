"""Ours' weights as numpy parts (per layer: attention, feed-forward, norms), and those parts
loaded into the KerasHub model of `train_compare.py` (`_compare_torch.load_ours_weights`
loads them into the PyTorch one), so that all three start from the same weights and the
equivalence check compares one function.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from _compare_models import HubTransformer


def ours_parts(ours: keras.Model) -> dict[str, Any]:
    """Ours' weights as numpy: {"embedding", "encoder", "decoder", "final_norms", "heads"}."""

    def numpy(variable) -> np.ndarray:
        return keras.ops.convert_to_numpy(variable)

    def attention_weights(layer) -> list[np.ndarray]:
        return [
            numpy(w)
            for dense in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense)
            for w in (dense.kernel, dense.bias)
        ]

    def ours_layer(layer, kind: str) -> dict[str, Any]:
        parts = {"self": attention_weights(layer.self_attention)}
        if kind == "decoder":
            parts["cross"] = attention_weights(layer.cross_attention)
        ff = layer.feed_forward
        parts["ff"] = [
            numpy(w)
            for w in (ff.inner_dense.kernel, ff.inner_dense.bias)
            + (ff.output_dense.kernel, ff.output_dense.bias)
        ]
        names = ["self_attention", "cross_attention", "feed_forward"]
        if kind == "encoder":
            names.remove("cross_attention")
        parts["norms"] = [
            (numpy(getattr(layer, f"{n}_norm").gamma), numpy(getattr(layer, f"{n}_norm").beta))
            for n in names
        ]
        return parts

    embedding = numpy(ours.encoder.embedding.token_embedding.embeddings)
    encoder = [ours_layer(layer, "encoder") for layer in ours.encoder.layers_]
    decoder = [ours_layer(layer, "decoder") for layer in ours.decoder.layers_]
    final_norms = [
        (numpy(stack.final_norm.gamma), numpy(stack.final_norm.beta))
        for stack in (ours.encoder, ours.decoder)
        if stack.final_norm is not None
    ]
    return {
        "embedding": embedding,
        "encoder": encoder,
        "decoder": decoder,
        "final_norms": final_norms,
        "heads": ours.num_heads,
    }


def load_hub(hub: HubTransformer, parts: dict[str, Any]) -> None:
    """Sets ours' weights (`ours_parts`) on the KerasHub model."""
    heads, embedding = parts["heads"], parts["embedding"]
    encoder, decoder, final_norms = parts["encoder"], parts["decoder"], parts["final_norms"]
    d = embedding.shape[1]

    def set_hub_attention(mha, w):
        qk, qb, kk, kb, vk, vb, ok, ob = w
        for dense, kernel, bias in (
            (mha._query_dense, qk, qb),
            (mha._key_dense, kk, kb),
            (mha._value_dense, vk, vb),
        ):
            dense.kernel.assign(kernel.reshape(d, heads, d // heads))
            dense.bias.assign(bias.reshape(heads, d // heads))
        mha._output_dense.kernel.assign(ok.reshape(heads, d // heads, d))
        mha._output_dense.bias.assign(ob)

    def set_norm(norm, values):
        norm.gamma.assign(values[0])
        norm.beta.assign(values[1])

    hub.embedding.embeddings.assign(embedding)
    for layers, parts_list, kind in (
        (hub.encoder_layers, encoder, "encoder"),
        (hub.decoder_layers, decoder, "decoder"),
    ):
        for layer, p in zip(layers, parts_list):
            set_hub_attention(layer._self_attention_layer, p["self"])
            norms = [layer._self_attention_layer_norm]
            if kind == "decoder":
                set_hub_attention(layer._cross_attention_layer, p["cross"])
                norms.append(layer._cross_attention_layer_norm)
            norms.append(layer._feedforward_layer_norm)
            w1, b1, w2, b2 = p["ff"]
            layer._feedforward_intermediate_dense.kernel.assign(w1)
            layer._feedforward_intermediate_dense.bias.assign(b1)
            layer._feedforward_output_dense.kernel.assign(w2)
            layer._feedforward_output_dense.bias.assign(b2)
            for norm, values in zip(norms, p["norms"]):
                set_norm(norm, values)
    for norm, values in zip((hub.encoder_norm, hub.decoder_norm), final_norms):
        set_norm(norm, values)
