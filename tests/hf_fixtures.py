"""Tiny tokenizers and random weights for the transformers-backed model tests (offline: nothing is
downloaded; the tokenizer is a character-level WordLevel model built in memory)."""

from __future__ import annotations

import torch


def char_tokenizer(
    specials: list[str],
    bos: str,
    pad: str,
    extra: dict[str, str] | None = None,
    size: int | None = None,
    eos: str | None = None,
):
    """A fast tokenizer: the special tokens, then one id per printable ASCII character (padded with
    filler tokens up to `size` ids). Like the real checkpoints' tokenizers, BOS is prepended, or, when
    `eos` is given (T5), EOS is appended instead."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", *specials] + [chr(c) for c in range(32, 127)]
    if size is not None:
        words += [f"<filler{i}>" for i in range(size - len(words))]
    vocab = {w: i for i, w in enumerate(words)}
    model = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    model.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    model.add_special_tokens(specials)
    if eos is None:
        model.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
    else:
        model.post_processor = processors.TemplateProcessing(single=f"$A {eos}", special_tokens=[(eos, vocab[eos])])
    return PreTrainedTokenizerFast(
        tokenizer_object=model,
        bos_token=bos,
        pad_token=pad,
        unk_token="<unk>",
        eos_token=eos,
        extra_special_tokens=extra or {},
    )


def spread_weights(model: torch.nn.Module, std: float = 0.3, seed: int = 0) -> torch.nn.Module:
    """Random weights with a wider spread than the initialisers' 0.02, so next-token distributions are
    peaked and context-dependent (greedy paths then test something)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2 and "vqmodel" not in name:
                param.copy_(torch.randn(param.shape, generator=generator) * std)
    return model.eval()


class ScoreRecorder:
    """A logits processor that keeps a copy of the scores it is shown (one entry per step)."""

    def __init__(self) -> None:
        self.scores: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.scores.append(scores.detach().clone())
        return scores
