"""Training of the toy model: tokenizer fit, dataset encoding and the transformer, seeded and resumable.

Sequences are `prompt_tokens(caption) + segment` (captions as word ids, see `text.py`) where the
segment is the 16x16 code grid with an <eol> after each row. Prompts in a batch are left-padded with
PAD (masked out) to the batch's longest prompt, which is exactly how
`LlamaImageAdapter.encode_prompt` builds the unconditional CFG branch; with probability
`caption_dropout` the caption is replaced by the unconditional prompt. The loss is on segment
tokens only. Batch composition is a function of (seed, step), so a resumed run continues
the same stream. `out_dir/ckpt.pt` is rewritten every `ckpt_minutes`; rerunning resumes from it.
"""

from __future__ import annotations

import csv
import json
import math
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from sjdbench.models.llama import Llama, LlamaConfig, segment_index
from sjdbench.models.llama_adapter import CODE_OFFSET, EOL, PAD, encode_text, prompt_tokens, vocab_size_for
from sjdbench.models.toy import model as toy_model
from sjdbench.models.toy.text import caption_encoder
from sjdbench.models.toy.tokenizer import GRID, PatchTokenizer, roundtrip_error
from sjdbench.models.weights import write_checksums
from sjdbench.toyworld.world import grammar_words, render_batch

SHIPPED_STEPS = 3400  # the step count of the shipped weights (see docs/TOY.md for the exact recipe)
DEFAULT_OUT = Path("toy_weights")  # `sjdbench toy train` writes here unless told otherwise
EXPORTED_MODE = 0o644  # safetensors writes 0600; exported weights are meant to be read by others


def publish(path: Path) -> None:
    """Make an exported file readable like any other file of the package."""
    path.chmod(EXPORTED_MODE)


@dataclass
class TrainConfig:
    seed: int = 0
    steps: int | None = None  # None: derived from `minutes` after timing the first steps
    minutes: float | None = None
    batch_size: int = 32
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 50
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    caption_dropout: float = 0.1
    text: str = "words"  # caption tokens: "words" (toy grammar vocabulary) or "chars" (printable ASCII)
    n_train: int = 20000
    n_val: int = 256
    n_codes: int = 512
    kmeans_images: int = 2000
    kmeans_iters: int = 20
    row_end_token: bool = True
    segment_embedding: bool = True  # learned embedding of the segment index (see LlamaConfig.segment_len)
    # "bf16": matmuls under bf16 autocast (attention stays fp32); measured side by side on 2 cores
    # with AMX, a step takes 0.80 s instead of 1.21 s in "fp32". Weights are saved in fp32 either way.
    precision: str = "bf16"
    device: str = "cpu"  # "cpu", "cuda", "cuda:N" or "auto" (cuda when visible)
    dim: int = 192
    n_layers: int = 4
    n_heads: int = 6
    max_seq_len: int = 512
    threads: int = 2
    ckpt_minutes: float = 3.0
    log_every: int = 10


def segment_tokens(codes: torch.Tensor, row_end_token: bool) -> torch.Tensor:
    """codes (B, 16, 16) -> segment ids (B, 16*17) with <eol> after each row (or (B, 256))."""
    ids = codes.long() + CODE_OFFSET
    if row_end_token:
        eol = torch.full((ids.shape[0], ids.shape[1], 1), EOL, dtype=torch.long)
        ids = torch.cat([ids, eol], dim=2)
    return ids.reshape(ids.shape[0], -1)


def resolve_train_device(device: str) -> str:
    """ "auto" -> cuda when visible, else cpu; an explicit cuda without a GPU is a clear error."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for but no CUDA device is visible; use --device cpu")
    if not (device == "cpu" or device.startswith("cuda")):
        raise ValueError(f"unknown device {device!r}; valid: auto, cpu, cuda, cuda:N")
    return device


def segment_length(cfg: TrainConfig) -> int:
    """Positions in the generated segment: 16 rows of 16 codes, each followed by <eol> if enabled."""
    return GRID * (GRID + int(cfg.row_end_token))


def make_batch(
    codes: torch.Tensor,
    captions: list[str],
    idx: np.ndarray,
    drop: np.ndarray,
    row_end_token: bool,
    encode: Callable[[str], list[int]] = encode_text,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Left-padded sequences (B, P + N) and pad mask; P = longest prompt in the batch."""
    prompts = [prompt_tokens(None if d else captions[i], encode) for i, d in zip(idx, drop)]
    P = max(len(p) for p in prompts)
    seg = segment_tokens(codes[torch.as_tensor(idx)], row_end_token)
    seq = torch.full((len(idx), P + seg.shape[1]), PAD, dtype=torch.long)
    for b, p in enumerate(prompts):
        seq[b, P - len(p) : P] = torch.tensor(p)
    seq[:, P:] = seg
    return seq, seq != PAD, P


