"""The one decoding loop: speculative Jacobi decoding over a window of drafts, for every decoder, over a
batch of samples decoded in lockstep.

Per iteration (docs/ALGORITHMS.md §0-§5), for every sample of the batch:
1. plan: the topology lays out the window's slots (a chain, a draft tree, several rows) and names the
   positions whose drafts they hold; the drafts waiting there are taken, the init drafts the
   never-predicted ones, and the topology places them in the slots; every root slot re-feeds a
   decided token;
2. forward every sample's window at once; slot i's logits give the target p at position
   positions[i] + 1;
3. verify: walking down from each root, the verifier accepts drafts (siblings by recursive rejection
   sampling); where a walk stops, an emitting root emits the verifier's replacement for the first
   rejected draft, or a bonus draw from the last slot's p when every draft passed;
4. commit the roots not yet cached and the accepted drafts; the other slots are dropped;
5. observe: the iteration enters what outlives it, in one place and from one record: the init's
   fresh drafts wait with the others, the distributions of the realized positions enter the history
   and the init, the recorder gets the iteration's statistics;
6. propose: the slots past where each walk stopped turn their p into next iteration's drafts.
AR is this loop with W = 1; its iteration takes a lean step (`BatchDecode.step_ar`) that decides
what the six steps decide for a window without drafts. The loop never knows which model it drives.
Each step returns what it decided; the loop alone keeps the state between iterations (the samples'
tokens, the waiting drafts, the history, the init's and the recorder's state).

Batches: one forward holds every unfinished sample's window (padded to the longest); verification,
emission, proposals and statistics run over all samples' slots at once, each sample drawing its
random numbers from its own generator with the calls it would make decoded alone (randomness.py), so
a sample's tokens do not depend on its batch wherever the batched forward returns the same logits. A
finished sample leaves the batch and the next request takes its batch index. There is one host sync
per iteration: the verifier's flags, which also bring the check for non-finite logits and the growth
flags of the previous iteration's tests (`GrowthFlags`, handed from one iteration to the next).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

import numpy as np
import torch

from sjdbench.adapter import ImageARAdapter, Sampling, WindowInputs, require_hidden_states
from sjdbench.decoding.chain_step import ChainStep, takes_fixed_step
from sjdbench.decoding.history import ProbabilityHistory
from sjdbench.decoding.inits.neighbours import neighbour_tables
from sjdbench.decoding.parts import (
    Init,
    InitContext,
    Layout,
    ParentDrafts,
    Proposal,
    ProposalContext,
    SampleView,
    TestDistributions,
    Topology,
    Verdict,
    Verifier,
    WaitingDrafts,
    Window,
)
from sjdbench.decoding.processing import StructureMasks, non_finite, process_logits, sample
from sjdbench.decoding.proposals.drafter import DrafterProposal
from sjdbench.decoding.randomness import Draws
from sjdbench.decoding.recorder import DecodeStats, GrowthFlags, IterationRecord, Recorder, TestedDrafts
from sjdbench.decoding.settings import DecodeSettings
from sjdbench.decoding.state import Drafts, PendingDrafts
from sjdbench.decoding.topologies.chain import ChainTopology
from sjdbench.decoding.topologies.drafter_tree import DrafterTreeTopology, RootLayout
from sjdbench.errors import NonFiniteLogits, UserError


@dataclass(frozen=True)
class Decoder:
    """A decoder = proposal x verifier x init x topology with a window of W slots (W = 1 is AR), built
    against a model. Its decoder-wide settings (window, growth mask, traces) are `settings`; they are
    spelled out here so a decoder is written as `Decoder(16, proposal, verifier, init)`."""

    window: int
    proposal: Proposal
    verifier: Verifier
    init: Init
    growth_steps: int = DecodeSettings.growth_steps
    growth_reading: str = DecodeSettings.growth_reading
    trace_positions: int = DecodeSettings.trace_positions
    track_growth: bool = True  # keep the probability history for the growth statistics
    topology: Topology = field(default_factory=ChainTopology)  # the window's shape
    trace_drafts: bool = False  # record every verified draft's trajectory (stats.draft_traces; for reports)

    @property
    def settings(self) -> DecodeSettings:
        return DecodeSettings(self.window, self.growth_steps, self.growth_reading, self.trace_positions)


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


# Which decodes run the chain's fixed-shape step instead of the general loop's verification and
# proposals (both decode the same tokens). "compiled-cuda", the default: compiled decodes on a CUDA
# device, where each of the general loop's small operator calls is a kernel launch and the step is one
# graph. On a CPU it did not pay: eager, the padded step measured 2 to 4 points more of the wall time
# outside the forwards (bench_decoders, sjd and sjd_vp at W = 16); compiled, whole toy decodes took
# 1.05x the general loop's time at B = 1 (ar, sjd) and at B = 4 (sjd), as dynamo's per-call guards
# and the padding cost more than the fused arithmetic saves at these sizes (docs/PERFORMANCE.md).
# "always" (the tests: both paths alike; the GPU check: both timed) and "never" override it.
CHAIN_STEP: Literal["compiled-cuda", "always", "never"] = "compiled-cuda"

# How a decoder of one slot (AR, the baseline every speedup divides by) runs its iterations: "lean"
# (`BatchDecode.step_ar`: the forward, one draw and the commit, without the steps' bookkeeping for
# drafts it never has) or "general" (the six steps; the tests decode both and compare). The two decide
# the same tokens, statistics and cache. On the toy the general steps made AR take 1.16-1.34x the time
# of a bare AR loop, the lean step 1.07-1.17x (benchmarks/bench_baseline.py, two paired runs): a slower
# baseline flattered every speedup over it.
AR_STEP: Literal["lean", "general"] = "lean"


def chain_step(
    adapter: ImageARAdapter, decoder: Decoder, topology: Topology, sampling: Sampling, drafter: bool
) -> ChainStep | None:
    """The decoder's fixed-shape chain step, compiled with the model's forward (`model.compile`), or None
    where `CHAIN_STEP` keeps the general loop and where the parts need it. Kept on the adapter per parts and sampling,
    so a compiled step is compiled once per process, not once per batch."""
    compile = bool(getattr(adapter, "compile", False))
    cuda = torch.device(adapter.device).type == "cuda"
    wanted = CHAIN_STEP == "always" or (CHAIN_STEP == "compiled-cuda" and compile and cuda)
    if not wanted or not takes_fixed_step(topology, decoder.verifier, decoder.proposal, drafter):
        return None
    key = (decoder.verifier, decoder.proposal, sampling, decoder.settings.growth_observations, compile)
    steps = getattr(adapter, "_chain_steps", None)
    if steps is None:
        steps = {}
        try:
            adapter._chain_steps = steps  # type: ignore[attr-defined]
        except AttributeError:  # adapters with __slots__: one step per decode
            pass
    step = steps.get(key)
    if step is None:
        step = steps[key] = ChainStep(decoder.verifier, decoder.proposal, sampling, key[3], compile)
    return step


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
class SampleState:
    """A sample in the batch: its request, and which positions are decided and cached (host)."""

    request: Request
    decided: np.ndarray
    cached: np.ndarray
    key: int = 0  # the sample's own key for position-keyed noise (drawn only for proposals that read it)
    run: np.ndarray | None = None  # (N,) tokens decided by the iteration that decided each position


@dataclass
class Iteration:
    """What one iteration's steps returned, for the one place that takes it in (`BatchDecode.observe`)."""

    forward: ForwardPass
    verdicts: list[Verdict]
    decided: list[np.ndarray]  # per sample: the positions it decided
    growth: GrowthFlags | None  # the previous iteration's growth flags, read by this iteration's sync


