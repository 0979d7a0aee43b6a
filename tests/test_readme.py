"""The README's Python examples run as written."""

import os
import re

README = os.path.join(os.path.dirname(__file__), "..", "README.md")


def test_readme_python_blocks_run():
    with open(README, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    assert blocks, "the README lost its Python example"
    values: dict = {}
    for block in blocks:
        namespace: dict = {}
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102
        values.update(namespace)
    assert tuple(values["logits"].shape) == (1, 4, 1000)  # the translation model
    assert tuple(values["tag_logits"].shape) == (1, 6, 10)
    assert tuple(values["class_logits"].shape) == (1, 2)
    assert tuple(values["next_token_logits"].shape) == (1, 4, 1000)
    continued = values["continued"]
    assert continued[0, :3].tolist() == [17, 42, 8] and continued[1, 0] == 5
    assert (continued[0, 8:] == 0).all() and (continued[1, 6:] == 0).all()  # 5 new at most
