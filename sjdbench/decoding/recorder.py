"""Per-sample decoding statistics (definitions in docs/ALGORITHMS.md §10): one recorder for a batch,
fed one `IterationRecord` per iteration; a finished sample's counters become its `DecodeStats`.

Which counters a sample has is the statistics table's (sjdbench/statistics_table.py: every counter
and histogram, with what indexes it); this module holds the code that counts them. Counts the loop
knows on the host (which drafts were tested and accepted) are numpy arrays over the batch; the growth
flags are computed on the device and reach the recorder with the next host sync (`GrowthFlags`), so
recording adds no sync of its own.

Every window topology reports through the same counters. A *test* is one draft checked by the
verifier: in a chain the accepted prefix and the first rejected draft, in a tree every sibling tried
along the accepted path (siblings before the accepted one were rejected), in rows the same per row.
`slot_*` are indexed by a draft's depth below its root (the chain's window slot; a tree's depth; the
slot within a row), `sibling_*` by its index among siblings (trees), `row_*` by its grid row.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from sjdbench.statistics_table import counters, histograms, sample_row


@dataclass
class DecodeStats:
    """One sample's statistics: the fields of its samples.jsonl row (`to_row`). Its counters are read
    by name: `stats.nfe`, `stats.accept_len_hist`."""

    window: int
    n_tokens: int  # generated positions, forced included (= AR's NFE)
    n_content: int  # sampled image tokens
    counts: dict[str, int] = field(default_factory=dict)  # the table's counters
    histograms: dict[str, list[int]] = field(default_factory=dict)  # the table's histograms, full width
    trajectories: list = field(default_factory=list)  # committed tokens' probability trajectories
    draft_traces: list = field(default_factory=list)  # every verified draft's trajectory (when traced)

    def __getattr__(self, name: str) -> Any:
        for table in ("counts", "histograms"):
            values = self.__dict__.get(table) or {}
            if name in values:
                return values[name]
        raise AttributeError(f"{type(self).__name__} has no field or counter {name!r}")

    def to_row(self) -> dict:
        """Plain JSON-able dict for samples.jsonl: the counters and the per-sample statistics (the
        statistics table says which), then the trajectories."""
        facts = {"n_tokens": self.n_tokens, "n_content": self.n_content}
        return {**sample_row({**facts, **self.counts, **self.histograms}), "trajectories": self.trajectories}


@dataclass
class TestedDrafts:
    """The drafts the verifier decided on in one iteration, all samples together (T tests)."""

    sample: np.ndarray  # (T,) int64 host: batch index of the sample
    depth: np.ndarray  # (T,) >= 1
    sibling: np.ndarray  # (T,) index among its parent's children
    grid_row: np.ndarray  # (T,) grid row of its position, -1 at forced positions
    accepted: np.ndarray  # (T,) bool
    content: np.ndarray  # (T,) bool: a content position (forced drafts are not counted)
    fresh: np.ndarray  # (T,) bool


@dataclass
class GrowthFlags:
    """The growth flags of one iteration's tests: computed on the device, brought to the host by the
    next iteration's one sync (`read`), then recorded."""

    sample: np.ndarray  # (T,) batch index of each test
    accepted: np.ndarray  # (T,) bool: accepted at a content position
    counted: np.ndarray  # (T,) bool: at a content position
    flags: torch.Tensor  # (T, 4) bool device: M when proposed, enough observations then; M and enough
    # observations up to and including the verifying iteration
    host: np.ndarray | None = None  # (T, 4) the flags, once read

    def read(self, host: np.ndarray) -> GrowthFlags:
        """These flags with their values read on the host (host: the T * 4 values, flat)."""
        return replace(self, host=np.asarray(host).reshape(-1, 4))


@dataclass
class IterationRecord:
    """What one iteration did, for every sample that took part (B samples of the batch)."""

    samples: np.ndarray  # (B,) batch indices
    decided: np.ndarray  # (B,) tokens decided this iteration
    slots: np.ndarray  # (B,) window slots fed
    in_flight: np.ndarray  # (B,) rows in flight (1 for chains and trees)
    tests: TestedDrafts
    growth: GrowthFlags | None = None  # the previous iteration's growth flags, read by this iteration's sync
    trajectories: list[tuple[int, dict]] = field(default_factory=list)  # (batch index, trajectory) of decided
    # traced positions
    draft_traces: list[tuple[int, dict]] = field(default_factory=list)  # (batch index, trace) of tested drafts
    drafter_forwards: np.ndarray | None = None  # (B,) drafter forwards each sample's drafting ran (None: no drafter)


