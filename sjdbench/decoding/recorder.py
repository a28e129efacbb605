"""Per-sample decoding statistics (definitions in docs/ALGORITHMS.md §10): one recorder for a batch,
fed one `IterationRecord` per iteration; a finished sample's counters become its `DecodeStats`.

Counts the loop knows on the host (which drafts were tested and accepted) are numpy arrays over the
batch's samples; counts that depend on device-side flags (growth) are device tensors, read once when a
sample finishes, so recording adds no host sync.

Every window topology reports through the same counters. A *test* is one draft checked by the
verifier: in a chain the accepted prefix and the first rejected draft, in a tree every sibling tried
along the accepted path (siblings before the accepted one were rejected), in rows the same per row.
`slot_*` are indexed by a draft's depth below its root (the chain's window slot; a tree's depth; the
slot within a row), `sibling_*` by its index among siblings (trees), `row_*` by its grid row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

GROWTH = (
    "growth_eligible_accepted",  # accepted drafts with >= N+1 observations
    "growth_grew_accepted",  # ... of which rose over the last N iterations
    "growth_flagged_verified",  # verified drafts flagged M = 1
    "growth_flagged_accepted",
    "verify_eligible_accepted",  # the same share, with growth measured up to the verifying iteration's p
    "verify_grew_accepted",
)


@dataclass
class DecodeStats:
    """One sample's statistics (the fields of a samples.jsonl row, see `to_row`)."""

    window: int
    n_tokens: int  # generated positions, forced included (= AR's NFE)
    n_content: int  # sampled image tokens
    nfe: int = 0
    iterations: int = 0  # Jacobi iterations (forwards after the prefill)
    accepted: int = 0  # drafts accepted (content slots only)
    verified: int = 0  # drafts tested: every slot up to and including the first rejection
    accepted_no_fresh: int = 0
    verified_no_fresh: int = 0
    accept_len_hist: list[int] = field(default_factory=list)  # [m] = iterations that decided m tokens
    slot_accepted: list[int] = field(default_factory=list)  # [j] = accepted drafts at depth j + 1
    slot_verified: list[int] = field(default_factory=list)
    sibling_accepted: list[int] = field(default_factory=list)  # [k] = accepted drafts that were sibling k
    sibling_verified: list[int] = field(default_factory=list)
    row_accepted: list[int] = field(default_factory=list)  # [r] = accepted drafts in grid row r
    row_verified: list[int] = field(default_factory=list)
    slots_fed: int = 0  # window slots over all forwards (roots included)
    rows_in_flight: list[int] = field(default_factory=list)  # [k] = iterations whose window held k rows
    growth: dict[str, int] = field(default_factory=dict)  # the GROWTH counters
    trajectories: list = field(default_factory=list)  # committed tokens' probability trajectories
    draft_traces: list = field(default_factory=list)  # every verified draft's trajectory (when traced)

    def to_row(self) -> dict:
        """Plain JSON-able dict for samples.jsonl."""
        ratio = lambda a, b: (a / b) if b else None  # noqa: E731
        hist = _trim(self.accept_len_hist)
        row = {
            "nfe": self.nfe,
            "n_tokens": self.n_tokens,
            "n_content": self.n_content,
            "iterations": self.iterations,
            "step_compression": self.n_tokens / self.nfe,
            "accepted": self.accepted,
            "verified": self.verified,
            "accepted_no_fresh": self.accepted_no_fresh,
            "verified_no_fresh": self.verified_no_fresh,
            "acceptance_rate": ratio(self.accepted, self.verified),
            "acceptance_rate_no_fresh": ratio(self.accepted_no_fresh, self.verified_no_fresh),
            "mean_accepted_length": ratio(float(sum(m * c for m, c in enumerate(hist))), self.iterations),
            "accept_len_hist": hist,
            "slot_accepted": self.slot_accepted,
            "slot_verified": self.slot_verified,
            "sibling_accepted": self.sibling_accepted,
            "sibling_verified": self.sibling_verified,
            "row_accepted": self.row_accepted,
            "row_verified": self.row_verified,
            "slots_fed": self.slots_fed,
            "rows_in_flight": _trim(self.rows_in_flight),
            **{key: int(self.growth.get(key, 0)) for key in GROWTH},
            "trajectories": self.trajectories,
        }
        row["growth_share"] = ratio(row["growth_grew_accepted"], row["growth_eligible_accepted"])
        row["growth_share_at_verify"] = ratio(row["verify_grew_accepted"], row["verify_eligible_accepted"])
        row["growth_precision"] = ratio(row["growth_flagged_accepted"], row["growth_flagged_verified"])
        row["slots_per_forward"] = ratio(self.slots_fed, self.iterations)
        return row


def _trim(counts: list[int]) -> list[int]:
    """Up to the last non-zero entry (at least one entry)."""
    last = max((i for i, c in enumerate(counts) if c), default=0)
    return list(counts[: last + 1])


@dataclass
class Tests:
    """The drafts the verifier decided on in one iteration, all samples together (T tests)."""

    sample: np.ndarray  # (T,) int64 host: batch row of the sample
    depth: np.ndarray  # (T,) >= 1
    sibling: np.ndarray  # (T,) index among its parent's children
    row: np.ndarray  # (T,) grid row, -1 at forced positions
    accepted: np.ndarray  # (T,) bool
    content: np.ndarray  # (T,) bool: a content position (forced drafts are not counted)
    fresh: np.ndarray  # (T,) bool


