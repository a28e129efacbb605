"""The parts a decoder is built from: every interface the loop depends on, and the data they exchange.

A decoder = proposal x verifier x init x topology inside one loop (loop.py):
- `Topology`: the shape of the window. `plan` lays out the slots of one forward (at which positions,
  who sees whom, which roots emit a token) and names the positions whose drafts they hold, as a
  `Layout`; once the loop has those drafts, `place` puts them in the slots and returns the `Window`;
  `verify` walks the window with the verifier's flags and returns a `Verdict` (chain, tree, rows).
- `Verifier`: says which drafts pass and what a rejected slot emits (exact, greedy, lantern, gsd).
- `Proposal`: turns the distributions past the commit point into next iteration's drafts and their
  references q (resample, coupled, vp, reuse).
- `Init`: drafts for positions that were never predicted (random, uniform, left, above, argmax_left).
  It reads a sample's current guesses (decided tokens, waiting drafts) from the loop; an init that
  reads the distributions keeps them itself and is told them once per iteration (`observe_p`).

Data flows one way: a part returns what it decides and never changes what it was given; the loop
alone keeps the state between iterations. A part is built from its config dataclass (`PartConfig`:
its knobs with their defaults and a comment each, written once) by `Part.build`; parts that read the
model (LANTERN's codebook, GSD's embeddings) override `build`. Optional hooks are methods of the
base classes with defaults, so the loop calls them unconditionally.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

import numpy as np
import torch

from sjdbench.decoding.state import Drafts

if TYPE_CHECKING:
    from sjdbench.adapter import SegmentLayout
    from sjdbench.decoding.history import ProbabilityHistory
    from sjdbench.decoding.randomness import Draws
    from sjdbench.decoding.state import PendingDrafts


@dataclass
class PartConfig:
    """Base of every part's knobs; subclasses add typed fields with defaults."""

    symbols: ClassVar[dict[str, str]] = {}  # short knob names for run labels, e.g. {"delta": "δ"}
    subparts: ClassVar[dict[str, str]] = {}  # knobs that name another part: knob -> kind (VP's inner)

    def check(self) -> None:
        """Raise UserError (message without the key prefix) for values out of range."""

    def model_notes(self, layout: SegmentLayout, where: str) -> list[str]:
        """A line per knob that is legal but does nothing on images of this layout (known once the
        model is built); `where` is the knob's key prefix, e.g. decoder.topology."""
        return []

    def unused(self) -> set[str]:
        """Knobs the current settings make irrelevant: they neither enter the run id nor the label."""
        return set()


@dataclass
class NoKnobs(PartConfig):
    """The config of a part without knobs."""


ConfigT = TypeVar("ConfigT", bound=PartConfig)


class Part(Generic[ConfigT]):
    """Base of every part: it holds its config and reads its knobs from there. `Config` is the class
    of its config (ConfigT, the type its methods read)."""

    Config: ClassVar[type[PartConfig]] = NoKnobs
    config: ConfigT

    def __init__(self, config: ConfigT | None = None) -> None:
        self.config = config if config is not None else cast(ConfigT, self.Config())

    @classmethod
    def build(cls, config: ConfigT, model: Any = None, **children: Any) -> Part[ConfigT]:
        """The part for a resolved config (the registry's one call); `model` is the adapter, for parts
        that read model data, and `children` the built nested parts (VP's inner proposal)."""
        return cls(config, **children)

    @classmethod
    def lossless(cls, config: ConfigT, **children: bool) -> bool:
        """Whether this part, with these knobs (and nested parts' claims), keeps AR's distribution.
        Lossy unless a part says otherwise: losslessness is a claim that needs a proof."""
        return False

    def resolved(self) -> dict[str, Any]:
        """Settings decided when the part was built (e.g. GSD's model-specific threshold), for env.json."""
        return {}


# -- proposals -----------------------------------------------------------------------------------


@dataclass
class WaitingDrafts:
    """The drafts waiting at the S positions being re-proposed (the coupling may keep them)."""

    drafts: torch.Tensor  # (S,) long; meaningless where has_old is False
    refs: torch.Tensor  # (S, V) their references q
    has_old: torch.Tensor  # (S,) bool: a draft waited there (the last slot of a window never has one)


