"""Generated offline datasets for the tagging, classification and language-modelling tasks.

A small toy English, generated deterministically (Python's `random.Random`, seeded per
split), so the task recipes train without a network connection and the tests learn from
the same data everywhere:

- `synthetic_pos`: sentences with one part-of-speech tag per word (universal tags). Some
  words are nouns or verbs depending on the context ("they watch the film" / "the watch
  is old"), so a tagger has to read the neighbours.
- `synthetic_sentiment`: one- to three-sentence reviews labelled `negative` or
  `positive` by the polarity of their adjectives and verbs, an adjective's flipped by a
  `not` before it ("the film was not good").
- `synthetic_text`: paragraphs of two to four sentences, for a language model.

Splits are `train`, `validation` (alias `dev`) and `test`, each from its own seed, with an
optional TFDS-style slice: `train[:50%]`, `train[100:200]`.

Example:
>>> words, tags = synthetic_tagging("train[:2]")
>>> len(words), [len(w) == len(t) for w, t in zip(words, tags)]
(2, [True, True])
>>> texts, labels = synthetic_classification("test[:2]")
>>> texts[1], CLASSIFICATION_LABELS[labels[1]]
('Every park is wonderful.', 'positive')
>>> synthetic_classification("test[1:2]")[0] == texts[1:]  # slices of the same split
True
"""

from __future__ import annotations

import random
import re

# Universal POS tags used (a subset of Universal Dependencies' UPOS).
POS_TAGS = ("ADJ", "ADP", "ADV", "AUX", "DET", "NOUN", "PART", "PRON", "PUNCT", "VERB")
CLASSIFICATION_LABELS = ("negative", "positive")

SPLIT_SIZES = {"train": 8000, "validation": 500, "test": 500}
_SPLIT_SEEDS = {"train": 11, "validation": 23, "test": 37}
_SPLIT_ALIASES = {"dev": "validation", "val": "validation"}

# word -> polarity (+1, -1 or 0).
_ADJECTIVES = {
    "good": 1,
    "great": 1,
    "wonderful": 1,
    "lovely": 1,
    "excellent": 1,
    "charming": 1,
    "bad": -1,
    "terrible": -1,
    "awful": -1,
    "boring": -1,
    "dull": -1,
    "poor": -1,
    "old": 0,
    "new": 0,
    "red": 0,
    "small": 0,
    "big": 0,
    "quiet": 0,
}
# Nouns; those in `_AMBIGUOUS` are also verbs (base form).
_NOUNS = ("film", "book", "dog", "city", "song", "watch", "play", "cook", "park", "garden")
_AMBIGUOUS = ("watch", "play", "cook", "film", "book")
# Verbs: base form -> (third person singular, polarity).
_VERBS = {
    "love": ("loves", 1),
    "like": ("likes", 1),
    "hate": ("hates", -1),
    "dislike": ("dislikes", -1),
    "see": ("sees", 0),
    "find": ("finds", 0),
    "watch": ("watches", 0),
    "play": ("plays", 0),
    "cook": ("cooks", 0),
    "film": ("films", 0),
    "book": ("books", 0),
}
_DETERMINERS = ("the", "a", "this", "that", "every", "my")
_PLURAL_PRONOUNS = ("they", "we", "you", "i")
_SINGULAR_PRONOUNS = ("she", "he")
_ADVERBS = ("really", "very", "quite")
_PREPOSITIONS = ("in", "near", "with", "about")
_AUXILIARIES = ("was", "is", "seems")


def _noun_phrase(rng: random.Random, words: list, score: list) -> None:
    words.append((rng.choice(_DETERMINERS), "DET"))
    if rng.random() < 0.5:
        adjective = rng.choice(sorted(_ADJECTIVES))
        words.append((adjective, "ADJ"))
        score[0] += _ADJECTIVES[adjective]
    words.append((rng.choice(_NOUNS), "NOUN"))


