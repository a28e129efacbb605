"""The toy CLIP: a small open_clip `CLIP` (custom config) trained contrastively on toy-world pairs.

Text goes through open_clip's bundled BPE tokenizer; the few BPE ids the caption grammar uses are
remapped to a compact vocabulary (unknown ids -> <unk>), so the text embedding table stays tiny and
the weights ship in well under a megabyte. Used for CLIP-Score and for a Frechet distance in its
image-feature space on the toy model, fully offline.

Files in the weights dir: toy_clip.safetensors, toy_clip.json (model config, vocabulary, training
config, final loss and retrieval accuracy).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from sjdbench.models.toy.model import WEIGHTS_DIR as TOY_WEIGHTS_DIR
from sjdbench.toyworld.world import (
    COLOURS,
    SHAPES,
    SIZES,
    TEXTURES,
    Scene,
    attribute_alternatives,
    caption,
    render_batch,
    render_scenes,
    with_attribute,
)

WEIGHTS_DIR = TOY_WEIGHTS_DIR  # the toy CLIP ships beside the toy model it scores
CLIP_FILE = "toy_clip.safetensors"
CLIP_META = "toy_clip.json"
CONTEXT_LENGTH = 48

MODEL_CONFIG = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 64, "layers": 3, "width": 128, "head_width": 32, "patch_size": 8, "mlp_ratio": 2.0},
    "text_cfg": {
        "context_length": CONTEXT_LENGTH,
        "width": 128,
        "heads": 4,
        "layers": 2,
        "mlp_ratio": 2.0,
        "pool_type": "eos",
    },
}
MEAN = torch.tensor([0.5, 0.5, 0.5])
STD = torch.tensor([0.25, 0.25, 0.25])


def _bpe():
    from open_clip.tokenizer import SimpleTokenizer

    return SimpleTokenizer(context_length=CONTEXT_LENGTH)


def grammar_vocabulary() -> list[int]:
    """BPE ids used by the caption grammar; index 0 = pad, 1 = <unk>, then sorted ids, <eot> last."""
    bpe = _bpe()
    words = list(COLOURS) + list(SHAPES) + list(SIZES) + list(TEXTURES)
    words += "a an and on the of at in background left right top bottom middle center above below , .".split()
    ids = set()
    for w in words:
        ids.update(bpe.encode(w))
    _, caps = render_batch(4242, 0, 500)
    for c in caps:
        ids.update(bpe.encode(c))
    sot, eot = bpe.encoder["<start_of_text>"], bpe.encoder["<end_of_text>"]
    ids.discard(eot)
    ids.add(sot)
    return [0, -1] + sorted(ids) + [eot]


class ToyClip:
    """Wraps the open_clip model with the compact tokenizer and the pixel normalisation."""

    def __init__(self, model, vocab: list[int], device: str = "cpu") -> None:
        self.model = model.eval().to(device)
        self.device = torch.device(device)
        self.vocab = vocab
        table = torch.ones(49408, dtype=torch.long)  # unknown -> 1
        for compact, bpe_id in enumerate(vocab):
            if bpe_id >= 0:
                table[bpe_id] = compact
        table[0] = 0
        self.table = table
        self.bpe = _bpe()

    def tokenize(self, captions: list[str]) -> torch.Tensor:
        return self.table[self.bpe(list(captions))].to(self.device)

    def preprocess(self, images: np.ndarray | torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(np.asarray(images)).float().div(255.0)  # (B, 64, 64, 3)
        x = (x - MEAN) / STD
        return x.permute(0, 3, 1, 2).contiguous().to(self.device)

    @torch.no_grad()
    def image_features(self, images: np.ndarray | torch.Tensor, batch: int = 256) -> torch.Tensor:
        """L2-normalised image embeddings (B, embed_dim) on CPU."""
        out = [
            self.model.encode_image(self.preprocess(images[i : i + batch]), normalize=True)
            for i in range(0, len(images), batch)
        ]
        return torch.cat(out).float().cpu()

    @torch.no_grad()
    def text_features(self, captions: list[str], batch: int = 256) -> torch.Tensor:
        out = [
            self.model.encode_text(self.tokenize(captions[i : i + batch]), normalize=True)
            for i in range(0, len(captions), batch)
        ]
        return torch.cat(out).float().cpu()

    def clip_score(self, images: np.ndarray | torch.Tensor, captions: list[str]) -> np.ndarray:
        """Per-sample CLIP-Score 100 * max(cos(image, caption), 0)."""
        cos = (self.image_features(images) * self.text_features(captions)).sum(-1)
        return (100.0 * cos.clamp_min(0)).numpy()


def _build_model(config: dict, vocab_size: int, eos_id: int):
    import open_clip

    text_cfg = dict(config["text_cfg"], vocab_size=vocab_size, eos_id=eos_id)
    return open_clip.CLIP(embed_dim=config["embed_dim"], vision_cfg=config["vision_cfg"], text_cfg=text_cfg)


_CACHE: dict = {}


def load_toy_clip(weights_dir: str | Path | None = None, device: str = "cpu") -> ToyClip:
    from safetensors.torch import load_file

    weights_dir = Path(weights_dir or WEIGHTS_DIR)
    key = (str(weights_dir.resolve()), device)
    if key in _CACHE:
        return _CACHE[key]
    meta_path = weights_dir / CLIP_META
    if not meta_path.exists():
        raise FileNotFoundError(f"toy CLIP not found at {meta_path}; run `sjdbench toy train-clip` to create it")
    meta = json.loads(meta_path.read_text())
    vocab = meta["vocab"]
    model = _build_model(meta["model"], len(vocab), len(vocab) - 1)
    model.load_state_dict(load_file(str(weights_dir / CLIP_FILE)))
    clip = ToyClip(model, vocab, device)
    _CACHE[key] = clip
    return clip


def clip_score(
    images: np.ndarray | torch.Tensor, captions: list[str], weights_dir: str | Path | None = None
) -> np.ndarray:
    """Per-sample toy CLIP-Score 100 * max(cos, 0) of uint8 images (B, 64, 64, 3) with their captions."""
    return load_toy_clip(weights_dir).clip_score(images, captions)


def image_features(images: np.ndarray | torch.Tensor, weights_dir: str | Path | None = None) -> torch.Tensor:
    """Toy CLIP image embeddings (B, 64), L2-normalised: the feature space for a Frechet distance."""
    return load_toy_clip(weights_dir).image_features(images)


def swapped_captions(scene: Scene, k: int, attribute: str) -> list[str]:
    """The caption first, then one copy per alternative value of object k's shape or colour."""
    alternatives = attribute_alternatives(scene, k, attribute)
    return [caption(scene), *(caption(with_attribute(scene, k, attribute, v)) for v in alternatives)]


