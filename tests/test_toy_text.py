"""The toy model's word-level caption tokenizer."""

import pytest

from sjdbench.models.llama_adapter import BOI, BOS, N_TEXT, TEXT_OFFSET, prompt_tokens
from sjdbench.models.toy.text import UNK, WordTokenizer
from sjdbench.toyworld.world import grammar_words, render_batch


def test_grammar_captions_have_no_unknown_words():
    tok = WordTokenizer(grammar_words())
    _, captions = render_batch(5, 0, 300)
    for caption in captions:
        ids = tok(caption)
        assert all(TEXT_OFFSET < i < TEXT_OFFSET + N_TEXT for i in ids)  # never <unk> (= TEXT_OFFSET)
        # one id per word or comma: the caption can be read back exactly
        words = [tok.vocab[i - TEXT_OFFSET] for i in ids]
        assert " ".join(words).replace(" ,", ",") == caption


def test_unknown_words_map_to_unk_and_case_is_ignored():
    tok = WordTokenizer(grammar_words())
    assert tok("A Big RED Circle") == tok("a big red circle")
    ids = tok("a giraffe on the left")
    assert ids[1] == TEXT_OFFSET + tok.vocab.index(UNK)
    assert ids.count(TEXT_OFFSET + tok.vocab.index(UNK)) == 1  # only "giraffe" is outside the grammar
    assert prompt_tokens("a circle", tok) == [BOS, *tok("a circle"), BOI]


def test_vocabulary_must_fit_and_start_with_unk():
    with pytest.raises(ValueError):
        WordTokenizer(["circle", UNK])
    with pytest.raises(ValueError):
        WordTokenizer([UNK] + [f"w{i}" for i in range(N_TEXT)])
