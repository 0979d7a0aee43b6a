"""sacreBLEU scoring (`keras_transformer.evaluation`)."""

import json

import pytest
import sacrebleu

from keras_transformer.evaluation import (
    evaluate_translator,
    score_corpus,
    score_sentences,
    write_details,
)

HYPOTHESES = ["The cat sat on the mat.", "A dog is running in the park", "Two men play."]
REFERENCES = ["The cat sat on a mat.", "A dog runs in the park.", "Two men are playing."]


def test_identical_text_scores_100():
    result = score_corpus(REFERENCES, REFERENCES, metrics=("bleu", "chrf", "chrf++"))
    assert result.scores == {
        "bleu": pytest.approx(100.0),
        "chrf": pytest.approx(100.0),
        "chrf++": pytest.approx(100.0),
    }
    assert result.num_sentences == 3


def test_scores_match_sacrebleu():
    result = score_corpus(HYPOTHESES, REFERENCES, metrics=("bleu", "chrf", "ter"))
    assert result.scores["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score
    )
    assert result.scores["chrf"] == pytest.approx(
        sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score
    )
    assert result.scores["ter"] == pytest.approx(
        sacrebleu.corpus_ter(HYPOTHESES, [REFERENCES]).score
    )
    assert 0 < result.scores["bleu"] < 100
    lowercase = score_corpus([h.upper() for h in HYPOTHESES], REFERENCES, lowercase=True)
    assert lowercase.scores["bleu"] == pytest.approx(result.scores["bleu"])
    # Two reference streams.
    two = score_corpus(HYPOTHESES, [REFERENCES, HYPOTHESES], metrics=("bleu",))
    assert two.scores["bleu"] == pytest.approx(100.0)
    assert two.signatures["bleu"].startswith("nrefs:2|")


def test_signature_and_format():
    result = score_corpus(HYPOTHESES, REFERENCES)
    version = sacrebleu.__version__
    assert (
        result.signatures["bleu"]
        == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{version}"
    )
    assert result.signatures["chrf"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no")
    lines = result.format().splitlines()
    assert lines[0].startswith(f"BLEU|{result.signatures['bleu']} = {result.scores['bleu']:.2f}")
    assert lines[1].startswith("chrF2|")
    assert json.loads(json.dumps(result.to_dict()))["scores"] == result.scores


def test_sentence_scores_and_details_file(tmp_path):
    rows = score_sentences(HYPOTHESES, REFERENCES)
    assert len(rows) == 3
    for hypothesis, reference, row in zip(HYPOTHESES, REFERENCES, rows):
        expected = sacrebleu.sentence_bleu(hypothesis, [reference]).score
        assert row["bleu"] == pytest.approx(expected)
        assert row["chrf"] == pytest.approx(sacrebleu.sentence_chrf(hypothesis, [reference]).score)
    path = write_details(
        str(tmp_path / "sub" / "details.jsonl"), HYPOTHESES, REFERENCES, ["a", "b", "c"]
    )
    records = [json.loads(line) for line in open(path, encoding="utf-8")]
    assert [r["hypothesis"] for r in records] == HYPOTHESES
    assert [r["source"] for r in records] == ["a", "b", "c"]
    assert [r["bleu"] for r in records] == pytest.approx([r["bleu"] for r in rows])


def test_evaluate_translator_writes_files(tmp_path):
    class Echo:
        def translate(self, sentences, progress=False):
            return [s.replace("Ein", "A") for s in sentences]

    sources = ["Ein dog runs.", "Ein cat sleeps."]
    output, details = tmp_path / "hyp.txt", tmp_path / "details.jsonl"
    result = evaluate_translator(
        Echo(),
        sources,
        ["A dog runs.", "A cat sleeps."],
        output_file=str(output),
        details_file=str(details),
    )
    assert result.scores["bleu"] == pytest.approx(100.0)
    assert output.read_text(encoding="utf-8").splitlines() == ["A dog runs.", "A cat sleeps."]
    assert len(details.read_text(encoding="utf-8").splitlines()) == 2


def test_invalid_inputs():
    with pytest.raises(ValueError, match="expected names among"):
        score_corpus(HYPOTHESES, REFERENCES, metrics=("meteor",))
    with pytest.raises(ValueError, match="3 hypotheses and 2 references"):
        score_corpus(HYPOTHESES, REFERENCES[:2])
    with pytest.raises(ValueError, match="not a single string"):
        score_corpus(HYPOTHESES, "The cat sat on a mat.")
    # sacreBLEU's IndexError on an empty corpus (an empty test file) was let through.
    with pytest.raises(ValueError, match="Received no sentences to score"):
        score_corpus([], [])


def test_the_printed_score_is_the_written_files(tmp_path):
    """A hypothesis with a newline is written as one line, and scored as written: the score
    printed is sacreBLEU's of the --output file (13a reads "-\n" and "- " apart)."""
    from keras_transformer.evaluation import write_hypotheses

    hypotheses, references = ["A well-\nknown dog."], ["A well-known dog."]
    path = write_hypotheses(str(tmp_path / "hyp.txt"), hypotheses)
    with open(path, encoding="utf-8") as f:
        written = f.read().splitlines()
    expected = sacrebleu.corpus_bleu(written, [references]).score
    assert written == ["A well- known dog."]
    assert score_corpus(hypotheses, references, ("bleu",)).scores["bleu"] == expected
    assert score_sentences(hypotheses, references, ("bleu",))[0]["bleu"] == pytest.approx(
        sacrebleu.sentence_bleu(written[0], references).score
    )
