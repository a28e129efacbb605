"""The one decoding loop: speculative Jacobi decoding over a window of drafts, for every decoder, over a
batch of samples decoded in lockstep.

Per iteration (docs/ALGORITHMS.md §0-§5), for every sample of the batch:
1. plan: the topology lays out the window's slots (a chain, a draft tree, several rows), drafting
   never-predicted positions with the init; every root slot re-feeds a decided token;
2. forward every sample's window at once; slot i's logits give the target p at position
   positions[i] + 1;
3. verify: walking down from each root, the verifier accepts drafts (siblings by recursive rejection
   sampling); where a walk stops, an emitting root emits the verifier's replacement for the first
   rejected draft, or a bonus draw from the last slot's p when every draft passed;
4. commit the roots not yet cached and the accepted drafts; the other slots are dropped;
5. propose: the slots past where each walk stopped turn their p into next iteration's drafts.
AR is this loop with W = 1. The loop never knows which model it drives.

Batches: one forward holds every unfinished sample's window (padded to the longest); verification,
emission, proposals and statistics run over all samples' rows at once, each sample drawing its
random numbers from its own generator with the calls it would make decoded alone (randomness.py), so
a sample's tokens do not depend on its batch wherever the batched forward returns the same logits. A
finished sample leaves the batch and the next request takes its row. There is one host sync per
iteration: the verifier's flags (which also carries the check for non-finite logits).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
import torch

from sjdbench.adapter import ImageARAdapter, Sampling
from sjdbench.decoding.history import ProbabilityHistory
from sjdbench.decoding.inits.neighbours import neighbour_tables
from sjdbench.decoding.parts import (
    Carried,
    Init,
    InitContext,
    Proposal,
    ProposalContext,
    SampleView,
    TestRows,
    Topology,
    Verdict,
    Verifier,
    Window,
)
from sjdbench.decoding.processing import StructureMasks, process_logits, sample
from sjdbench.decoding.randomness import Draws
from sjdbench.decoding.recorder import DecodeStats, IterationRecord, Recorder, Tests
from sjdbench.decoding.state import Drafts, PendingDrafts
from sjdbench.decoding.topologies.chain import ChainTopology
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
class Request:
    """One sample to decode: its prompt, the generator all its random numbers come from, and the key
    the caller knows it by."""

    prompt: str
    generator: torch.Generator
    key: Any = None


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
        adapter._loop_constants = constants  # type: ignore[attr-defined]
    except AttributeError:  # adapters with __slots__: rebuild each call
        pass
    return constants


def trace_set(layout, count: int) -> set[int]:
    """`count` content positions spread over the image whose trajectories are recorded."""
    content = torch.nonzero(~layout.is_forced).squeeze(1).tolist()
    if count <= 0 or not content:
        return set()
    picks = np.linspace(0, len(content) - 1, num=min(count, len(content))).round().astype(int)
    return {content[i] for i in picks}


def jacobi_decode(
    adapter: ImageARAdapter, prompt_text: str, decoder: Decoder, sampling: Sampling, generator: torch.Generator
) -> DecodeResult:
    """Decode one image."""
    ((_, result),) = jacobi_decode_batch(adapter, [Request(prompt_text, generator)], decoder, sampling, 1)
    return result


def jacobi_decode_batch(
    adapter: ImageARAdapter, requests: Sequence[Request], decoder: Decoder, sampling: Sampling, batch_size: int
) -> Iterator[tuple[Request, DecodeResult]]:
    """Decode every request, `batch_size` at a time in lockstep; yields (request, result) as samples finish."""
    if not requests:
        return iter(())
    return BatchDecode(adapter, decoder, sampling, list(requests), max(1, batch_size)).run()


@dataclass
class Active:
    """A sample in the batch: its request, and which positions are decided and cached (host)."""

    request: Request
    decided: np.ndarray
    cached: np.ndarray


class BatchDecode:
    """One batched decode: the batch's state and the five steps of an iteration."""

    def __init__(
        self, adapter: ImageARAdapter, decoder: Decoder, sampling: Sampling, requests: list[Request], batch_size: int
    ) -> None:
        self.adapter, self.decoder = adapter, decoder
        self.sampling = replace(sampling, temperature=0.0) if decoder.verifier.greedy else sampling
        self.queue = list(reversed(requests))
        self.prompts = {id(r): adapter.encode_prompt(r.prompt) for r in requests}
        layout, W = adapter.layout, decoder.window
        self.topology = decoder.topology if W > 1 else ChainTopology()
        self.constants = loop_constants(adapter)
        self.N, self.V, self.device = layout.n_positions, adapter.vocab_size, adapter.device
        self.dtype = torch.float64 if getattr(adapter, "dtype", torch.float32) == torch.float64 else torch.float32
        B = min(batch_size, len(requests))
        span = self.topology.span(layout, W)
        self.cache = adapter.new_cache(B, max(p.length for p in self.prompts.values()), W)
        self.tokens = torch.full((B, self.N), -1, dtype=torch.long, device=self.device)
        self.pending = PendingDrafts(B, span, self.V, self.device, self.dtype)
        depth = max(decoder.growth_observations, decoder.proposal.history_depth, 16 if decoder.trace_drafts else 8)
        keep_history = W > 1 and (decoder.track_growth or decoder.proposal.history_depth > 0)
        self.history = ProbabilityHistory(B, span, depth, self.V, self.device, self.dtype) if keep_history else None
        self.traced = trace_set(layout, decoder.trace_positions) if self.history is not None else set()
        self.recorder = Recorder(
            B, W, self.N, int(self.constants.content.sum()), layout.grid_hw[0], self.topology.siblings(), self.device
        )
        c = self.constants
        self.init_ctx = InitContext(
            layout, c.forced, adapter.image_token_ids, c.left_of, c.above_of, self.V, self.dtype, B
        )
        self.init_state = decoder.init.begin(self.init_ctx)
        self.rows: list[Active | None] = [None] * B
        self.bad_prefill = torch.zeros((), dtype=torch.bool, device=self.device)
        # growth flags of the last tests, read with the next host sync: (samples, accepted, verified, flags)
        self.deferred: tuple[np.ndarray, np.ndarray, np.ndarray, torch.Tensor] | None = None

    # -- the batch -----------------------------------------------------------------------------------

    def run(self) -> Iterator[tuple[Request, DecodeResult]]:
        yield from self.admit(list(range(len(self.rows))))
        while any(row is not None for row in self.rows):
            self.step()
            yield from self.finished()

    def admit(self, rows: list[int]) -> Iterator[tuple[Request, DecodeResult]]:
        """Start the next requests in these free rows: prefill, then the first token from p at position 0."""
        rows = rows[: len(self.queue)]
        if not rows:
            return
        requests = [self.queue.pop() for _ in rows]
        for row, request in zip(rows, requests):
            self.rows[row] = Active(request, np.zeros(self.N, dtype=bool), np.zeros(self.N, dtype=bool))
            self.tokens[row] = -1
            self.pending.clear(row)
            if self.history is not None:
                self.history.reset(row)
            self.recorder.start(row)
            self.decoder.init.reset(self.init_state, row)
        logits = self.adapter.prefill(self.cache, rows, [self.prompts.pop(id(r)) for r in requests])  # (n, 2, V)
        p0 = process_logits(logits[:, :, None], self.constants.masks.window(0, 1), self.sampling)[:, 0]  # (n, V)
        self.bad_prefill = self.bad_prefill | non_finite(logits, p0)
        first = sample(p0, Draws([r.generator for r in requests], [1] * len(rows), self.device))  # (n,)
        rows_t = torch.as_tensor(rows, device=self.device)
        zero = torch.zeros_like(rows_t)
        self.tokens[rows_t, zero] = first
        self.decoder.init.observe(self.init_state, rows_t, zero, first)
        self.recorder.prefill(rows)
        for row in rows:
            cast(Active, self.rows[row]).decided[0] = True  # admitted above
        yield from self.finished()  # a one-position segment is done already

    def finished(self) -> Iterator[tuple[Request, DecodeResult]]:
        done = [i for i, row in enumerate(self.rows) if row is not None and row.decided.all()]
        if not done:
            return
        self.flush_growth()
        tokens = self.tokens[done].cpu()
        for i, row in enumerate(done):
            active = self.rows[row]
            assert active is not None  # done lists occupied rows
            self.rows[row] = None
            yield active.request, DecodeResult(tokens[i], self.recorder.finish(row))
        yield from self.admit(done)  # the next requests take the free rows
        if any(row is None for row in self.rows):  # none left to take them: the batch shrinks
            self.retain([i for i, row in enumerate(self.rows) if row is not None])

    def retain(self, keep: list[int]) -> None:
        """The batch shrinks to these rows, in this order (nothing is left to admit)."""
        if keep == list(range(len(self.rows))):
            return
        self.rows = [self.rows[i] for i in keep]
        if not keep:
            return
        index = torch.as_tensor(keep, device=self.device)
        self.adapter.retain(self.cache, keep)
        self.tokens = self.tokens[index]
        self.pending.retain(keep)
        if self.history is not None:
            self.history.retain(index)
        self.recorder.retain(keep)
        self.init_state = self.decoder.init.retain(self.init_state, keep)

    # -- one iteration -------------------------------------------------------------------------------

    def active_rows(self) -> list[Active]:
        """The samples row by row, during an iteration: finished() leaves no row empty (the batch shrinks)."""
        return cast("list[Active]", self.rows)

    def step(self) -> None:
        windows = self.plan()  # 1. the windows' slots
        fed = self.forward(windows)  # 2. one forward; slot i predicts position positions[i] + 1
        verdicts, emitted = self.verify(fed)  # 3. accepted paths and emitted tokens
        decided = self.commit(fed, verdicts, emitted)  # 4. commit the kept slots
        self.observe(fed, verdicts, decided)  # the iteration's observation: history, init, statistics
        self.propose(fed, verdicts)  # 5. next drafts past where each walk stopped

    def plan(self) -> list[Window]:
        windows = []
        for row, active in enumerate(self.active_rows()):
            view = SampleView(
                row,
                self.tokens[row],
                active.decided,
                active.cached,
                self.adapter.layout,
                self.constants.forced,
                self.adapter.image_token_ids,
                self.pending,
                self.decoder.init,
                self.init_state,
                active.request.generator,
                self.V,
            )
            windows.append(self.topology.plan(view, self.decoder.window))
        filled = [w.filled for w in windows]
        if any(len(f) for f in filled):  # the init's drafts wait with the others
            self.pending.put(np.repeat(np.arange(len(windows)), [len(f) for f in filled]), Drafts.cat(filled))
        return windows

    def forward(self, windows: list[Window]) -> Fed:
        """The padded batch of windows through the model, and the processed distributions."""
        lengths = np.array([len(w) for w in windows])
        L = int(lengths.max())
        positions = np.stack([_pad(w.positions, L) for w in windows])  # (B, L) host
        if len(windows) == 1:
            tokens = windows[0].tokens[None]
        else:
            tokens = torch.stack([torch.cat([w.tokens, w.tokens[-1:].expand(L - len(w))]) for w in windows])
        mask = None
        if any(w.mask is not None for w in windows):
            mask = torch.eye(L, dtype=torch.bool, device=self.device).repeat(len(windows), 1, 1)  # pads see themselves
            for b, w in enumerate(windows):
                n = len(w)
                mask[b, :n, :n] = w.mask if w.mask is not None else torch.ones(n, n, dtype=torch.bool).tril()
        positions_t = torch.as_tensor(positions, device=self.device)
        padded = None if (lengths == L).all() else lengths.tolist()
        extra = {} if padded is None else {"lengths": padded}  # an unpadded batch needs no lengths
        logits = self.adapter.forward(self.cache, tokens, positions_t, mask, int(positions.max()) + 1, **extra)
        masks = self.constants.masks
        targets = (positions_t + 1).clamp_max(self.N - 1)
        p = process_logits(logits, masks.rows[masks.index[targets]], self.sampling)  # (B, L, V)
        bad = non_finite(logits, p) | self.bad_prefill
        self.bad_prefill = torch.zeros_like(bad)
        nodes = Drafts.cat([w.nodes for w in windows])
        return Fed(
            windows, lengths, positions, tokens, p, logits, bad, nodes, _offsets([len(w.nodes) for w in windows])
        )

    def verify(self, fed: Fed) -> tuple[list[Verdict], torch.Tensor]:
        """Every draft's test at once (one verifier call, one host sync, which also brings the last
        iteration's growth flags to the recorder), then each window's walk, then the emitted tokens,
        each sample's from its own generator."""
        generators = [row.request.generator for row in self.active_rows()]
        carry, deferred = self.carry(fed.bad)
        verdicts, emitted, host = verify_windows(
            self.topology, self.decoder.verifier, fed.windows, fed.p, fed.nodes, generators, carry
        )
        if host[0]:
            self.raise_non_finite(fed)
        if deferred is not None:
            self.recorder.record_growth(*deferred, host[1:].reshape(-1, 4))
        return verdicts, emitted

    def carry(self, bad: torch.Tensor) -> tuple[torch.Tensor, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
        """What the iteration's one host sync brings back besides the verifier's flags: the non-finite
        flag, then the growth flags (T, 4) of the tests recorded last iteration (deferred to this sync
        so that recording them costs no sync of its own)."""
        deferred, self.deferred = self.deferred, None
        if deferred is None:
            return bad[None], None
        test_b, accepted, verified, flags = deferred
        return torch.cat([bad[None], flags.reshape(-1)]), (test_b, accepted, verified)

    def flush_growth(self) -> None:
        """Record deferred growth flags now (a sample finishes before another sync would bring them)."""
        if self.deferred is not None:
            test_b, accepted, verified, flags = self.deferred
            self.deferred = None
            self.recorder.record_growth(test_b, accepted, verified, flags.cpu().numpy())

    def commit(self, fed: Fed, verdicts: list[Verdict], emitted: torch.Tensor) -> list[np.ndarray]:
        """Write the decided tokens, keep the roots not yet cached and the accepted drafts in the cache.
        Returns each sample's newly decided positions."""
        device = self.device
        samples, positions, pieces, kept, decided = [], [], [], [], []
        e = 0
        for b, (w, v, active) in enumerate(zip(fed.windows, verdicts, self.active_rows())):
            accepted_pos = w.positions[v.accepted]
            emitted_pos = w.positions[v.emit_slots] + 1
            here = (
                np.concatenate([accepted_pos, emitted_pos, w.decided])
                if len(w.decided)
                else np.concatenate([accepted_pos, emitted_pos])
            )
            active.decided[here] = True
            roots = np.flatnonzero(w.commit_root)
            keep = np.concatenate([roots, v.accepted]) if len(v.accepted) else roots
            if len(roots) > 1:
                keep = np.sort(keep)
            active.cached[w.positions[keep]] = True
            kept.append(keep)
            decided.append(here)
            samples.append(np.full(len(here), b))
            positions.append(here)
            if len(v.accepted):
                pieces.append(
                    fed.tokens[b, v.accepted[0] : v.accepted[-1] + 1]
                    if _consecutive(v.accepted)
                    else fed.tokens[b, torch.as_tensor(v.accepted, device=device)]
                )
            if len(emitted_pos):
                pieces.append(emitted[e : e + len(emitted_pos)])
                e += len(emitted_pos)
            if len(w.decided):
                pieces.append(self.constants.forced[torch.as_tensor(w.decided, device=device)])
        if pieces:
            where = torch.as_tensor(np.stack([np.concatenate(samples), np.concatenate(positions)]), device=device)
            tokens = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
            self.tokens[where[0], where[1]] = tokens
            self.decoder.init.observe(self.init_state, where[0], where[1], tokens)
        width = max(len(k) for k in kept)
        slots = np.full((len(kept), width), -1, dtype=np.int64)
        for b, keep in enumerate(kept):
            slots[b, : len(keep)] = keep
        self.adapter.commit(self.cache, torch.as_tensor(slots, device=device))
        return decided

    def observe(self, fed: Fed, verdicts: list[Verdict], decided: list[np.ndarray]) -> None:
        """This iteration's distributions enter the history (one row per realized position) and the
        init's view; the recorder gets one record of everything the verifier decided on."""
        device, windows, history, init = self.device, fed.windows, self.history, self.decoder.init
        if history is not None or init.reads_p:
            real_b = _cat([np.full(len(v.realized), b) for b, v in enumerate(verdicts)])
            real_slot = _cat([v.realized for v in verdicts])
            index = torch.as_tensor(np.stack([real_b, real_slot, fed.positions[real_b, real_slot] + 1]), device=device)
            p_real = _rows(fed.p, real_b, real_slot, index)  # (R, V)
            init.observe_p(self.init_state, index[0], index[2], p_real)
            if history is not None:
                history.push(index[0], index[2], p_real)

        c = self.constants
        tested = [v.tested for v in verdicts]
        if sum(len(x) for x in tested):
            test_b = _cat([np.full(len(x), b) for b, x in enumerate(tested)])
            tested_ = _cat(tested)
            test_node = _cat([w.node_of[x] + off for w, x, off in zip(windows, tested, fed.offsets)])
            test_pos = fed.positions[test_b, tested_]
            accepted = _cat([_member(x, v.accepted, len(w)) for x, v, w in zip(tested, verdicts, windows)])
            depth = _cat([w.depth[x] for w, x in zip(windows, tested)])
            sibling = _cat([w.sibling[x] for w, x in zip(windows, tested)])
        else:
            test_b = tested_ = test_node = test_pos = depth = sibling = np.zeros(0, dtype=np.int64)
            accepted = np.zeros(0, dtype=bool)
        content = c.content[test_pos]
        tests = Tests(test_b, depth, sibling, c.grid_row[test_pos], accepted, content, fed.nodes.fresh[test_node])
        record = IterationRecord(
            np.arange(len(windows)),
            np.array([len(d) for d in decided]),
            fed.lengths,
            np.array([w.in_flight for w in windows]),
            tests,
        )
        self.recorder.record(record)
        if history is not None:
            if len(tested_):  # growth flags, to the recorder with the next host sync
                index = torch.as_tensor(np.stack([test_b, test_pos, test_node]), device=device)
                nodes, dec = fed.nodes, self.decoder
                eligible, grew, tokens = _entries((nodes.eligible, nodes.grew, nodes.tokens), test_node, index[2])
                where = history.locate(index[0], index[1])
                flags = torch.stack(
                    [
                        eligible,
                        grew,
                        history.grew(where, tokens, dec.growth_steps, dec.strict_increases),
                        where[1] >= dec.growth_observations,
                    ],
                    dim=-1,
                )
                self.deferred = (test_b, accepted & content, content, flags)
            self.trace(fed, decided, test_b, tested_, accepted)

    def trace(
        self, fed: Fed, decided: list[np.ndarray], test_b: np.ndarray, tested: np.ndarray, accepted: np.ndarray
    ) -> None:
        """Probability trajectories: of the traced positions as they are decided, and (when asked for)
        of every draft the verifier decided on at a content position, with whether it passed."""
        history, recorder = self.history, self.recorder
        assert history is not None  # traces are read from the history: observe() calls this only when it is kept
        for b, new in enumerate(decided):
            hits = self.traced.intersection(new.tolist())
            for pos in sorted(hits):
                token = int(self.tokens[b, pos])
                recorder.trajectories[b].append(
                    {"pos": pos, "token": token, "probs": history.trajectory(b, pos, token)}
                )
        if not self.decoder.trace_drafts:
            return
        for b, slot, ok in zip(test_b.tolist(), tested.tolist(), accepted.tolist()):
            pos = int(fed.positions[b, slot])
            if self.constants.content[pos]:
                token = int(fed.tokens[b, slot])
                recorder.draft_traces[b].append(
                    {"pos": pos, "token": token, "accepted": bool(ok), "probs": history.trajectory(b, pos, token)}
                )

    def propose(self, fed: Fed, verdicts: list[Verdict]) -> None:
        """The sources' p become next drafts at their targets, for every sample at once."""
        samples, sources, carried = [], [], []
        for b, (w, v, active) in enumerate(zip(fed.windows, verdicts, self.active_rows())):
            src, carry = v.sources, v.carried
            if not len(src):
                continue
            open_ = ~active.decided[w.positions[src] + 1]  # a slot that only caches its token predicts nothing
            if not open_.all():
                src, carry = src[open_], carry[open_]
            samples.append(np.full(len(src), b))
            sources.append(src)
            carried.append(np.where(carry >= 0, w.node_of[np.maximum(carry, 0)] + fed.offsets[b], -1))
        if not samples:
            return
        sample_ids, source_slots, carried_nodes = map(np.concatenate, (samples, sources, carried))
        per_sample = np.bincount(sample_ids, minlength=len(fed.windows)).tolist()
        if not len(sample_ids):
            return
        device, dec, history = self.device, self.decoder, self.history
        target_host = fed.positions[sample_ids, source_slots] + 1
        index = torch.as_tensor(
            np.stack([sample_ids, source_slots, target_host, np.maximum(carried_nodes, 0)]), device=device
        )
        sb, targets = index[0], index[2]
        p = _rows(fed.p, sample_ids, source_slots, index)  # (S, V)
        has_old = torch.as_tensor(carried_nodes >= 0, device=device)
        if len(fed.nodes):
            old_drafts, old_refs = _entries((fed.nodes.tokens, fed.nodes.refs), np.maximum(carried_nodes, 0), index[3])
            old = Carried(old_drafts, old_refs, has_old)
        else:
            old = Carried(torch.zeros_like(sb), torch.zeros_like(p), has_old)
        growth = observed = None
        if history is not None and dec.proposal.history_depth:
            growth = history.growth_mask(sb, targets, dec.growth_steps, dec.strict_increases)
        generators = [row.request.generator for row in self.active_rows()]
        ctx = ProposalContext(sb, targets, history, growth, Draws(generators, per_sample, device))
        drafts, refs = dec.proposal.propose(p, old, ctx)
        grew = None
        if history is not None:
            where = history.locate(sb, targets)
            grew = history.grew(where, drafts, dec.growth_steps, dec.strict_increases)
            observed = where[1] >= dec.growth_observations
        self.pending.put(sample_ids, Drafts.made(target_host, drafts, refs, self.V, False, grew, observed))
        self.decoder.init.observe(self.init_state, sb, targets, drafts)

    def raise_non_finite(self, fed: Fed) -> None:
        """The error path: the first sample and position whose logits or probabilities are bad."""
        rows = self.active_rows()
        for b, w in enumerate(fed.windows):
            raw = fed.logits[b, :, : len(w)]  # (2, L, V): NaN or +inf anywhere (greedy's p stays finite)
            bad = ~(raw < float("inf")).all(-1).all(0) | ~torch.isfinite(fed.p[b, : len(w)]).all(-1)
            if bool(bad.any()):
                raise NonFiniteLogits(int(w.positions[int(bad.long().argmax())]) + 1, rows[b].request.prompt)
        raise NonFiniteLogits(0, rows[0].request.prompt)  # a prompt's own logits (the prefill)


@dataclass
class Fed:
    """One iteration's forward: the windows (B), padded to L slots, and what the model returned."""

    windows: list[Window]
    lengths: np.ndarray  # (B,) slots of each window
    positions: np.ndarray  # (B, L) host, padded with each window's last position
    tokens: torch.Tensor  # (B, L) slot inputs, padded likewise
    p: torch.Tensor  # (B, L, V) processed distributions
    logits: torch.Tensor  # (B, 2, L, V) what the model returned
    bad: torch.Tensor  # () NaN/+inf logits or probabilities anywhere (device flag)
    nodes: Drafts  # every window's draft slots, window by window
    offsets: np.ndarray  # (B,) where each window's nodes start in `nodes`


def verify_windows(
    topology: Topology,
    verifier: Verifier,
    windows: list[Window],
    p: torch.Tensor,
    nodes: Drafts,
    generators: list[torch.Generator],
    carry: torch.Tensor | None = None,
) -> tuple[list[Verdict], torch.Tensor, np.ndarray]:
    """Verification of B windows (p: (B, L, V), nodes: every window's drafts in order): every draft's
    test in one verifier call, read with one host sync (which also brings `carry` (C,) bool to the
    host, returned), each window's walk, then the emitted tokens (E,), each sample's from its own
    generator."""
    device = p.device
    counts = [len(w.nodes) for w in windows]
    carry = carry if carry is not None else torch.zeros(0, dtype=torch.bool, device=device)
    if sum(counts):
        rows = [topology.test_rows(w, p[b, : len(w)], verifier) for b, w in enumerate(windows)]
        u = Draws(generators, counts, device).uniform()
        test_p = rows[0].p if len(rows) == 1 else torch.cat([r.p for r in rows])
        flags = verifier.accept(test_p, nodes.refs, nodes.tokens, u)
        fails = [r.fails if r.fails is not None else torch.zeros_like(flags[:0]) for r in rows]
        if any(r.fails is not None for r in rows):
            flags = flags & ~torch.cat(
                [
                    f if len(f) else torch.zeros(len(w.nodes), dtype=torch.bool, device=device)
                    for f, w in zip(fails, windows)
                ]
            )
        host = torch.cat([flags, carry]).cpu().numpy()  # the one host sync per iteration
        passed = np.split(host[: flags.shape[0]], np.cumsum(counts)[:-1])
        carried = host[flags.shape[0] :]
    else:
        rows = [TestRows(p[b, :0], p[b, : len(w)]) for b, w in enumerate(windows)]  # no drafts to test
        carried = carry.cpu().numpy()
        passed = [np.zeros(0, dtype=bool)] * len(windows)
    if carried.size and carried[0]:
        return [], p[:0, 0], carried
    verdicts = [topology.verify(w, p[b, : len(w)], rows[b], passed[b], verifier) for b, w in enumerate(windows)]
    base = verdicts[0].emit_base if len(verdicts) == 1 else torch.cat([v.emit_base for v in verdicts])  # (E, V)
    offsets = _offsets(counts)
    rejected_of = [np.where(v.emit_rejected >= 0, v.emit_rejected + off, -1) for v, off in zip(verdicts, offsets)]
    rejected = rejected_of[0] if len(rejected_of) == 1 else np.concatenate(rejected_of)
    residual_rows = np.flatnonzero(rejected >= 0)
    if residual_rows.size:  # the verifier's replacement where a draft was rejected
        index = torch.as_tensor(np.stack([residual_rows, rejected[residual_rows]]), device=device)
        (before,) = _entries((base,), residual_rows, index[0])
        refs, tokens = _entries((nodes.refs, nodes.tokens), rejected[residual_rows], index[1])
        residual = verifier.replacement(before, refs, tokens)
        base = residual if residual_rows.size == base.shape[0] else base.index_copy(0, index[0], residual)
    return verdicts, sample(base, Draws(generators, [len(v.emit_slots) for v in verdicts], device)), carried


def non_finite(logits: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """() device flag: a raw logit is NaN or +inf (greedy would take its argmax), or a processed
    probability is not finite. -inf logits are fine (models mask ids that way). Two reductions:
    NaN and inf propagate through max and sum."""
    return ~torch.isfinite(logits.amax() + p.sum())


def _pad(values: np.ndarray, length: int) -> np.ndarray:
    """A window's positions padded with its last one (padding slots are never read)."""
    return values if len(values) == length else np.concatenate([values, np.full(length - len(values), values[-1])])


def _offsets(counts: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def _span(index: np.ndarray) -> slice | None:
    """index (k,) as a slice when it is consecutive (a chain's slots: a view instead of a gather)."""
    if (
        index.size
        and int(index[-1]) - int(index[0]) == index.size - 1
        and (index.size < 3 or (np.diff(index) == 1).all())
    ):
        return slice(int(index[0]), int(index[-1]) + 1)
    return None


def _rows(values: torch.Tensor, samples: np.ndarray, slots: np.ndarray, index: torch.Tensor) -> torch.Tensor:
    """values[samples, slots] (values: (B, L, ...)): one sample's consecutive slots as a view; index
    holds the same samples and slots on the device (rows 0 and 1) for the general case."""
    if samples.size and samples[0] == samples[-1] and (samples == samples[0]).all():
        span = _span(slots)
        if span is not None:
            return values[int(samples[0]), span]
    return values[index[0], index[1]]


def _entries(columns: tuple[torch.Tensor, ...], host: np.ndarray, device_index: torch.Tensor) -> list[torch.Tensor]:
    """Each column's entries at `host` (k,) (the same index on the device), as views when consecutive."""
    span = _span(host)
    return [column[span] if span is not None else column[device_index] for column in columns]


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _member(values: np.ndarray, members: np.ndarray, size: int) -> np.ndarray:
    """(len(values),) bool: which values (slots < size) are among `members` (np.isin for small slots)."""
    table = np.zeros(size, dtype=bool)
    table[members] = True
    return table[values]


def _consecutive(slots: np.ndarray) -> bool:
    return int(slots[-1]) - int(slots[0]) == len(slots) - 1
