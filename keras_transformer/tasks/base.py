"""`Task`: what one task (translation, tagging, classification, language modelling) owns,
so that training, evaluation, prediction and export run one path for every task.

A task owns its config section (`config.task_sections`), loading a split, the texts its
tokenizers learn from, the encoding of its training batches (the same functions its
predictor encodes with, `keras_transformer.data`), its model, loss and metrics, its
callbacks, its evaluation, its predictor and its export signatures. The code that drives
tasks (`keras_transformer.runner`, `keras_transformer.export`, the commands) never
branches on a task's name: it asks the task (`tasks.get_task`).
"""

from __future__ import annotations

import abc
import dataclasses
import logging
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import keras
import tensorflow as tf

from keras_transformer.data.batching import bucket_batches, default_bucket_lengths
from keras_transformer.data.examples import Component, check_examples
from keras_transformer.data.task_sources import TaskData
from keras_transformer.evaluation import EvaluationResult
from keras_transformer.run_dir import RunPaths
from keras_transformer.tokenization.tokenizer import SubwordTokenizer

logger = logging.getLogger(__name__)


class Task(abc.ABC):
    """One task of the package, built from an `ExperimentConfig` whose `task` is `name`.

    Class attributes:
        name: the task's name (`constants.TASKS`, the config's `task`).
        model_name: the default TF Serving model name of its exports.
        predictor_class: its predictor (`keras_transformer.predictors`).
        main_metric: the score `evaluate` reports first.
        decodes: whether its predictor searches (takes decoding options).
        labelled: whether the run keeps label names (`labels.txt`).
        hard_vocab_limit: whether `data.vocab_size` is exact (else a most: a recipe
            sized for its TFDS dataset also trains on the much smaller offline set).
        example_spec: the components of its raw examples (`data.examples`), as its loaders
            yield them and `train`'s own data must be.

    Args:
        config: the experiment config.
    """

    name: ClassVar[str]
    model_name: ClassVar[str]
    predictor_class: ClassVar[type]
    main_metric: ClassVar[str]
    decodes: ClassVar[bool] = False
    labelled: ClassVar[bool] = False
    hard_vocab_limit: ClassVar[bool] = True
    example_spec: ClassVar[tuple[Component, ...]]

    def __init__(self, config: Any) -> None:
        if config.task != self.name:
            raise ValueError(f"Received a config of task {config.task!r} for the {self.name} task.")
        self.config = config

    @property
    def section(self) -> Any:
        """The config's section of this task (`config.translation`, ...)."""
        return self.config.section

    # Data.

    @abc.abstractmethod
    def load_data(self, split: str, *, validation: bool = False) -> TaskData:
        """The raw examples of a split (`validation`: the validation data's source)."""

    def load_split(
        self, split: str, *, validation: bool = False, limit: int | None = None
    ) -> TaskData:
        """`load_data`'s split, its first `limit` examples when given."""
        data = self.load_data(split, validation=validation)
        return _first(data, limit)

    @property
    def reads_local_files(self) -> bool:
        """Whether `data.source` names local files, which have no splits (their validation
        data is `data.validation_source` or a holdout)."""
        return False

    def has_validation_data(self) -> bool:
        """Whether the config names validation data apart from the training data."""
        return self.config.data.validation_split is not None

    def load_training_data(
        self, given: tuple[TaskData, TaskData | None] | None = None
    ) -> tuple[TaskData, TaskData | None]:
        """The training data and the validation data (None: train without validation).

        The data is the config's splits, or `given` (`(train, validation or None)`, a
        caller's own). With `data.validation_holdout` and no validation data given, the
        validation data is the last part of the training data (`data.holdout.split_off`),
        held out before `max_train_examples` applies. Without validation data (local files
        without `validation_source`, or given data without validation), the run trains
        without validation and logs so in one line: it never validates on training data.
        """
        d = self.config.data
        train, validation = given if given is not None else (None, None)
        if validation is None and d.validation_holdout is not None:
            train, validation = self._split_off_holdout(train, log=True)
        elif given is None:
            train = self.load_split(d.train_split)
            if self.has_validation_data():
                validation = self.load_split(d.validation_split or "", validation=True)
            elif d.validation_split is not None:
                logger.warning(
                    "No validation data: %s has no split %r (local files); training without "
                    "validation. Set data.validation_source (the validation files) or "
                    "data.validation_holdout (a fraction or a number of training examples to "
                    "hold out).",
                    train.origin,
                    d.validation_split,
                )
        elif validation is None:
            logger.warning(
                "No validation data: training without validation (pass `validation_data` or "
                "set data.validation_holdout)."
            )
        return (
            _first(train, d.max_train_examples),
            None if validation is None else _first(validation, d.max_validation_examples),
        )

    def load_evaluation_data(self, split: str, *, limit: int | None = None) -> TaskData:
        """The examples `evaluate` scores for `split`: the validation data as in training
        (the holdout, or `data.validation_source`) when `split` is `data.validation_split`,
        else the split itself.

        Raises:
            ValueError: for the validation split of local files when the run had no
                validation data (it would be the training data).
        """
        d = self.config.data
        if split == d.validation_split and d.validation_holdout is not None:
            return _first(self._split_off_holdout(None, log=False)[1], limit)
        if split == d.validation_split and self.reads_local_files:
            if not self.has_validation_data():
                raise ValueError(
                    f"Received split {split!r} for a run on local files ({d.source}) trained "
                    "without validation data (it would score training data), expected test "
                    "files: `--source-file FILE --reference-file FILE` (in Python, "
                    "`source_file=`, `reference_file=`)."
                )
            return self.load_split(split, validation=True, limit=limit)
        return self.load_split(split, limit=limit)

    def _split_off_holdout(self, data: TaskData | None, *, log: bool) -> tuple[TaskData, TaskData]:
        """`data` (None: the training split) less its holdout, and the holdout."""
        from keras_transformer.data.holdout import split_off

        d = self.config.data
        data = data or self.load_split(d.train_split)
        kept, held_out, counts = split_off(data.dataset, d.validation_holdout)
        if log:
            logger.info(
                "Validation data: the last %d of the %d examples of %s (data.validation_holdout"
                "=%s); training on the first %d.",
                counts.held_out,
                counts.total,
                data.origin,
                d.validation_holdout,
                counts.kept,
            )
        return (
            dataclasses.replace(data, dataset=kept),
            dataclasses.replace(data, dataset=held_out, origin=f"{data.origin} (holdout)"),
        )

    @classmethod
    def check_examples(cls, dataset: Any, argument: str) -> None:
        """Refuses a dataset (`argument`: its name in the error) whose elements are not the
        task's raw examples (`example_spec`).

        Raises:
            ValueError: naming `argument`, the expected and the received element spec.
        """
        check_examples(dataset, cls.example_spec, argument)

    @abc.abstractmethod
    def tokenizer_texts(self, data: TaskData) -> tf.data.Dataset:
        """`(source_text, target_text)` string pairs the tokenizers learn from (a single
        tokenizer learns from the first, with `shared_vocab`)."""

    @property
    def shared_vocab(self) -> bool:
        """One tokenizer for both sides (saved as both of the run's tokenizers)."""
        return True

    @abc.abstractmethod
    def encode(
        self,
        dataset: tf.data.Dataset,
        tokenizers: tuple[Any, Any],
        *,
        labels: tuple[str, ...] | None = None,
        origin: str = "the data",
    ) -> tf.data.Dataset:
        """The task's raw examples as `(x, y)` examples of 1-D int32 tensors (or scalar
        labels), encoded as its predictor encodes (`data.encoding`). With `labels` (a task
        with labels), an id outside them, met as the examples are encoded, raises
        `tf.errors.InvalidArgumentError` naming `origin` (the data) and the range."""

    def make_batches(
        self,
        data: TaskData,
        tokenizers: tuple[Any, Any],
        *,
        shuffle: bool,
        batch_size: int | None = None,
        drop_remainder: bool = False,
        sample_subwords: bool = False,
    ) -> tf.data.Dataset:
        """The encoded, length-bucketed, padded `(x, y)` batches of `data`
        (`data.batching.bucket_batches`), as the config's `data` section says
        (`batch_size` overrides it) up to the section's longest example;
        `drop_remainder` keeps full batches only (with `data.pad_to_bucket`, a fixed set of
        shapes, as XLA wants). With `sample_subwords` and `data.subword_sampling` set, each
        pass tokenizes the (cached) text anew with sampled segmentations, so the batches,
        and their number, change from pass to pass; otherwise the encoded examples are
        cached."""
        d, longest = self.config.data, self.section.longest
        sampling = d.subword_sampling if sample_subwords else None
        dataset = data.dataset
        if sampling is not None:
            dataset = dataset.cache()
            tokenizers = tuple(
                t.with_sampling(sampling) if isinstance(t, SubwordTokenizer) else t
                for t in tokenizers
            )
        return bucket_batches(
            self.encode(dataset, tokenizers, labels=data.labels, origin=data.origin),
            batch_size=batch_size or d.batch_size,
            tokens_per_batch=None if batch_size else d.tokens_per_batch,
            bucket_lengths=default_bucket_lengths(longest, d.bucket_step),
            max_length=longest,
            pad_to_bucket=d.pad_to_bucket,
            shuffle=shuffle,
            shuffle_buffer_size=d.shuffle_buffer_size,
            batch_shuffle_buffer_size=d.batch_shuffle_buffer_size,
            seed=self.config.training.seed,
            drop_remainder=drop_remainder,
            cache=sampling is None,
        )

    # Model.

    @abc.abstractmethod
    def build_model(
        self,
        tokenizers: tuple[Any, Any],
        labels: tuple[str, ...] | None,
        *,
        remat: bool | None = None,
        dtype_policy: str | None = None,
    ) -> keras.Model:
        """The built training model (`training.models`), under the current strategy scope."""

    @classmethod
    @abc.abstractmethod
    def loss_and_metrics(cls, label_smoothing: float) -> tuple[Any, list[Any]]:
        """`(loss, metrics)` for `compile`."""

    def callbacks(
        self,
        validation: TaskData | None,
        tokenizers: tuple[Any, Any],
        paths: RunPaths,
        *,
        start: float,
        chief: bool,
    ) -> list[keras.callbacks.Callback]:
        """The task's own training callbacks (validation BLEU for translation)."""
        return []

    # After training.

    def evaluate(
        self,
        run_dir: str,
        split: str,
        *,
        max_examples: int | None = None,
        batch_size: int | None = None,
        progress: bool = False,
        data: TaskData | None = None,
    ) -> EvaluationResult:
        """Scores the run's model on a split of the config's data, or on `data` (its first
        `max_examples` examples) with Keras' `evaluate` and the task's metrics, the loss
        unsmoothed: the main metric, the others, and `loss` (Keras' per-batch average);
        `progress` shows Keras' progress bar. A task that scores otherwise (translation:
        sacreBLEU on translations) overrides it, with options of its own."""
        from keras_transformer.run_dir import load_run, read_labels

        model, tokenizer, _ = load_run(run_dir)
        if data is None:
            data = self.load_evaluation_data(split, limit=max_examples)
        else:
            data = _first(data, max_examples)
        if self.labelled and data.labels != read_labels(run_dir):
            raise ValueError(
                f"Received data whose labels {list(data.labels)} differ from the run's "
                f"{list(read_labels(run_dir))} ({data.origin})."
            )
        batches = self.make_batches(
            data, (tokenizer, tokenizer), shuffle=False, batch_size=batch_size
        )
        count = count_examples(batches)
        if count == 0:
            raise ValueError(f"Received an empty split {split!r} of {data.origin}.")
        batches = batches.apply(tf.data.experimental.assert_cardinality(count))
        loss, metrics = self.loss_and_metrics(label_smoothing=0.0)
        model.compile(loss=loss, metrics=metrics)
        scores = model.evaluate(batches, verbose=1 if progress else 0, return_dict=True)
        return EvaluationResult.of_scores(
            {k: float(v) for k, v in scores.items()},
            task=self.name,
            data=f"{data.origin}:{split}",
            num_sentences=count_examples(data.dataset),
            main=self.main_metric,
        )

    @classmethod
    def load_predictor(cls, run_dir: str, **options: Any) -> Any:
        """The run's predictor (`options`: its arguments, e.g. the decoding settings)."""
        return cls.predictor_class.from_run_dir(run_dir, **options)

    @classmethod
    @abc.abstractmethod
    def serving_endpoints(cls, predictor: Any) -> dict[str, tf.types.experimental.GenericFunction]:
        """The export's signatures: name -> `tf.function` with an input signature."""

    @classmethod
    def signature_methods(cls) -> dict[str, str]:
        """The export's signatures whose SignatureDef `method_name` is not the
        `tensorflow/serving/predict` that TF2 writes for every signature (TF Serving's
        Classify and Regress APIs look for theirs): name -> method name."""
        return {}

    @classmethod
    @abc.abstractmethod
    def export_info(cls, predictor: Any) -> dict[str, Any]:
        """What `export_info.json` records beyond the task's name, the versions and the
        signatures (`export.export_predictor` adds those)."""

    @classmethod
    def export_track(cls, predictor: Any) -> list[Any]:
        """What the SavedModel tracks: the model and the tokenizers (tf-text resources)."""
        tokenizers = list(dict.fromkeys(_tokenizers_of(predictor)))
        return [predictor.model, *tokenizers]

    @classmethod
    @abc.abstractmethod
    def predict_lines(
        cls,
        predictor: Any,
        texts: Sequence[str],
        *,
        nbest: int | None = None,
        progress: bool = False,
    ) -> Iterator[str]:
        """What `keras-transformer predict` writes for `texts`, one string a line (`nbest`:
        the N best of a search, where the task decodes)."""


def _first(data: TaskData, limit: int | None) -> TaskData:
    """`data`'s first `limit` examples (all of them when None)."""
    return dataclasses.replace(data, dataset=data.dataset.take(limit)) if limit else data


def _tokenizers_of(predictor: Any) -> list[Any]:
    names = ("source_tokenizer", "target_tokenizer", "tokenizer")
    return [getattr(predictor, n) for n in names if getattr(predictor, n, None) is not None]


def count_examples(dataset: tf.data.Dataset) -> int:
    """The examples of a finite dataset (iterates it once)."""
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))
