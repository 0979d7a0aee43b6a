"""The experiment config's task sections: each task reads its own section, a key it does not
read is an error that names it, and configs of the layout before the sections load."""

import pytest
import yaml

from keras_transformer.config import (
    ExperimentConfig,
    TaggingConfig,
    TranslationConfig,
    load_config,
    save_config,
)
from keras_transformer.constants import TASKS
from keras_transformer.tasks import get_task, task_class


@pytest.mark.parametrize(
    "name, task",
    [
        ("multi30k_de_en", "translation"),
        ("ted_hrlr_pt_en", "translation"),
        ("conll2003_pos", "tagging"),
        ("imdb_reviews", "classification"),
        ("tiny_shakespeare", "language_modeling"),
    ],
)
def test_packaged_configs_hold_their_task_section_only(name, task):
    config = load_config(name)
    assert config.task == task and config.section is getattr(config, task)
    assert [t for t in TASKS if getattr(config, t) is not None] == [task]
    assert set(config.to_dict()) == {"model", "data", "training", "task", task}
    assert get_task(config).name == task and task_class(task).name == task


def test_the_run_task_section_is_created_and_saved(tmp_path):
    config = ExperimentConfig.from_dict({"task": "tagging"})
    assert isinstance(config.tagging, TaggingConfig) and config.translation is None
    assert isinstance(ExperimentConfig().translation, TranslationConfig)
    path = str(tmp_path / "config.yaml")
    save_config(load_config("multi30k_de_en"), path)
    saved = yaml.safe_load(open(path))
    assert saved["translation"]["source_lang"] == "de" and "tagging" not in saved
    assert "source_lang" not in saved["data"] and "bleu_every" not in saved["training"]
    assert load_config(path) == load_config("multi30k_de_en")


@pytest.mark.parametrize(
    "name, override, message",
    [
        ("conll2003_pos", "translation.source_lang=de", r"the `translation` section for task "),
        ("multi30k_de_en", "tagging.max_length=8", r"the `tagging` section for task"),
        ("conll2003_pos", "model.num_decoder_layers=2", r"`model.num_decoder_layers` for task"),
        ("tiny_shakespeare", "model.num_encoder_layers=2", r"`model.num_encoder_layers` for"),
        ("imdb_reviews", "data.validation_source=v.tsv", r"`data.validation_source` for task"),
        ("conll2003_pos", "data.source_eos=false", r"`data.source_eos` for task 'tagging'"),
        ("conll2003_pos", "training.bleu_every=1", r"`training.bleu_every` for task"),
        ("imdb_reviews", "classification.pooling=max", r"`classification.pooling`"),
        ("tiny_shakespeare", "language_modeling.max_length=1", r"at least 2"),
        ("conll2003_pos", "tagging.max_length=1000", r"model.max_length"),
        ("multi30k_de_en", "translation.max_source_length=1000", r"model.max_length"),
        ("multi30k_de_en", "translation.bleu_every=0", r"`translation.bleu_every`"),
        ("multi30k_de_en", "translation.shared_vocab=false", r"translation.shared_vocab=False"),
        ("multi30k_de_en", "task=summarization", r"`task`, expected one of"),
    ],
)
def test_keys_a_task_does_not_read_are_errors_that_name_them(name, override, message):
    with pytest.raises(ValueError, match=message):
        load_config(name, [override])


def test_the_layout_before_the_task_sections_still_loads(tmp_path):
    old_translation = {
        "data": {
            "source": "multi30k",
            "source_lang": "de",
            "max_source_length": 40,
            "source_eos": False,
            "local_dir": "/data",
            "batch_size": 8,
        },
        "training": {"bleu_every": 2, "epochs": 1},
    }
    config = ExperimentConfig.from_dict(old_translation)
    s = config.translation
    assert (s.source_lang, s.max_source_length, s.source_eos, s.local_dir) == (
        "de",
        40,
        False,
        "/data",
    )
    assert s.bleu_every == 2 and config.training.epochs == 1
    # What 0.1 saved for a tagging run: every data key, at its defaults but the length.
    old_tagging = {
        "task": "tagging",
        "data": {
            "source": "synthetic_pos",
            "max_source_length": 48,
            "max_target_length": 128,
            "source_eos": True,
            "shared_vocab": True,
            "source_lang": None,
        },
        "training": {"bleu_every": None, "bleu_beam_size": 1},
    }
    assert ExperimentConfig.from_dict(old_tagging).tagging.max_length == 48
    old_lm = {"task": "language_modeling", "data": {"max_target_length": 64}}
    assert ExperimentConfig.from_dict(old_lm).language_modeling.max_length == 64
    # The layout before the task sections saved every task's section at its defaults (as
    # the config.yaml of a run trained at ca0c11d has them): read as not set.
    dumped = {
        "tagging": {"words_feature": "tokens", "tags_feature": "pos", "fallback": True},
        "classification": {"text_feature": None, "label_feature": None, "pooling": "mean"},
        "language_modeling": {"text_feature": "text", "document_separator": "\n\n"},
    }
    config = ExperimentConfig.from_dict({**old_translation, **dumped})
    assert config.tagging is None and config.translation.source_lang == "de"
    set_one = {**dumped, "tagging": {"words_feature": "words"}}
    with pytest.raises(ValueError, match=r"Received the `tagging` section for task 'translation'"):
        ExperimentConfig.from_dict({**old_translation, **set_one})
    # An old-layout override sets the key where it lives now.
    config = load_config("multi30k_de_en", ["data.max_source_length=32", "data.local_dir=/x"])
    assert (config.translation.max_source_length, config.translation.local_dir) == (32, "/x")
    assert load_config("conll2003_pos", ["data.max_source_length=64"]).tagging.max_length == 64
    both = {"data": {"source_eos": False}, "translation": {"source_eos": True}}
    with pytest.raises(ValueError, match=r"both `data.source_eos`.*keep `translation.source_eos`"):
        ExperimentConfig.from_dict(both)
