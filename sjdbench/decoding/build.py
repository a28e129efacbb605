"""Build a decoder (proposal x verifier x init) from its config; the config group is the registry."""
from __future__ import annotations

import os
from pathlib import Path

from sjdbench.decoding.inits import INITS, Init
from sjdbench.decoding.loop import DecoderParts
from sjdbench.decoding.proposals import CoupledProposal, ResampleProposal
from sjdbench.decoding.verifiers import ExactVerifier, GSDVerifier, GreedyVerifier, LanternVerifier, neighbour_table
from sjdbench.decoding.vp import VPProposal, VPSettings
from sjdbench.errors import UserError

PROPOSALS = ("resample", "coupled")
VERIFIERS = ("exact", "greedy", "lantern", "gsd")
PAPER_GSD_D_THR = 0.5  # So et al.'s value on Lumina-mGPT's token embeddings
CHOICES = {
    "proposal": PROPOSALS,
    "verifier": VERIFIERS,
    "init": INITS,
    "fusion": ("fused", "prior", "none"),
    "reference": ("fused", "p"),
    "growth_reading": ("increases", "observations"),
}


def cache_dir() -> Path:
    """Where derived per-model artefacts (LANTERN neighbourhoods) are cached."""
    return Path(os.environ.get("SJDBENCH_CACHE", Path.home() / ".cache" / "sjdbench"))


def validate_decoder(cfg) -> None:
    for key, valid in CHOICES.items():
        value = getattr(cfg, key)
        if value not in valid:
            raise UserError(f"unknown decoder.{key} '{value}'; choose one of: {', '.join(valid)}")
    if cfg.window < 1:
        raise UserError(f"decoder.window must be >= 1, got {cfg.window}")
    if cfg.growth_steps < 1:
        raise UserError(f"decoder.growth_steps must be >= 1, got {cfg.growth_steps}")
    if not 0 < cfg.gamma <= 1:
        raise UserError(f"decoder.gamma must be in (0, 1], got {cfg.gamma}")
    if cfg.history < 1:
        raise UserError(f"decoder.history must be >= 1, got {cfg.history}")
    if cfg.lantern.zero_on not in ("all", "moved"):
        raise UserError(f"unknown decoder.lantern.zero_on '{cfg.lantern.zero_on}'; choose one of: all, moved")
    if cfg.lantern.delta < 0 or cfg.lantern.k < 1:
        raise UserError("decoder.lantern needs k >= 1 and delta >= 0")
    if cfg.gsd.group_size < 0:
        raise UserError("decoder.gsd.group_size must be >= 0")
    if cfg.gsd.d_thr is not None and cfg.gsd.d_thr <= 0:
        raise UserError(f"decoder.gsd.d_thr must be > 0 (or null for the model's value), got {cfg.gsd.d_thr}")


def vp_settings(cfg) -> VPSettings:
    return VPSettings(
        growth_steps=cfg.growth_steps,
        strict_increases=cfg.growth_reading == "increases",
        gamma=cfg.gamma,
        history=cfg.history,
        lam=cfg.lam,
        fusion_top_k=cfg.fusion_top_k,
        fusion=cfg.fusion,
        reference=cfg.reference,
    )


def build_verifier(cfg, adapter):
    if cfg.verifier == "exact":
        return ExactVerifier()
    if cfg.verifier == "greedy":
        return GreedyVerifier()
    if cfg.verifier == "lantern":
        table = neighbour_table(adapter.codebook(), cfg.lantern.k, cache_dir(), adapter.name)
        return LanternVerifier(table, adapter.image_token_ids, adapter.vocab_size, cfg.lantern.delta, cfg.lantern.zero_on)
    return GSDVerifier(adapter.token_embeddings().to(adapter.device), cfg.gsd.group_size, cfg.gsd.p_thr, gsd_d_thr(cfg, adapter))


def gsd_d_thr(cfg, adapter) -> float:
    """GSD's embedding-distance threshold: the config's, else the model's, else the paper's 0.5.

    Why per model: the threshold is an absolute squared distance between input embeddings, whose
    scale differs from model to model (0.5 is the published value for Lumina-mGPT; on the toy no
    two codes are that close, so GSD would silently equal SJD).
    """
    if cfg.gsd.d_thr is not None:
        return float(cfg.gsd.d_thr)
    return float(getattr(adapter, "gsd_d_thr", PAPER_GSD_D_THR))


def build_decoder(cfg, adapter) -> DecoderParts:
    validate_decoder(cfg)
    proposal = ResampleProposal() if cfg.proposal == "resample" else CoupledProposal(cfg.tau)
    if cfg.vp:
        proposal = VPProposal(proposal, vp_settings(cfg))
    return DecoderParts(
        window=cfg.window,
        proposal=proposal,
        verifier=build_verifier(cfg, adapter),
        init=Init(cfg.init),
        growth_steps=cfg.growth_steps,
        strict_increases=cfg.growth_reading == "increases",
        trace_positions=cfg.trace_positions,
        name=cfg.name,
    )
