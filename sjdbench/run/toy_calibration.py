"""Calibration measurements of the toy model's regime (reported in docs/TOY.md).

- SJD step compression (exact verifier, resample proposal, random init) at windows 16 and 32;
- context sensitivity: mean total variation between the processed next-token distribution given the
  true prefix and given a prefix whose previous row was taken from another image;
- toy CLIP-Score of AR samples with their captions vs shuffled captions;
- attribute accuracy: does toy CLIP prefer the true caption over copies with one object's shape
  (or colour) swapped? This asks whether the *captioned objects* are drawn, not only the background;
- a captioned grid of AR samples.

Every sample is decoded by the runner (`sjdbench.run.runner.execute`), like any `sjdbench run`: the
calibration's AR and SJD runs are ordinary, resumable runs in a results store (by default
`$SJDBENCH_CACHE/toy-calibration`; `sjdbench toy calibrate --results-dir results` keeps them with your
other runs, where `sjdbench eval` can score them). The held-out captions are written once to a
prompt file; a run's samples are seeded per (run seed, prompt, sample) as in every run.

Run: sjdbench toy calibrate --out docs/toy_calibration.json --png docs/toy_samples.png
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import numpy as np
import torch

from sjdbench.decoding.processing import process_logits, structure_mask
from sjdbench.models.llama import segment_index
from sjdbench.toyworld.world import caption, render_batch, render_scenes

HELD_OUT_SEED = 90210
N_HELD_OUT = 256  # captions in the held-out prompt file; runs select the first n (data.limit)


def held_out(n: int) -> tuple[np.ndarray, list[str]]:
    return render_batch(HELD_OUT_SEED, 0, n)


def held_out_prompt_file() -> Path:
    """The first N_HELD_OUT held-out captions as a prompt file (written once, in the cache)."""
    from sjdbench.paths import cache_dir
    from sjdbench.results.store import atomic_write_text

    path = cache_dir() / "toy" / f"heldout-{HELD_OUT_SEED}-{N_HELD_OUT}.txt"
    if not path.exists():
        _, scenes = render_scenes(HELD_OUT_SEED, 0, N_HELD_OUT)
        atomic_write_text(path, "".join(caption(s) + "\n" for s in scenes))
    return path


def default_results_dir() -> Path:
    from sjdbench.paths import cache_dir

    return cache_dir() / "toy-calibration"


def adapter_options(adapter) -> dict:
    """model.options that rebuild this toy adapter (so the run id names its sampling and weights)."""
    sampling = adapter.default_sampling
    options = {
        "cfg_scale": sampling.cfg_scale,
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
    }
    weights_dir = getattr(adapter, "weights_dir", None)
    if weights_dir is not None:
        options["weights_dir"] = str(weights_dir)
    return options


def decode_held_out(adapter, n: int, decoder: list[str], results_dir=None) -> list[dict]:
    """Rows of the first n held-out captions decoded by the runner with this adapter and decoder."""
    from sjdbench.config import compose_run
    from sjdbench.results.store import RunStore
    from sjdbench.run.runner import execute

    options = [f"model.options.{k}={v}" for k, v in adapter_options(adapter).items()]
    config = compose_run(
        [
            "model=toy",
            *options,
            "data=file",
            f"data.path={held_out_prompt_file()}",
            f"data.limit={n}",
            *decoder,
            f"results_dir={results_dir or default_results_dir()}",
            "warmup=0",
            "device=cpu",
        ]
    )
    outcome = execute(config, adapter=adapter)
    rows = RunStore(Path(outcome.run_dir).parent.parent, outcome.run_id).rows()
    rows = [r for r in rows if r["prompt_id"] < n and r.get("sample", 0) == 0]
    for row in rows:
        row["run_dir"] = outcome.run_dir
    return rows


def row_images(rows: list[dict]) -> list[np.ndarray]:
    from PIL import Image

    return [np.asarray(Image.open(Path(r["run_dir"]) / r["image"]).convert("RGB")) for r in rows]


def sjd_runs(adapter, n: int, window: int, results_dir=None) -> tuple[dict, list[dict]]:
    """Step compression of SJD (W = window; 1 = AR) on the first n held-out captions, via the runner."""
    decoder = ["decoder=ar"] if window == 1 else ["decoder=sjd", f"decoder.window={window}"]
    t0 = time.time()
    rows = decode_held_out(adapter, n, decoder, results_dir)
    comp = np.array([r["step_compression"] for r in rows])
    acc = np.array([r["acceptance_rate"] or 0.0 for r in rows])
    return {
        "window": window,
        "n": n,
        "step_compression_mean": float(comp.mean()),
        "step_compression_std": float(comp.std()),
        "acceptance_rate_mean": float(acc.mean()),
        "seconds": round(time.time() - t0, 1),
    }, rows


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


def image_sets(adapter, n: int, results_dir=None) -> tuple[list, dict[str, np.ndarray]]:
    """Scenes of the first n held-out captions and three image sets for them, each (n, 64, 64, 3):
    renders (the ceiling), their tokenizer round trips, AR samples (the runner's AR run, resumed
    where a shorter one stopped)."""
    from sjdbench.models.toy.tokenizer import PatchTokenizer

    refs, scenes = render_scenes(HELD_OUT_SEED, 0, n)
    ar = row_images(decode_held_out(adapter, n, ["decoder=ar"], results_dir))
    tok = PatchTokenizer(adapter.codebook())
    return scenes, {"renders": refs, "roundtrip": tok.decode(tok.encode(refs)), "ar": np.stack(ar)}


def objects_calibration(adapter, n: int, prepared=None, results_dir=None) -> dict:
    """Oracle object finder on renders (ceiling), their code round trips and AR samples.
    prepared: image_sets(adapter, n) if already computed."""
    from sjdbench.toyworld.objects import object_report

    scenes, sets = prepared or image_sets(adapter, n, results_dir)
    return {"n_images": n, **{name: object_report(images, scenes) for name, images in sets.items()}}


FD_REFERENCE_SEED = 31337  # reference renders for the toy Fréchet distance (disjoint from training and held-out)


def fd_calibration(clip, sets: dict[str, np.ndarray], n_reference: int = 1024) -> dict:
    """Fréchet distance in toy CLIP feature space between each image set and n_reference renders.

    The renders of the same captions give the floor at this set size (FD is biased upwards at
    small N), so compare the AR figure with it, not with zero.
    """
    from sjdbench.eval.metrics.frechet import frechet_distance

    reference, _ = render_batch(FD_REFERENCE_SEED, 0, n_reference)
    ref_features = clip.image_features(reference)
    out: dict[str, float] = {"n_reference": n_reference}
    for name, images in sets.items():
        out[name] = frechet_distance(clip.image_features(images), ref_features)
    return out


# the sampling settings of docs/TOY.md's knob table (SJD W=16 against the shipped CFG 3, top-k 100, T 1)
KNOB_SETTINGS = (
    {"top_k": 64},
    {"top_k": 200},
    {"top_k": 0},
    {"cfg_scale": 1.5},
    {"cfg_scale": 2.0},
    {"cfg_scale": 5.0},
    {"temperature": 0.8},
)


def knob_sweep(
    weights_dir=None, n: int = 16, window: int = 16, settings=KNOB_SETTINGS, threads: int = 2, results_dir=None
) -> list[dict]:
    """Step compression and drawn objects under other sampling settings, on the same n captions.

    The object finder runs on the SJD samples themselves: SJD samples exactly from the model.
    """
    from sjdbench.models.toy.model import build_toy_adapter
    from sjdbench.toyworld.objects import object_report

    torch.set_num_threads(threads)
    _, scenes = render_scenes(HELD_OUT_SEED, 0, n)
    rows = []
    for setting in ({},) + tuple(settings):
        adapter = _with_weights_dir(build_toy_adapter(weights_dir, **setting), weights_dir)
        res, decoded = sjd_runs(adapter, n, window, results_dir)
        res["objects"] = object_report(np.stack(row_images(decoded)), scenes)
        rows.append({"setting": setting or "shipped", **res})
    return rows


def _with_weights_dir(adapter, weights_dir):
    """Remember where the weights came from, so the runs name them (model.options.weights_dir)."""
    adapter.weights_dir = weights_dir
    return adapter


def calibrate(
    weights_dir=None,
    n: int = 16,
    windows=(16, 32),
    png: str | None = None,
    threads: int = 2,
    with_clip: bool = True,
    n_objects: int = 64,
    results_dir=None,
    **sampling,
) -> dict:
    """sampling: overrides for build_toy_adapter (cfg_scale, top_k, temperature, top_p).

    Step compression and CLIP use the first n held-out captions; the object finder (are the
    captioned shapes drawn?) uses AR samples of the first max(n, n_objects), for a usable count of
    objects. All decoding goes through the runner into `results_dir` (resumable).
    """
    from sjdbench.models.toy.model import build_toy_adapter

    torch.set_num_threads(threads)
    t0 = time.time()
    adapter = _with_weights_dir(build_toy_adapter(weights_dir, **sampling), weights_dir)
    load_s = time.time() - t0
    _, caps = held_out(n)
    out: dict = {"load_seconds": round(load_s, 3), "sampling": vars(adapter.default_sampling), "n_captions": n}
    ar, ar_rows = sjd_runs(adapter, n, 1, results_dir)
    out["ar"] = ar
    for w in windows:
        out[f"sjd_w{w}"], _ = sjd_runs(adapter, n, w, results_dir)
    out["context_tv"] = context_sensitivity(adapter)
    images = row_images(ar_rows)
    prepared = image_sets(adapter, max(n, n_objects), results_dir)
    out["objects"] = objects_calibration(adapter, max(n, n_objects), prepared)
    if with_clip:
        from sjdbench.toyworld.clip import load_toy_clip

        clip = load_toy_clip(weights_dir)
        out["toy_fd"] = fd_calibration(clip, prepared[1])
        arr = np.stack(images)
        refs, scenes = render_scenes(HELD_OUT_SEED, 0, n)  # the scenes behind `caps`
        out["clip_score_ar_matched"] = float(clip.clip_score(arr, caps).mean())
        out["clip_score_ar_shuffled"] = float(clip.clip_score(arr, list(np.roll(caps, 1))).mean())
        out["clip_score_renders_matched"] = float(clip.clip_score(refs, caps).mean())
        from sjdbench.toyworld.clip import attribute_accuracy

        for attribute in ("shape", "colour"):
            out[f"{attribute}_accuracy_ar"] = attribute_accuracy(clip, arr, scenes, attribute)
            out[f"{attribute}_accuracy_renders"] = attribute_accuracy(clip, refs, scenes, attribute)
    if png:
        sample_grid(images, caps, png)
    return out