class Recorder:
    """The statistics of every sample of a batch (one entry per batch index)."""

    def __init__(
        self,
        batch: int,
        window: int,
        n_tokens: int,
        n_content: int,
        grid_rows: int,
        siblings: int,
        device: torch.device,
    ) -> None:
        self.window, self.n_tokens, self.n_content = window, n_tokens, n_content
        self.device = device
        width = {  # what indexes a histogram -> its width in this decode
            "decided": n_tokens + 1,
            "depth": max(window - 1, 1),
            "sibling": max(siblings, 1),
            "grid_row": grid_rows,
            "rows_in_flight": window + 1,
        }
        self.width = {h.name: width[h.by] for h in histograms()}
        self._allocate(batch)

    def _allocate(self, batch: int) -> None:
        self.counts = {c.name: np.zeros(batch, dtype=np.int64) for c in counters()}
        self.histograms = {name: np.zeros((batch, width), dtype=np.int64) for name, width in self.width.items()}
        self.trajectories: list[list] = [[] for _ in range(batch)]
        self.draft_traces: list[list] = [[] for _ in range(batch)]

    def start(self, sample: int) -> None:
        """A new sample takes this batch index: its counters start at zero, but for its prefill forward."""
        for value in self.counts.values():
            value[sample] = 0
        for array in self.histograms.values():
            array[sample] = 0
        self.counts["nfe"][sample] = 1
        self.trajectories[sample], self.draft_traces[sample] = [], []

    def record(self, record: IterationRecord) -> None:
        c, h, s = self.counts, self.histograms, record.samples
        c["nfe"][s] += 1
        c["iterations"][s] += 1
        c["slots_fed"][s] += record.slots
        if record.drafter_forwards is not None:
            c["drafter_forwards"][s] += record.drafter_forwards
        h["accept_len_hist"][s, record.decided] += 1  # one entry per sample: no repeated index
        h["rows_in_flight"][s, np.minimum(record.in_flight, self.width["rows_in_flight"] - 1)] += 1
        if record.growth is not None:
            self.record_growth(record.growth)
        for b, trajectory in record.trajectories:
            self.trajectories[b].append(trajectory)
        for b, trace in record.draft_traces:
            self.draft_traces[b].append(trace)
        t = record.tests
        if t.sample.size == 0:
            return
        batch = len(c["nfe"])
        verified = t.content
        acc = t.accepted & verified
        old = ~t.fresh
        for key, values in (
            ("verified", verified),
            ("accepted", acc),
            ("verified_no_fresh", verified & old),
            ("accepted_no_fresh", acc & old),
        ):
            c[key] += np.bincount(t.sample, values, minlength=batch).astype(np.int64)
        slot = np.minimum(t.depth - 1, self.width["slot_verified"] - 1)
        sib = np.minimum(t.sibling, self.width["sibling_verified"] - 1)
        grid = t.grid_row >= 0
        for name, index, keep in (("slot", slot, None), ("sibling", sib, None), ("row", t.grid_row, grid)):
            width = self.width[f"{name}_verified"]
            if not width:
                continue
            cell = t.sample * width + index
            if keep is not None:
                cell, ver, ac = cell[keep], verified[keep], acc[keep]
            else:
                ver, ac = verified, acc
            h[f"{name}_verified"] += (
                np.bincount(cell, ver, minlength=batch * width).astype(np.int64).reshape(batch, width)
            )
            h[f"{name}_accepted"] += (
                np.bincount(cell, ac, minlength=batch * width).astype(np.int64).reshape(batch, width)
            )

    def record_growth(self, growth: GrowthFlags) -> None:
        """Growth counters of T tests, from their flags read on the host."""
        assert growth.host is not None  # recorded once read
        eligible, grew, grew_verify, eligible_verify = (growth.host[:, i].astype(bool) for i in range(4))
        accepted, verified = growth.accepted, growth.counted
        batch = len(self.counts["nfe"])
        for key, values in (
            ("growth_eligible_accepted", eligible & accepted),
            ("growth_grew_accepted", eligible & grew & accepted),
            ("growth_flagged_verified", grew & verified),
            ("growth_flagged_accepted", grew & accepted),
            ("verify_eligible_accepted", eligible_verify & accepted),
            ("verify_grew_accepted", eligible_verify & grew_verify & accepted),
        ):
            self.counts[key] += np.bincount(growth.sample, values, minlength=batch).astype(np.int64)

    def finish(self, sample: int) -> DecodeStats:
        return DecodeStats(
            self.window,
            self.n_tokens,
            self.n_content,
            {key: int(value[sample]) for key, value in self.counts.items()},
            {key: value[sample].tolist() for key, value in self.histograms.items()},
            self.trajectories[sample],
            self.draft_traces[sample],
        )

    def retain(self, samples: list[int]) -> None:
        self.counts = {key: value[samples] for key, value in self.counts.items()}
        self.histograms = {key: value[samples] for key, value in self.histograms.items()}
        self.trajectories = [self.trajectories[i] for i in samples]
        self.draft_traces = [self.draft_traces[i] for i in samples]
