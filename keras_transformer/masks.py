"""Attention masks: the one place the convention lives.

**True means "may attend"**, as in Keras (`keras.layers.MultiHeadAttention`'s
`attention_mask`). Masks are boolean:

- a *padding mask* is (B, L): True at real tokens, False at padding;
- an *attention mask* is (B, T, S) (or broadcastable to it, e.g. (1, T, S)): True where query
  position t may attend key position s.

Keras 3 propagates `mask=` only through single-input layers (keras-team/keras#19311), so the
multi-input layers of this package take these masks as explicit `padding_mask` /
`attention_mask` arguments instead.
"""

from __future__ import annotations

from keras import ops


def padding_mask(token_ids, pad_id: int = 0):
    """Padding mask from token ids.

    Args:
        token_ids: int tensor (B, L).
        pad_id: the id used for padding.

    Returns:
        bool tensor (B, L), True at real (non-pad) tokens.
    """
    return ops.not_equal(token_ids, pad_id)


def causal_mask(query_length, key_length=None, offset=0):
    """Look-ahead (causal) mask.

    Query t sits at absolute position `offset + t` and may attend keys at positions
    s <= offset + t. With `offset=0` and `key_length=query_length` this is the usual
    lower-triangular matrix; during cached decoding `offset` is the index of the first new
    token and `key_length` the cache length.

    Args:
        query_length: int (or scalar tensor), T.
        key_length: int (or scalar tensor), S; defaults to `query_length`.
        offset: int (or scalar tensor), absolute position of the first query.

    Returns:
        bool tensor (1, T, S).
    """
    if key_length is None:
        key_length = query_length
    q = ops.arange(query_length, dtype="int32")[:, None] + ops.cast(offset, "int32")
    k = ops.arange(key_length, dtype="int32")[None, :]
    return ops.expand_dims(ops.greater_equal(q, k), 0)


def key_padding_attention_mask(key_padding_mask):
    """(B, S) padding mask of the keys -> (B, 1, S) attention mask for every query."""
    return ops.expand_dims(ops.cast(key_padding_mask, "bool"), 1)


def per_head_attention_mask(attention_mask):
    """An attention mask (B, T, S), or (T, S) for every batch row (broadcastable, as Keras'
    `MultiHeadAttention` reads it), as bool (B, 1, T, S): one mask for every head.

    Raises:
        ValueError: for a mask of another rank (a (B, S) padding mask is no attention mask:
            `key_padding_attention_mask` makes one of it).
    """
    rank = len(attention_mask.shape)
    if rank not in (2, 3):
        raise ValueError(
            "Received an invalid value for argument `attention_mask`, expected a mask of rank "
            "3, (B, T, S), or 2, (T, S); a (B, S) padding mask goes through "
            f"`key_padding_attention_mask`. Received: attention_mask.shape={attention_mask.shape}"
        )
    mask = ops.cast(attention_mask, "bool")
    if rank == 2:
        mask = ops.expand_dims(mask, 0)  # (1, T, S)
    return ops.expand_dims(mask, 1)  # (B, 1, T, S)


def merge_masks(*masks):
    """Logical AND of broadcastable boolean masks; `None` entries are skipped.

    Returns:
        The combined bool mask, or `None` when every mask is `None`.
    """
    result = None
    for mask in masks:
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        result = mask if result is None else ops.logical_and(result, mask)
    return result


def self_attention_mask(padding_mask=None, causal: bool = False):
    """Attention mask for self-attention over one sequence.

    Args:
        padding_mask: optional bool (B, T), True at real tokens.
        causal: whether to add the look-ahead mask.

    Returns:
        bool (B, T, T) (or (1, T, T) without `padding_mask`), or `None` when there is
        nothing to mask.
    """
    key_mask = None if padding_mask is None else key_padding_attention_mask(padding_mask)
    look_ahead = None
    if causal:
        length = ops.shape(padding_mask)[1] if padding_mask is not None else None
        if length is None:
            raise ValueError(
                "`self_attention_mask(causal=True)` needs `padding_mask` to know the length; "
                "use `causal_mask(length)` directly instead."
            )
        look_ahead = causal_mask(length)
    return merge_masks(key_mask, look_ahead)
