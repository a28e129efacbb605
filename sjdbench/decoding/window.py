"""What one decode knows between iterations, and the slots of one window forward.

`WindowState`: drafts waiting for verification, one entry per slot, as one object. Entry s holds the
draft for one segment position together with everything the loop knows about it: its position, its
reference q (the distribution it was drawn from), whether the init drafted it (one-hot q), and the
consecutive-growth flags it carried when it was proposed. Entries are appended, kept from a point
on, gathered by index or looked up by position, so a draft chain, a draft tree or several rows in
flight all keep their per-draft state aligned with one call.

`DecodeState`: the decided tokens, which of them are in the model's cache, and the pending drafts.

`Window`: the slots of one forward as a forest. A root slot holds a token that is already decided
(the last committed token, re-fed so that its logits predict the next position); every other slot
is a draft whose parent is the slot it follows. A chain is one root with one child per slot, a
draft tree is one root with several children per slot (siblings), rows in flight are one chain per
row. Each slot sees its ancestors only, which is the attention mask over the window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from sjdbench.decoding.processing import one_hot


@dataclass
class WindowState:
    drafts: torch.Tensor  # (S,) long
    refs: torch.Tensor  # (S, V) reference q of each draft
    fresh: np.ndarray  # (S,) bool on the host: drafted by the init (one-hot q) or drawn without model information
    grew: torch.Tensor  # (S,) bool: growth mask M on the draft when it was proposed
    eligible: torch.Tensor  # (S,) bool: its position had enough observations for M
    positions: np.ndarray = None  # (S,) int64 on the host: the segment position each draft is for

    def __post_init__(self) -> None:
        if self.positions is None:
            self.positions = np.zeros(self.drafts.numel(), dtype=np.int64)

    @staticmethod
    def empty(vocab_size: int, device: torch.device) -> WindowState:
        no = torch.zeros(0, dtype=torch.bool, device=device)
        return WindowState(
            torch.zeros(0, dtype=torch.long, device=device),
            torch.zeros(0, vocab_size, device=device),
            np.zeros(0, dtype=bool),
            no,
            no,
            np.zeros(0, dtype=np.int64),
        )

    @staticmethod
    def proposed(
        drafts: torch.Tensor,
        refs: torch.Tensor,
        positions: np.ndarray,
        grew: torch.Tensor | None = None,
        eligible: torch.Tensor | None = None,
    ) -> WindowState:
        """Drafts (S,) drawn by a proposal (not fresh) for `positions` (S,); growth flags default to False."""
        no = torch.zeros_like(drafts, dtype=torch.bool)
        return WindowState(
            drafts,
            refs,
            np.zeros(drafts.numel(), dtype=bool),
            no if grew is None else grew,
            no if eligible is None else eligible,
            np.asarray(positions, dtype=np.int64),
        )

    @staticmethod
    def drawn(drafts: torch.Tensor, refs: torch.Tensor, positions: np.ndarray, fresh: np.ndarray) -> WindowState:
        """Drafts drawn by the loop itself (a tree's extra siblings), with their references."""
        no = torch.zeros_like(drafts, dtype=torch.bool)
        return WindowState(drafts, refs, np.asarray(fresh, dtype=bool), no, no, np.asarray(positions, dtype=np.int64))

    def __len__(self) -> int:
        return int(self.drafts.numel())

    def append_fresh(
        self, drafts: torch.Tensor, positions: np.ndarray | list[int], refs: torch.Tensor | None = None
    ) -> WindowState:
        """Add init drafts (F,) for `positions` (F,) after the existing entries; their reference is
        `refs` (F, V) when the init drew them from a distribution, else one-hot."""
        no = torch.zeros_like(drafts, dtype=torch.bool)
        return WindowState(
            torch.cat([self.drafts, drafts]),
            torch.cat([self.refs, one_hot(drafts, self.refs.shape[-1]) if refs is None else refs]),
            np.concatenate([self.fresh, np.ones(drafts.numel(), dtype=bool)]),
            torch.cat([self.grew, no]),
            torch.cat([self.eligible, no]),
            np.concatenate([self.positions, np.asarray(positions, dtype=np.int64)]),
        )

    def concat(self, other: WindowState) -> WindowState:
        return WindowState(
            torch.cat([self.drafts, other.drafts]),
            torch.cat([self.refs, other.refs]),
            np.concatenate([self.fresh, other.fresh]),
            torch.cat([self.grew, other.grew]),
            torch.cat([self.eligible, other.eligible]),
            np.concatenate([self.positions, other.positions]),
        )

    def head(self, n: int) -> WindowState:
        """The first n entries."""
        return WindowState(
            self.drafts[:n], self.refs[:n], self.fresh[:n], self.grew[:n], self.eligible[:n], self.positions[:n]
        )

    def keep_from(self, m: int) -> WindowState:
        """The entries from m on (those not committed this iteration)."""
        return WindowState(
            self.drafts[m:], self.refs[m:], self.fresh[m:], self.grew[m:], self.eligible[m:], self.positions[m:]
        )

    def gather(self, index: np.ndarray | torch.Tensor) -> WindowState:
        """The entries at `index` (k,), in that order (one path of a tree, the rows still in flight)."""
        host = index.cpu().numpy() if isinstance(index, torch.Tensor) else np.asarray(index, dtype=np.int64)
        dev = torch.as_tensor(host, dtype=torch.long, device=self.drafts.device)
        return WindowState(
            self.drafts[dev], self.refs[dev], self.fresh[host], self.grew[dev], self.eligible[dev], self.positions[host]
        )

    def index_of(self, positions: np.ndarray | list[int]) -> np.ndarray:
        """(k,) entry index of each position, -1 where no draft waits for it."""
        lookup = {int(p): i for i, p in enumerate(self.positions)}
        return np.array([lookup.get(int(p), -1) for p in positions], dtype=np.int64)

    def sorted(self) -> WindowState:
        order = np.argsort(self.positions, kind="stable")
        return self if bool((order == np.arange(len(order))).all()) else self.gather(order)


@dataclass
class DecodeState:
    """One decode between iterations. `decided` tokens are known (committed to the cache, or emitted
    by the last iteration and re-fed by the next); `cached` ones have their keys and values in the
    model's cache. `pending` holds the drafts waiting at undecided positions."""

    tokens: torch.Tensor  # (N,) device: decided tokens, -1 elsewhere
    decided: np.ndarray  # (N,) bool host
    cached: np.ndarray  # (N,) bool host
    pending: WindowState
    layout: object  # SegmentLayout
    forced: torch.Tensor  # (N,) forced id or -1, on device

    @property
    def n_positions(self) -> int:
        return int(self.decided.shape[0])

    def frontier(self) -> int:
        """The first undecided position (N when the segment is complete)."""
        open_ = np.flatnonzero(~self.decided)
        return int(open_[0]) if open_.size else self.n_positions

    def done(self) -> bool:
        return bool(self.decided.all())


@dataclass
class Window:
    """One forward's L slots as a forest (see the module docstring)."""

    tokens: torch.Tensor  # (L,) device: slot inputs
    positions: np.ndarray  # (L,) host: segment position of each slot; its logits predict position + 1
    parent: np.ndarray  # (L,) host: parent slot, -1 for a root
    sibling: np.ndarray  # (L,) host: index among its parent's children (siblings are tested in this order)
    nodes: WindowState  # the draft slots (parent >= 0) in slot order
    commit_root: np.ndarray  # (L,) bool host: a root whose token enters the cache with this window
    emits: np.ndarray  # (L,) bool host: a root whose accepted path ends with an emitted token (residual or bonus)
    mask: torch.Tensor | None  # (L, L) bool: slot i sees slot j; None = the causal chain
    decided_now: list[int] = field(default_factory=list)  # positions the plan itself decided (forced anchors)
    in_flight: int = 1  # rows (chains that predict) in this window; a root that only enters the cache is not one

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    @cached_property
    def node_slots(self) -> np.ndarray:
        return np.flatnonzero(self.parent >= 0)

    @cached_property
    def node_of(self) -> np.ndarray:
        """(L,) host: each draft slot's row in `nodes`, -1 for roots."""
        node_of = np.full(len(self), -1, dtype=np.int64)
        node_of[self.node_slots] = np.arange(self.node_slots.size)
        return node_of

    @property
    def roots(self) -> np.ndarray:
        return np.flatnonzero(self.parent < 0)

    def children(self) -> list[list[int]]:
        """Child slots of each slot, in sibling order."""
        kids: list[list[int]] = [[] for _ in range(len(self))]
        for slot in range(len(self)):
            if self.parent[slot] >= 0:
                kids[self.parent[slot]].append(slot)
        for k in kids:
            k.sort(key=lambda s: self.sibling[s])
        return kids

    def depth(self) -> np.ndarray:
        """(L,) depth of each slot under its root (parents come before children in slot order)."""
        depth = np.zeros(len(self), dtype=np.int64)
        for slot in range(len(self)):
            if self.parent[slot] >= 0:
                depth[slot] = depth[self.parent[slot]] + 1
        return depth


def ancestor_mask(parent: np.ndarray, hidden_roots: np.ndarray | None = None) -> np.ndarray:
    """(L, L) bool: slot i sees itself and its ancestors (parents come before children in slot order).

    hidden_roots (L,) bool: roots whose keys are already in the cache; their descendants see that
    committed copy, so the re-fed window copy is hidden from them (a key seen twice would count twice
    in the attention softmax)."""
    L = parent.shape[0]
    mask = np.eye(L, dtype=bool)
    for slot in range(L):
        if parent[slot] >= 0:
            mask[slot] |= mask[parent[slot]]
    if hidden_roots is not None and hidden_roots.any():
        hidden = np.flatnonzero(hidden_roots)
        mask[:, hidden] = False
        mask[hidden, hidden] = True
    return mask
