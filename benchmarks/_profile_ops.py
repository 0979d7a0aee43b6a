"""The op table of `benchmarks/train_profile.py`: xprof's `framework_op_stats` rows read,
grouped by what each op computes, and printed (the standard library only)."""

from __future__ import annotations

import re
from collections import defaultdict

# The table's groups, in its order. An op falls in the first whose rule matches (`_group`).
CATEGORIES = (
    "input pipeline (tf.data threads)",
    "optimizer update (Adam)",
    "dropout",
    "LayerNorm",
    "attention: Q/K/V/output projections",
    "attention: scores and weighted sums",
    "attention: softmax",
    "attention: masks",
    "attention: transposes, scaling, other",
    "feed-forward",
    "output projection (tied logits)",
    "embeddings (lookup, scale, positions, gradient)",
    "loss (its TensorFlow ops; the XLA kernel is not in the op stats)",
    "other (metrics, residual adds, gradient sums)",
)
_PROJECTIONS = ("/query/", "/key/", "/value/", "/attention_output/")
_MASK_TYPES = {"SelectV2", "Select", "BroadcastTo", "LogicalAnd", "LogicalNot", "Cast", "Where"}
_MATMUL_TYPES = re.compile(r"(Einsum|BatchMatMul|MatMul)")


def op_rows(tables: list[dict]) -> list[dict]:
    """`{"type", "name", "count", "self_us"}` for each host op of a `framework_op_stats`
    table (xprof's gviz JSON: a list of tables with `cols` and `rows`), IDLE left out."""
    table = tables[0]
    index = {col["label"]: i for i, col in enumerate(table["cols"])}
    rows = []
    for row in table["rows"]:
        cells = [cell.get("v") for cell in row["c"]]
        if cells[index["Operation Type"]] == "IDLE":
            continue
        rows.append(
            {
                "type": cells[index["Operation Type"]],
                "name": cells[index["Operation Name"]],
                "count": int(cells[index["#Occurrences"]]),
                "self_us": float(cells[index["Total self-time (us)"]]),
            }
        )
    return rows


def short_name(name: str) -> str:
    """An op's name without the function call and gradient prefixes and Keras' `_1` suffixes
    (`StatefulPartitionedCall/gradient_tape/training_transformer_1/encoder_1/...` ->
    `training_transformer/encoder/...`)."""
    name = name.replace("StatefulPartitionedCall/", "").replace("gradient_tape/", "")
    # `encoder_1` -> `encoder`, `layer_0_1` -> `layer_0`, `Mul_1` -> `Mul`.
    return re.sub(r"(?<=[A-Za-z])_\d+(?=/|$)|(?<=_\d)_\d+(?=/|$)", "", name)


def _group(op: dict) -> str:
    kind, name = op["type"], "/" + short_name(op["name"]) + "/"
    if kind == "Dataset" or name.startswith("/Iterator::"):
        return CATEGORIES[0]
    if "/adam/" in name:
        return CATEGORIES[1]
    if "dropout" in name:
        return CATEGORIES[2]
    if re.search(r"_norm/|/norm/|layer_norm", name):
        return CATEGORIES[3]
    if "attention/" in name:
        if any(p in name for p in _PROJECTIONS):
            return CATEGORIES[4]
        if _MATMUL_TYPES.search(kind):
            return CATEGORIES[5]
        if "Softmax" in kind:
            return CATEGORIES[6]
        if kind in _MASK_TYPES:
            return CATEGORIES[7]
        return CATEGORIES[8]
    if "/feed_forward/" in name:
        return CATEGORIES[9]
    # The tied projection: a Tensordot on (B, T, D) hidden states, a plain MatMul on the
    # (N, D) real positions that training projects (`logit_positions`).
    if "/token_embedding/" in name and (
        _MATMUL_TYPES.search(kind) or "/Tensordot" in name or "/transpose" in name
    ):
        return CATEGORIES[10]
    if "embedding" in name or kind == "UnsortedSegmentSum":
        return CATEGORIES[11]
    if "/compile_loss/" in name:
        return CATEGORIES[12]
    return CATEGORIES[13]


def categorize(rows: list[dict]) -> dict[str, dict]:
    """Each category's `{"self_us", "types": {op type: self_us}}`, every category present."""
    groups = {c: {"self_us": 0.0, "types": defaultdict(float)} for c in CATEGORIES}
    for op in rows:
        group = groups[_group(op)]
        group["self_us"] += op["self_us"]
        group["types"][op["type"]] += op["self_us"]
    return groups


def format_table(groups: dict[str, dict], *, steps: int) -> str:
    """A Markdown table: each category's op self-time a step, its share of all op time, and
    its three largest op types; then the total (on several cores, more than the wall)."""
    total = sum(g["self_us"] for g in groups.values()) or 1.0
    lines = [
        "| ops | ms a step | share of op time | largest op types |",
        "| --- | --- | --- | --- |",
    ]
    for name, g in groups.items():
        top = sorted(g["types"].items(), key=lambda kv: -kv[1])[:3]
        types = ", ".join(f"{t} {100 * us / g['self_us']:.0f}%" for t, us in top if us > 0)
        lines.append(
            f"| {name} | {g['self_us'] / 1000 / steps:,.1f} | {100 * g['self_us'] / total:.1f}% "
            f"| {types or '-'} |"
        )
    lines.append(f"| all ops | {total / 1000 / steps:,.1f} | 100% | |")
    return "\n".join(lines)


def top_ops(rows: list[dict], *, steps: int, n: int = 15) -> str:
    """The `n` ops with the most self-time, an op's forward and gradient ops of one type
    together (`short_name`): a Markdown table of type, name and ms a step."""
    merged: dict[tuple[str, str], float] = defaultdict(float)  # forward and gradient together
    for op in rows:
        merged[op["type"], short_name(op["name"])] += op["self_us"]
    lines = ["| op type | op (forward and gradient) | ms a step |", "| --- | --- | --- |"]
    for (kind, name), us in sorted(merged.items(), key=lambda kv: -kv[1])[:n]:
        lines.append(f"| {kind} | {name} | {us / 1000 / steps:,.1f} |")
    return "\n".join(lines)
