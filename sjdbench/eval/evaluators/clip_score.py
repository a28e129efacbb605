"""CLIP-Score with open_clip, computed per sample from L2-normalised image and text embeddings.

Two scales are in use and cannot be compared with each other:
- `100max0`: 100 * max(cos, 0) per sample, OpenAI ViT-B/16 (SJD, GSD; numbers near 31);
- `cosine`: the raw cosine with OpenAI ViT-B/32 and the "A photo depicts " prefix (LANTERN,
  LlamaGen; numbers near 0.3).
The backbone, weight file and its sha256, the image path into CLIP, the prefix, the scale and how
many prompts were cut at CLIP's 77 tokens are all recorded in the score's protocol.

Weights are never downloaded here: an open_clip tag is resolved in the local caches only (the
Hugging Face hub cache, then open_clip's URL cache), so a missing file fails at once with one line
naming the file and where to put it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Callable

import numpy as np

from sjdbench.errors import UserError
from sjdbench.eval.evaluators.base import Sample, SampleMetric
from sjdbench.eval.evaluators.hashing import env_flag_offline, file_sha256
from sjdbench.eval.evaluators.imaging import resize_for_clip

SCALES = {"100max0": "100 * max(cos, 0) per sample", "cosine": "raw cosine per sample"}


def resolve_weights(model: str, pretrained: str, cache_dir: str | None) -> Path:
    """The local file behind eval.clip.pretrained: a path, or a tag found in the local caches."""
    env_flag_offline()
    from open_clip import list_pretrained_tags_by_model
    from open_clip.pretrained import download_pretrained_from_hf, get_pretrained_cfg

    candidate = Path(pretrained).expanduser()
    if candidate.suffix in (".pt", ".pth", ".bin", ".safetensors") or candidate.exists():
        if not candidate.is_file():
            raise UserError(f"eval.clip.pretrained={pretrained} is not a file; pass a weights file or an open_clip tag")
        return candidate
    cfg = get_pretrained_cfg(model, pretrained)
    if not cfg:
        tags = ", ".join(list_pretrained_tags_by_model(model)) or "none"
        raise UserError(
            f"open_clip has no weights '{pretrained}' for {model}; tags: {tags}, or pass a local weights file"
        )
    hub = cfg.get("hf_hub", "")
    if hub:
        model_id, filename = os.path.split(hub)
        try:
            return Path(download_pretrained_from_hf(model_id, filename=filename or None, cache_dir=cache_dir))
        except (FileNotFoundError, OSError, RuntimeError, ValueError):
            pass
    url = cfg.get("url", "")
    if url:
        cached = Path(cache_dir or "~/.cache/clip").expanduser() / os.path.basename(url)
        if cached.is_file():
            return cached
    from huggingface_hub.constants import HF_HUB_CACHE

    where = (
        [f"open_clip_model.safetensors of the Hugging Face repo {hub.rstrip('/')} into {cache_dir or HF_HUB_CACHE}"]
        if hub
        else []
    )
    if url:
        where.append(f"{os.path.basename(url)} ({url}) into {Path(cache_dir or '~/.cache/clip').expanduser()}")
    raise UserError(
        f"CLIP weights {model}/{pretrained} are not on this machine (no download is attempted): place "
        f"{' or '.join(where)}, or pass eval.clip.pretrained=<local weights file>"
    )


@functools.lru_cache(maxsize=2)
def load_clip(model: str, weights: str, kwargs_key: tuple, device: str):
    """(model, image transform, tokenizer), loaded once per process."""
    env_flag_offline()
    import open_clip

    kwargs = _thaw(kwargs_key) if kwargs_key else {}
    net, _, transform = open_clip.create_model_and_transforms(model, pretrained=weights, device=device, **kwargs)
    tokenizer = open_clip.get_tokenizer(
        model,
        **(
            {"context_length": kwargs["text_cfg"]["context_length"]}
            if "context_length" in kwargs.get("text_cfg", {})
            else {}
        ),
    )
    return net.eval(), transform, tokenizer


def _freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value):
    if isinstance(value, tuple) and all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) for x in value):
        return {k: _thaw(v) for k, v in value}
    return value


def eval_device(setting: str) -> str:
    import torch

    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return setting


def text_tower_extra(vectors: np.ndarray, samples: list[Sample], encode: Callable[[str], list], limit: int) -> dict:
    """What a CLIP-style score records beside its value: the prompts longer than the text tower's
    context (their tokens plus the start and end tokens), which it cuts, and the mean cosine."""
    truncated = sorted({s.prompt_id for s in samples if len(encode(s.text)) + 2 > limit})
    return {
        "truncated_prompts": len(truncated),
        "truncated_prompt_ids": truncated[:50],
        "context_length": limit,
        "mean_cosine": float(vectors[:, 0].mean()),
    }


class ClipScore(SampleMetric):
    name = "clip_score"
    cache_kind = "clip_cosine"

    def __init__(self, settings, run) -> None:
        super().__init__(settings, run)
        self.clip = settings.clip
        self.metric = f"CLIP-Score ({SCALES[self.clip.score]}, {self.clip.model})"

    @functools.cached_property
    def weights(self) -> Path:
        return resolve_weights(self.clip.model, self.clip.pretrained, self.clip.cache_dir)

    def _loaded(self):
        kwargs = _freeze(dict(self.clip.model_kwargs))
        net, transform, tokenizer = load_clip(
            self.clip.model, str(self.weights), kwargs, eval_device(self.settings.device)
        )
        return net, transform, tokenizer

    def measure_protocol(self) -> dict:
        _, transform, tokenizer = self._loaded()
        return {
            "backbone": self.clip.model,
            "pretrained": self.clip.pretrained,
            "weights_file": self.weights.name,
            "weights_sha256": file_sha256(self.weights),
            "model_kwargs": dict(self.clip.model_kwargs),
            "image_resize_before_clip": self.clip.image_resize,
            "clip_transform": repr(transform).replace("\n", " "),
            "prefix": self.clip.prefix,
            "context_length": int(tokenizer.context_length),
            "truncation": "prompts longer than the context are cut, keeping the end-of-text token last (as CLIP)",
            "embedding": "L2-normalised image and text embeddings; cos = their dot product",
        }

    def protocol_extras(self) -> dict:
        return {"score": SCALES[self.clip.score], "aggregate": "mean over samples"}

    def measure(self, samples: list[Sample]) -> np.ndarray:
        import torch
        from PIL import Image

        net, transform, tokenizer = self._loaded()
        device = next(net.parameters()).device
        out = []
        for start in range(0, len(samples), self.clip.batch_size):
            batch = samples[start : start + self.clip.batch_size]
            pixels = torch.stack(
                [
                    transform(Image.fromarray(resize_for_clip(image, self.clip.image_resize)))
                    for image in self.images(batch)
                ]
            ).to(device)
            tokens = tokenizer([self.clip.prefix + s.text for s in batch]).to(device)
            with torch.no_grad():
                image_emb = net.encode_image(pixels, normalize=True).double()  # (B, E)
                text_emb = net.encode_text(tokens, normalize=True).double()  # (B, E)
            out.append((image_emb * text_emb).sum(-1).cpu().numpy())
        return np.concatenate(out)[:, None]

    def sample_values(self, vectors: np.ndarray) -> np.ndarray:
        cos = vectors[:, 0]
        return 100.0 * np.maximum(cos, 0.0) if self.clip.score == "100max0" else cos

    def extra(self, vectors: np.ndarray) -> dict:
        _, _, tokenizer = self._loaded()
        limit = int(tokenizer.context_length)
        if not hasattr(tokenizer, "encode"):  # a Hugging Face text tower: its own truncation, not counted here
            return {"truncated_prompts": None, "context_length": limit, "mean_cosine": float(vectors[:, 0].mean())}
        prefix = self.clip.prefix
        return text_tower_extra(vectors, self.run.samples, lambda text: tokenizer.encode(prefix + text), limit)
