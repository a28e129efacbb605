"""Per-sample decoding statistics (definitions in docs/ALGORITHMS.md §10).

Counts that the loop knows on the host (which drafts were tested and accepted) are plain ints;
counts that depend on device-side flags (growth) stay tensors until the end, so recording adds no
host sync.

Every window topology reports through the same counters. A *test* is one draft checked by the
verifier: in a chain the accepted prefix and the first rejected draft, in a tree every sibling tried
along the accepted path (siblings before the accepted one were rejected), in rows the same per row.
`slot_*` are indexed by a draft's depth below its root (the chain's window slot; a tree's depth; the
slot within a row), `sibling_*` by its index among siblings (trees), `row_*` by its grid row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class DecodeStats:
    window: int
    n_tokens: int  # generated positions, forced included (= AR's NFE)
    n_content: int  # sampled image tokens
    nfe: int = 0
    iterations: int = 0  # Jacobi iterations (forwards after the prefill)
    accepted: int = 0  # drafts accepted (content slots only)
    verified: int = 0  # drafts tested: every slot up to and including the first rejection
    accepted_no_fresh: int = 0
    verified_no_fresh: int = 0
    accept_len_hist: np.ndarray = None  # [m] = iterations that decided m tokens
    slot_accepted: np.ndarray = None  # [j] = accepted drafts at depth j + 1
    slot_verified: np.ndarray = None
    sibling_accepted: np.ndarray = None  # [k] = accepted drafts that were sibling k (trees; chains: k = 0)
    sibling_verified: np.ndarray = None
    row_accepted: np.ndarray = None  # [r] = accepted drafts in grid row r
    row_verified: np.ndarray = None
    slots_fed: int = 0  # window slots over all forwards (roots included)
    rows_in_flight: np.ndarray = None  # [k] = iterations whose window held k rows in flight (chains: 1)
    growth_eligible_accepted: torch.Tensor | int = 0  # accepted drafts with >= N+1 observations
    growth_grew_accepted: torch.Tensor | int = 0  # ... of which rose over the last N iterations
    growth_flagged_verified: torch.Tensor | int = 0  # verified drafts flagged M = 1
    growth_flagged_accepted: torch.Tensor | int = 0
    # the same share, but with growth measured up to and including the verifying iteration's p
    verify_eligible_accepted: torch.Tensor | int = 0
    verify_grew_accepted: torch.Tensor | int = 0
    trajectories: list = field(default_factory=list)
    draft_traces: list = field(default_factory=list)  # verified drafts' trajectories, when the decoder traces them

    @staticmethod
    def empty(window: int, n_tokens: int, n_content: int, grid_rows: int = 0, siblings: int = 1) -> DecodeStats:
        slots = max(window - 1, 1)
        zeros = lambda n: np.zeros(n, dtype=np.int64)  # noqa: E731
        return DecodeStats(
            window=window,
            n_tokens=n_tokens,
            n_content=n_content,
            accept_len_hist=zeros(2 * window + 2),
            slot_accepted=zeros(slots),
            slot_verified=zeros(slots),
            sibling_accepted=zeros(max(siblings, 1)),
            sibling_verified=zeros(max(siblings, 1)),
            row_accepted=zeros(grid_rows),
            row_verified=zeros(grid_rows),
            rows_in_flight=zeros(window + 1),
        )

    def record_forward(self, slots: int, rows: int) -> None:
        self.nfe += 1
        self.iterations += 1
        self.slots_fed += slots
        self.rows_in_flight[min(rows, len(self.rows_in_flight) - 1)] += 1

    def record_tests(
        self,
        m: int,
        depth: np.ndarray,
        sibling: np.ndarray,
        row: np.ndarray,
        accepted: np.ndarray,
        content: np.ndarray,
        fresh: np.ndarray,
        grew=None,
        eligible=None,
        grew_verify=None,
        eligible_verify=None,
    ) -> None:
        """One iteration that decided m tokens and tested T drafts, one entry per test (host arrays
        (T,): depth >= 1, sibling index, grid row (-1 forced), accepted, content, fresh).

        grew/eligible (T,) device: the growth mask M on each draft when it was proposed (what VP can
        see); grew_verify/eligible_verify: growth over the last N iterations ending at this verification."""
        if m >= len(self.accept_len_hist):
            self.accept_len_hist = np.concatenate(
                [self.accept_len_hist, np.zeros(m + 1 - len(self.accept_len_hist), dtype=np.int64)]
            )
        self.accept_len_hist[m] += 1
        if depth.size == 0:
            return
        verified = content.astype(bool)
        acc = accepted.astype(bool) & verified
        self.verified += int(verified.sum())
        self.accepted += int(acc.sum())
        self.verified_no_fresh += int((verified & ~fresh).sum())
        self.accepted_no_fresh += int((acc & ~fresh).sum())
        slot = np.minimum(depth - 1, len(self.slot_verified) - 1)
        np.add.at(self.slot_verified, slot, verified)
        np.add.at(self.slot_accepted, slot, acc)
        sib = np.minimum(sibling, len(self.sibling_verified) - 1)
        np.add.at(self.sibling_verified, sib, verified)
        np.add.at(self.sibling_accepted, sib, acc)
        if self.row_verified.size:
            in_grid = row >= 0
            np.add.at(self.row_verified, row[in_grid], verified[in_grid])
            np.add.at(self.row_accepted, row[in_grid], acc[in_grid])
        if grew is None:
            return  # no probability history kept: growth statistics are not tracked
        acc_t = torch.from_numpy(acc).to(grew.device)
        ver_t = torch.from_numpy(verified).to(grew.device)
        self.growth_eligible_accepted = self.growth_eligible_accepted + (eligible & acc_t).sum()
        self.growth_grew_accepted = self.growth_grew_accepted + (eligible & grew & acc_t).sum()
        self.growth_flagged_verified = self.growth_flagged_verified + (grew & ver_t).sum()
        self.growth_flagged_accepted = self.growth_flagged_accepted + (grew & acc_t).sum()
        if grew_verify is not None:
            self.verify_eligible_accepted = self.verify_eligible_accepted + (eligible_verify & acc_t).sum()
            self.verify_grew_accepted = self.verify_grew_accepted + (eligible_verify & grew_verify & acc_t).sum()

    def to_row(self) -> dict:
        """Plain JSON-able dict for samples.jsonl."""
        as_int = lambda x: int(x)  # noqa: E731
        last = int(np.nonzero(self.accept_len_hist)[0].max()) if self.accept_len_hist.any() else 0
        ratio = lambda a, b: (a / b) if b else None  # noqa: E731
        flights = int(np.nonzero(self.rows_in_flight)[0].max()) if self.rows_in_flight.any() else 0
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
            "mean_accepted_length": ratio(
                float((self.accept_len_hist * np.arange(len(self.accept_len_hist))).sum()), self.iterations
            ),
            "accept_len_hist": self.accept_len_hist[: last + 1].tolist(),
            "slot_accepted": self.slot_accepted.tolist(),
            "slot_verified": self.slot_verified.tolist(),
            "sibling_accepted": self.sibling_accepted.tolist(),
            "sibling_verified": self.sibling_verified.tolist(),
            "row_accepted": self.row_accepted.tolist(),
            "row_verified": self.row_verified.tolist(),
            "slots_fed": self.slots_fed,
            "rows_in_flight": self.rows_in_flight[: flights + 1].tolist(),
            "growth_eligible_accepted": as_int(self.growth_eligible_accepted),
            "growth_grew_accepted": as_int(self.growth_grew_accepted),
            "growth_flagged_verified": as_int(self.growth_flagged_verified),
            "growth_flagged_accepted": as_int(self.growth_flagged_accepted),
            "verify_eligible_accepted": as_int(self.verify_eligible_accepted),
            "verify_grew_accepted": as_int(self.verify_grew_accepted),
            "trajectories": self.trajectories,
        }
        row["growth_share"] = ratio(row["growth_grew_accepted"], row["growth_eligible_accepted"])
        row["growth_share_at_verify"] = ratio(row["verify_grew_accepted"], row["verify_eligible_accepted"])
        row["growth_precision"] = ratio(row["growth_flagged_accepted"], row["growth_flagged_verified"])
        row["slots_per_forward"] = ratio(self.slots_fed, self.iterations)
        return row


def _pooled(rows: list[dict], key: str) -> list[int]:
    width = max((len(r.get(key) or []) for r in rows), default=0)
    total = [0] * width
    for r in rows:
        for i, value in enumerate(r.get(key) or []):
            total[i] += value
    return total


def summarize_topology(rows: list[dict]) -> dict:
    """Run-level statistics of the window's shape, pooled over samples (rows from `to_row`):

    tokens_per_forward      decided tokens per NFE, prefill included (= step compression)
    slots_per_forward       window slots fed per forward (a tree's nodes, all rows' slots)
    depth_acceptance        [j] accepted / tested drafts at depth j + 1 (= slot_acceptance)
    sibling_acceptance      [k] accepted / tested drafts that were sibling k of a tree
    sibling_share           [k] share of accepted drafts that were sibling k (how much the tree adds)
    row_acceptance          [r] accepted / tested drafts in grid row r
    rows_in_flight_mean     mean number of rows (roots) per forward
    Samples written before these fields existed are skipped for the fields they lack.
    """
    rows = [r for r in rows if "sibling_accepted" in r]
    if not rows:
        return {}
    ratio = lambda a, b: (a / b) if b else None  # noqa: E731
    total = lambda key: sum(r[key] for r in rows)  # noqa: E731
    sib_acc, sib_ver = _pooled(rows, "sibling_accepted"), _pooled(rows, "sibling_verified")
    flights = _pooled(rows, "rows_in_flight")
    return {
        "tokens_per_forward": ratio(total("n_tokens"), total("nfe")),
        "slots_per_forward": ratio(total("slots_fed"), total("iterations")),
        "depth_acceptance": [
            ratio(a, v) for a, v in zip(_pooled(rows, "slot_accepted"), _pooled(rows, "slot_verified"))
        ],
        "sibling_acceptance": [ratio(a, v) for a, v in zip(sib_acc, sib_ver)],
        "sibling_share": [ratio(a, sum(sib_acc)) for a in sib_acc],
        "row_acceptance": [ratio(a, v) for a, v in zip(_pooled(rows, "row_accepted"), _pooled(rows, "row_verified"))],
        "rows_in_flight_mean": ratio(sum(k * c for k, c in enumerate(flights)), sum(flights)),
    }
