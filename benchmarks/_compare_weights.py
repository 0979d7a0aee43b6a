"""Ours' weights copied into the KerasHub and PyTorch models of `train_compare.py`, for the
check that the three compute the same function.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from _compare_models import HubTransformer


def copy_weights_from_ours(ours: keras.Model, hub: HubTransformer | None, torch_model) -> None:
    """Gives the KerasHub and PyTorch models the weights of ours (for the equivalence check)."""

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
    heads = ours.num_heads
    d = ours.d_model

    if hub is not None:

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
            for layer, parts in zip(layers, parts_list):
                set_hub_attention(layer._self_attention_layer, parts["self"])
                norms = [layer._self_attention_layer_norm]
                if kind == "decoder":
                    set_hub_attention(layer._cross_attention_layer, parts["cross"])
                    norms.append(layer._cross_attention_layer_norm)
                norms.append(layer._feedforward_layer_norm)
                w1, b1, w2, b2 = parts["ff"]
                layer._feedforward_intermediate_dense.kernel.assign(w1)
                layer._feedforward_intermediate_dense.bias.assign(b1)
                layer._feedforward_output_dense.kernel.assign(w2)
                layer._feedforward_output_dense.bias.assign(b2)
                for norm, values in zip(norms, parts["norms"]):
                    set_norm(norm, values)
        for norm, values in zip((hub.encoder_norm, hub.decoder_norm), final_norms):
            set_norm(norm, values)

    if torch_model is not None:
        import torch

        def tensor(x: np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(x))

        def set_torch_attention(mha, w):
            qk, qb, kk, kb, vk, vb, ok, ob = w
            mha.in_proj_weight.copy_(tensor(np.concatenate([qk.T, kk.T, vk.T])))
            mha.in_proj_bias.copy_(tensor(np.concatenate([qb, kb, vb])))
            mha.out_proj.weight.copy_(tensor(ok.T))
            mha.out_proj.bias.copy_(tensor(ob))

        with torch.no_grad():
            torch_model.embedding.weight.copy_(tensor(embedding))
            for layers, parts_list, kind in (
                (torch_model.encoder.layers, encoder, "encoder"),
                (torch_model.decoder.layers, decoder, "decoder"),
            ):
                for layer, parts in zip(layers, parts_list):
                    set_torch_attention(layer.self_attn, parts["self"])
                    norms = [layer.norm1, layer.norm2]
                    if kind == "decoder":
                        set_torch_attention(layer.multihead_attn, parts["cross"])
                        norms.append(layer.norm3)
                    w1, b1, w2, b2 = parts["ff"]
                    layer.linear1.weight.copy_(tensor(w1.T))
                    layer.linear1.bias.copy_(tensor(b1))
                    layer.linear2.weight.copy_(tensor(w2.T))
                    layer.linear2.bias.copy_(tensor(b2))
                    for norm, (gamma, beta) in zip(norms, parts["norms"]):
                        norm.weight.copy_(tensor(gamma))
                        norm.bias.copy_(tensor(beta))
            stacks = (torch_model.encoder.norm, torch_model.decoder.norm)
            for norm, (gamma, beta) in zip(stacks, final_norms):
                norm.weight.copy_(tensor(gamma))
                norm.bias.copy_(tensor(beta))
