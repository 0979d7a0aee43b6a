import numpy as np

from keras_transformer import masks


def test_padding_mask_marks_real_tokens():
    ids = np.array([[5, 6, 0, 0], [7, 0, 0, 0]])
    np.testing.assert_array_equal(masks.padding_mask(ids), ids != 0)
    np.testing.assert_array_equal(masks.padding_mask(ids, pad_id=7), ids != 7)


def test_causal_mask_is_lower_triangular():
    mask = np.asarray(masks.causal_mask(4))
    assert mask.shape == (1, 4, 4)
    np.testing.assert_array_equal(mask[0], np.tril(np.ones((4, 4), bool)))


def test_causal_mask_with_offset_for_cached_decoding():
    # One query at absolute position 2 over a cache of 5 keys: keys 0..2 visible.
    mask = np.asarray(masks.causal_mask(1, 5, offset=2))
    np.testing.assert_array_equal(mask, [[[True, True, True, False, False]]])


def test_merge_masks_ands_and_skips_none():
    causal = masks.causal_mask(3)
    keys = masks.key_padding_attention_mask(np.array([[True, True, False]]))
    merged = np.asarray(masks.merge_masks(None, causal, keys))
    expected = np.tril(np.ones((3, 3), bool)) & np.array([True, True, False])
    np.testing.assert_array_equal(merged[0], expected)
    assert masks.merge_masks(None, None) is None


def test_self_attention_mask_shapes():
    pad = np.array([[True, True, False]])
    assert masks.self_attention_mask(None) is None
    np.testing.assert_array_equal(masks.self_attention_mask(pad), [[[True, True, False]]])
    causal = np.asarray(masks.self_attention_mask(pad, causal=True))
    assert causal.shape == (1, 3, 3)
    assert not causal[0, 0, 1] and not causal[0, 2, 2]