@dataclass
class ProposalContext:
    """Where the S re-proposed positions stand, grouped by sample (see `Draws`)."""

    samples: torch.Tensor  # (S,) batch index of each one's sample
    positions: torch.Tensor  # (S,) segment positions the new drafts are for
    history: ProbabilityHistory | None  # kept when the loop tracks growth or a part reads it
    growth: torch.Tensor | None  # (S, V) consecutive-growth mask M at these positions, or None
    draws: Draws  # uniforms, each from its own sample's generator
    keys: torch.Tensor | None = None  # (S,) long, host: each one's sample key (`Proposal.reads_sample_key`)


class Proposal(Part[ConfigT]):
    history_depth: int = 0  # iterations of per-position probability history it reads (0: none)

    @property
    def reads_sample_key(self) -> bool:
        """Whether it reads `ProposalContext.keys`: one number per sample, drawn from the sample's
        generator once, after its first token, so that noise keyed by (sample, position) differs
        between samples that share a generator (decodes one after another)."""
        return False

    # Whether `propose` is a row-wise function of p, the waiting drafts and one uniform per row
    # (`ctx.draws.uniform(1)`), reading no sample key: then a chain may call it over every slot of a
    # fixed-shape window and keep the proposing ones (sjdbench.decoding.chain_step).
    rowwise: bool = False

    def propose(
        self, p: torch.Tensor, waiting: WaitingDrafts, ctx: ProposalContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """From target distributions p (S, V): next drafts (S,) and their references q (S, V), the
        distributions they are verified against next iteration."""
        raise NotImplementedError


# -- verifiers -----------------------------------------------------------------------------------


@dataclass
class ParentDrafts:
    """For each tested draft, what its parent slot holds: the token, and when the parent is itself a
    draft, its tested p and q at that token (a verifier that judges consecutive drafts together)."""

    tokens: torch.Tensor  # (T,) the parent slot's token
    p: torch.Tensor  # (T,) the parent draft's tested p at its token (0 where the parent is a root)
    q: torch.Tensor  # (T,) its reference q at its token (0 where the parent is a root)
    drafted: torch.Tensor  # (T,) bool: the parent is a draft (not a decided root)


class Verifier(Part[ConfigT]):
    greedy: ClassVar[bool] = False  # the loop processes distributions at temperature 0 (Jacobi)
    reads_parent: ClassVar[bool] = False  # accept also gets `parent`: ParentDrafts of each draft's parent slot
    # the rule depends on how deep a draft sits below its root: accept and replacement then also get
    # `depth` (T,) / (E,) long, each draft's depth (1 = the first draft after the root)
    reads_depth: ClassVar[bool] = False

    def accept(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """p, q: (T, V); drafts, u: (T,) -> (T,) bool: which drafts pass, each against its own p and q."""
        raise NotImplementedError

    def replacement(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        """(E, V) distribution of the token emitted where each draft (E,) was rejected (p, q: (E, V))."""
        raise NotImplementedError


# -- inits ---------------------------------------------------------------------------------------


@dataclass
class InitContext:
    """What an init may read about the model, for a batch of `batch` samples."""

    layout: SegmentLayout
    forced: torch.Tensor  # (N,) forced id or -1, on device
    legal: torch.Tensor  # (K,) legal image ids
    left_of: np.ndarray  # (N,) host: position of each position's left grid neighbour, -1 if none
    above_of: np.ndarray  # (N,) host: the same for the neighbour above
    vocab_size: int
    dtype: torch.dtype  # of the distributions (references an init states)
    batch: int


class Init(Part[ConfigT]):
    reads_p: ClassVar[bool] = False  # wants `observe_p` (the loop skips gathering the distributions otherwise)

    def begin(self, ctx: InitContext) -> Any:
        """The init's own state for a batch (None when it keeps none)."""
        return None

    def fill(self, state: Any, sample: SampleView, positions: np.ndarray) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Drafts (F,) for never-predicted positions (F,) ascending of one sample, and the
        distributions they were drawn from (F, V), or None for deterministic drafts (one-hot q).
        It may read the sample's current guesses (`SampleView.guess`) and draw from its generator;
        it changes nothing (the loop keeps the drafts waiting)."""
        raise NotImplementedError

    def observe_p(self, state: Any, samples: torch.Tensor, positions: torch.Tensor, p: torch.Tensor) -> None:
        """This iteration's distributions (T, V) at these positions of these samples (batch indices)."""

    def reset(self, state: Any, sample: int) -> None:
        """A new sample takes this batch index."""

    def retain(self, state: Any, samples: list[int]) -> Any:
        """The state of the kept batch indices, in this order."""
        return state


# -- topologies ----------------------------------------------------------------------------------


@dataclass
class SampleView:
    """One sample between iterations, as a topology's plan and an init read it (they change nothing of it)."""

    index: int  # its batch index
    tokens: torch.Tensor  # (N,) device: decided tokens, -1 elsewhere
    decided: np.ndarray  # (N,) bool host: known (committed, or emitted and re-fed next)
    cached: np.ndarray  # (N,) bool host: in the model's cache
    layout: SegmentLayout
    forced: torch.Tensor  # (N,) forced id or -1, on device
    legal: torch.Tensor  # (K,) legal image ids
    pending: PendingDrafts  # the drafts waiting in the batch
    generator: torch.Generator  # the sample's own random numbers
    # (N,) host: tokens decided by the iteration that decided each position (0: undecided); an
    # adaptive topology reads how easy a region was from its decided neighbours
    run: np.ndarray | None = None
    neighbours: tuple[np.ndarray, np.ndarray] | None = None  # (left_of, above_of) (N,) grid neighbours, -1: none

    @property
    def n_positions(self) -> int:
        return int(self.decided.shape[0])

    def frontier(self) -> int:
        """The first undecided position (N when the segment is complete)."""
        open_ = np.flatnonzero(~self.decided)
        return int(open_[0]) if open_.size else self.n_positions

    def guess(self, positions: np.ndarray) -> torch.Tensor:
        """(k,) device: the current guess at these positions: the decided token, else the draft waiting
        there, else -1 (never predicted)."""
        guesses = self.tokens[torch.as_tensor(positions, device=self.tokens.device)]
        waiting = ~self.decided[positions] & ~self.pending.missing(self.index, positions)
        if not waiting.any():
            return guesses
        guesses[torch.as_tensor(np.flatnonzero(waiting), device=guesses.device)] = self.pending.tokens_at(
            self.index, positions[waiting]
        )
        return guesses


@dataclass
class Layout:
    """One forward's L slots of one sample, as a forest, before its drafts are known.

    A root slot holds a token that is already decided (the last committed one, re-fed so that its
    logits predict the next position); every other slot is a draft whose parent is the slot it
    follows. A chain is one root with one child per slot, a draft tree one root with several children
    per slot (siblings), rows in flight one chain per row. Each slot sees its ancestors only. The
    drafts the slots hold are those for `wanted`: waiting ones, or fresh ones from the init."""

    positions: np.ndarray  # (L,) host: segment position of each slot; its logits predict position + 1
    parent: np.ndarray  # (L,) host: parent slot, -1 for a root (parents come before children)
    sibling: np.ndarray  # (L,) host: index among its parent's children (siblings are tested in this order)
    depth: np.ndarray  # (L,) host: depth below its root
    roots: torch.Tensor  # (R,) device: the tokens the root slots re-feed, in slot order
    commit_root: np.ndarray  # (L,) bool host: a root whose token enters the cache with this window
    emits: np.ndarray  # (L,) bool host: a root whose accepted path ends with an emitted token
    mask: torch.Tensor | None  # (L, L) bool: slot i sees slot j; None = the causal chain
    wanted: np.ndarray  # (D,) ascending: the positions whose drafts the slots hold
    decided: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # positions the plan
    # itself decided (forced row ends that anchor a row), with their forced tokens as root inputs
    in_flight: int = 1  # rows that predict in this window (a root that only enters the cache is not one)

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    @property
    def root_slots(self) -> np.ndarray:
        return np.flatnonzero(self.parent < 0)

    @property
    def node_slots(self) -> np.ndarray:
        """The draft slots (parent >= 0), in slot order."""
        return np.flatnonzero(self.parent >= 0)

    @functools.cached_property
    def node_of(self) -> np.ndarray:
        """(L,) each draft slot's index in the window's `nodes`, -1 for roots."""
        index = np.full(len(self), -1, dtype=np.int64)
        slots = self.node_slots
        index[slots] = np.arange(slots.size)
        return index

    def placed(self, tokens: torch.Tensor, nodes: Drafts) -> Window:
        """The window of this layout whose slots hold `tokens` (L,), its draft slots `nodes`."""
        return Window(**{f.name: getattr(self, f.name) for f in fields(Layout)}, tokens=tokens, nodes=nodes)


@dataclass
class Window(Layout):
    """A layout with its drafts in place: what one forward feeds."""

    tokens: torch.Tensor = field(kw_only=True)  # (L,) device: slot inputs
    nodes: Drafts = field(kw_only=True)  # the draft slots' drafts (parent >= 0), in slot order


@dataclass
class TestDistributions:
    """What each draft of a window is tested against (Q distributions, one per draft slot, in slot
    order): its parent's distribution, or for a later sibling the residual left after the earlier ones."""

    p: torch.Tensor  # (Q, V)
    last: torch.Tensor  # (L, V) per slot: what its last child was tested against (its p without siblings)
    fails: torch.Tensor | None = None  # (Q,) drafts that fail whatever their test says (a reading's rule)


@dataclass
class Verdict:
    """What one window's verification decided (slots index the window)."""

    accepted: np.ndarray  # (A,) accepted draft slots, root by root, top down
    tested: np.ndarray  # (T,) draft slots the verifier decided on, in walk order
    emit_slots: np.ndarray  # (E,) per emitting root: the slot where its walk ended
    emit_base: torch.Tensor  # (E, V) the distribution the emitted token comes from (a bonus: the slot's p) ...
    emit_rejected: np.ndarray  # (E,) ... or, where a draft was rejected there (node index), its residual
    realized: np.ndarray  # (R,) the slots whose p is this iteration's observation (distinct targets)
    sources: np.ndarray  # (S,) slots whose p proposes the next drafts, one per target position
    waiting: np.ndarray  # (S,) per source: the draft slot holding the draft that waits at its target, or -1


class Topology(Part[ConfigT]):
    select: str = "first"  # accepted path: "first" (recursive rejection sampling) | "longest"

    def siblings(self) -> int:
        """The most children a draft slot can have (1 for chains and rows)."""
        return 1

    def span(self, layout: SegmentLayout, window: int) -> int:
        """The most positions between a sample's first undecided position and the last one it keeps
        drafts or history for (the rings of `PendingDrafts` and `ProbabilityHistory` are this long)."""
        return max(window, 1)

    def useful_window(self, layout: SegmentLayout) -> int:
        """The most slots one forward can use on this layout: a larger window decodes the same tokens
        (the config's range checks clamp the window to it). Every topology must say: a window past
        what a forward can use only allocates caches for slots that are never fed."""
        raise NotImplementedError(f"{type(self).__name__} does not say how many slots a forward can use")

    def longest_stay(self, window: int) -> int | None:
        """The most iterations a position stays in a window of `window` slots before it is decided
        (it is observed at most this often); None when no bound is known."""
        return None

    def plan(self, sample: SampleView, window: int) -> Layout:
        """The slots of the next forward (at most `window`); slot i predicts position positions[i] + 1."""
        raise NotImplementedError

    def place(self, layout: Layout, drafts: Drafts, sample: SampleView) -> Window:
        """The window with its drafts in place: every draft slot holds the draft for its position
        (`drafts`: one per wanted position, ascending)."""
        nodes = drafts.select(np.searchsorted(drafts.positions, layout.positions[layout.node_slots]))
        device = layout.roots.device
        tokens = torch.zeros(len(layout), dtype=torch.long, device=device)
        tokens[torch.as_tensor(layout.root_slots, device=device)] = layout.roots
        tokens[torch.as_tensor(layout.node_slots, device=device)] = nodes.tokens
        return layout.placed(tokens, nodes)

    def test_distributions(self, window: Window, p: torch.Tensor, verifier: Verifier) -> TestDistributions:
        """p (L, V): slot i's distribution over position positions[i] + 1 -> what each draft is tested against."""
        raise NotImplementedError

    def verify(
        self, window: Window, p: torch.Tensor, tests: TestDistributions, passed: np.ndarray, verifier: Verifier
    ) -> Verdict:
        """The walk over the window given which drafts passed their tests (Q,) (host)."""
        raise NotImplementedError
