"""The one decoding loop: a sliding Jacobi window verified speculatively, for every decoder.

One iteration = one model forward over the window [x_{n-1}, d_n, ..., d_{n+L-2}] (x_{n-1} is the
last committed token, not yet in the cache). Slot j's logits give p at position n+j. Drafts are
checked in order by the verifier (vectorised; the accepted prefix is a cumulative product of the
flags), the first rejected slot gets the verifier's replacement (all passed: a bonus draw from the
last slot), the cache is rolled back over the rejected slots, and the proposal turns the remaining
slots' distributions into next iteration's drafts; never-seen tail slots get fresh drafts from the
init. AR is this loop with W = 1. The loop never knows which model it drives.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from sjdbench.decoding.history import ProbabilityHistory
from sjdbench.decoding.inits import Init, InitContext, neighbour_tables
from sjdbench.decoding.processing import StructureMasks, one_hot, process_logits, sample
from sjdbench.decoding.stats import DecodeStats
from sjdbench.models.base import ImageARAdapter, Sampling


@dataclass
class DecoderParts:
    """A decoder = proposal x verifier x init, with a window size W (W = 1 is AR)."""

    window: int
    proposal: object
    verifier: object
    init: Init
    growth_steps: int = 3  # N for the consecutive-growth statistics (and VP's mask)
    strict_increases: bool = True
    trace_positions: int = 8  # positions whose probability trajectories are recorded
    track_growth: bool = True  # keep the probability history for growth statistics (VP always does)
    name: str = ""


@dataclass
class DecodeResult:
    tokens: torch.Tensor  # (N,) on CPU
    stats: DecodeStats = field(repr=False)


def _trace_set(layout, count: int) -> set[int]:
    content = torch.nonzero(~layout.is_forced).squeeze(1).tolist()
    if count <= 0 or not content:
        return set()
    picks = np.linspace(0, len(content) - 1, num=min(count, len(content))).round().astype(int)
    return {content[i] for i in picks}


@dataclass
class LoopConstants:
    """Per-adapter tables the loop needs every call; built once and kept on the adapter."""

    forced: torch.Tensor  # (N,) on device
    content: np.ndarray  # (N,) bool on host
    masks: StructureMasks
    left_of: np.ndarray  # (N,) host neighbour tables for the spatial inits
    above_of: np.ndarray


def loop_constants(adapter: ImageARAdapter) -> LoopConstants:
    cached = getattr(adapter, "_loop_constants", None)
    if cached is not None:
        return cached
    layout, device = adapter.layout, adapter.device
    legal = torch.zeros(adapter.vocab_size, dtype=torch.bool, device=device)
    legal[adapter.image_token_ids] = True
    forced = layout.forced.to(device)
    left_of, above_of = neighbour_tables(layout)
    constants = LoopConstants(forced, (layout.forced < 0).numpy(), StructureMasks(forced, legal), left_of, above_of)
    try:
        adapter._loop_constants = constants
    except AttributeError:  # adapters with __slots__: rebuild each call
        pass
    return constants


def jacobi_decode(
    adapter: ImageARAdapter,
    prompt_text: str,
    parts: DecoderParts,
    sampling: Sampling,
    generator: torch.Generator,
) -> DecodeResult:
    layout, device, V, W = adapter.layout, adapter.device, adapter.vocab_size, parts.window
    N = layout.n_positions
    if parts.verifier.greedy:
        sampling = replace(sampling, temperature=0.0)
    constants = loop_constants(adapter)
    content_cpu, masks = constants.content, constants.masks
    stats = DecodeStats.empty(W, n_tokens=N, n_content=int(content_cpu.sum()))
    traced = _trace_set(layout, parts.trace_positions) if parts.track_growth else set()

    prompt = adapter.encode_prompt(prompt_text)
    cache = adapter.new_cache(prompt, extra=W)
    first = adapter.prefill(prompt, cache)  # (2, V)
    p0 = process_logits(first[:, None], masks.window(0, 1), sampling)  # (1, V)
    tokens = torch.full((N,), -1, dtype=torch.long, device=device)
    tokens[0] = sample(p0, generator)[0]
    stats.nfe = 1
    n = 1

    depth = max(parts.growth_steps + 1, getattr(getattr(parts.proposal, "settings", None), "history", 0) + 1, 8)
    vp_distribution = getattr(parts.proposal, "proposal_distribution", None)
    vp_settings = getattr(parts.proposal, "settings", None)
    if vp_settings is not None and (vp_settings.growth_steps, vp_settings.strict_increases) != (parts.growth_steps, parts.strict_increases):
        raise ValueError("VP's growth_steps/reading must equal the decoder's: the loop computes one growth mask for both")
    keep_history = W > 1 and (parts.track_growth or vp_distribution is not None)
    history = ProbabilityHistory(W, depth, V, device) if keep_history else None
    ctx = InitContext(layout, constants.forced, constants.left_of, constants.above_of, adapter.image_token_ids, tokens.clone(),
                      torch.full((N,), -1, dtype=torch.long, device=device))
    drafts = torch.empty(0, dtype=torch.long, device=device)  # drafts for positions n, n+1, ...
    refs = torch.empty(0, V, device=device)  # their references q
    fresh = np.zeros(0, dtype=bool)  # drafted by the init (one-hot q)
    grew = torch.zeros(0, dtype=torch.bool, device=device)  # M = 1 on the draft when proposed
    eligible = torch.zeros(0, dtype=torch.bool, device=device)  # had enough observations for M
    growth_obs = parts.growth_steps + 1 if parts.strict_increases else parts.growth_steps

    while n < N:
        L = min(W, N - n)
        missing = L - 1 - drafts.numel()
        if missing > 0:  # fresh drafts for slots never predicted before
            new_pos = list(range(n + drafts.numel(), n + L - 1))
            new = parts.init.fill(new_pos, ctx, generator)
            drafts = torch.cat([drafts, new])
            refs = torch.cat([refs, one_hot(new, V)])
            fresh = np.concatenate([fresh, np.ones(missing, dtype=bool)])
            grew = torch.cat([grew, torch.zeros(missing, dtype=torch.bool, device=device)])
            eligible = torch.cat([eligible, torch.zeros(missing, dtype=torch.bool, device=device)])
        d, q = drafts[: L - 1], refs[: L - 1]

        window = torch.cat([tokens[n - 1 : n], d])  # (L,)
        logits = adapter.forward(window, n - 1, cache)  # (2, L, V)
        stats.nfe += 1
        positions = torch.arange(n, n + L, device=device)
        p = process_logits(logits, masks.window(n, n + L), sampling)  # (L, V)
        if history is not None:
            history.push(positions, p)
            # one growth mask per iteration over the whole window, now including this iteration's p:
            # sliced for the verified drafts (growth up to verification) and for the proposal
            growth_window = history.growth_mask(positions, parts.growth_steps, parts.strict_increases)  # (L, V)
            observed = history.observations(positions)  # (L,)
        ctx.latest_argmax[n : n + L] = p.argmax(-1)

        u = torch.rand(L - 1, generator=generator, device=device)
        passed = parts.verifier.accept(p[: L - 1], q, d, u)  # (L-1,)
        k = int(passed.long().cumprod(0).sum())  # accepted prefix: the one host sync per iteration
        tokens[n : n + k] = d[:k]
        if k < L - 1:
            tokens[n + k] = sample(parts.verifier.replacement(p[k], q[k], d[k]), generator)
        else:
            tokens[n + L - 1] = sample(p[L - 1 :], generator)[0]
        m = k + 1
        adapter.rollback(cache, L - m)
        ctx.guess[n : n + m] = tokens[n : n + m]
        if history is not None:
            grew_verify = growth_window[: L - 1].gather(-1, d[:, None]).squeeze(-1)
            stats.record_iteration(m, k, L - 1, content_cpu[n : n + L - 1], fresh[: L - 1], grew[: L - 1],
                                   eligible[: L - 1], grew_verify, observed[: L - 1] >= growth_obs)
        else:
            stats.record_iteration(m, k, L - 1, content_cpu[n : n + L - 1], fresh[: L - 1])
        for pos in traced.intersection(range(n, n + m)):
            if history is not None:
                stats.trajectories.append({"pos": pos, "token": int(tokens[pos]), "probs": history.trajectory(pos, int(tokens[pos]))})

        if m < L:  # the proposal turns slots m..L-1 into next iteration's drafts
            rest = positions[m:]
            growth = growth_window[m:] if history is not None else None  # (L-m, V)
            r, ref = vp_distribution(p[m:], rest, history, growth) if vp_distribution else (p[m:], p[m:])
            old = torch.cat([d[m:], d.new_zeros(1)])  # position n+L-1 had no draft yet
            old_q = torch.cat([q[m:], p.new_zeros(1, V)])
            has_old = torch.arange(L - m, device=device) < (L - 1 - m)
            drafts = parts.proposal.draw(r, old, old_q, has_old, generator)
            refs = ref
            fresh = np.zeros(L - m, dtype=bool)
            if growth is not None:
                grew = growth.gather(-1, drafts[:, None]).squeeze(-1)
                eligible = observed[m:] >= growth_obs
            else:
                grew = eligible = torch.zeros(L - m, dtype=torch.bool, device=device)
            ctx.guess[n + m : n + L] = drafts
        else:
            drafts, refs = drafts[:0], refs[:0]
            fresh, grew, eligible = fresh[:0], grew[:0], eligible[:0]
        n += m

    return DecodeResult(tokens.cpu(), stats)
