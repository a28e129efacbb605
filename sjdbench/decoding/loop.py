"""The one decoding loop: speculative Jacobi decoding over a window of drafts, for every decoder.

Per iteration (docs/ALGORITHMS.md §0-§5):
1. plan: the topology lays out the window's slots (a chain, a draft tree, several rows), drafting
   never-predicted positions with the init; every root slot re-feeds a decided token;
2. forward the window once; slot i's logits give the target p at position positions[i] + 1;
3. verify: walking down from each root, the verifier accepts drafts (siblings by recursive rejection
   sampling); where a walk stops, an emitting root emits the verifier's replacement for the first
   rejected draft, or a bonus draw from the last slot's p when every draft passed;
4. commit the roots not yet cached and the accepted drafts; the other slots are dropped;
5. propose: the slots past where each walk stopped turn their p into next iteration's drafts.
AR is this loop with W = 1. The loop never knows which model it drives.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from sjdbench.adapter import ImageARAdapter, Sampling
from sjdbench.decoding.history import ProbabilityHistory
from sjdbench.decoding.inits.neighbours import InitContext, neighbour_tables
from sjdbench.decoding.parts import Carried, Init, Proposal, ProposalContext, Topology, Verifier
from sjdbench.decoding.processing import StructureMasks, process_logits, sample
from sjdbench.decoding.stats import DecodeStats
from sjdbench.decoding.topologies.chain import ChainTopology
from sjdbench.decoding.topologies.forest import Verdict
from sjdbench.decoding.window import DecodeState, Window, WindowState
from sjdbench.errors import NonFiniteLogits


@dataclass(frozen=True)
class Decoder:
    """A decoder = proposal x verifier x init x topology with a window of W slots (W = 1 is AR)."""

    window: int
    proposal: Proposal
    verifier: Verifier
    init: Init
    growth_steps: int = 3  # N of the consecutive-growth mask (statistics and VP alike)
    strict_increases: bool = True  # N strict increases (N + 1 observations); False: N observations
    trace_positions: int = 8  # positions whose probability trajectories are recorded
    track_growth: bool = True  # keep the probability history for the growth statistics
    topology: Topology = field(default_factory=ChainTopology)  # the window's shape
    trace_drafts: bool = False  # record every verified draft's trajectory (stats.draft_traces; for reports)

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
    grid_row: np.ndarray  # (N,) host: grid row of each position, -1 for forced ones


def loop_constants(adapter: ImageARAdapter) -> LoopConstants:
    cached = getattr(adapter, "_loop_constants", None)
    if cached is not None:
        return cached
    layout, device = adapter.layout, adapter.device
    legal = torch.zeros(adapter.vocab_size, dtype=torch.bool, device=device)
    legal[adapter.image_token_ids] = True
    forced = layout.forced.to(device)
    left_of, above_of = neighbour_tables(layout)
    constants = LoopConstants(
        forced, (layout.forced < 0).numpy(), StructureMasks(forced, legal), left_of, above_of, layout.row.numpy()
    )
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


def _carried(window: Window, carried: np.ndarray, vocab_size: int) -> Carried:
    """The drafts the window held at the continuation's target positions: carried (C,) draft slots,
    -1 where none (zeros there)."""
    node_of = window.node_of
    device = window.tokens.device
    has_old = carried >= 0
    drafts = torch.zeros(carried.size, dtype=torch.long, device=device)
    refs = torch.zeros(carried.size, vocab_size, device=device)
    if has_old.all() and carried.size:
        index = torch.as_tensor(node_of[carried], device=device)
        return Carried(window.nodes.drafts[index], window.nodes.refs[index], torch.ones_like(drafts, dtype=torch.bool))
    if has_old.any():
        where = torch.as_tensor(np.flatnonzero(has_old), device=device)
        index = torch.as_tensor(node_of[carried[has_old]], device=device)
        drafts[where] = window.nodes.drafts[index]
        refs[where] = window.nodes.refs[index]
    return Carried(drafts, refs, torch.as_tensor(has_old, device=device))


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
    topology = decoder.topology if W > 1 else ChainTopology()
    if decoder.verifier.greedy:
        sampling = replace(sampling, temperature=0.0)
    constants = loop_constants(adapter)
    masks = constants.masks
    stats = DecodeStats.empty(
        W, n_tokens=N, n_content=int(constants.content.sum()), grid_rows=layout.grid_hw[0], siblings=topology.siblings()
    )
    depth = max(decoder.growth_observations, decoder.proposal.history_depth, 16 if decoder.trace_drafts else 8)
    keep_history = W > 1 and (decoder.track_growth or decoder.proposal.history_depth > 0)
    history = ProbabilityHistory(topology.history_rows(W), depth, V, device, N) if keep_history else None
    traced = _trace_set(layout, decoder.trace_positions) if history is not None else set()

    prompt = adapter.encode_prompt(prompt_text)
    cache = adapter.new_cache(1, prompt.length, W)
    logits0 = adapter.prefill(cache, [0], [prompt])[0][:, None]  # (2, 1, V)
    p0 = process_logits(logits0, masks.window(0, 1), sampling)  # (1, V)
    bad_prefill = _non_finite(logits0, p0)  # device flag, read at the first iteration's sync
    tokens = torch.full((N,), -1, dtype=torch.long, device=device)
    tokens[0] = sample(p0, generator)[0]
    stats.nfe = 1
    decided = np.zeros(N, dtype=bool)
    decided[0] = True
    state = DecodeState(
        tokens, decided, np.zeros(N, dtype=bool), WindowState.empty(V, device), layout, constants.forced
    )
    ctx = InitContext(
        layout,
        constants.forced,
        constants.left_of,
        constants.above_of,
        adapter.image_token_ids,
        tokens.clone(),
        torch.full((N,), -1, dtype=torch.long, device=device),
    )

    while not state.done():
        # 1. the window's slots; never-predicted positions get drafts from the init
        window = topology.plan(state, W, decoder.init, ctx, generator)

        # 2. one forward; slot i predicts position positions[i] + 1
        positions = torch.as_tensor(window.positions, device=device)[None]
        mask = None if window.mask is None else window.mask[None]
        horizon = int(window.positions.max()) + 1
        logits = adapter.forward(cache, window.tokens[None], positions, mask, horizon)[0]  # (2, L, V)
        stats.record_forward(len(window), window.in_flight)
        target_host = window.positions + 1
        targets = torch.as_tensor(target_host, device=device)
        p = process_logits(logits, masks.rows[masks.index[targets]], sampling)  # (L, V)

        # 3. verify: accepted paths, then an emitted token (residual or bonus) per emitting root
        bad = _non_finite(logits, p) | bad_prefill  # NaN/+inf logits or NaN probabilities (device flag)
        verdict = topology.verify(window, p, decoder.verifier, generator)
        if bool(bad):  # read after verify's own host sync; nothing sampled from them reaches the tokens
            raise NonFiniteLogits(0 if bool(bad_prefill) else int(window.positions[_first_bad_slot(logits, p)]) + 1)
        accepted = np.array(verdict.accepted, dtype=np.int64)
        accepted_pos = window.positions[accepted]
        emitted_pos = window.positions[np.array(verdict.emit_slots, dtype=np.int64)] + 1
        if accepted.size:
            tokens[torch.as_tensor(accepted_pos, device=device)] = window.tokens[
                torch.as_tensor(accepted, device=device)
            ]
        if emitted_pos.size:
            tokens[torch.as_tensor(emitted_pos, device=device)] = verdict.emitted
        new = np.sort(np.concatenate([accepted_pos, emitted_pos, np.array(window.decided_now, dtype=np.int64)]))
        state.decided[new] = True

        # 4. commit the roots not yet cached and the accepted drafts; the rest of the window is dropped
        kept = np.sort(np.concatenate([np.flatnonzero(window.commit_root), accepted]))
        adapter.commit(cache, torch.as_tensor(kept, device=device)[None])
        state.cached[window.positions[kept]] = True
        new_t = torch.as_tensor(new, device=device)
        ctx.guess[new_t] = tokens[new_t]

        # one growth mask per iteration, for VP and the statistics alike, along each realized chain
        realized = np.array(verdict.realized, dtype=np.int64)
        realized_t = torch.as_tensor(realized, device=device)
        row_of = np.full(len(window), -1, dtype=np.int64)
        row_of[realized] = np.arange(realized.size)
        ctx.latest_argmax[targets[realized_t]] = p[realized_t].argmax(-1)
        growth = observed = None
        if history is not None:
            history.push(targets[realized_t], p[realized_t], target_host[realized])
            growth = history.growth_mask(targets[realized_t], decoder.growth_steps, decoder.strict_increases)  # (R, V)
            observed = history.observations(targets[realized_t]) >= decoder.growth_observations  # (R,)
        _record(stats, window, verdict, len(new), constants, growth, observed, row_of)
        if decoder.trace_drafts and history is not None:
            _trace_drafts(stats, window, verdict, constants, history)
        if history is not None:
            for pos in sorted(traced.intersection(new.tolist())):
                token = int(tokens[pos])
                stats.trajectories.append({"pos": pos, "token": token, "probs": history.trajectory(pos, token)})

        # 5. propose next drafts at the continuation's target positions
        state.pending = _propose(decoder, window, verdict, p, state, ctx, history, growth, observed, row_of, generator)

    return DecodeResult(tokens.cpu(), stats)


def _trace_drafts(
    stats: DecodeStats, window: Window, verdict: Verdict, constants: LoopConstants, history: ProbabilityHistory
) -> None:
    """Every draft the verifier decided on at a content position: its token's probability at its
    position over the iterations up to this one, and whether it passed (SJD-VP's accepted vs
    rejected trajectories). Any topology: a tree's siblings and each row's drafts are listed alike."""
    accepted = set(verdict.accepted)
    for slot in verdict.tested:
        pos = int(window.positions[slot])
        if constants.content[pos]:
            token = int(window.tokens[slot])
            stats.draft_traces.append(
                {"pos": pos, "token": token, "accepted": slot in accepted, "probs": history.trajectory(pos, token)}
            )


def _record(
    stats: DecodeStats,
    window: Window,
    verdict: Verdict,
    m: int,
    constants: LoopConstants,
    growth: torch.Tensor | None,
    observed: torch.Tensor | None,
    row_of: np.ndarray,
) -> None:
    """Statistics of the drafts the verifier decided on this iteration."""
    tested = np.array(verdict.tested, dtype=np.int64)
    nodes = window.node_of[tested]
    positions = window.positions[tested]
    accepted = np.isin(tested, np.array(verdict.accepted, dtype=np.int64))
    host = (
        m,
        window.depth()[tested],
        window.sibling[tested],
        constants.grid_row[positions],
        accepted,
        constants.content[positions],
        window.nodes.fresh[nodes],
    )
    if growth is None:
        stats.record_tests(*host)
        return
    index = torch.as_tensor(nodes, device=window.tokens.device)
    rows = torch.as_tensor(row_of[window.parent[tested]], device=index.device)  # the p each draft was tested against
    grew_verify = growth[rows].gather(-1, window.nodes.drafts[index][:, None]).squeeze(-1)
    stats.record_tests(*host, window.nodes.grew[index], window.nodes.eligible[index], grew_verify, observed[rows])


def _propose(
    decoder: Decoder,
    window: Window,
    verdict: Verdict,
    p: torch.Tensor,
    state: DecodeState,
    ctx: InitContext,
    history,
    growth,
    observed,
    row_of: np.ndarray,
    generator: torch.Generator,
) -> WindowState:
    """The pending drafts after this iteration: the continuation's proposals plus every earlier
    draft whose position is neither decided nor re-proposed."""
    cont = np.array(verdict.continuation, dtype=np.int64)
    carried = np.array(verdict.carried, dtype=np.int64)
    open_ = ~state.decided[window.positions[cont] + 1] if cont.size else np.zeros(0, dtype=bool)
    if not open_.all():  # a slot that only caches its token predicts a decided position: nothing to propose
        cont, carried = cont[open_], carried[open_]
    pending = state.pending
    keep = ~state.decided[pending.positions]
    if cont.size == 0:
        return pending if keep.all() else pending.gather(np.flatnonzero(keep))
    device = p.device
    target_host = window.positions[cont] + 1
    cont_t = torch.as_tensor(cont, device=device)
    rows = torch.as_tensor(row_of[cont], device=device)
    targets = torch.as_tensor(target_host, device=device)
    cont_growth = growth[rows] if growth is not None else None
    proposal_ctx = ProposalContext(targets, history, cont_growth, generator)
    drafts, refs = decoder.proposal.propose(p[cont_t], _carried(window, carried, p.shape[-1]), proposal_ctx)
    if growth is not None:
        proposed = WindowState.proposed(
            drafts, refs, target_host, cont_growth.gather(-1, drafts[:, None]).squeeze(-1), observed[rows]
        )
    else:
        proposed = WindowState.proposed(drafts, refs, target_host)
    ctx.guess[targets] = drafts
    keep &= ~np.isin(pending.positions, target_host)
    if not keep.any():
        return proposed
    return pending.gather(np.flatnonzero(keep)).concat(proposed)