class BatchDecode:
    """One batched decode: the batch's state and the steps of an iteration."""

    def __init__(
        self, adapter: ImageARAdapter, decoder: Decoder, sampling: Sampling, requests: list[Request], batch_size: int
    ) -> None:
        self.adapter, self.decoder, self.settings = adapter, decoder, decoder.settings
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
        depth = max(
            self.settings.growth_observations, decoder.proposal.history_depth, 16 if decoder.trace_drafts else 8
        )
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
        self.drafter = decoder.proposal if isinstance(decoder.proposal, DrafterProposal) and W > 1 else None
        self.tree = self.topology if isinstance(self.topology, DrafterTreeTopology) else None
        if self.tree is not None and self.drafter is None and W > 1:
            raise UserError("decoder.topology=drafter_tree is grown by a drafter: use decoder/proposal=drafter")
        if self.drafter is not None:  # a drafter reads the target's hidden states, on a chain or its own tree
            self.states_model = require_hidden_states(adapter, "the drafter proposal")
            if self.tree is None and not isinstance(self.topology, ChainTopology):
                raise UserError(
                    "the drafter proposal drafts a chain or its own tree; use decoder.topology=chain or drafter_tree"
                )
            entries = W if self.tree is None else self.tree.most_nodes(W)
            self.drafting = self.drafter.begin(B, self.cache.prompt_len, self.N, entries)
        self.chain_step = chain_step(adapter, decoder, self.topology, self.sampling, self.drafter is not None)
        self.lean_ar = W == 1 and self.chain_step is None and AR_STEP == "lean"
        self.samples: list[SampleState | None] = [None] * B  # by batch index
        self.bad_prefill = torch.zeros((), dtype=torch.bool, device=self.device)
        none = np.zeros(0, dtype=np.int64)
        self.no_drafts = (none, Drafts.new(none, self.tokens[0, :0], None, self.V, fresh=True))  # nothing fresh
        self.no_tests = TestedDrafts(none, none, none, none, none.astype(bool), none.astype(bool), none.astype(bool))

    # -- the batch -----------------------------------------------------------------------------------

    def run(self) -> Iterator[tuple[Request, DecodeResult]]:
        yield from self.admit(list(range(len(self.samples))))
        unread: GrowthFlags | None = None  # the last iteration's growth flags, read with the next sync
        while any(state is not None for state in self.samples):
            if self.lean_ar:
                self.step_ar()
            else:
                unread = self.step(unread)
            done = self.done()
            if done:
                if unread is not None:  # a finishing sample's statistics must be complete: read them now
                    self.recorder.record_growth(unread.read(unread.flags.cpu().numpy()))
                    unread = None
                yield from self.finished(done)

    def done(self) -> list[int]:
        """The batch indices whose sample has every position decided."""
        return [b for b, state in enumerate(self.samples) if state is not None and state.decided.all()]

    def admit(self, free: list[int]) -> Iterator[tuple[Request, DecodeResult]]:
        """Start the next requests at these free batch indices: prefill, then the first token from p at
        position 0."""
        free = free[: len(self.queue)]
        if not free:
            return
        requests = [self.queue.pop() for _ in free]
        for b, request in zip(free, requests):
            self.samples[b] = SampleState(
                request,
                np.zeros(self.N, dtype=bool),
                np.zeros(self.N, dtype=bool),
                run=np.zeros(self.N, dtype=np.int64),
            )
            self.tokens[b] = -1
            self.pending.clear(b)
            if self.history is not None:
                self.history.reset(b)
            self.recorder.start(b)
            self.decoder.init.reset(self.init_state, b)
        prompts = [self.prompts.pop(id(r)) for r in requests]
        if self.drafter is not None:
            logits, states = self.states_model.prefill_states(self.cache, free, prompts)  # (n, 2, V)
        else:
            logits = self.adapter.prefill(self.cache, free, prompts)  # (n, 2, V)
        p0 = process_logits(logits[:, :, None], self.constants.masks.window(0, 1), self.sampling)[:, 0]  # (n, V)
        self.bad_prefill = self.bad_prefill | non_finite(logits, p0)
        first = sample(p0, Draws([r.generator for r in requests], [1] * len(free), self.device))  # (n,)
        if self.decoder.proposal.reads_sample_key:  # after the first token: other decoders' streams unchanged
            for b, request in zip(free, requests):
                state = self.samples[b]
                assert state is not None  # started just above
                state.key = int(torch.randint(2**62, (1,), generator=request.generator))
        self.tokens[torch.as_tensor(free, device=self.device), 0] = first
        if self.drafter is not None:
            self.drafter.start(self.drafting, free, states, first)
            self.recorder.counts["drafter_forwards"] += self.drafter.take_served(self.drafting)
        for b in free:
            admitted = cast(SampleState, self.samples[b])  # admitted above
            admitted.decided[0] = True
            if admitted.run is not None:
                admitted.run[0] = 1  # the prefill decided position 0 alone
        done = self.done()
        if done:  # a one-position segment is done already
            yield from self.finished(done)

    def finished(self, done: list[int]) -> Iterator[tuple[Request, DecodeResult]]:
        """Hand over the finished samples, admit the next requests in their place, and shrink the batch
        when none are left to take them."""
        tokens = self.tokens[done].cpu()
        for i, b in enumerate(done):
            state = self.samples[b]
            assert state is not None  # done lists occupied batch indices
            self.samples[b] = None
            yield state.request, DecodeResult(tokens[i], self.recorder.finish(b))
        yield from self.admit(done)  # the next requests take the free batch indices
        if any(state is None for state in self.samples):  # none left to take them: the batch shrinks
            self.retain([b for b, state in enumerate(self.samples) if state is not None])

    def retain(self, keep: list[int]) -> None:
        """The batch shrinks to these batch indices, in this order (nothing is left to admit)."""
        if keep == list(range(len(self.samples))):
            return
        self.samples = [self.samples[b] for b in keep]
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
        if self.drafter is not None:
            self.drafting = self.drafter.retain(self.drafting, keep)

    # -- one iteration -------------------------------------------------------------------------------

    def in_batch(self) -> list[SampleState]:
        """The samples by batch index, during an iteration: finished() leaves no index empty (the batch shrinks)."""
        return cast("list[SampleState]", self.samples)

    def step(self, unread: GrowthFlags | None) -> GrowthFlags | None:
        """One iteration; `unread`: the last iteration's growth flags, which this one's sync reads.
        Returns this iteration's, for the next."""
        windows, fresh = self.plan()  # 1. the windows' slots, and the drafts the init made for them
        self.pending.put(*fresh)  # they wait with the others
        fed = self.forward(windows)  # 2. one forward; slot i predicts position positions[i] + 1
        if self.chain_step is not None:  # processing, tests and emission in one fixed-shape call
            fed, verdicts, emitted, growth = self.verify_chains(fed, unread)
        else:
            verdicts, emitted, growth = self.verify(fed, unread)  # 3. accepted paths and emitted tokens
        decided = self.commit(fed, verdicts, emitted)  # 4. the kept slots into the cache
        if self.drafter is not None:  # the drafter takes in the decided tokens
            self.advance_drafter(fed, verdicts, decided)
        unread = self.observe(Iteration(fed, verdicts, decided, growth))  # 5. history, init, statistics
        proposed = None if self.drafter is not None else self.propose(fed, verdicts)  # 6. next drafts
        if proposed is not None:
            self.pending.put(*proposed)
        return unread

    def step_ar(self) -> None:
        """One iteration of a one-slot decoder (AR): every sample's last decided token re-fed, one draw
        from p at the next position, the slot kept in the cache, the iteration recorded. What the six
        steps decide for a window without drafts (the same draws, cache and statistics), without
        their bookkeeping for drafts, so the baseline costs no more than an AR loop must."""
        states = self.in_batch()
        B, device = len(states), self.device
        frontier = np.array([int(np.argmin(state.decided)) for state in states])  # AR decides a prefix
        rows = torch.arange(B, device=device)
        positions = torch.as_tensor(frontier - 1, device=device)[:, None]  # (B, 1) the last decided
        window = WindowInputs(self.tokens[rows, positions[:, 0]][:, None], positions, None, int(frontier.max()))
        logits = self.adapter.forward(self.cache, window)  # (B, 2, 1, V)
        masks = self.constants.masks
        p = process_logits(logits, masks.rows[masks.index[positions + 1]], self.sampling)  # (B, 1, V)
        bad = non_finite(logits, p) | self.bad_prefill
        self.bad_prefill = torch.zeros_like(bad)
        if bool(bad):  # the one host sync, as the general steps' verification brings the same flag
            self.raise_non_finite(logits, p, [np.array([n - 1]) for n in frontier.tolist()])
        emitted = sample(p[:, 0], Draws([state.request.generator for state in states], [1] * B, device))  # (B,)
        self.tokens[rows, positions[:, 0] + 1] = emitted
        for state, n in zip(states, frontier.tolist()):
            state.decided[n] = True
            state.cached[n - 1] = True
            if state.run is not None:
                state.run[n] = 1
        self.adapter.commit(self.cache, torch.zeros(B, 1, dtype=torch.long, device=device))
        ones = np.ones(B, dtype=np.int64)
        self.recorder.record(IterationRecord(np.arange(B), ones, ones, ones, self.no_tests))

    def view(self, b: int) -> SampleView:
        state = self.in_batch()[b]
        c = self.constants
        return SampleView(
            b,
            self.tokens[b],
            state.decided,
            state.cached,
            self.adapter.layout,
            c.forced,
            self.adapter.image_token_ids,
            self.pending,
            state.request.generator,
            state.run,
            (c.left_of, c.above_of),
        )

    def plan(self) -> tuple[list[Window], tuple[np.ndarray, Drafts]]:
        """Each sample's window: the topology's layout, the drafts it wants (the waiting ones, and fresh
        ones the init drafts where none waits), the window with them in place. Returns the windows and
        the fresh drafts with the batch index of each."""
        views = [self.view(b) for b in range(len(self.samples))]
        layouts = [self.topology.plan(view, self.decoder.window) for view in views]
        if self.tree is not None:  # a drafter tree leaves no drafts waiting
            return self.drafted_trees(layouts), self.no_drafts
        if self.drafter is not None:
            self.draft_chains(layouts)
        drafts, fresh = self.drafts_for(views, [layout.wanted for layout in layouts])
        windows = [self.topology.place(layout, d, view) for view, layout, d in zip(views, layouts, drafts)]
        return windows, fresh

    def draft_chains(self, layouts: list[Layout]) -> None:
        """The drafter drafts every wanted position (a chain's consecutive positions) afresh; its
        drafts wait for the windows like any proposal's."""
        assert self.drafter is not None
        counts = np.array([len(layout.wanted) for layout in layouts])
        if not counts.any():
            return
        starts = np.array([int(layout.wanted[0]) if len(layout.wanted) else 0 for layout in layouts])
        generators = [state.request.generator for state in self.in_batch()]
        drafts, refs = self.drafter.draft_chain(
            self.drafting, starts, counts, self.constants.masks, self.sampling, generators, self.dtype
        )
        for b, (layout, count) in enumerate(zip(layouts, counts.tolist())):
            if count:
                self.pending.put(
                    np.full(count, b), Drafts.new(layout.wanted, drafts[b, :count], refs[b, :count], self.V, False)
                )

    def drafted_trees(self, layouts: list[Layout]) -> list[Window]:
        """The drafter grows each sample's tree below its root (the topology picks the nodes)."""
        assert self.drafter is not None and self.tree is not None
        frontiers = np.array([int(layout.positions[0]) + 1 for layout in layouts])
        generators = [state.request.generator for state in self.in_batch()]
        trees = self.drafter.draft_trees(
            self.drafting,
            self.tree,
            frontiers,
            self.decoder.window,
            self.constants.masks,
            self.sampling,
            generators,
            self.dtype,
            [cast(RootLayout, layout).budget for layout in layouts],  # the topology's plan made them
        )
        return [self.tree.grow(layout, tree, self.V, self.dtype) for layout, tree in zip(layouts, trees)]

    def advance_drafter(self, fed: ForwardPass, verdicts: list[Verdict], decided: list[np.ndarray]) -> None:
        """Each sample's decided positions enter the drafter, each token with the target's hidden state
        of the slot before it on the accepted path (the root, then the accepted drafts)."""
        assert self.drafter is not None and fed.hidden is not None
        width = max(1, max(len(d) for d in decided))
        B = len(decided)
        positions = np.full((B, width), -1, dtype=np.int64)
        slots = np.zeros((B, width), dtype=np.int64)
        for b, (w, v, here) in enumerate(zip(fed.windows, verdicts, decided)):
            here = np.sort(here)
            path = np.concatenate([w.root_slots[:1], v.accepted])
            slot_at = dict(zip(w.positions[path].tolist(), path.tolist()))
            positions[b, : len(here)] = here
            slots[b, : len(here)] = [slot_at[t - 1] for t in here.tolist()]
        device = self.device
        positions_t = torch.as_tensor(positions, device=device)
        slots_t = torch.as_tensor(slots, device=device)
        tokens = self.tokens.gather(1, positions_t.clamp_min(0))  # (B, K)
        hidden = fed.hidden.gather(2, slots_t[:, None, :, None].expand(-1, 2, -1, fed.hidden.shape[-1]))  # (B, 2, K, D)
        self.drafter.advance(self.drafting, tokens, hidden, positions_t, int(positions.max()) + 1)

    def drafts_for(
        self, views: list[SampleView], wanted: list[np.ndarray]
    ) -> tuple[list[Drafts], tuple[np.ndarray, Drafts]]:
        """The drafts for each sample's `wanted` positions (ascending): those waiting there, looked up
        for the whole batch at once, and fresh ones the init drafts where none waits (one call per
        sample that needs any). Returns each sample's drafts in position order (views into one batch
        of drafts) and the fresh ones with the batch index of each."""
        counts = np.array([len(w) for w in wanted], dtype=np.int64)
        starts = np.cumsum(counts) - counts
        samples = np.repeat(np.arange(len(wanted)), counts)  # (D,) over the batch's wanted positions
        positions = np.concatenate(wanted).astype(np.int64, copy=False)
        missing = self.pending.missing(samples, positions)
        if not missing.any():
            every, made = self.pending.get(samples, positions), self.no_drafts
        else:
            every = self.pending.get(samples[~missing], positions[~missing])
            fresh_samples, fresh = [], []
            for b, (start, stop) in enumerate(zip(starts.tolist(), (starts + counts).tolist())):
                here = positions[start:stop][missing[start:stop]]  # the init's calls, sample by sample
                if here.size:
                    tokens, refs = self.decoder.init.fill(self.init_state, views[b], here)
                    fresh.append(Drafts.new(here, tokens, refs, self.V, fresh=True))
                    fresh_samples.append(np.full(here.size, b))
            owner = np.concatenate([samples[~missing], *fresh_samples])
            merged = Drafts.cat([every, *fresh])
            every = merged.select(np.lexsort((merged.positions, owner)))  # by sample, then position
            made = (np.concatenate(fresh_samples), Drafts.cat(fresh))
        if len(wanted) == 1:
            return [every], made
        return [every.span(a, a + n) for a, n in zip(starts.tolist(), counts.tolist())], made

    def forward(self, windows: list[Window]) -> ForwardPass:
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
        padded = None if (lengths == L).all() else lengths.tolist()  # an unpadded batch needs no lengths
        window = WindowInputs(tokens, positions_t, mask, int(positions.max()) + 1, padded)
        hidden = None
        if self.drafter is not None:  # (B, 2, L, D) the drafter pairs decided tokens with them
            logits, hidden = self.states_model.forward_states(self.cache, window)
        else:
            logits = self.adapter.forward(self.cache, window)
        if self.chain_step is not None:  # processed with the tests, over the whole window (verify_chains)
            p, bad = logits[:0, 0], self.bad_prefill
        else:
            masks = self.constants.masks
            targets = (positions_t + 1).clamp_max(self.N - 1)
            p = process_logits(logits, masks.rows[masks.index[targets]], self.sampling)  # (B, L, V)
            bad = non_finite(logits, p) | self.bad_prefill
        self.bad_prefill = torch.zeros_like(bad)
        nodes = Drafts.cat([w.nodes for w in windows])
        return ForwardPass(
            windows,
            lengths,
            positions,
            tokens,
            p,
            logits,
            bad,
            nodes,
            _offsets([len(w.nodes) for w in windows]),
            hidden,
        )

    def verify(
        self, fed: ForwardPass, unread: GrowthFlags | None
    ) -> tuple[list[Verdict], torch.Tensor, GrowthFlags | None]:
        """Every draft's test at once (one verifier call, one host sync, which also brings the
        non-finite flag and the last iteration's growth flags to the host), then each window's walk,
        then the emitted tokens, each sample's from its own generator. Returns the verdicts, the
        emitted tokens and the last iteration's growth flags, read."""
        generators = [state.request.generator for state in self.in_batch()]
        extra = fed.bad[None] if unread is None else torch.cat([fed.bad[None], unread.flags.reshape(-1)])
        verdicts, emitted, host = verify_windows(
            self.topology, self.decoder.verifier, fed.windows, fed.p, fed.nodes, generators, extra
        )
        if host[0]:
            self.raise_non_finite(fed.logits, fed.p, [w.positions for w in fed.windows])
        return verdicts, emitted, None if unread is None else unread.read(host[1:])

    def verify_chains(
        self, fed: ForwardPass, unread: GrowthFlags | None
    ) -> tuple[ForwardPass, list[Verdict], torch.Tensor, GrowthFlags | None]:
        """`verify` for chain windows as one fixed-shape call (`ChainStep.verify`): the windows padded
        to W slots, their uniforms drawn as `verify_windows` draws them (the tests, then the emission),
        one host sync for which drafts passed. Returns the forward with its processed p, the verdicts,
        the emitted tokens and the last iteration's growth flags, read."""
        step, device = self.chain_step, self.device
        assert step is not None  # the loop calls this only for chain steps
        B, W, V = len(fed.windows), self.decoder.window, self.V
        Q = W - 1
        counts = fed.lengths - 1  # (B,) drafts per window
        generators = [state.request.generator for state in self.in_batch()]
        rows = np.repeat(np.arange(B), counts)
        cols = np.arange(len(rows)) - np.repeat(_offsets(counts.tolist()), counts)
        index = torch.as_tensor(np.stack([rows, cols]), device=device)
        u = Draws(generators, counts.tolist(), device).uniform()  # (sum counts,)
        u_emit = Draws(generators, [1] * B, device).uniform(1)  # (B, 1)
        full = bool((counts == Q).all())
        refs = (
            fed.nodes.refs.view(B, Q, V)
            if full
            else fed.nodes.refs.new_zeros(B, Q, V).index_put_((index[0], index[1]), fed.nodes.refs)
        )
        u = u.view(B, Q) if full else u.new_zeros(B, Q).index_put_((index[0], index[1]), u)
        positions = np.concatenate([fed.positions, np.repeat(fed.positions[:, -1:], W - fed.positions.shape[1], 1)], 1)
        positions_t = torch.as_tensor(positions, device=device)  # (B, W)
        logits, tokens = fed.logits, fed.tokens
        if logits.shape[2] < W:  # pad the slots to W (padding slots are never read)
            logits = torch.cat([logits, logits[:, :, -1:].expand(-1, -1, W - logits.shape[2], -1)], 2)
            tokens = torch.cat([tokens, tokens[:, -1:].expand(-1, W - tokens.shape[1])], 1)
        masks = self.constants.masks
        allowed = masks.rows[masks.index[(positions_t + 1).clamp_max(self.N - 1)]]  # (B, W, V)
        p, bad, passed, emitted = step.verify(
            logits, allowed, tokens, refs, u, u_emit, torch.as_tensor(counts, device=device)
        )
        bad = bad | fed.bad
        extra = [bad[None]] if unread is None else [bad[None], unread.flags.reshape(-1)]
        host = torch.cat([passed.reshape(-1), *extra]).cpu().numpy()  # the one host sync per iteration
        fed = replace(fed, p=p, bad=bad, fixed=FixedWindows(tokens, refs, positions, positions_t))
        if host[B * Q]:
            self.raise_non_finite(fed.logits, fed.p, [w.positions for w in fed.windows])
        passed_host = host[: B * Q].reshape(B, Q)
        verifier = self.decoder.verifier
        verdicts = []
        for b, w in enumerate(fed.windows):
            L = len(w)
            tests = TestDistributions(p[b, : L - 1], p[b, :L])
            verdicts.append(self.topology.verify(w, p[b, :L], tests, passed_host[b, : L - 1], verifier))
        return fed, verdicts, emitted, None if unread is None else unread.read(host[B * Q + 1 :])

    def commit(self, fed: ForwardPass, verdicts: list[Verdict], emitted: torch.Tensor) -> list[np.ndarray]:
        """Write the decided tokens, keep the roots not yet cached and the accepted drafts in the cache.
        Returns each sample's newly decided positions."""
        device = self.device
        samples, positions, pieces, kept, decided = [], [], [], [], []
        e = 0
        for b, (w, v, state) in enumerate(zip(fed.windows, verdicts, self.in_batch())):
            accepted_pos = w.positions[v.accepted]
            emitted_pos = w.positions[v.emit_slots] + 1
            here = (
                np.concatenate([accepted_pos, emitted_pos, w.decided])
                if len(w.decided)
                else np.concatenate([accepted_pos, emitted_pos])
            )
            state.decided[here] = True
            if state.run is not None:
                state.run[here] = len(here)
            roots = np.flatnonzero(w.commit_root)
            keep = np.concatenate([roots, v.accepted]) if len(v.accepted) else roots
            if len(roots) > 1:
                keep = np.sort(keep)
            state.cached[w.positions[keep]] = True
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
            self.tokens[where[0], where[1]] = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
        width = max(len(k) for k in kept)
        slots = np.full((len(kept), width), -1, dtype=np.int64)
        for b, keep in enumerate(kept):
            slots[b, : len(keep)] = keep
        self.adapter.commit(self.cache, torch.as_tensor(slots, device=device))
        return decided

    def observe(self, it: Iteration) -> GrowthFlags | None:
        """The one place an iteration enters the history, the init and the recorder: the distributions
        of the realized positions (one per distinct target) enter the history and the init; the
        recorder gets one record of what the verifier decided on, the tokens decided and the
        trajectories traced. Returns the growth flags of this iteration's tests (device values, read
        with the next host sync)."""
        fed, verdicts, device, history, init = it.forward, it.verdicts, self.device, self.history, self.decoder.init
        windows = fed.windows
        if history is not None or init.reads_p:
            real_b = _cat([np.full(len(v.realized), b) for b, v in enumerate(verdicts)])
            real_slot = _cat([v.realized for v in verdicts])
            index = torch.as_tensor(np.stack([real_b, real_slot, fed.positions[real_b, real_slot] + 1]), device=device)
            p_real = _gather(fed.p, real_b, real_slot, index)  # (R, V)
            if init.reads_p:
                init.observe_p(self.init_state, index[0], index[2], p_real)
            if history is not None:
                history.push(index[0], index[2], p_real)

        c = self.constants
        tested = [v.tested for v in verdicts]
        if sum(len(x) for x in tested):
            test_b = _cat([np.full(len(x), b) for b, x in enumerate(tested)])
            test_slot = _cat(tested)
            test_node = _cat([w.node_of[x] + off for w, x, off in zip(windows, tested, fed.offsets)])
            test_pos = fed.positions[test_b, test_slot]
            accepted = _cat([_member(x, v.accepted, len(w)) for x, v, w in zip(tested, verdicts, windows)])
            depth = _cat([w.depth[x] for w, x in zip(windows, tested)])
            sibling = _cat([w.sibling[x] for w, x in zip(windows, tested)])
        else:
            test_b = test_slot = test_node = test_pos = depth = sibling = np.zeros(0, dtype=np.int64)
            accepted = np.zeros(0, dtype=bool)
        content = c.content[test_pos]
        tests = TestedDrafts(
            test_b, depth, sibling, c.grid_row[test_pos], accepted, content, fed.nodes.fresh[test_node]
        )
        record = IterationRecord(
            np.arange(len(windows)),
            np.array([len(d) for d in it.decided]),
            fed.lengths,
            np.array([w.in_flight for w in windows]),
            tests,
            it.growth,
            drafter_forwards=None if self.drafter is None else self.drafter.take_served(self.drafting),
        )
        unread = None
        if history is not None:
            if len(test_slot):  # growth flags (after the push: M up to and including this iteration)
                index = torch.as_tensor(np.stack([test_b, test_pos, test_node]), device=device)
                nodes, observations = fed.nodes, self.settings.growth_observations
                eligible, grew, tokens = _entries((nodes.eligible, nodes.grew, nodes.tokens), test_node, index[2])
                where = history.locate(index[0], index[1])
                flags = torch.stack(
                    [eligible, grew, history.grew(where, tokens, observations), where[1] >= observations], dim=-1
                )
                unread = GrowthFlags(test_b, accepted & content, content, flags)
            record.trajectories, record.draft_traces = self.traces(fed, it.decided, test_b, test_slot, accepted)
        self.recorder.record(record)
        return unread

    def traces(
        self, fed: ForwardPass, decided: list[np.ndarray], test_b: np.ndarray, tested: np.ndarray, accepted: np.ndarray
    ) -> tuple[list[tuple[int, dict]], list[tuple[int, dict]]]:
        """Probability trajectories: of the traced positions as they are decided, and (when asked for)
        of every draft the verifier decided on at a content position, with whether it passed; each
        with the batch index of its sample."""
        history = self.history
        assert history is not None  # traces are read from the history: observe() asks only when it is kept
        trajectories = []
        for b, new in enumerate(decided):
            for pos in sorted(self.traced.intersection(new.tolist())):
                token = int(self.tokens[b, pos])
                trajectories.append((b, {"pos": pos, "token": token, "probs": history.trajectory(b, pos, token)}))
        drafts: list[tuple[int, dict]] = []
        if not self.decoder.trace_drafts:
            return trajectories, drafts
        for b, slot, ok in zip(test_b.tolist(), tested.tolist(), accepted.tolist()):
            pos = int(fed.positions[b, slot])
            if self.constants.content[pos]:
                token = int(fed.tokens[b, slot])
                trace = {"pos": pos, "token": token, "accepted": bool(ok), "probs": history.trajectory(b, pos, token)}
                drafts.append((b, trace))
        return trajectories, drafts

    def proposing(self, fed: ForwardPass, verdicts: list[Verdict]) -> Proposing | None:
        """The slots whose p proposes next drafts (each with the slot of the draft waiting at its target),
        every sample's together; None when no position is left to draft."""
        samples, sources, waiting_nodes = [], [], []
        for b, (w, v, state) in enumerate(zip(fed.windows, verdicts, self.in_batch())):
            src, waits = v.sources, v.waiting
            if not len(src):
                continue
            open_ = ~state.decided[w.positions[src] + 1]  # a slot that only caches its token predicts nothing
            if not open_.all():
                src, waits = src[open_], waits[open_]
            samples.append(np.full(len(src), b))
            sources.append(src)
            waiting_nodes.append(np.where(waits >= 0, w.node_of[np.maximum(waits, 0)] + fed.offsets[b], -1))
        if not samples:
            return None
        sample_ids, source_slots, waiting_node = map(np.concatenate, (samples, sources, waiting_nodes))
        if not len(sample_ids):
            return None
        target_host = fed.positions[sample_ids, source_slots] + 1
        index = torch.as_tensor(
            np.stack([sample_ids, source_slots, target_host, np.maximum(waiting_node, 0)]), device=self.device
        )
        per_sample = np.bincount(sample_ids, minlength=len(fed.windows)).tolist()
        return Proposing(sample_ids, source_slots, waiting_node, target_host, index, per_sample)

    def propose(self, fed: ForwardPass, verdicts: list[Verdict]) -> tuple[np.ndarray, Drafts] | None:
        """The sources' p become next drafts at their targets, for every sample at once. Returns the
        batch index of each and the drafts (None when no position is left to draft)."""
        chosen = self.proposing(fed, verdicts)
        if chosen is None:
            return None
        device, history, observations = self.device, self.history, self.settings.growth_observations
        proposal = self.decoder.proposal
        generators = [state.request.generator for state in self.in_batch()]
        draws = Draws(generators, chosen.per_sample, device)
        index = chosen.index
        sb, targets = index[0], index[2]
        if fed.fixed is not None:  # every slot proposes in one fixed-shape call; the sources are kept
            drafts, refs = self.propose_fixed(fed, chosen, draws)
        else:
            p = _gather(fed.p, chosen.sample_ids, chosen.source_slots, index)  # (S, V)
            has_old = torch.as_tensor(chosen.waiting_node >= 0, device=device)
            if len(fed.nodes):
                old_drafts, old_refs = _entries(
                    (fed.nodes.tokens, fed.nodes.refs), np.maximum(chosen.waiting_node, 0), index[3]
                )
                waiting = WaitingDrafts(old_drafts, old_refs, has_old)
            else:
                waiting = WaitingDrafts(torch.zeros_like(sb), torch.zeros_like(p), has_old)
            growth = None
            if history is not None and proposal.history_depth:
                growth = history.growth_mask(sb, targets, observations)
            keys = None
            if proposal.reads_sample_key:  # host values: no device round trip
                keys = torch.tensor([state.key for state in self.in_batch()], dtype=torch.long)[chosen.sample_ids]
            drafts, refs = proposal.propose(p, waiting, ProposalContext(sb, targets, history, growth, draws, keys))
        grew = observed = None
        if history is not None:
            where = history.locate(sb, targets)
            grew = history.grew(where, drafts, observations)
            observed = where[1] >= observations
        return chosen.sample_ids, Drafts.new(chosen.target_host, drafts, refs, self.V, False, grew, observed)

    def propose_fixed(self, fed: ForwardPass, chosen: Proposing, draws: Draws) -> tuple[torch.Tensor, torch.Tensor]:
        """`propose` over every slot of the padded windows (`ChainStep.propose`): the sources' uniforms
        drawn as `propose` draws them, in their slots; the sources' drafts (S,) and references (S, V)."""
        step, fixed = self.chain_step, fed.fixed
        assert step is not None and fixed is not None  # set together (verify_chains)
        device, (B, W) = self.device, fixed.tokens.shape
        index = chosen.index
        u = fed.p.new_zeros(B, W).index_put_((index[0], index[1]), draws.uniform().to(fed.p.dtype))
        slots = torch.arange(W, device=device)
        lengths = torch.as_tensor(fed.lengths, device=device)
        waiting = WaitingDrafts(  # slot s's target holds the draft of slot s + 1 (node s), in the window
            torch.cat([fixed.tokens[:, 1:], fixed.tokens[:, -1:]], 1).reshape(-1),
            torch.cat([fixed.refs, fixed.refs.new_zeros(B, 1, self.V)], 1).reshape(B * W, self.V),
            (slots[None] + 1 < lengths[:, None]).reshape(-1),
        )
        samples = torch.arange(B, device=device).repeat_interleave(W)
        targets = (fixed.positions_t + 1).clamp_max(self.N - 1).reshape(-1)
        drafts, refs = step.propose(fed.p, waiting, u, samples, targets, self.history)
        return drafts[index[0], index[1]], refs[index[0], index[1]]

    def raise_non_finite(self, logits: torch.Tensor, p: torch.Tensor, positions: list[np.ndarray]) -> None:
        """The error path: the first sample and position whose logits (B, 2, L, V) or probabilities
        (B, L, V) are bad; positions[b]: the segment positions of sample b's window slots."""
        states = self.in_batch()
        for b, slots in enumerate(positions):
            L = len(slots)
            raw = logits[b, :, :L]  # (2, L, V): NaN or +inf anywhere (greedy's p stays finite)
            bad = ~(raw < float("inf")).all(-1).all(0) | ~torch.isfinite(p[b, :L]).all(-1)
            if bool(bad.any()):
                raise NonFiniteLogits(int(slots[int(bad.long().argmax())]) + 1, states[b].request.prompt)
        raise NonFiniteLogits(0, states[0].request.prompt)  # a prompt's own logits (the prefill)


