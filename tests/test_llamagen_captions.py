"""LlamaGen's caption cleaner against the released one's outputs.

tests/data/llamagen_captions.json holds (caption, released output) pairs computed with LlamaGen's own
`T5Embedder.text_preprocessing` (FoundationVision/LlamaGen, `language/t5.py`: `clean_caption` twice):
every PartiPrompt (24 of 1,632) and every caption of LlamaGen's COCO-30k list (101 of 30,000) whose
cleaned text differs from the plain lower-cased, whitespace-collapsed caption, hand-written cases
for each rule of the cleaner, and random strings built from the pieces those rules react to. On the
full lists and on 30,000 such random strings our cleaner gave the released text every time
(docs/MODELS.md); the file keeps the cases that differ from the plain form, where a simplified
cleaner would fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("ftfy")
pytest.importorskip("bs4")

from sjdbench.errors import UserError  # noqa: E402
from sjdbench.models import captions  # noqa: E402
from sjdbench.models.captions import clean_caption, clean_caption_once  # noqa: E402

CASES = json.loads((Path(__file__).parent / "data" / "llamagen_captions.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("group", ["parti_differs_from_plain", "coco30k_differs_from_plain", "crafted", "random"])
def test_every_caption_gets_the_released_text(group):
    pairs = CASES[group]
    assert pairs, group
    ours = [clean_caption(caption) for caption, _ in pairs]
    wrong = [(caption, expected, got) for (caption, expected), got in zip(pairs, ours) if got != expected]
    assert not wrong, f"{len(wrong)} of {len(pairs)} differ, e.g. {wrong[:3]}"


def test_the_captions_the_simplification_got_wrong():
    assert clean_caption("A set of 2x2 emoji icons") == "a set of emoji icons"  # a size pattern is removed
    assert clean_caption("A book on birds sitting on a shelf..") == "a book on birds sitting on a shelf"
    assert clean_caption("a fence offering food to an elephant,") == "a fence offering food to an elephant"
    assert clean_caption("James Smith & Sons store") == "james smith sons store"
    assert clean_caption("U.S. 101") == "u. s. 101"
    assert clean_caption("a corgi’s head") == "a corgi's head"


def test_plain_captions_are_only_lower_cased_and_collapsed():
    assert clean_caption("  A photo of an astronaut\triding a horse.  ") == "a photo of an astronaut riding a horse."


def test_the_cleaner_runs_twice_as_in_training():
    """One pass removes one trailing separator; the second removes the next one."""
    assert clean_caption_once("cat,,") == "cat,"
    assert clean_caption("cat,,") == "cat"


def test_missing_libraries_give_one_line(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_bs4(name, *args, **kwargs):
        if name == "bs4":
            raise ImportError("No module named 'bs4'", name="bs4")
        return real_import(name, *args, **kwargs)

    captions._libraries.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_bs4)
    try:
        with pytest.raises(UserError, match=r"beautifulsoup4 \(bs4 is missing\): pip install 'sjdbench\[models\]'"):
            clean_caption("a cat")
    finally:
        monkeypatch.undo()
        captions._libraries.cache_clear()
