"""Multi-head scaled dot-product attention with an optional key/value cache."""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_transformer.layers.dropout import Dropout
from keras_transformer.masks import per_head_attention_mask
from keras_transformer.packing import pack, unpack
from keras_transformer.validation import check_positive_int, check_rate


def write_cache(cache, index, key, value):
    """Writes new keys/values into a `(keys, values)` cache at positions `index...`.

    The cache is a pair of head-major (B, H, S_max, D) tensors, so that attention reads it
    without a copy: no slice of a stacked tensor, no transpose to heads-first at each step
    (those two copies of the whole cache took about a third of a decoding step on CPU).
    Each is written with one `TensorScatterUpdate` (`keras.ops.scatter_update`): an op with
    ordinary CPU and GPU kernels that XLA also compiles. `keras.ops.slice_update` would be
    the natural choice, but Keras' TensorFlow backend implements it with
    `XlaDynamicUpdateSlice`, whose CPU and GPU kernels compile with XLA on first use; TF
    Serving's model server disables XLA compilation by default, so an exported decoding loop
    holding it fails on its first request (tensorflow/serving#2217). Measured on CPU, the
    scatter is as fast as the slice update both with and without XLA
    (`python benchmarks/decoding.py`).

    Args:
        cache: `(keys, values)`, each (B, H, S_max, D).
        index: int or scalar int tensor, the position of the first new key/value.
        key: (B, H, T_new, D) new keys.
        value: (B, H, T_new, D) new values.

    Returns:
        The updated `(keys, values)`.
    """
    shape = ops.shape(key)
    batch, heads, steps = shape[0], shape[1], shape[2]
    grid = (batch, heads, steps)
    rows = ops.broadcast_to(ops.reshape(ops.arange(batch), (-1, 1, 1)), grid)
    head_ids = ops.broadcast_to(ops.reshape(ops.arange(heads), (1, -1, 1)), grid)
    positions = ops.broadcast_to(
        ops.reshape(ops.arange(steps) + ops.cast(index, "int32"), (1, 1, -1)), grid
    )
    indices = ops.stack([rows, head_ids, positions], axis=-1)  # (B, H, T_new, 3)
    keys, values = cache
    return (
        ops.scatter_update(keys, indices, ops.cast(key, keys.dtype)),
        ops.scatter_update(values, indices, ops.cast(value, values.dtype)),
    )


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention (Vaswani et al. 2017, section 3.2).

    `softmax(Q K^T / sqrt(d_k)) V` over `num_heads` heads, with Q/K/V/output projections. The
    mask convention is the package's (`keras_transformer.masks`): True means "may attend".
    A query whose mask row is all False gets all-zero weights (its output is the output
    projection's bias), so results never depend on how much padding there is.

    One path computes the attention (einsum + masked softmax in float32): on the TensorFlow
    backend `keras.ops.dot_product_attention` is no fused kernel and measured 1.1-1.2x
    slower for forward+backward on CPU (`python benchmarks/attention.py`; 1.05-1.47x over
    three shapes and two runs on a 2-core AVX2 AMD EPYC with the package's oneDNN default),
    and a single path keeps the numbers identical everywhere.

    For incremental decoding the layer takes a `cache` of keys and values: a pair
    `(keys, values)` of head-major (B, H, S_max, D_k) tensors:

    - self-attention: pass `cache` and `cache_update_index`; the keys/values of the new
      query positions are written into the cache at that index, attention runs over the
      whole cache (mask the unwritten tail with `masks.causal_mask(..., offset=index)`), and
      the updated cache is returned;
    - cross-attention: pass a precomputed `cache` (see `compute_cache`) and no
      `cache_update_index`; the encoder keys/values are read from it, not recomputed.

    Args:
        num_heads: number of heads (the paper's h).
        key_dim: size of each head for queries and keys (the paper's d_k = d_model / h).
        value_dim: size of each head for values (d_v); defaults to `key_dim`.
        output_dim: size of the output; defaults to the query's last dimension (d_model).
        dropout: dropout rate on the attention weights.
        use_bias: whether the projections have biases.
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the projection biases.
        **kwargs: base layer arguments.

    Call arguments:
        query: (B, T, d_model).
        value: (B, S, d_model).
        key: (B, S, d_model); defaults to `value`.
        attention_mask: bool (B, T, S), or of rank 2 or 3 and broadcastable to it ((T, S) for
            every row, (1, T, S), (B, 1, S)); True = may attend.
        return_attention_scores: also return the attention weights (B, H, T, S).
        cache: optional `(keys, values)` cache, each (B, H, S_max, D_k) (see above).
        cache_update_index: int or scalar tensor; where the new keys/values go.
        query_packing: the `keras_transformer.packing.Packing` of a packed query (N,
            d_model): the real positions of a padded (B, T) batch; the output is then
            packed too, (N, output_dim).
        value_packing: the `Packing` of packed keys and values (N_s, d_model).
        training: whether dropout is active.

    Returns:
        The output (B, T, output_dim); then the weights (B, H, T, S) if
        `return_attention_scores`; then the updated cache if `cache_update_index` was given;
        as a tuple when there is more than the output.

    Example:
    >>> mha = MultiHeadAttention(num_heads=2, key_dim=8)
    >>> x = keras.ops.ones((3, 5, 16))
    >>> out, weights = mha(x, x, return_attention_scores=True)
    >>> tuple(out.shape), tuple(weights.shape)
    ((3, 5, 16), (3, 2, 5, 5))
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        value_dim: int | None = None,
        output_dim: int | None = None,
        dropout: float = 0.0,
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.key_dim = check_positive_int("key_dim", key_dim)
        self.value_dim = check_positive_int("value_dim", value_dim or key_dim)
        self.output_dim = (
            None if output_dim is None else check_positive_int("output_dim", output_dim)
        )
        self.dropout = check_rate("dropout", dropout)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def _dense(self, units: int, name: str) -> keras.layers.Dense:
        return keras.layers.Dense(
            units,
            use_bias=self.use_bias,
            kernel_initializer=keras.initializers.get(
                keras.initializers.serialize(self.kernel_initializer)
            ),
            bias_initializer=keras.initializers.get(
                keras.initializers.serialize(self.bias_initializer)
            ),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        output_dim = self.output_dim or query_shape[-1]
        self.query_dense = self._dense(self.num_heads * self.key_dim, "query")
        self.query_dense.build(query_shape)
        self.key_dense = self._dense(self.num_heads * self.key_dim, "key")
        self.key_dense.build(key_shape)
        self.value_dense = self._dense(self.num_heads * self.value_dim, "value")
        self.value_dense.build(value_shape)
        self.output_dense = self._dense(output_dim, "attention_output")
        self.output_dense.build((*query_shape[:-1], self.num_heads * self.value_dim))
        self.dropout_layer = Dropout(
            self.dropout, dtype=self.dtype_policy, name="attention_dropout"
        )
        self.built = True

    def _split_heads(self, x, head_dim: int):
        shape = ops.shape(x)
        x = ops.reshape(x, (shape[0], shape[1], self.num_heads, head_dim))  # (B, L, H, D)
        return ops.transpose(x, (0, 2, 1, 3))  # (B, H, L, D)

    def project_key_value(self, key, value, packing=None):
        """Projects keys and values to heads: two head-major (B, H, S, D) tensors (from
        packed (N, d_model) ones with their `packing`)."""
        k, v = self.key_dense(key), self.value_dense(value)  # (B, S, H * D) or (N, H * D)
        if packing is not None:
            k, v = unpack(k, packing), unpack(v, packing)  # (B, S, H * D)
        k = self._split_heads(k, self.key_dim)  # (B, H, S, Dk)
        v = self._split_heads(v, self.value_dim)  # (B, H, S, Dv)
        return k, v

    def compute_cache(self, value, key=None):
        """Precomputes the `(keys, values)` cache of a fixed sequence (cross-attention):
        two (B, H, S, D) tensors."""
        key = value if key is None else key
        return self.project_key_value(key, value)

    def call(
        self,
        query,
        value,
        key=None,
        attention_mask=None,
        return_attention_scores: bool = False,
        cache=None,
        cache_update_index=None,
        query_packing=None,
        value_packing=None,
        training=None,
    ):
        if cache is not None and (query_packing is not None or value_packing is not None):
            raise ValueError(
                "Received a `cache` with packed inputs; decoding with a cache takes padded "
                "(B, T, d_model) inputs. Pass query_packing=None and value_packing=None."
            )
        key = value if key is None else key
        q = self.query_dense(query)  # (B, T, H * Dk) or (N, H * Dk)
        if query_packing is not None:
            q = unpack(q, query_packing)  # (B, T, H * Dk)
        q = self._split_heads(q, self.key_dim)  # (B, H, T, Dk)

        if cache is not None and cache_update_index is None:
            k, v = cache  # (B, H, S, D): precomputed
        else:
            k, v = self.project_key_value(key, value, value_packing)  # (B, H, S_new, D)
            if cache is not None:
                cache = write_cache(cache, cache_update_index, k, v)
                k, v = cache  # (B, H, S_max, D)

        q = q * ops.cast(1.0 / math.sqrt(self.key_dim), q.dtype)
        scores = ops.einsum("bhtd,bhsd->bhts", q, k)  # (B, H, T, S)
        # Softmax in float32 for stability under mixed precision.
        scores = ops.cast(scores, "float32")
        if attention_mask is not None:
            mask = per_head_attention_mask(attention_mask)  # (B, 1, T, S)
            scores = ops.where(mask, scores, ops.full_like(scores, -1e9))
        weights = ops.softmax(scores, axis=-1)  # (B, H, T, S)
        if attention_mask is not None:
            # A query that may attend nothing (an empty source) attends nothing: zero
            # weights, rather than a uniform average whose value depends on the padding.
            weights = ops.where(ops.any(mask, axis=-1, keepdims=True), weights, 0.0)
        weights = ops.cast(weights, self.compute_dtype)
        attended = ops.einsum(
            "bhts,bhsd->bthd", self.dropout_layer(weights, training=training), v
        )  # (B, T, H, Dv)
        shape = ops.shape(attended)
        attended = ops.reshape(attended, (shape[0], shape[1], self.num_heads * self.value_dim))
        if query_packing is not None:
            attended = pack(attended, query_packing)  # (N, H * Dv)
        output = self.output_dense(attended)  # (B, T, output_dim) or (N, output_dim)

        results = (output,)
        if return_attention_scores:
            results += (weights,)
        if cache is not None and cache_update_index is not None:
            results += (cache,)
        return results[0] if len(results) == 1 else results

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return (*query_shape[:-1], self.output_dim or query_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "output_dim": self.output_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