@dataclass
class ForwardPass:
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
    hidden: torch.Tensor | None = None  # (B, 2, L, D) the slots' hidden states, when a drafter reads them
    fixed: FixedWindows | None = None  # the windows padded to W slots, when a chain step verified them


@dataclass
class FixedWindows:
    """Chain windows padded to W slots for the fixed-shape step (`BatchDecode.verify_chains`)."""

    tokens: torch.Tensor  # (B, W) slot inputs
    refs: torch.Tensor  # (B, W - 1, V) the drafts' references (zeros past a window's drafts)
    positions: np.ndarray  # (B, W) host
    positions_t: torch.Tensor  # (B, W) the same on the device


@dataclass
class Proposing:
    """The slots that propose next drafts, all samples together (S of them): `BatchDecode.proposing`."""

    sample_ids: np.ndarray  # (S,) batch index
    source_slots: np.ndarray  # (S,) the slot whose p proposes
    waiting_node: np.ndarray  # (S,) node index (in the forward's nodes) of the draft waiting at the target, or -1
    target_host: np.ndarray  # (S,) the target positions
    index: torch.Tensor  # (4, S) device: sample, slot, target, waiting node (clamped at 0)
    per_sample: list[int]  # proposals per sample, by batch index


def verify_windows(
    topology: Topology,
    verifier: Verifier,
    windows: list[Window],
    p: torch.Tensor,
    nodes: Drafts,
    generators: list[torch.Generator],
    extra: torch.Tensor | None = None,
) -> tuple[list[Verdict], torch.Tensor, np.ndarray]:
    """Verification of B windows (p: (B, L, V), nodes: every window's drafts in order): every draft's
    test in one verifier call, read with one host sync (which also brings `extra` (C,) bool to the
    host, returned), each window's walk, then the emitted tokens (E,), each sample's from its own
    generator."""
    device = p.device
    counts = [len(w.nodes) for w in windows]
    extra = extra if extra is not None else torch.zeros(0, dtype=torch.bool, device=device)
    if sum(counts):
        tests = [topology.test_distributions(w, p[b, : len(w)], verifier) for b, w in enumerate(windows)]
        u = Draws(generators, counts, device).uniform()
        test_p = tests[0].p if len(tests) == 1 else torch.cat([t.p for t in tests])
        depths = _node_depths(windows, device) if verifier.reads_depth else None
        reads: dict[str, Any] = {} if depths is None else {"depth": depths}
        if verifier.reads_parent:
            reads["parent"] = _parent_drafts(windows, nodes, test_p)
        flags = verifier.accept(test_p, nodes.refs, nodes.tokens, u, **reads)
        fails = [t.fails if t.fails is not None else torch.zeros_like(flags[:0]) for t in tests]
        if any(t.fails is not None for t in tests):
            flags = flags & ~torch.cat(
                [
                    f if len(f) else torch.zeros(len(w.nodes), dtype=torch.bool, device=device)
                    for f, w in zip(fails, windows)
                ]
            )
        host = torch.cat([flags, extra]).cpu().numpy()  # the one host sync per iteration
        passed = np.split(host[: flags.shape[0]], np.cumsum(counts)[:-1])
        brought = host[flags.shape[0] :]
    else:
        depths = None
        tests = [TestDistributions(p[b, :0], p[b, : len(w)]) for b, w in enumerate(windows)]  # no drafts to test
        brought = extra.cpu().numpy()
        passed = [np.zeros(0, dtype=bool)] * len(windows)
    if brought.size and brought[0]:
        return [], p[:0, 0], brought
    verdicts = [topology.verify(w, p[b, : len(w)], tests[b], passed[b], verifier) for b, w in enumerate(windows)]
    base = verdicts[0].emit_base if len(verdicts) == 1 else torch.cat([v.emit_base for v in verdicts])  # (E, V)
    offsets = _offsets(counts)
    rejected_of = [np.where(v.emit_rejected >= 0, v.emit_rejected + off, -1) for v, off in zip(verdicts, offsets)]
    rejected = rejected_of[0] if len(rejected_of) == 1 else np.concatenate(rejected_of)
    residual_at = np.flatnonzero(rejected >= 0)
    if residual_at.size:  # the verifier's replacement where a draft was rejected
        index = torch.as_tensor(np.stack([residual_at, rejected[residual_at]]), device=device)
        (before,) = _entries((base,), residual_at, index[0])
        refs, tokens = _entries((nodes.refs, nodes.tokens), rejected[residual_at], index[1])
        extra_args = {} if depths is None else {"depth": depths[index[1]]}
        residual = verifier.replacement(before, refs, tokens, **extra_args)
        base = residual if residual_at.size == base.shape[0] else base.index_copy(0, index[0], residual)
    return verdicts, sample(base, Draws(generators, [len(v.emit_slots) for v in verdicts], device)), brought