def attribute_accuracy(clip: ToyClip, images: np.ndarray, scenes: list[Scene], attribute: str) -> dict:
    """Share of (image, object) pairs where toy CLIP ranks the true caption above every swap."""
    groups = [
        (b, swapped_captions(scene, k, attribute)) for b, scene in enumerate(scenes) for k in range(len(scene.objects))
    ]
    image_feats = clip.image_features(images)  # (B, D), L2-normalised
    text_feats = clip.text_features([c for _, caps in groups for c in caps])  # all captions in large batches
    hits, chance, start = [], [], 0
    for b, caps in groups:
        cos = text_feats[start : start + len(caps)] @ image_feats[b]  # (C,) raw cosines: no ties at 0
        start += len(caps)
        hits.append(bool(torch.argmax(cos) == 0))
        chance.append(1.0 / len(caps))
    return {"accuracy": float(np.mean(hits)), "chance": float(np.mean(chance)), "n": len(hits)}


def hard_negative_captions(scenes: list[Scene], rng: np.random.Generator) -> list[str]:
    """Per scene, its caption with one random object's shape swapped, then with one's colour swapped.

    Why: with in-batch negatives alone, backgrounds and colours already separate almost every pair,
    so a CLIP trained that way ignores shapes (shape-swap accuracy 0.21 against a chance of 0.17).
    Swapped captions make the object's attributes the only way to tell the true caption apart.
    Returned attribute-major: all scenes' shape swaps, then all scenes' colour swaps.
    """
    negatives = []
    for attribute in ("shape", "colour"):
        for scene in scenes:
            k = int(rng.integers(len(scene.objects)))
            options = attribute_alternatives(scene, k, attribute)
            value = options[int(rng.integers(len(options)))]
            negatives.append(caption(with_attribute(scene, k, attribute, value)))
    return negatives


def _retrieval_accuracy(clip: ToyClip, images: np.ndarray, captions: list[str]) -> float:
    """Fraction of images whose own caption is the best of the batch (image -> text top-1)."""
    sims = clip.image_features(images) @ clip.text_features(captions).T
    return float((sims.argmax(1) == torch.arange(len(captions))).float().mean())


