"""The parts a decoder is built from: every interface the loop depends on, and the data they exchange.

A decoder = proposal x verifier x init x topology inside one loop (loop.py):
- `Topology`: the shape of the window. `plan` lays out the slots of one forward (which drafts, at
  which positions, who sees whom, which roots emit a token) and returns them as a `Window`; `verify`
  walks the window with the verifier's flags and returns a `Verdict` (chain, tree, rows).
- `Verifier`: says which drafts pass and what a rejected slot emits (exact, greedy, lantern, gsd).
- `Proposal`: turns the distributions past the commit point into next iteration's drafts and their
  references q (resample, coupled, vp, reuse).
- `Init`: drafts for positions that were never predicted (random, uniform, left, above, argmax_left);
  an init keeps whatever state it reads (a grid of guesses) itself and is told what happened.

Data flows one way: a part returns what it decides and never changes what it was given. A part is
built from its config dataclass (`PartConfig`: its knobs, written once) by `Part.build`; parts that
read the model (LANTERN's codebook, GSD's embeddings) override `build`. Optional hooks are methods of
the base classes with defaults, so the loop calls them unconditionally.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

import numpy as np
import torch

from sjdbench.decoding.state import Drafts

if TYPE_CHECKING:
    from sjdbench.adapter import SegmentLayout
    from sjdbench.decoding.history import ProbabilityHistory
    from sjdbench.decoding.randomness import Draws
    from sjdbench.decoding.state import PendingDrafts

KINDS = ("proposal", "verifier", "init", "topology")


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
class Carried:
    """The drafts waiting at the positions being re-proposed (S rows)."""

    drafts: torch.Tensor  # (S,) long; meaningless where has_old is False
    refs: torch.Tensor  # (S, V) their references q
    has_old: torch.Tensor  # (S,) bool: a draft waited there (the last slot of a window never has one)


@dataclass
class ProposalContext:
    """Where the S re-proposed rows stand; rows are grouped by sample (see `Draws`)."""

    samples: torch.Tensor  # (S,) batch row of each row's sample
    positions: torch.Tensor  # (S,) segment positions the new drafts are for
    history: ProbabilityHistory | None  # kept when the loop tracks growth or a part reads it
    growth: torch.Tensor | None  # (S, V) consecutive-growth mask M at these positions, or None
    draws: Draws  # uniforms, each row from its own sample's generator


class Proposal(Part[ConfigT]):
    history_depth: int = 0  # iterations of per-position probability history it reads (0: none)

    def propose(self, p: torch.Tensor, carried: Carried, ctx: ProposalContext) -> tuple[torch.Tensor, torch.Tensor]:
        """From target distributions p (S, V): next drafts (S,) and their references q (S, V), the
        distributions they are verified against next iteration."""
        raise NotImplementedError


# -- verifiers -----------------------------------------------------------------------------------


class Verifier(Part[ConfigT]):
    greedy: ClassVar[bool] = False  # the loop processes distributions at temperature 0 (Jacobi)

    def accept(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """p, q: (T, V); drafts, u: (T,) -> (T,) bool: which drafts pass, row by row."""
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
    reads_p: ClassVar[bool] = False  # wants `observe_p` (the loop skips gathering the rows otherwise)

    def begin(self, ctx: InitContext) -> Any:
        """The init's own state for a batch (None when it keeps none)."""
        return None

    def fill(
        self, state: Any, sample: int, positions: np.ndarray, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Drafts (F,) for never-predicted positions (F,) ascending of one sample, and the
        distributions they were drawn from (F, V), or None for deterministic drafts (one-hot q)."""
        raise NotImplementedError

    def observe(self, state: Any, samples: torch.Tensor, positions: torch.Tensor, tokens: torch.Tensor) -> None:
        """The current guess at these positions (decided tokens and new drafts) of these samples."""

    def observe_p(self, state: Any, samples: torch.Tensor, positions: torch.Tensor, p: torch.Tensor) -> None:
        """This iteration's distributions (T, V) at these positions."""

    def reset(self, state: Any, sample: int) -> None:
        """A new sample takes this batch row."""

    def retain(self, state: Any, samples: list[int]) -> Any:
        """The state of the kept batch rows, in this order."""
        return state


# -- topologies ----------------------------------------------------------------------------------


@dataclass
class SampleView:
    """One sample between iterations, as a topology's plan reads it (it changes nothing of it)."""

    row: int  # batch row
    tokens: torch.Tensor  # (N,) device: decided tokens, -1 elsewhere
    decided: np.ndarray  # (N,) bool host: known (committed, or emitted and re-fed next)
    cached: np.ndarray  # (N,) bool host: in the model's cache
    layout: SegmentLayout
    forced: torch.Tensor  # (N,) forced id or -1, on device
    legal: torch.Tensor  # (K,) legal image ids
    pending: PendingDrafts
    init: Init
    init_state: Any
    generator: torch.Generator
    vocab_size: int

    @property
    def n_positions(self) -> int:
        return int(self.decided.shape[0])

    def frontier(self) -> int:
        """The first undecided position (N when the segment is complete)."""
        open_ = np.flatnonzero(~self.decided)
        return int(open_[0]) if open_.size else self.n_positions

    def drafts(self, positions: np.ndarray) -> tuple[Drafts, Drafts]:
        """The drafts for `positions` (ascending): those waiting, the missing ones drafted by the init.
        Returns (all of them in position order, the newly drafted ones)."""
        positions = np.asarray(positions, dtype=np.int64)
        missing = self.pending.missing(self.row, positions)
        new_positions = positions[missing]
        if new_positions.size:
            tokens, refs = self.init.fill(self.init_state, self.row, new_positions, self.generator)
            fresh = Drafts.made(new_positions, tokens, refs, self.vocab_size, fresh=True)
        else:
            fresh = Drafts.made(new_positions, self.tokens[:0], None, self.vocab_size, fresh=True)
        if not missing.any():
            return self.pending.get(self.row, positions), fresh
        waiting = self.pending.get(self.row, positions[~missing])
        merged = Drafts.cat([waiting, fresh])
        order = np.argsort(merged.positions, kind="stable")
        return merged.select(order), fresh


@dataclass
class Window:
    """One forward's L slots of one sample, as a forest.

    A root slot holds a token that is already decided (the last committed one, re-fed so that its
    logits predict the next position); every other slot is a draft whose parent is the slot it
    follows. A chain is one root with one child per slot, a draft tree one root with several children
    per slot (siblings), rows in flight one chain per row. Each slot sees its ancestors only."""

    tokens: torch.Tensor  # (L,) device: slot inputs
    positions: np.ndarray  # (L,) host: segment position of each slot; its logits predict position + 1
    parent: np.ndarray  # (L,) host: parent slot, -1 for a root (parents come before children)
    sibling: np.ndarray  # (L,) host: index among its parent's children (siblings are tested in this order)
    depth: np.ndarray  # (L,) host: depth below its root
    nodes: Drafts  # the draft slots (parent >= 0), in slot order
    commit_root: np.ndarray  # (L,) bool host: a root whose token enters the cache with this window
    emits: np.ndarray  # (L,) bool host: a root whose accepted path ends with an emitted token
    mask: torch.Tensor | None  # (L, L) bool: slot i sees slot j; None = the causal chain
    filled: Drafts  # drafts the init made for this window (the loop keeps them waiting)
    decided: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # positions the plan
    # itself decided (forced row ends that anchor a row), with their forced tokens as slot inputs
    in_flight: int = 1  # rows that predict in this window (a root that only enters the cache is not one)

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    @property
    def node_slots(self) -> np.ndarray:
        return np.flatnonzero(self.parent >= 0)

    @functools.cached_property
    def node_of(self) -> np.ndarray:
        """(L,) each draft slot's row in `nodes`, -1 for roots."""
        index = np.full(len(self), -1, dtype=np.int64)
        slots = self.node_slots
        index[slots] = np.arange(slots.size)
        return index


@dataclass
class TestRows:
    """What each draft of a window is tested against (Q rows, one per draft slot, in slot order):
    its parent's distribution, or for a later sibling the residual left after the earlier ones."""

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
    carried: np.ndarray  # (S,) per source: the draft slot waiting at its target (carried over), or -1


class Topology(Part[ConfigT]):
    select: str = "first"  # accepted path: "first" (recursive rejection sampling) | "longest"

    def siblings(self) -> int:
        """The most children a draft slot can have (1 for chains and rows)."""
        return 1

    def span(self, layout: SegmentLayout, window: int) -> int:
        """The most positions between a sample's first undecided position and the last one it keeps
        drafts or history for (the rings of `PendingDrafts` and `ProbabilityHistory` are this long)."""
        return max(window, 1)

    def plan(self, sample: SampleView, window: int) -> Window:
        """The slots of the next forward (at most `window`); slot i predicts position positions[i] + 1."""
        raise NotImplementedError

    def test_rows(self, window: Window, p: torch.Tensor, verifier: Verifier) -> TestRows:
        """p (L, V): slot i's distribution over position positions[i] + 1 -> each draft's test row."""
        raise NotImplementedError

    def verify(
        self, window: Window, p: torch.Tensor, rows: TestRows, passed: np.ndarray, verifier: Verifier
    ) -> Verdict:
        """The walk over the window given which drafts passed their tests (Q,) (host)."""
        raise NotImplementedError