def _parent_drafts(windows: list[Window], nodes: Drafts, test_p: torch.Tensor) -> ParentDrafts:
    """Each draft's parent slot, in node order: its token, and where it is a draft, its tested p and
    its q at that token (a verifier that judges consecutive drafts together reads them)."""
    device = test_p.device
    index, slots, offsets = [], [], _offsets([len(w.nodes) for w in windows])
    for w, offset in zip(windows, offsets):
        parent = w.parent[w.node_slots]
        node = w.node_of[parent]
        index.append(np.where(node >= 0, node + offset, -1))
        slots.append(parent)
    at = torch.as_tensor(np.concatenate(index), device=device)
    tokens = torch.cat([w.tokens[torch.as_tensor(s, device=device)] for w, s in zip(windows, slots)])
    drafted = at >= 0
    rows = at.clamp_min(0)
    p = torch.where(drafted, test_p[rows, tokens], torch.zeros_like(test_p[rows, tokens]))
    q = torch.where(drafted, nodes.refs[rows, tokens].to(p.dtype), torch.zeros_like(p))
    return ParentDrafts(tokens, p, q, drafted)


def _node_depths(windows: list[Window], device: torch.device) -> torch.Tensor:
    """(Q,) every window's drafts' depths below their roots, in node order (a verifier that reads them)."""
    return torch.as_tensor(np.concatenate([w.depth[w.node_slots] for w in windows]), device=device)


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


def _gather(values: torch.Tensor, samples: np.ndarray, slots: np.ndarray, index: torch.Tensor) -> torch.Tensor:
    """values[samples, slots] (values: (B, L, ...)): one sample's consecutive slots as a view; index
    holds the same samples and slots on the device (its first two lines) for the general case."""
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