def train_toy_clip(
    out_dir: str | Path | None = None,
    minutes: float = 6.0,
    steps: int | None = None,
    seed: int = 0,
    threads: int = 2,
    batch_size: int = 128,
    lr: float = 1e-3,
    hard_negatives: bool = True,
    device: str = "cpu",
    log=print,
) -> dict:
    """Contrastive training on freshly rendered pairs; stops at `steps` or after `minutes`.
    device: "cpu", "cuda" or "auto" (cuda when visible)."""
    from rich.progress import Progress
    from safetensors.torch import save_file

    from sjdbench.toyworld.train import resolve_train_device

    out_dir = Path(out_dir or WEIGHTS_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = resolve_train_device(device)
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    vocab = grammar_vocabulary()
    model = _build_model(MODEL_CONFIG, len(vocab), len(vocab) - 1)
    clip = ToyClip(model, vocab, device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    est_steps = steps or 10**9
    t_start, step, losses = time.time(), 0, []
    with Progress() as progress:
        task = progress.add_task("toy CLIP", total=steps)
        while True:
            elapsed = time.time() - t_start
            if (steps is not None and step >= steps) or (steps is None and elapsed > minutes * 60):
                break
            if steps is None and step == 20:  # time budget -> step count for the LR schedule
                est_steps = max(21, int(minutes * 60 / (elapsed / step)))
            frac = min(1.0, step / est_steps)
            warm = min(1.0, (step + 1) / 50)
            for g in opt.param_groups:
                g["lr"] = lr * warm * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
            images, scenes = render_scenes(seed + 5000 + step, 0, batch_size)  # a fresh batch every step
            caps = [caption(s) for s in scenes]
            negatives = (
                hard_negative_captions(scenes, np.random.default_rng([seed, 11, step])) if hard_negatives else []
            )
            img_f = model.encode_image(clip.preprocess(images), normalize=True)  # (B, D)
            txt_all = model.encode_text(clip.tokenize(caps + negatives), normalize=True)  # (B + B*H, D)
            scale = model.logit_scale.exp().clamp(max=100)
            labels = torch.arange(batch_size, device=clip.device)
            image_to_text = scale * img_f @ txt_all.T  # (B, B + B*H): every negative caption competes
            text_to_image = scale * txt_all[:batch_size] @ img_f.T  # (B, B)
            loss = 0.5 * (F.cross_entropy(image_to_text, labels) + F.cross_entropy(text_to_image, labels))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
            progress.update(task, completed=step, description=f"toy CLIP loss {losses[-1]:.3f}")
    model.eval()
    val_images, val_scenes = render_scenes(seed + 777, 0, 256)
    val_caps = [caption(s) for s in val_scenes]
    acc = _retrieval_accuracy(clip, val_images, val_caps)
    matched = clip.clip_score(val_images, val_caps).mean()
    shuffled = clip.clip_score(val_images, list(np.roll(val_caps, 1))).mean()
    swaps = {a: attribute_accuracy(clip, val_images, val_scenes, a) for a in ("shape", "colour")}
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(out_dir / CLIP_FILE))
    meta: dict[str, Any] = {
        "model": MODEL_CONFIG,
        "vocab": vocab,
        "normalisation": {"mean": MEAN.tolist(), "std": STD.tolist()},
        "train": {
            "seed": seed,
            "steps": step,
            "batch_size": batch_size,
            "lr": lr,
            "threads": threads,
            "device": device,
            "seconds": round(time.time() - t_start, 1),
            "data": "fresh render_batch(seed + 5000 + step) per step",
            "hard_negatives": "one shape-swapped and one colour-swapped caption per image" if hard_negatives else None,
        },
        "final": {
            "train_loss_last20": float(np.mean(losses[-20:])),
            "val_top1_of_256": acc,
            "val_clip_score_matched": float(matched),
            "val_clip_score_shuffled": float(shuffled),
            "val_shape_swap_accuracy": swaps["shape"],
            "val_colour_swap_accuracy": swaps["colour"],
        },
    }
    (out_dir / CLIP_META).write_text(json.dumps(meta, indent=2) + "\n")
    _CACHE.clear()
    log(
        f"toy CLIP: {step} steps, loss {meta['final']['train_loss_last20']:.3f}, val top-1 {acc:.2f}, "
        f"CLIP-Score matched {matched:.1f} vs shuffled {shuffled:.1f}, shape-swap accuracy "
        f"{swaps['shape']['accuracy']:.2f} (chance {swaps['shape']['chance']:.2f})"
    )
    return meta
