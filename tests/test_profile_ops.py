"""`benchmarks/_profile_ops.py`: xprof's op table read, op names shortened, and every op of
the recipe's real training step put in the group it computes (the op names come from the
traced step of a small model of the recipe; the profiler's trace itself needs xprof, which
`benchmarks/train_profile.py` runs)."""

import os
import sys
import types

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks"))

from _profile_ops import CATEGORIES, categorize, format_table, op_rows, short_name  # noqa: E402

COLUMNS = ["Rank", "Host/device", "Operation Type", "Operation Name", "#Occurrences"]
COLUMNS += ["Total time (us)", "Avg. time (us)", "Total self-time (us)"]


def _table(*ops):
    rows = [
        {"c": [{"v": v} for v in (i, "Host", t, n, c, us, us / c, us)]}
        for i, (t, n, c, us) in enumerate(ops)
    ]
    return [{"cols": [{"label": label} for label in COLUMNS], "rows": rows, "p": {}}]


def test_op_rows_reads_the_table_without_idle():
    table = _table(("IDLE", "IDLE", 1, 9e6), ("_MklMatMul", "a/b/MatMul", 4, 100.0))
    assert op_rows(table) == [
        {"type": "_MklMatMul", "name": "a/b/MatMul", "count": 4, "self_us": 100.0}
    ]


def test_short_name_drops_the_call_gradient_prefixes_and_keras_suffixes():
    name = "StatefulPartitionedCall/gradient_tape/training_transformer_1/decoder_1/layer_0_1/"
    assert short_name(name + "cross_attention_norm_1/mul/Mul_1") == (
        "training_transformer/decoder/layer_0/cross_attention_norm/mul/Mul"
    )


def test_the_recipes_training_step_ops_fall_in_their_groups():
    from keras_transformer.config import load_config
    from keras_transformer.runner import build_and_compile
    from keras_transformer.tasks import get_task

    small = ["model.d_model=32", "model.d_ff=64", "model.num_heads=2", "training.warmup_steps=1"]
    config = load_config("multi30k_de_en", small)
    tokenizer = types.SimpleNamespace(vocab_size=50)
    task = get_task(config)
    model, _ = build_and_compile(
        task, (tokenizer, tokenizer), None, tf.distribute.get_strategy(), 10
    )
    rng = np.random.default_rng(0)
    source, target = rng.integers(1, 50, (4, 7)), rng.integers(1, 50, (4, 6))
    source[0, 5:] = 0  # padding: the masks are in the step
    batch = ((source.astype("int32"), target.astype("int32")), target.astype("int32"))
    model(batch[0])  # builds the weights, then Adam's
    model.optimizer.build(model.trainable_variables)
    spec = tf.nest.map_structure(lambda a: tf.TensorSpec((None, None), tf.int32), batch)
    graph = tf.function(model.train_step).get_concrete_function(spec).graph
    ops = [
        {"type": op.type, "name": op.name, "count": 1, "self_us": 1.0}
        for op in graph.get_operations()
    ]
    groups = categorize(ops)
    # Every group of the model's computation has ops of the real step...
    for name in CATEGORIES[1:13]:
        assert groups[name]["self_us"] > 0, name
    assert {"Softmax"} <= set(groups["attention: softmax"]["types"])
    assert set(groups["attention: scores and weighted sums"]["types"]) & {"Einsum", "BatchMatMulV2"}
    # ...and no op of a layer the groups name is left in "other".
    others = [short_name(op["name"]) for op in ops if categorize([op])[CATEGORIES[-1]]["self_us"]]
    named = ("attention", "feed_forward", "_norm", "dropout", "embedding", "adam")
    assert not [n for n in others if any(k in n for k in named)]
    table = format_table(groups, steps=1)
    assert table.count("\n") == len(CATEGORIES) + 2  # header, rule, the groups, the total
