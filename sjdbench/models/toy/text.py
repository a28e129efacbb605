"""Word-level caption tokenizer for the toy model.

Why words and not characters: the toy grammar has 40 words, so a caption is about 20 word tokens
(at most 32) instead of about 95 characters. A 4-layer model conditions far more easily on "circle"
as one token than on a spelled word, and the shorter prefix makes a training step 1.7x cheaper. The
ids live in the adapter's text range (5..100), so the vocabulary layout of `llama_adapter` is
unchanged. Words and numbers outside the grammar map to <unk>, which the model never saw in
training; punctuation other than the comma is dropped.
"""

from __future__ import annotations

import re
from typing import Callable

from sjdbench.models.llama_adapter import N_TEXT, TEXT_OFFSET, encode_text

UNK = "<unk>"
_WORD_RE = re.compile(r"[a-z0-9]+|,")


class WordTokenizer:
    """caption -> text ids in [TEXT_OFFSET, TEXT_OFFSET + N_TEXT)."""

    def __init__(self, vocab: list[str]) -> None:
        if len(vocab) > N_TEXT:
            raise ValueError(f"{len(vocab)} words do not fit the adapter's {N_TEXT} text ids")
        if vocab[0] != UNK:
            raise ValueError(f"the first word of the vocabulary must be {UNK}")
        self.vocab = list(vocab)
        self._ids = {w: TEXT_OFFSET + i for i, w in enumerate(vocab)}

    def __call__(self, text: str) -> list[int]:
        unk = self._ids[UNK]
        return [self._ids.get(w, unk) for w in _WORD_RE.findall(text.lower())]


def caption_encoder(kind: str, vocab: list[str] | None = None) -> Callable[[str], list[int]]:
    """ "words" (with that vocabulary: the one recorded with the weights) or "chars" (printable ASCII)."""
    if kind == "words":
        if not vocab:
            raise ValueError("word captions need the vocabulary recorded with the weights (toy.json: text.vocab)")
        return WordTokenizer(vocab)
    if kind == "chars":
        return encode_text
    raise ValueError(f"unknown caption tokenization {kind!r}; valid: words, chars")
