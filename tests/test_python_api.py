"""The workflow from Python: top-level imports, overrides as dicts and keyword arguments,
a batch size set as an attribute, `validation_holdout`'s checks and `split_off`."""

import dataclasses

import pytest
import tensorflow as tf

import keras_transformer
from keras_transformer.config import load_config, packaged_configs
from keras_transformer.data.holdout import split_off


def test_the_workflow_imports_from_the_top_level():
    from keras_transformer import Translator, evaluate_run, export_run, load_config, train
    from keras_transformer.export import export_run as module_export_run
    from keras_transformer.predictors import Translator as module_translator
    from keras_transformer.runner import evaluate_run as module_evaluate_run
    from keras_transformer.runner import train as module_train

    assert train is module_train and evaluate_run is module_evaluate_run
    assert export_run is module_export_run and Translator is module_translator
    assert load_config("multi30k_de_en").task == "translation"
    missing = [name for name in keras_transformer.__all__ if not hasattr(keras_transformer, name)]
    assert missing == []
    assert set(keras_transformer.__all__) <= set(dir(keras_transformer))


def test_overrides_as_strings_dicts_and_keyword_sections_agree():
    from_strings = load_config("multi30k_de_en", ["training.epochs=3", "data.batch_size=32"])
    from_dict = load_config("multi30k_de_en", {"training.epochs": 3, "data.batch_size": 32})
    from_kwargs = load_config("multi30k_de_en", training={"epochs": 3}, data={"batch_size": 32})
    assert from_strings == from_dict == from_kwargs
    # Setting one batch size clears the other, in every form.
    assert (from_kwargs.data.batch_size, from_kwargs.data.tokens_per_batch) == (32, None)
    assert load_config(None, task="classification").task == "classification"
    with pytest.raises(ValueError, match="Unknown|unknown|epoch"):
        load_config("multi30k_de_en", training={"epoch": 3})
    with pytest.raises(ValueError, match="override key"):
        load_config("multi30k_de_en", {"training.": 3})


def test_a_batch_size_set_as_an_attribute_replaces_the_token_budget():
    config = load_config("multi30k_de_en")
    assert (config.data.batch_size, config.data.tokens_per_batch) == (None, 4096)
    config.data.batch_size = 64
    assert (config.data.batch_size, config.data.tokens_per_batch) == (64, None)
    config.validate()
    config.data.tokens_per_batch = 2048
    assert (config.data.batch_size, config.data.tokens_per_batch) == (None, 2048)
    config.validate()
    # Built with both (a file that sets both), the config is still refused, naming them.
    data = dataclasses.replace(config.data, batch_size=8)
    assert (data.batch_size, data.tokens_per_batch) == (8, 2048)
    with pytest.raises(ValueError, match="exactly one of `data.batch_size`"):
        dataclasses.replace(config, data=data).validate()


def test_packaged_configs_are_the_yaml_files():
    names = packaged_configs()
    assert "multi30k_de_en" in names and "imdb_reviews" in names
    for name in names:
        load_config(name)


@pytest.mark.parametrize("value", [0.0, 1.0, 1.5, 0, -3, True, "10%"])
def test_validation_holdout_must_be_a_fraction_or_a_count(value):
    with pytest.raises(ValueError, match="data.validation_holdout"):
        load_config(None, {"data.validation_holdout": value})


def test_validation_holdout_and_validation_files_exclude_each_other():
    with pytest.raises(ValueError, match="at most one of `data.validation_source`"):
        load_config(None, {"data.validation_holdout": 10, "data.validation_source": "valid.de"})


def test_split_off_holds_out_the_last_examples():
    numbers = tf.data.Dataset.range(10)
    kept, held_out, counts = split_off(numbers, 3)
    assert [int(x) for x in kept] == list(range(7))
    assert [int(x) for x in held_out] == [7, 8, 9]
    assert (counts.total, counts.held_out, counts.kept) == (10, 3, 7)
    # A dataset of unknown length is counted; a fraction rounds, to one example at least.
    unknown = numbers.filter(lambda x: True)
    _, held_out, counts = split_off(unknown, 0.01)
    assert [int(x) for x in held_out] == [9] and counts.total == 10
    with pytest.raises(ValueError, match="fewer"):
        split_off(numbers, 10)


@pytest.mark.parametrize("value", [0, -1, 2.5])
def test_batch_shuffle_buffer_size_must_be_a_positive_count_or_null(value):
    with pytest.raises(ValueError, match="data.batch_shuffle_buffer_size"):
        load_config(None, {"data.batch_shuffle_buffer_size": value})
    assert load_config(None, {}).data.batch_shuffle_buffer_size is None


@pytest.mark.parametrize("value", [0, 1.5, "often"])
def test_subword_sampling_must_be_a_probability_or_null(value):
    with pytest.raises(ValueError, match="data.subword_sampling"):
        load_config(None, {"data.subword_sampling": value})
    assert load_config(None, {"data.subword_sampling": 0.2}).data.subword_sampling == 0.2