@dataclass
class IterationRecord:
    """What one iteration did, for every sample that took part (B samples of the batch)."""

    samples: np.ndarray  # (B,) batch rows
    decided: np.ndarray  # (B,) tokens decided this iteration
    slots: np.ndarray  # (B,) window slots fed
    in_flight: np.ndarray  # (B,) rows in flight (1 for chains and trees)
    tests: Tests


class Recorder:
    """The statistics of every sample of a batch (one row per batch slot)."""

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
        self.shape = {
            "accept_len_hist": n_tokens + 1,
            "slot_accepted": max(window - 1, 1),
            "slot_verified": max(window - 1, 1),
            "sibling_accepted": max(siblings, 1),
            "sibling_verified": max(siblings, 1),
            "row_accepted": grid_rows,
            "row_verified": grid_rows,
            "rows_in_flight": window + 1,
        }
        self.scalars = (
            "nfe",
            "iterations",
            "accepted",
            "verified",
            "accepted_no_fresh",
            "verified_no_fresh",
            "slots_fed",
        )
        self._allocate(batch)

    def _allocate(self, batch: int) -> None:
        self.counts = {key: np.zeros(batch, dtype=np.int64) for key in self.scalars}
        self.arrays = {key: np.zeros((batch, width), dtype=np.int64) for key, width in self.shape.items()}
        self.growth = np.zeros((batch, len(GROWTH)), dtype=np.int64)
        self.trajectories: list[list] = [[] for _ in range(batch)]
        self.draft_traces: list[list] = [[] for _ in range(batch)]

    def start(self, sample: int) -> None:
        """A new sample takes this batch row: its counters start at zero."""
        for value in self.counts.values():
            value[sample] = 0
        for array in self.arrays.values():
            array[sample] = 0
        self.growth[sample] = 0
        self.trajectories[sample], self.draft_traces[sample] = [], []

    def prefill(self, samples: list[int]) -> None:
        self.counts["nfe"][samples] += 1

    def record(self, record: IterationRecord) -> None:
        c, a, s = self.counts, self.arrays, record.samples
        c["nfe"][s] += 1
        c["iterations"][s] += 1
        c["slots_fed"][s] += record.slots
        a["accept_len_hist"][s, record.decided] += 1  # one entry per sample: no repeated index
        a["rows_in_flight"][s, np.minimum(record.in_flight, self.shape["rows_in_flight"] - 1)] += 1
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
        slot = np.minimum(t.depth - 1, self.shape["slot_verified"] - 1)
        sib = np.minimum(t.sibling, self.shape["sibling_verified"] - 1)
        grid = t.row >= 0
        for name, index, keep in (("slot", slot, None), ("sibling", sib, None), ("row", t.row, grid)):
            width = self.shape[f"{name}_verified"]
            if not width:
                continue
            cell = t.sample * width + index
            if keep is not None:
                cell, ver, ac = cell[keep], verified[keep], acc[keep]
            else:
                ver, ac = verified, acc
            a[f"{name}_verified"] += (
                np.bincount(cell, ver, minlength=batch * width).astype(np.int64).reshape(batch, width)
            )
            a[f"{name}_accepted"] += (
                np.bincount(cell, ac, minlength=batch * width).astype(np.int64).reshape(batch, width)
            )

    def record_growth(self, sample: np.ndarray, accepted: np.ndarray, verified: np.ndarray, flags: np.ndarray) -> None:
        """Growth counters of T tests (host arrays): flags (T, 4) = M on the draft when proposed and
        whether its position then had enough observations, M up to and including the verifying
        iteration and its observations."""
        eligible, grew, grew_verify, eligible_verify = (flags[:, i].astype(bool) for i in range(4))
        counts = np.stack(
            [
                eligible & accepted,
                eligible & grew & accepted,
                grew & verified,
                grew & accepted,
                eligible_verify & accepted,
                eligible_verify & grew_verify & accepted,
            ]
        )
        batch = self.growth.shape[0]
        for k, values in enumerate(counts):
            self.growth[:, k] += np.bincount(sample, values, minlength=batch).astype(np.int64)

    def finish(self, sample: int) -> DecodeStats:
        growth = self.growth[sample].tolist()
        # keyword arguments by field name: the int counters, then the list ones
        counts: dict[str, Any] = {key: int(value[sample]) for key, value in self.counts.items()}
        arrays: dict[str, Any] = {key: value[sample].tolist() for key, value in self.arrays.items()}
        return DecodeStats(
            self.window,
            self.n_tokens,
            self.n_content,
            **counts,
            **arrays,
            growth=dict(zip(GROWTH, growth)),
            trajectories=self.trajectories[sample],
            draft_traces=self.draft_traces[sample],
        )

    def retain(self, samples: list[int]) -> None:
        self.counts = {key: value[samples] for key, value in self.counts.items()}
        self.arrays = {key: value[samples] for key, value in self.arrays.items()}
        self.growth = self.growth[samples]
        self.trajectories = [self.trajectories[i] for i in samples]
        self.draft_traces = [self.draft_traces[i] for i in samples]
