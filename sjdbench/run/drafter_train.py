"""Training of an EAGLE-style drafter for any model that returns its hidden states, on the model's
own samples (`drafter_data.py`): seeded, resumable, within a time budget.

Loss (EAGLE-1, `eagle/train/main.py`; jadohu/LANTERN's `train_drafter/main.py` the same): for each
entry, the drafter's output feature regresses the target's hidden state of the next slot
(SmoothL1, mean over the feature) and its logits through the target's LM head match the target's
next-token distribution there (cross-entropy against softmax(head(target))); loss = 1.0 * vloss +
0.1 * ploss, both averaged over the entries that stand at segment positions. Input features get
EAGLE's uniform noise, (u - 1/2) * 0.2 * 512 / sequence length; gradients are clipped by value
(0.5); AdamW (0.9, 0.95) with a linear warmup and decay. Entries pair the hidden state of slot k
with the token of slot k + 1, as drafting does (EAGLE's data and LANTERN's LlamaGen data; LANTERN's
Anole and Lumina data pair slot k's hidden state with slot k's own token, which its drafting code
then does not do).

Batch composition is a function of (seed, step), so a resumed run continues the same stream;
`work_dir/ckpt.pt` is rewritten every `ckpt_minutes`. The trained drafter is written as weights +
json (config, training config, data provenance, curve, held-out agreement) with checksums.
"""

from __future__ import annotations

import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from sjdbench.adapter import require_hidden_states
from sjdbench.decoding.processing import cfg_mix, process_logits
from sjdbench.models.drafter.files import save_trained
from sjdbench.models.drafter.network import DrafterConfig, DrafterNet, NoCache
from sjdbench.run import drafter_data
from sjdbench.run.drafter_data import Sequence


@dataclass
class DrafterTrainConfig:
    seed: int = 0
    n_train: int = 1024  # self-distilled samples (one row each)
    n_val: int = 32  # held-out samples (both rows) for the agreement figures
    data_batch: int = 128  # prompts sampled together (one AR forward per position serves them all)
    steps: int | None = None  # None: derived from `minutes` after timing the first steps
    minutes: float | None = None
    batch_size: int = 16  # sequences per step
    lr: float = 1e-3
    warmup: int = 50
    min_lr_ratio: float = 0.05
    v_w: float = 1.0  # EAGLE-1's weights
    p_w: float = 0.1
    grad_clip: float = 0.5  # by value
    noise_std: float = 0.2  # EAGLE's uniform feature noise
    threads: int = 2
    ckpt_minutes: float = 3.0
    log_every: int = 10


# the target config's fields a drafter layer copies, in DrafterConfig's order (hidden size,
# intermediate size, attention heads, key/value heads, vocabulary, RMSNorm eps, rotary theta):
# our ChameleonLM's are the transformers names, our Llama's (toy, debug) Meta's, one head count for both
_TARGET_FIELDS = {
    "chameleon": (
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "rms_norm_eps",
        "rope_theta",
    ),
    "llama": ("dim", "hidden_dim", "n_heads", "n_heads", "vocab_size", "norm_eps", "rope_theta"),
}


def drafter_config_for(adapter: Any) -> DrafterConfig:
    """A drafter of the target's family and width: the Chameleon layer for Chameleon models, the
    LLaMA layer otherwise (1-D rotary at the target's theta; LlamaGen's 2-D table where it has one)."""
    lm = getattr(adapter, "lm", None)
    model = getattr(adapter, "model", None)
    if lm is not None and hasattr(lm, "cfg") and hasattr(lm.cfg, "num_attention_heads"):  # our ChameleonLM
        family, target = "chameleon", lm.cfg
    elif model is not None and hasattr(model, "cfg") and hasattr(model.cfg, "hidden_dim"):  # our Llama (toy, debug)
        family, target = "llama", model.cfg
    else:
        raise ValueError(
            f"no drafter architecture is defined for model '{adapter.name}'; train one for toy, debug or anole"
        )
    hidden, intermediate, heads, kv_heads, vocab, eps, theta = (getattr(target, f) for f in _TARGET_FIELDS[family])
    return DrafterConfig(family, hidden, intermediate, heads, kv_heads, vocab, rms_norm_eps=eps, rope_theta=theta)


