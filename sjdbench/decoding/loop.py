"""The one decoding loop: a sliding Jacobi window verified speculatively, for every decoder.

Per iteration (docs/ALGORITHMS.md §0-§5):
1. fill: never-predicted slots get fresh drafts from the init;
2. forward the window [x_{n-1}, d_n, ..., d_{n+L-2}] once (x_{n-1}: the last committed token, not
   yet in the cache); slot j's logits give the target p at position n+j;
3. verify the drafts in order (vectorised: the accepted prefix is a cumulative product of the
   verifier's flags); the first rejected slot emits the verifier's replacement, or, when every
   draft passed, the last slot gives a bonus draw;
4. commit x_{n-1} and the accepted drafts to the cache;
5. propose: the slots past the commit point turn their p into next iteration's drafts.
AR is this loop with W = 1. The loop never knows which model it drives.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from sjdbench.adapter import ImageARAdapter, Sampling
from sjdbench.decoding.history import ProbabilityHistory
from sjdbench.decoding.inits.neighbours import InitContext, neighbour_tables
from sjdbench.decoding.parts import Carried, Init, Proposal, ProposalContext, Verifier
from sjdbench.decoding.processing import StructureMasks, process_logits, sample
from sjdbench.decoding.stats import DecodeStats
from sjdbench.decoding.window import WindowState
from sjdbench.errors import NonFiniteLogits


@dataclass(frozen=True)
class Decoder:
    """A decoder = proposal x verifier x init with a window of W slots (W = 1 is AR)."""

    window: int
    proposal: Proposal
    verifier: Verifier
    init: Init
    growth_steps: int = 3  # N of the consecutive-growth mask (statistics and VP alike)
    strict_increases: bool = True  # N strict increases (N + 1 observations); False: N observations
    trace_positions: int = 8  # positions whose probability trajectories are recorded
    track_growth: bool = True  # keep the probability history for the growth statistics

    @property
    def growth_observations(self) -> int:
        return self.growth_steps + 1 if self.strict_increases else self.growth_steps


@dataclass
class DecodeResult:
    tokens: torch.Tensor  # (N,) on CPU
    stats: DecodeStats = field(repr=False)


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


def _trace_set(layout, count: int) -> set[int]:
    content = torch.nonzero(~layout.is_forced).squeeze(1).tolist()
    if count <= 0 or not content:
        return set()
    picks = np.linspace(0, len(content) - 1, num=min(count, len(content))).round().astype(int)
    return {content[i] for i in picks}


def _carried(verified: WindowState, m: int, slots: int) -> Carried:
    """The drafts at the slots past the commit point, padded to `slots`: the window's last slot
    (position n+L-1) has only just been predicted and carries no draft."""
    rest = verified.keep_from(m)
    pad = slots - len(rest)
    drafts = torch.cat([rest.drafts, rest.drafts.new_zeros(pad)])
    refs = torch.cat([rest.refs, rest.refs.new_zeros(pad, rest.refs.shape[-1])])
    has_old = torch.arange(slots, device=drafts.device) < len(rest)
    return Carried(drafts, refs, has_old)


def _non_finite(logits: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """() device flag: a raw logit is NaN or +inf (greedy would take its argmax), or a processed
    probability is not finite. -inf logits are fine (models mask ids that way). Two reductions:
    NaN and inf propagate through max and sum."""
    return ~torch.isfinite(logits.amax() + p.sum())


def _first_bad_slot(logits: torch.Tensor, p: torch.Tensor) -> int:
    """The error path only: the first window slot whose logits or probabilities are bad."""
    bad = ~(logits < float("inf")).all(-1).all(0) | ~torch.isfinite(p).all(-1)  # (L,)
    return int(bad.long().argmax())


def jacobi_decode(
    adapter: ImageARAdapter,
    prompt_text: str,
    decoder: Decoder,
    sampling: Sampling,
    generator: torch.Generator,
) -> DecodeResult:
    layout, device, V, W = adapter.layout, adapter.device, adapter.vocab_size, decoder.window
    N = layout.n_positions
    if decoder.verifier.greedy:
        sampling = replace(sampling, temperature=0.0)
    constants = loop_constants(adapter)
    masks = constants.masks
    stats = DecodeStats.empty(W, n_tokens=N, n_content=int(constants.content.sum()))
    depth = max(decoder.growth_observations, decoder.proposal.history_depth, 8)
    keep_history = W > 1 and (decoder.track_growth or decoder.proposal.history_depth > 0)
    history = ProbabilityHistory(W, depth, V, device) if keep_history else None
    traced = _trace_set(layout, decoder.trace_positions) if history is not None else set()

    prompt = adapter.encode_prompt(prompt_text)
    cache = adapter.new_cache(prompt, extra=W)
    logits0 = adapter.prefill(prompt, cache)[:, None]  # (2, 1, V)
    p0 = process_logits(logits0, masks.window(0, 1), sampling)  # (1, V)
    bad_prefill = _non_finite(logits0, p0)  # device flag, read at the first iteration's sync
    tokens = torch.full((N,), -1, dtype=torch.long, device=device)
    tokens[0] = sample(p0, generator)[0]
    stats.nfe = 1
    n = 1
    ctx = InitContext(layout, constants.forced, constants.left_of, constants.above_of, adapter.image_token_ids,
                      tokens.clone(), torch.full((N,), -1, dtype=torch.long, device=device))
    window = WindowState.empty(V, device)  # drafts for positions n, n+1, ...

    while n < N:
        L = min(W, N - n)  # slots: x_{n-1}, then drafts for positions n .. n+L-2
        if len(window) < L - 1:  # 1. fill never-predicted slots
            fresh_positions = list(range(n + len(window), n + L - 1))
            window = window.append_fresh(decoder.init.fill(fresh_positions, ctx, generator))
        drafts = window.head(L - 1)

        # 2. one forward; slot j predicts position n + j
        inputs = torch.cat([tokens[n - 1 : n], drafts.drafts])  # (L,)
        logits = adapter.forward(inputs, torch.arange(n - 1, n - 1 + L, device=device), cache)  # (2, L, V)
        stats.nfe += 1
        targets = torch.arange(n, n + L, device=device)
        p = process_logits(logits, masks.window(n, n + L), sampling)  # (L, V)
        if history is not None:  # one growth mask per iteration, for VP and the statistics alike
            history.push(targets, p)
            growth = history.growth_mask(targets, decoder.growth_steps, decoder.strict_increases)  # (L, V)
            observed = history.observations(targets) >= decoder.growth_observations  # (L,)
        ctx.latest_argmax[n : n + L] = p.argmax(-1)

        # 3. verify: accepted prefix, then the residual at the first rejection or a bonus draw
        u = torch.rand(L - 1, generator=generator, device=device)
        passed = decoder.verifier.accept(p[: L - 1], drafts.refs, drafts.drafts, u)  # (L-1,)
        bad = _non_finite(logits, p) | bad_prefill  # NaN/+inf logits or NaN probabilities
        k, any_bad = torch.stack([passed.long().cumprod(0).sum(), bad.long()]).tolist()  # the one host sync per iteration
        if any_bad:  # nothing sampled from them reaches the tokens
            raise NonFiniteLogits(0 if bool(bad_prefill) else n + _first_bad_slot(logits, p))
        tokens[n : n + k] = drafts.drafts[:k]
        if k < L - 1:
            emitted = decoder.verifier.replacement(p[k], drafts.refs[k], drafts.drafts[k])  # (V,)
        else:
            emitted = p[L - 1]
        tokens[n + k] = sample(emitted[None], generator)[0]
        m = k + 1

        # 4. commit x_{n-1} and the k accepted drafts (slots 0..k); the rest of the window is dropped
        adapter.commit(cache, torch.arange(m, device=device))
        ctx.guess[n : n + m] = tokens[n : n + m]
        content = constants.content[n : n + L - 1]
        if history is not None:
            grew_at_verify = growth[: L - 1].gather(-1, drafts.drafts[:, None]).squeeze(-1)
            stats.record_iteration(m, k, L - 1, content, drafts.fresh, drafts.grew, drafts.eligible,
                                   grew_at_verify, observed[: L - 1])
            for pos in traced.intersection(range(n, n + m)):
                token = int(tokens[pos])
                stats.trajectories.append({"pos": pos, "token": token, "probs": history.trajectory(pos, token)})
        else:
            stats.record_iteration(m, k, L - 1, content, drafts.fresh)

        # 5. propose next drafts for the slots past the commit point (positions n+m .. n+L-1)
        if m < L:
            proposal_ctx = ProposalContext(targets[m:], history, growth[m:] if history is not None else None, generator)
            new, refs = decoder.proposal.propose(p[m:], _carried(drafts, m, L - m), proposal_ctx)
            if history is not None:
                window = WindowState.proposed(new, refs, growth[m:].gather(-1, new[:, None]).squeeze(-1), observed[m:])
            else:
                window = WindowState.proposed(new, refs)
            ctx.guess[n + m : n + L] = new
        else:
            window = WindowState.empty(V, device)
        n += m

    return DecodeResult(tokens.cpu(), stats)
