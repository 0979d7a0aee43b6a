"""Tasks beyond translation: tagging, classification and language modelling.

- `config.py`: the experiment config's `tagging`, `classification` and `language_modeling`
  sections and `validate_task` (imported by `keras_transformer.config`).
- `models.py`: `build_task_model`, `compile_task_model`, the `fit`-ready
  `TrainingEncoderModel` / `TrainingDecoderModel`.
- `training.py`: `train_task(config)`, what `keras_transformer.training.train` runs for
  these tasks.
- `evaluation.py`: `evaluate_run(run_dir, split)`: accuracy or perplexity.

Submodules are imported on use, so `keras_transformer.config` stays light.
"""
