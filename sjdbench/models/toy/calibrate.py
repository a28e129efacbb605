"""Calibration measurements of the toy model's regime (reported in docs/TOY.md).

- SJD step compression (exact verifier, resample proposal, random init) at windows 16 and 32;
- context sensitivity: mean total variation between the processed next-token distribution given the
  true prefix and given a prefix whose previous row was taken from another image;
- toy CLIP-Score of AR samples with their captions vs shuffled captions;
- attribute accuracy: does toy CLIP prefer the true caption over copies with one object's shape
  (or colour) swapped? This asks whether the *captioned objects* are drawn, not only the background;
- a captioned grid of AR samples.

Run: sjdbench toy calibrate --out docs/toy_calibration.json --png docs/toy_samples.png
"""
from __future__ import annotations

import textwrap
import time
from pathlib import Path

import numpy as np
import torch

from sjdbench.config import build_preset
from sjdbench.decoding.loop import jacobi_decode
from sjdbench.decoding.processing import process_logits, structure_mask
from sjdbench.models.llama import segment_index
from sjdbench.models.toy.world import caption, render_batch, render_scenes

HELD_OUT_SEED = 90210


def held_out(n: int) -> tuple[np.ndarray, list[str]]:
    return render_batch(HELD_OUT_SEED, 0, n)


def sjd_runs(adapter, captions: list[str], window: int, sampling=None) -> tuple[dict, list[torch.Tensor]]:
    parts = build_preset("sjd", adapter, f"decoder.window={window}")
    sampling = sampling or adapter.default_sampling
    rows, tokens = [], []
    t0 = time.time()
    for i, cap in enumerate(captions):
        res = jacobi_decode(adapter, cap, parts, sampling, torch.Generator().manual_seed(i))
        rows.append(res.stats.to_row())
        tokens.append(res.tokens)
    comp = np.array([r["step_compression"] for r in rows])
    acc = np.array([r["acceptance_rate"] or 0.0 for r in rows])
    return {
        "window": window, "n": len(captions), "step_compression_mean": float(comp.mean()),
        "step_compression_std": float(comp.std()), "acceptance_rate_mean": float(acc.mean()),
        "seconds": round(time.time() - t0, 1),
    }, tokens


@torch.no_grad()
def context_sensitivity(adapter, n_images: int = 6, seed: int = 0) -> float:
    """Mean TV(p(.|true prefix), p(.|prefix with the previous row from another image)) over rows 1..h-1."""
    from sjdbench.models.toy.tokenizer import PatchTokenizer

    tok = PatchTokenizer(adapter.codebook())
    images, caps = held_out(n_images + 1)
    codes = tok.encode(images)  # (n+1, 16, 16)
    layout = adapter.layout
    pos_of = layout.position_of()  # (h, w) segment positions
    h, w = layout.grid_hw
    legal = torch.zeros(adapter.vocab_size, dtype=torch.bool)
    legal[adapter.image_token_ids] = True
    allowed = structure_mask(layout.forced, legal)
    tvs = []
    adapter.model.clear_cache()  # plain causal forwards below
    for i in range(n_images):
        seg = layout.forced.clone()
        seg[pos_of.flatten()] = codes[i].flatten() + int(adapter.image_token_ids[0])
        other = codes[(i + 1) % (n_images + 1)].flatten() + int(adapter.image_token_ids[0])
        prompt = adapter.encode_prompt(caps[i])
        P = prompt.length
        variants = [seg]
        for r in range(1, h):
            alt = seg.clone()
            alt[pos_of[r - 1]] = other.view(h, w)[r - 1]
            variants.append(alt)
        probs = []
        for v in variants:
            full = torch.cat([prompt.tokens, v[None].expand(2, -1)], dim=1)
            mask = torch.cat([prompt.pad_mask, torch.ones(2, v.numel(), dtype=torch.bool)], dim=1)
            L = full.shape[1]
            logits = adapter.model(full, torch.arange(L), pad_mask=mask, segment_index=segment_index(L, P))  # (2, L, V)
            seg_logits = logits[:, P - 1 : P - 1 + v.numel()]  # predicts segment positions 0..N-1
            probs.append(process_logits(seg_logits, allowed, adapter.default_sampling))
        base = probs[0]
        for r in range(1, h):
            rows = pos_of[r]
            tvs.append(0.5 * (base[rows] - probs[r][rows]).abs().sum(-1))
    return float(torch.cat(tvs).mean())


def sample_grid(images: list[np.ndarray], captions: list[str], path: str | Path, cols: int = 4) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = (len(images) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 2.6, rows * 3.1), dpi=90)
    for ax in np.atleast_1d(axes).flat:
        ax.axis("off")
    for ax, img, cap in zip(np.atleast_1d(axes).flat, images, captions):
        ax.imshow(img, interpolation="nearest")
        ax.set_title("\n".join(textwrap.wrap(cap, 34)), fontsize=6)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def image_sets(adapter, ar_images: list[np.ndarray], n: int) -> tuple[list, dict[str, np.ndarray]]:
    """Scenes of the first n held-out captions and three image sets for them, each (n, 64, 64, 3):
    renders (the ceiling), their tokenizer round trips, AR samples (ar_images first, then drawn)."""
    from sjdbench.models.toy.tokenizer import PatchTokenizer

    refs, scenes = render_scenes(HELD_OUT_SEED, 0, n)
    captions = [caption(s) for s in scenes]
    images = list(ar_images)
    parts = build_preset("ar", adapter)
    for i in range(len(images), n):  # AR samples beyond those already drawn, same seeding as sjd_runs
        res = jacobi_decode(adapter, captions[i], parts, adapter.default_sampling, torch.Generator().manual_seed(i))
        images.append(adapter.decode(res.tokens))
    tok = PatchTokenizer(adapter.codebook())
    return scenes, {"renders": refs, "roundtrip": tok.decode(tok.encode(refs)), "ar": np.stack(images[:n])}