def _sentence(rng: random.Random) -> tuple[list[tuple[str, str]], int]:
    """One sentence as (word, tag) pairs, and its polarity."""
    words: list[tuple[str, str]] = []
    score = [0]
    kind = rng.randrange(3)
    if kind == 0:  # the old dog watches a red film in the park .
        _noun_phrase(rng, words, score)
        verb = rng.choice(sorted(_VERBS))
        words.append((_VERBS[verb][0], "VERB"))
        score[0] += _VERBS[verb][1]
        _noun_phrase(rng, words, score)
        if rng.random() < 0.4:
            words.append((rng.choice(_PREPOSITIONS), "ADP"))
            _noun_phrase(rng, words, score)
    elif kind == 1:  # they love the new book .  /  she books a quiet city .
        if rng.random() < 0.7:
            words.append((rng.choice(_PLURAL_PRONOUNS), "PRON"))
            verb = rng.choice(sorted(_VERBS))
            words.append((verb, "VERB"))
        else:
            words.append((rng.choice(_SINGULAR_PRONOUNS), "PRON"))
            verb = rng.choice(sorted(_VERBS))
            words.append((_VERBS[verb][0], "VERB"))
        score[0] += _VERBS[verb][1]
        _noun_phrase(rng, words, score)
    else:  # the watch was not really good .
        _noun_phrase(rng, words, score)
        words.append((rng.choice(_AUXILIARIES), "AUX"))
        negated = rng.random() < 0.35
        if negated:
            words.append(("not", "PART"))
        if rng.random() < 0.4:
            words.append((rng.choice(_ADVERBS), "ADV"))
        adjective = rng.choice(sorted(_ADJECTIVES))
        words.append((adjective, "ADJ"))
        score[0] += -_ADJECTIVES[adjective] if negated else _ADJECTIVES[adjective]
    words.append((rng.choice((".", ".", "!")), "PUNCT"))
    return words, score[0]


def _as_text(sentences: list[list[tuple[str, str]]]) -> str:
    """Sentences as text: capitalized, punctuation attached to the word before it."""
    out = []
    for words in sentences:
        text = " ".join(w for w, _ in words)
        text = re.sub(r" ([.!])", r"\1", text)
        out.append(text[0].upper() + text[1:])
    return " ".join(out)


def _resolve_split(split: str) -> tuple[str, int, int]:
    """`(base split, start, stop)` from `"train"`, `"train[:10%]"`, `"test[5:20]"`."""
    match = re.fullmatch(r"\s*(\w+)\s*(?:\[\s*(-?\d*)\s*(%?)\s*:\s*(-?\d*)\s*(%?)\s*\])?\s*", split)
    base = match and _SPLIT_ALIASES.get(match.group(1), match.group(1))
    if not match or base not in SPLIT_SIZES:
        raise ValueError(
            "Received an invalid value for argument `split`, expected one of "
            f"{tuple(SPLIT_SIZES)} with an optional slice such as '[:50%]' or '[10:20]'. "
            f"Received: split={split!r}"
        )
    size = SPLIT_SIZES[base]

    def bound(value: str, percent: str, default: int) -> int:
        if not value:
            return default
        number = int(value) * size // 100 if percent else int(value)
        return max(0, min(size, number if number >= 0 else size + number))

    return (
        base,
        bound(match.group(2), match.group(3), 0),
        bound(match.group(4), match.group(5), size),
    )


def _examples(split: str, make):
    base, start, stop = _resolve_split(split)
    rng = random.Random(_SPLIT_SEEDS[base])
    return [make(rng) for _ in range(stop)][start:]


def synthetic_tagging(split: str = "train") -> tuple[list[list[str]], list[list[int]]]:
    """`synthetic_pos`: `(words, tags)` per sentence; tags index `POS_TAGS`."""

    def make(rng):
        words, _ = _sentence(rng)
        return [w for w, _ in words], [POS_TAGS.index(t) for _, t in words]

    examples = _examples(split, make)
    return [e[0] for e in examples], [e[1] for e in examples]


def synthetic_classification(split: str = "train") -> tuple[list[str], list[int]]:
    """`synthetic_sentiment`: `(text, label)` per review; labels index
    `CLASSIFICATION_LABELS`. Reviews whose polarity sums to zero are not drawn."""

    def make(rng):
        while True:
            sentences = [_sentence(rng) for _ in range(rng.randint(1, 3))]
            score = sum(s for _, s in sentences)
            if score:
                return _as_text([w for w, _ in sentences]), int(score > 0)

    examples = _examples(split, make)
    return [e[0] for e in examples], [e[1] for e in examples]


def synthetic_text(split: str = "train") -> list[str]:
    """`synthetic_text`: paragraphs of two to four sentences."""
    return _examples(
        split, lambda rng: _as_text([_sentence(rng)[0] for _ in range(rng.randint(2, 4))])
    )
