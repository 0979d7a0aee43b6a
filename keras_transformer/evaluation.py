"""Corpus evaluation with sacreBLEU: BLEU, chrF (and chrF++, TER) on detokenized text.

Scores are computed on the detokenized translations against the raw references, with
sacreBLEU's own tokenization (`13a` for BLEU by default), so they are comparable with
published numbers; every result carries sacreBLEU's signature
(`nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`), which says exactly how it
was computed.

Public API:

- `score_corpus(hypotheses, references, metrics=("bleu", "chrf"), ...) -> EvaluationResult`.
- `score_sentences(hypotheses, references, metrics=...) -> list[dict[str, float]]`.
- `write_hypotheses(path, hypotheses)`: one translation per line (what `sacrebleu` reads).
- `write_details(path, hypotheses, references, sources=None, metrics=...)`: one JSON object
  per sentence with its source, reference, hypothesis and sentence-level scores.
- `evaluate_translator(translator, sources, references, ...) -> EvaluationResult`:
  translate, score, and optionally write both files.

Example:

```python
result = score_corpus(["A dog runs."], ["A dog runs."])
result.scores  # {"bleu": 100.0, "chrf": 100.0}
print(result.format())
# BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0 = 100.00 ...
```
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from keras_transformer import storage

logger = logging.getLogger(__name__)

METRICS = ("bleu", "chrf", "chrf++", "ter")


@dataclass
class EvaluationResult:
    """What every task's evaluation returns (`keras_transformer.runner.evaluate_run`).

    Attributes:
        scores: metric name -> corpus score (sacreBLEU's 0-100 for translation; accuracy,
            perplexity and loss for the other tasks), the task's main metric first.
        signatures: metric name -> sacreBLEU signature string (translation).
        details: metric name -> its line of `format()` (sacreBLEU's full line for
            translation, e.g. BLEU's n-gram precisions).
        num_sentences: number of scored sentences (examples).
        hypotheses: the scored hypotheses (translation).
        task: the run's task.
        data: what was scored (`"<source>:<split>"` or a file), when known.
        settings: how it was produced (a translation's decoding method, beam size, ...).
    """

    scores: dict[str, float]
    signatures: dict[str, str]
    details: dict[str, str]
    num_sentences: int
    hypotheses: list[str] = field(default_factory=list, repr=False)
    task: str = "translation"
    data: str = ""
    settings: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of_scores(
        cls, scores: dict[str, float], *, task: str, data: str, num_sentences: int, main: str
    ) -> EvaluationResult:
        """A result of plain scores (no sacreBLEU signature), `main` first."""
        names = [main] + sorted(k for k in scores if k != main)
        ordered = {name: scores[name] for name in names}
        details = {name: f"{name} = {value:.4f}" for name, value in ordered.items()}
        return cls(ordered, {}, details, num_sentences, task=task, data=data)

    def format(self) -> str:
        """One line per metric (as sacreBLEU prints it for translation), after a line that
        says what was scored when `data` is known."""
        lines = [self.details[name] for name in self.scores]
        if self.data:
            lines.insert(0, f"{self.task} on {self.data} ({self.num_sentences} sentences)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Scores, signatures and details as a JSON-serializable dict."""
        return {
            "task": self.task,
            "data": self.data,
            "scores": dict(self.scores),
            "signatures": dict(self.signatures),
            "details": dict(self.details),
            "num_sentences": self.num_sentences,
            **self.settings,
        }


def _check_metrics(metrics: Sequence[str]) -> tuple[str, ...]:
    if isinstance(metrics, str):
        metrics = (metrics,)
    metrics = tuple(m.lower() for m in metrics)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown or not metrics:
        raise ValueError(
            f"Received an invalid value for argument `metrics`, expected names among "
            f"{METRICS}. Received: metrics={list(metrics)}"
        )
    return metrics


def one_line(text: Any) -> str:
    """A hypothesis as one line, as `write_hypotheses` writes it and sacreBLEU reads it
    back (newlines inside it become spaces): scored so, the printed score is the file's."""
    return " ".join(str(text).splitlines())


def _reference_streams(
    references: Sequence[str] | Sequence[Sequence[str]], num_hypotheses: int
) -> list[list[str]]:
    """One reference per sentence (a list of str) or several streams (a list of lists)."""
    if isinstance(references, str):
        raise ValueError(
            "Received an invalid value for argument `references`, expected a list of "
            "strings (one reference per sentence), not a single string."
        )
    references = list(references)
    if references and not isinstance(references[0], str):
        streams = [list(stream) for stream in references]
    else:
        streams = [references]
    for i, stream in enumerate(streams):
        if len(stream) != num_hypotheses:
            raise ValueError(
                "Received references and hypotheses of different lengths, expected one "
                f"reference per hypothesis. Received: {num_hypotheses} hypotheses and "
                f"{len(stream)} references (stream {i})"
            )
    return streams


def _metric(name: str, lowercase: bool, tokenize: str | None, sentence_level: bool = False):
    from sacrebleu.metrics import BLEU, CHRF, TER

    if name == "bleu":
        kwargs: dict[str, Any] = {"lowercase": lowercase, "effective_order": sentence_level}
        if tokenize is not None:
            kwargs["tokenize"] = tokenize
        return BLEU(**kwargs)
    if name == "chrf":
        return CHRF(lowercase=lowercase)
    if name == "chrf++":
        return CHRF(word_order=2, lowercase=lowercase)
    return TER(case_sensitive=not lowercase)


def score_corpus(
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    metrics: Sequence[str] = ("bleu", "chrf"),
    *,
    lowercase: bool = False,
    tokenize: str | None = None,
) -> EvaluationResult:
    """Corpus-level sacreBLEU scores of detokenized hypotheses against raw references.

    Args:
        hypotheses: one detokenized translation per sentence.
        references: one raw reference per sentence, or several reference streams (a list
            of such lists).
        metrics: names among `"bleu"`, `"chrf"`, `"chrf++"`, `"ter"`.
        lowercase: case-insensitive scores.
        tokenize: sacreBLEU's BLEU tokenizer (`"13a"` by default, `"intl"`, `"zh"`, ...).

    Returns:
        An `EvaluationResult`.

    Example:
    >>> round(score_corpus(["the cat sat on the mat"], ["the cat sat on the mat"]).scores["bleu"])
    100
    """
    metrics = _check_metrics(metrics)
    hypotheses = [one_line(h) for h in hypotheses]
    if not hypotheses:
        # sacreBLEU fails on an empty corpus with an IndexError.
        raise ValueError(
            "Received no sentences to score, expected at least one hypothesis and its "
            "reference (an empty file or data set?)."
        )
    streams = _reference_streams(references, len(hypotheses))
    scores, signatures, details = {}, {}, {}
    for name in metrics:
        metric = _metric(name, lowercase, tokenize)
        result = metric.corpus_score(hypotheses, streams)
        signature = str(metric.get_signature())
        scores[name] = float(result.score)
        signatures[name] = signature
        details[name] = result.format(signature=signature)
    return EvaluationResult(scores, signatures, details, len(hypotheses), hypotheses)


def score_sentences(
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    metrics: Sequence[str] = ("bleu", "chrf"),
    *,
    lowercase: bool = False,
    tokenize: str | None = None,
) -> list[dict[str, float]]:
    """Sentence-level scores (BLEU with effective order), one dict per sentence."""
    metrics = _check_metrics(metrics)
    streams = _reference_streams(references, len(hypotheses))
    objects = {name: _metric(name, lowercase, tokenize, sentence_level=True) for name in metrics}
    rows = []
    for i, hypothesis in enumerate(hypotheses):
        refs = [stream[i] for stream in streams]
        rows.append(
            {
                name: float(m.sentence_score(one_line(hypothesis), refs).score)
                for name, m in objects.items()
            }
        )
    return rows


def write_hypotheses(path: str, hypotheses: Sequence[str]) -> str:
    """Writes one hypothesis per line (newlines inside a hypothesis become spaces)."""
    with storage.open_for_writing(path) as f:
        for hypothesis in hypotheses:
            f.write(one_line(hypothesis) + "\n")
    logger.info("Wrote %d translations to %s", len(hypotheses), path)
    return path


def write_details(
    path: str,
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    sources: Sequence[str] | None = None,
    metrics: Sequence[str] = ("bleu", "chrf"),
    *,
    lowercase: bool = False,
    tokenize: str | None = None,
) -> str:
    """Writes one JSON object per line and sentence: index, source, references, hypothesis,
    and the sentence-level scores of `metrics`."""
    streams = _reference_streams(references, len(hypotheses))
    rows = score_sentences(hypotheses, references, metrics, lowercase=lowercase, tokenize=tokenize)
    with storage.open_for_writing(path) as f:
        for i, (hypothesis, scores) in enumerate(zip(hypotheses, rows)):
            record: dict[str, Any] = {"index": i}
            if sources is not None:
                record["source"] = sources[i]
            record["reference"] = streams[0][i] if len(streams) == 1 else [s[i] for s in streams]
            record["hypothesis"] = hypothesis
            record.update(scores)
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    logger.info("Wrote per-sentence scores of %d sentences to %s", len(hypotheses), path)
    return path


def evaluate_translator(
    translator,
    sources: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    metrics: Sequence[str] = ("bleu", "chrf"),
    *,
    output_file: str | None = None,
    details_file: str | None = None,
    lowercase: bool = False,
    tokenize: str | None = None,
    progress: bool = False,
) -> EvaluationResult:
    """Translates `sources` and scores the translations against `references`.

    Args:
        translator: anything with `translate(list[str], progress=...) -> list[str]`
            (a `keras_transformer.predictors.Translator`).
        sources: the source sentences.
        references: their references (one per sentence, or several streams).
        metrics: names among `"bleu"`, `"chrf"`, `"chrf++"`, `"ter"`.
        output_file: if set, the translations are written there, one per line.
        details_file: if set, per-sentence JSON lines (see `write_details`).
        lowercase: case-insensitive scores.
        tokenize: sacreBLEU's BLEU tokenizer.
        progress: show a progress bar while translating.

    Returns:
        An `EvaluationResult` (its `hypotheses` are the translations).

    Example (not run as a doctest: it needs a trained translator):

    ```python
    result = evaluate_translator(translator, sources, references)
    print(result.format())
    ```
    """
    metrics = _check_metrics(metrics)
    sources = list(sources)
    _reference_streams(references, len(sources))
    for path in (output_file, details_file):
        if path:
            storage.check_file(path, reading=False)  # before the decoding it would hold
    hypotheses = translator.translate(sources, progress=progress)
    result = score_corpus(hypotheses, references, metrics, lowercase=lowercase, tokenize=tokenize)
    if output_file:
        write_hypotheses(output_file, hypotheses)
    if details_file:
        write_details(
            details_file,
            hypotheses,
            references,
            sources,
            metrics,
            lowercase=lowercase,
            tokenize=tokenize,
        )
    for line in result.format().splitlines():
        logger.info("%s", line)
    return result