def _lr(step: int, total: int, cfg: DrafterTrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = min(1.0, (step - cfg.warmup) / max(1, total - cfg.warmup))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * (1 - t))


def make_batch(
    sequences: list[Sequence], noise_std: float, generator: torch.Generator | None
) -> dict[str, torch.Tensor]:
    """Right-padded entries of each sequence: entry k pairs token k + 1 with the hidden state of
    slot k (noised), at slot k's rotary position; its targets are slot k + 1's hidden state. Loss
    on entries at segment positions."""
    L = max(s.tokens.numel() for s in sequences) - 1
    D = sequences[0].hidden.shape[1]
    B = len(sequences)
    tokens = torch.zeros(B, L, dtype=torch.long)
    features = torch.zeros(B, L, D)
    target = torch.zeros(B, L, D)
    rotary = torch.zeros(B, L, dtype=torch.long)
    valid = torch.zeros(B, L, dtype=torch.bool)
    loss_mask = torch.zeros(B, L)
    for b, s in enumerate(sequences):
        n = s.tokens.numel() - 1
        hidden = s.hidden.float()
        tokens[b, :n] = s.tokens[1:]
        features[b, :n] = hidden[:-1]
        if noise_std > 0:
            noise = (torch.rand(n, D, generator=generator) - 0.5) * noise_std * 512 / (n + 1)
            features[b, :n] += noise
        target[b, :n] = hidden[1:]
        rotary[b, :n] = s.rotary[:-1]
        valid[b, :n] = True
        loss_mask[b, s.first_segment - 1 : n] = 1.0
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    mask = (causal[None] & valid[:, None, :]) | torch.eye(L, dtype=torch.bool)[None]
    return dict(tokens=tokens, features=features, target=target, rotary=rotary, mask=mask[:, None], loss_mask=loss_mask)