def objects_calibration(adapter, ar_images: list[np.ndarray], n: int, prepared=None) -> dict:
    """Oracle object finder on renders (ceiling), their code round trips and AR samples.
    prepared: image_sets(adapter, ar_images, n) if already computed."""
    from sjdbench.models.toy.objects import object_report

    scenes, sets = prepared or image_sets(adapter, ar_images, n)
    return {"n_images": n, **{name: object_report(images, scenes) for name, images in sets.items()}}


FD_REFERENCE_SEED = 31337  # reference renders for the toy Fréchet distance (disjoint from training and held-out)


def fd_calibration(clip, sets: dict[str, np.ndarray], n_reference: int = 1024) -> dict:
    """Fréchet distance in toy CLIP feature space between each image set and n_reference renders.

    The renders of the same captions give the floor at this set size (FD is biased upwards at
    small N), so compare the AR figure with it, not with zero.
    """
    from sjdbench.metrics.frechet import frechet_distance

    reference, _ = render_batch(FD_REFERENCE_SEED, 0, n_reference)
    ref_features = clip.image_features(reference)
    out = {"n_reference": n_reference}
    for name, images in sets.items():
        out[name] = frechet_distance(clip.image_features(images), ref_features)
    return out


# the sampling settings of docs/TOY.md's knob table (SJD W=16 against the shipped CFG 3, top-k 100, T 1)
KNOB_SETTINGS = (
    {"top_k": 64}, {"top_k": 200}, {"top_k": 0}, {"cfg_scale": 1.5}, {"cfg_scale": 2.0}, {"cfg_scale": 5.0},
    {"temperature": 0.8},
)


def knob_sweep(weights_dir=None, n: int = 16, window: int = 16, settings=KNOB_SETTINGS, threads: int = 2) -> list[dict]:
    """Step compression and drawn objects under other sampling settings, on the same n captions.

    The object finder runs on the SJD samples themselves: SJD samples exactly from the model.
    """
    from sjdbench.models.toy.model import build_toy_adapter
    from sjdbench.models.toy.objects import object_report

    torch.set_num_threads(threads)
    _, scenes = render_scenes(HELD_OUT_SEED, 0, n)
    captions = [caption(s) for s in scenes]
    rows = []
    for setting in ({},) + tuple(settings):
        adapter = build_toy_adapter(weights_dir, **setting)
        res, tokens = sjd_runs(adapter, captions, window)
        res["objects"] = object_report(np.stack([adapter.decode(t) for t in tokens]), scenes)
        rows.append({"setting": setting or "shipped", **res})
    return rows


def calibrate(
    weights_dir=None, n: int = 16, windows=(16, 32), png: str | None = None, threads: int = 2, with_clip: bool = True,
    n_objects: int = 64, **sampling,
) -> dict:
    """sampling: overrides for build_toy_adapter (cfg_scale, top_k, temperature, top_p).

    Step compression and CLIP use the first n held-out captions; the object finder (are the
    captioned shapes drawn?) uses AR samples of the first max(n, n_objects), for a usable count of
    objects.
    """
    from sjdbench.models.toy.model import build_toy_adapter

    torch.set_num_threads(threads)
    t0 = time.time()
    adapter = build_toy_adapter(weights_dir, **sampling)
    load_s = time.time() - t0
    _, caps = held_out(n)
    out: dict = {"load_seconds": round(load_s, 3), "sampling": vars(adapter.default_sampling), "n_captions": n}
    ar, ar_tokens = sjd_runs(adapter, caps, 1)
    out["ar"] = ar
    for w in windows:
        out[f"sjd_w{w}"], _ = sjd_runs(adapter, caps, w)
    out["context_tv"] = context_sensitivity(adapter)
    images = [adapter.decode(t) for t in ar_tokens]
    prepared = image_sets(adapter, images, max(n, n_objects))
    out["objects"] = objects_calibration(adapter, images, max(n, n_objects), prepared)
    if with_clip:
        from sjdbench.models.toy.clip import load_toy_clip

        clip = load_toy_clip(weights_dir)
        out["toy_fd"] = fd_calibration(clip, prepared[1])
        arr = np.stack(images)
        refs, scenes = render_scenes(HELD_OUT_SEED, 0, n)  # the scenes behind `caps`
        out["clip_score_ar_matched"] = float(clip.clip_score(arr, caps).mean())
        out["clip_score_ar_shuffled"] = float(clip.clip_score(arr, list(np.roll(caps, 1))).mean())
        out["clip_score_renders_matched"] = float(clip.clip_score(refs, caps).mean())
        from sjdbench.models.toy.clip import attribute_accuracy

        for attribute in ("shape", "colour"):
            out[f"{attribute}_accuracy_ar"] = attribute_accuracy(clip, arr, scenes, attribute)
            out[f"{attribute}_accuracy_renders"] = attribute_accuracy(clip, refs, scenes, attribute)
    if png:
        sample_grid(images, caps, png)
    return out