def sequence_loss(model: Llama, seq: torch.Tensor, pad_mask: torch.Tensor, P: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy over segment targets; also per-position losses (B, N)."""
    device = model.head.weight.device
    seq, pad_mask = seq.to(device), pad_mask.to(device)
    inp, tgt = seq[:, :-1], seq[:, 1:]
    L = inp.shape[1]
    pos, index = torch.arange(L, device=device), segment_index(L, P).to(device)
    logits = model(inp, pos, pad_mask=pad_mask[:, :-1], segment_index=index)
    seg_logits = logits[:, P - 1 :]  # position P-1 (<boi>) predicts segment 0
    per = F.cross_entropy(seg_logits.reshape(-1, seg_logits.shape[-1]), tgt[:, P - 1 :].reshape(-1), reduction="none")
    per = per.view(seq.shape[0], -1)
    return per.mean(), per


def _progress():
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
    )


def prepare_data(out_dir: Path, work_dir: Path, cfg: TrainConfig, log=print) -> dict:
    """Fit (or load) the tokenizer into out_dir and encode the train/val scenes (cached in work_dir)."""
    tok_path = out_dir / toy_model.TOKENIZER_FILE
    data_path = work_dir / "data.pt"
    if data_path.exists() and tok_path.exists():
        return torch.load(data_path, weights_only=False)
    if tok_path.exists():
        tok = PatchTokenizer.load(tok_path)
    else:
        log(f"fitting the k-means codebook (K={cfg.n_codes}) on {cfg.kmeans_images} renders")
        images, _ = render_batch(cfg.seed + 1000, 0, cfg.kmeans_images)
        tok = PatchTokenizer.fit(images, k=cfg.n_codes, iters=cfg.kmeans_iters, seed=cfg.seed)
        tok.save(tok_path)
        publish(tok_path)
    chunk = 1000
    codes, captions = [], []
    with _progress() as progress:
        task = progress.add_task("rendering + encoding", total=cfg.n_train, info="")
        for start in range(0, cfg.n_train, chunk):
            images, caps = render_batch(cfg.seed, start, min(chunk, cfg.n_train - start))
            codes.append(tok.encode(images).to(torch.int16))
            captions += caps
            progress.update(task, advance=len(caps))
    val_images, val_caps = render_batch(cfg.seed + 1, 0, cfg.n_val)
    data = {
        "codes": torch.cat(codes),
        "captions": captions,
        "val_codes": tok.encode(val_images).to(torch.int16),
        "val_captions": val_caps,
        "tokenizer_roundtrip": roundtrip_error(tok, val_images),
        "near_duplicate_pairs": {str(t): tok.near_duplicate_pairs(t) for t in (0.03, 0.05, 0.08)},
    }
    torch.save(data, data_path)
    return data


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = min(1.0, (step - cfg.warmup) / max(1, total - cfg.warmup))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


@torch.no_grad()
def evaluate(model: Llama, data: dict, cfg: TrainConfig, unconditional: bool = False) -> dict:
    model.eval()
    codes, caps = data["val_codes"], data["val_captions"]
    totals, code_losses = [], []
    for start in range(0, len(caps), cfg.batch_size):
        idx = np.arange(start, min(start + cfg.batch_size, len(caps)))
        seq, mask, P = make_batch(
            codes,
            caps,
            idx,
            np.full(len(idx), unconditional),
            cfg.row_end_token,
            caption_encoder(cfg.text, grammar_words()),
        )
        loss, per = sequence_loss(model, seq, mask, P)
        totals.append(per)
        is_code = seq[:, P:] >= CODE_OFFSET
        code_losses.append(per[is_code])
    model.train()
    return {"loss": float(torch.cat(totals).mean()), "code_loss": float(torch.cat(code_losses).mean())}


def _save_curve(out_dir: Path, log_rows: list[dict]) -> None:
    if not log_rows:
        return
    with open(out_dir / "loss.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(log_rows[0]))
        writer.writeheader()
        writer.writerows(log_rows)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3), dpi=80)
        ax.plot([r["step"] for r in log_rows], [r["loss"] for r in log_rows], lw=1)
        ax.set_xlabel("step")
        ax.set_ylabel("train loss (nats/token)")
        ax.set_title("toy model training")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out_dir / "loss.png")
        plt.close(fig)
    except Exception:  # the plot is a convenience; the CSV is the record
        pass


def train_toy(
    out_dir: str | Path | None = None,
    steps: int | None = None,
    seed: int = 0,
    threads: int = 2,
    resume: bool = True,
    minutes: float | None = None,
    work_dir: str | Path | None = None,
    log=print,
    overwrite: bool = False,
    **overrides,
) -> dict:
    """Train the toy model into out_dir (default: ./toy_weights, a folder of its own). Returns the
    metadata dict.

    The shipped weights (the package weights dir) are replaced only with overwrite=True: a
    retraining run takes about 40 minutes on 2 CPU cores and must not silently replace the
    weights every run id of the shipped model refers to. Checkpoint and encoded dataset go to
    work_dir: out_dir itself, except for the package weights dir, where they go to
    ./.cache/toy_train so they are never shipped.
    """
    out_dir = Path(out_dir or DEFAULT_OUT)
    is_package = out_dir.resolve() == toy_model.WEIGHTS_DIR.resolve()
    if is_package and not overwrite:
        raise ValueError(
            f"{out_dir} holds the shipped toy weights; train into another folder (--out DIR) and use it with "
            "model.options.weights_dir=DIR, or pass --overwrite to replace the shipped weights"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    if work_dir is None:
        work_dir = Path(".cache") / "toy_train" if is_package else out_dir
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    if steps is None and minutes is None:
        steps = SHIPPED_STEPS
    cfg = TrainConfig(seed=seed, steps=steps, minutes=minutes, threads=threads, **overrides)
    if cfg.precision not in ("bf16", "fp32"):
        raise ValueError(f"unknown precision {cfg.precision!r}; valid: bf16, fp32")
    cfg.device = resolve_train_device(cfg.device)
    torch.set_num_threads(cfg.threads)
    ckpt_path = work_dir / "ckpt.pt"
    state = None
    if resume and ckpt_path.exists():
        state = torch.load(ckpt_path, weights_only=False, map_location="cpu")
        # fields missing from older checkpoints take the values those runs used
        saved = TrainConfig(**{"text": "chars", "segment_embedding": False, "precision": "fp32", **state["cfg"]})
        identity = ("seed", "dim", "n_layers", "n_codes", "row_end_token", "text", "segment_embedding", "precision")
        if any(getattr(saved, f) != getattr(cfg, f) for f in identity):
            raise ValueError(f"{ckpt_path} was written by a different configuration; use --no-resume to start over")
        if steps is not None:  # a longer (or shorter) run continues the same stream and schedule shape
            saved.steps = steps
        saved.device = cfg.device  # a run may continue on another device
        cfg = saved
        log(f"resuming from {ckpt_path} at step {state['step']} of {cfg.steps}")
    elif not resume:
        for path in (ckpt_path, work_dir / "data.pt", out_dir / toy_model.TOKENIZER_FILE):
            path.unlink(missing_ok=True)

    data = prepare_data(out_dir, work_dir, cfg, log)
    codes, captions = data["codes"], data["captions"]
    torch.manual_seed(cfg.seed)
    model_cfg = LlamaConfig(
        vocab_size=vocab_size_for(cfg.n_codes),
        dim=cfg.dim,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        max_seq_len=cfg.max_seq_len,
        segment_len=segment_length(cfg) if cfg.segment_embedding else 0,
    )
    model = Llama(model_cfg).to(cfg.device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )
    step, log_rows, elapsed = 0, [], 0.0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, log_rows, elapsed = state["step"], state["log"], state["elapsed"]

    def checkpoint() -> None:
        tmp = ckpt_path.with_suffix(".tmp")
        torch.save(
            {
                "model": model.state_dict(),
                "opt": opt.state_dict(),
                "step": step,
                "log": log_rows,
                "cfg": asdict(cfg),
                "elapsed": elapsed,
            },
            tmp,
        )
        tmp.replace(ckpt_path)
        _save_curve(out_dir, log_rows)

    encode = caption_encoder(cfg.text, grammar_words())
    model.train()
    last_ckpt = time.time()
    window: list[float] = []
    with _progress() as progress:
        task = progress.add_task("training", total=cfg.steps or 0, completed=step, info="")
        while cfg.steps is None or step < cfg.steps:
            t0 = time.time()
            rng = np.random.default_rng([cfg.seed, 7, step])
            idx = rng.integers(0, len(captions), cfg.batch_size)
            drop = rng.random(cfg.batch_size) < cfg.caption_dropout
            seq, mask, P = make_batch(codes, captions, idx, drop, cfg.row_end_token, encode)
            total = cfg.steps or 10**9
            for group in opt.param_groups:
                group["lr"] = lr_at(step, total, cfg)
            with torch.autocast(torch.device(cfg.device).type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
                loss, _ = sequence_loss(model, seq, mask, P)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            step += 1
            dt = time.time() - t0
            elapsed += dt
            last_loss = loss.item()
            window.append(last_loss)
            if cfg.steps is None and step >= 8:  # time budget -> step count, fixed once
                assert cfg.minutes is not None  # a run without a step count has a time budget
                cfg.steps = max(step + 1, int(cfg.minutes * 60 / (elapsed / step)))
                progress.update(task, total=cfg.steps)
                log(f"time budget {cfg.minutes} min -> {cfg.steps} steps")
            if step % cfg.log_every == 0:
                row = {
                    "step": step,
                    "loss": float(np.mean(window)),
                    "lr": opt.param_groups[0]["lr"],
                    "elapsed_s": round(elapsed, 1),
                }
                log_rows.append(row)
                window = []
            progress.update(task, completed=step, info=f"loss {last_loss:.3f}")
            if time.time() - last_ckpt > cfg.ckpt_minutes * 60:
                checkpoint()
                last_ckpt = time.time()
    if window:  # the last partial logging window
        log_rows.append(
            {
                "step": step,
                "loss": float(np.mean(window)),
                "lr": opt.param_groups[0]["lr"],
                "elapsed_s": round(elapsed, 1),
            }
        )
    checkpoint()
    return export(out_dir, model, cfg, data, log_rows, elapsed, log)


def export(
    out_dir: Path, model: Llama, cfg: TrainConfig, data: dict, log_rows: list[dict], elapsed: float, log=print
) -> dict:
    val = evaluate(model, data, cfg)
    val_uncond = evaluate(model, data, cfg, unconditional=True)
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(out_dir / toy_model.LM_FILE)
    )
    publish(out_dir / toy_model.LM_FILE)
    tail = [r["loss"] for r in log_rows[-5:]]
    meta = {
        "name": "toy",
        "model": model.cfg.to_dict(),
        "layout": {"grid": [GRID, GRID], "row_end_token": cfg.row_end_token, "end_token": False},
        "tokenizer": {
            "kind": "kmeans-4x4-rgb-patches",
            "n_codes": cfg.n_codes,
            "patch": 4,
            "image_size": 64,
            "roundtrip_val": data["tokenizer_roundtrip"],
            "near_duplicate_pairs_rms": data["near_duplicate_pairs"],
        },
        "text": {"kind": cfg.text, "vocab": grammar_words() if cfg.text == "words" else None},
        "sampling_defaults": {
            "cfg_scale": toy_model.DEFAULT_CFG_SCALE,
            "temperature": 1.0,
            "top_k": toy_model.DEFAULT_TOP_K,
            "top_p": 1.0,
        },
        "train": asdict(cfg),
        "final": {
            "step": log_rows[-1]["step"] if log_rows else 0,
            "train_loss_last50": float(np.mean(tail)) if tail else None,
            "val_loss": val["loss"],
            "val_code_loss": val["code_loss"],
            "val_loss_unconditional": val_uncond["loss"],
            "val_code_loss_unconditional": val_uncond["code_loss"],
            "train_seconds": round(elapsed, 1),
        },
        "environment": {"torch": torch.__version__, "python": platform.python_version(), "threads": cfg.threads},
    }
    (out_dir / toy_model.META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    write_checksums(out_dir, [toy_model.LM_FILE, toy_model.TOKENIZER_FILE])
    log(
        f"exported to {out_dir}: val loss {val['loss']:.3f} (codes {val['code_loss']:.3f}), "
        f"unconditional {val_uncond['loss']:.3f}"
    )
    return meta
