"""Subcommands of `keras-transformer` (see `keras_transformer.cli`).

Add a subcommand by writing `<name>.py` here with `add_arguments(parser)` and
`run(args) -> int`, and listing it in `SUMMARIES`.
"""

SUMMARIES: dict[str, str] = {}