def losses(
    net: DrafterNet, head: Callable, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(vloss, ploss, top-1 agreement) over the batch's loss entries."""
    out = net(batch["tokens"], batch["features"], batch["rotary"], batch["mask"], NoCache())  # (B, L, D)
    mask = batch["loss_mask"]
    count = mask.sum() + 1e-5
    with torch.no_grad():
        target_logits = head(batch["target"]).float()
        target_p = target_logits.softmax(-1)
    out_logits = head(out).float()
    ploss = -(target_p * out_logits.log_softmax(-1)).sum(-1).mul(mask).sum() / count
    vloss = F.smooth_l1_loss(out, batch["target"], reduction="none").mean(-1).mul(mask).sum() / count
    agree = ((out_logits.argmax(-1) == target_logits.argmax(-1)).float() * mask).sum() / count
    return vloss, ploss, agree


@torch.no_grad()
def held_out_agreement(adapter: Any, net: DrafterNet, val: list[list[Sequence]]) -> dict[str, float]:
    """On held-out samples (each with its conditional and unconditional row), at content positions,
    the drafter fed the target's exact features (one step ahead): how often its top-1 equals the
    target's, per row and after the model's CFG mixing and image-id mask; and the mean acceptance
    probability of one draft sampled from it, sum_x min(p, q) over the processed distributions."""
    net.eval()
    legal = torch.zeros(adapter.vocab_size, dtype=torch.bool, device=adapter.device)
    legal[adapter.image_token_ids] = True
    content = ~adapter.layout.is_forced.to(adapter.device)
    N = adapter.layout.n_positions
    raw, mixed, accept, count = 0.0, 0.0, 0.0, 0
    for pair in val:
        drafts, targets = [], []
        for s in pair:  # rows 0 and 1: the segment's entries predict positions 1..N-1 (and past the end)
            batch = make_batch([s], 0.0, None)
            out = net(batch["tokens"], batch["features"].to(net.dtype), batch["rotary"], batch["mask"], NoCache())[0]
            first = s.first_segment - 1  # the entry at segment position 0
            drafts.append(adapter.lm_head(out[first : first + N - 1].to(net.dtype)))  # (N-1, V): predict 1..N-1
            targets.append(adapter.lm_head(s.hidden[s.first_segment : s.first_segment + N - 1].to(net.dtype)))
        q_raw, p_raw = torch.stack(drafts), torch.stack(targets)  # (2, N-1, V)
        where = content[1:]
        raw += float((q_raw.argmax(-1) == p_raw.argmax(-1))[:, where].float().mean())
        sampling = adapter.default_sampling
        allowed = torch.where(where[:, None], legal[None, :], torch.ones_like(legal)[None, :])
        q_mix = cfg_mix(q_raw, sampling.cfg_scale, sampling.guidance).masked_fill(~allowed, float("-inf"))
        p_mix = cfg_mix(p_raw, sampling.cfg_scale, sampling.guidance).masked_fill(~allowed, float("-inf"))
        mixed += float((q_mix.argmax(-1) == p_mix.argmax(-1))[where].float().mean())
        q = process_logits(q_raw, allowed, sampling)[where]
        p = process_logits(p_raw, allowed, sampling)[where]
        accept += float(torch.minimum(p, q).sum(-1).mean())
        count += 1
    net.train()
    return {
        "top1_agreement_per_row": raw / count,
        "top1_agreement_cfg": mixed / count,
        "acceptance_one_draft": accept / count,
        "held_out_samples": count,
    }


def train_drafter(
    adapter: Any,
    prompts: list[str],
    val_prompts: list[str],
    out_dir: Path,
    name: str,
    work_dir: Path,
    cfg: DrafterTrainConfig,
    target: dict[str, Any],
    resume: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Generate (or reuse) the self-distilled data in work_dir, train, export `name` into out_dir;
    returns the metadata written. target: what the drafter was trained for (model name, options,
    weights fingerprint), recorded in the metadata."""
    require_hidden_states(adapter, "drafter training")
    torch.set_num_threads(cfg.threads)
    for param in _modules_parameters(adapter):
        param.requires_grad_(False)  # the target is frozen: its head passes gradients, never takes them
    work_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    batching = f"b{cfg.data_batch}"  # batch files hold data_batch samples each: another size starts afresh
    train_rows = drafter_data.generate(adapter, prompts, work_dir / f"train_{batching}", cfg.seed, cfg.data_batch, log)
    train = [row for (row,) in train_rows]
    val_rows = drafter_data.generate(
        adapter, val_prompts, work_dir / f"val_{batching}", cfg.seed + 1, cfg.data_batch, log, both_rows=True
    )
    data_seconds = time.time() - started

    torch.manual_seed(cfg.seed)
    net = DrafterNet(drafter_config_for(adapter))
    with torch.no_grad():
        net.embed_tokens.weight.copy_(adapter.token_embeddings())
    net.to(device=adapter.device, dtype=getattr(adapter, "weights_dtype", torch.float32))
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95))
    ckpt_path = work_dir / "ckpt.pt"
    step, curve, elapsed = 0, [], 0.0
    if resume and ckpt_path.exists():
        state = torch.load(ckpt_path, weights_only=False, map_location="cpu")
        saved = DrafterTrainConfig(**state["cfg"])
        identity = ("seed", "n_train", "batch_size", "lr", "noise_std")
        if any(getattr(saved, f) != getattr(cfg, f) for f in identity):
            raise ValueError(f"{ckpt_path} was written by a different configuration; use --no-resume to start over")
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, curve, elapsed = state["step"], state["curve"], state["elapsed"]
        cfg.steps = cfg.steps or saved.steps
        log(f"resuming from {ckpt_path} at step {step} of {cfg.steps}")

    def checkpoint() -> None:
        tmp = ckpt_path.with_suffix(".tmp")
        state = {"model": net.state_dict(), "opt": opt.state_dict(), "step": step, "curve": curve}
        torch.save({**state, "cfg": asdict(cfg), "elapsed": elapsed}, tmp)
        tmp.replace(ckpt_path)

    head = adapter.lm_head
    net.train()
    last_ckpt, window = time.time(), []
    while cfg.steps is None or step < cfg.steps:
        t0 = time.time()
        rng = np.random.default_rng([cfg.seed, 13, step])
        chosen = [train[i] for i in rng.integers(0, len(train), cfg.batch_size)]
        noise = torch.Generator().manual_seed(int(rng.integers(2**62)))
        batch = {k: v.to(adapter.device) for k, v in make_batch(chosen, cfg.noise_std, noise).items()}
        batch["features"] = batch["features"].to(net.dtype)
        batch["target"] = batch["target"].to(net.dtype)
        for group in opt.param_groups:
            group["lr"] = _lr(step, cfg.steps or 10**9, cfg)
        vloss, ploss, agree = losses(net, head, batch)
        loss = cfg.v_w * vloss + cfg.p_w * ploss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_value_(params, cfg.grad_clip)
        opt.step()
        step += 1
        elapsed += time.time() - t0
        window.append((loss.item(), vloss.item(), ploss.item(), agree.item()))
        if cfg.steps is None and step >= 5:  # time budget -> step count, fixed once
            assert cfg.minutes is not None
            cfg.steps = max(step + 1, int(cfg.minutes * 60 / (elapsed / step)))
            log(f"time budget {cfg.minutes} min -> {cfg.steps} steps")
        if step % cfg.log_every == 0 or step == cfg.steps:
            mean = np.mean(window, axis=0)
            curve.append(
                {
                    "step": step,
                    "loss": round(float(mean[0]), 5),
                    "vloss": round(float(mean[1]), 5),
                    "ploss": round(float(mean[2]), 5),
                    "top1": round(float(mean[3]), 4),
                    "lr": opt.param_groups[0]["lr"],
                    "elapsed_s": round(elapsed, 1),
                }
            )
            window = []
            log(
                f"step {step}/{cfg.steps}: loss {mean[0]:.4f} (feature {mean[1]:.4f}, token {mean[2]:.3f}), "
                f"top-1 {mean[3]:.3f}"
            )
        if time.time() - last_ckpt > cfg.ckpt_minutes * 60:
            checkpoint()
            last_ckpt = time.time()
    checkpoint()
    agreement = held_out_agreement(adapter, net, val_rows)
    meta = {
        "name": name,
        "target": target,
        "train": asdict(cfg),
        "data": {
            "kind": "self-distilled: the target's own AR samples (default sampling), hidden states by a "
            "teacher-forced forward",
            "train_samples": len(train),
            "conditional_share": round(sum(s.row == 0 for s in train) / max(1, len(train)), 3),
            "train_entries": int(sum(s.tokens.numel() - 1 for s in train)),
            "stored_bytes": int(sum(s.hidden.numel() * s.hidden.element_size() + 16 * s.tokens.numel() for s in train)),
            "held_out_samples": len(val_rows),
            "prompts": target.get("prompts"),
            "seed": cfg.seed,
            "generation_seconds": round(data_seconds, 1),
        },
        "curve": curve,
        "final": {**agreement, "train_seconds": round(elapsed, 1), "steps": step},
        "environment": {"torch": torch.__version__, "python": platform.python_version(), "threads": cfg.threads},
    }
    save_trained(net, out_dir, name, meta)
    log(
        f"exported {name} to {out_dir}: top-1 agreement with the target {agreement['top1_agreement_cfg']:.3f} "
        f"(CFG-mixed), {agreement['top1_agreement_per_row']:.3f} (per row); one-draft acceptance "
        f"{agreement['acceptance_one_draft']:.3f}"
    )
    return {"config": net.cfg.to_dict(), **meta}


def _modules_parameters(adapter: Any) -> list[torch.nn.Parameter]:
    found: dict[int, torch.nn.Parameter] = {}
    for value in vars(adapter).values():
        if isinstance(value, torch.nn.Module):
            for param in value.parameters():
                found[id(param)] = param
    return list(found.values())
