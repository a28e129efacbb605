"""Per-sample decoding statistics (definitions in docs/ALGORITHMS.md §10).

Counts that the loop knows on the host (accepted prefix length) are plain ints; counts that depend
on device-side flags (growth) stay tensors until the end, so recording adds no host sync.
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
    accept_len_hist: np.ndarray = None  # [m] = iterations that committed m tokens
    slot_accepted: np.ndarray = None  # [j] = accepted drafts at window slot j
    slot_verified: np.ndarray = None
    growth_eligible_accepted: torch.Tensor | int = 0  # accepted drafts with >= N+1 observations
    growth_grew_accepted: torch.Tensor | int = 0  # ... of which rose over the last N iterations
    growth_flagged_verified: torch.Tensor | int = 0  # verified drafts flagged M = 1
    growth_flagged_accepted: torch.Tensor | int = 0
    # the same share, but with growth measured up to and including the verifying iteration's p
    verify_eligible_accepted: torch.Tensor | int = 0
    verify_grew_accepted: torch.Tensor | int = 0
    trajectories: list = field(default_factory=list)

    @staticmethod
    def empty(window: int, n_tokens: int, n_content: int) -> "DecodeStats":
        return DecodeStats(
            window=window, n_tokens=n_tokens, n_content=n_content,
            accept_len_hist=np.zeros(window + 1, dtype=np.int64),
            slot_accepted=np.zeros(max(window - 1, 1), dtype=np.int64),
            slot_verified=np.zeros(max(window - 1, 1), dtype=np.int64),
        )

    def record_iteration(self, m, k, n_drafts, content, fresh, grew=None, eligible=None, grew_verify=None,
                         eligible_verify=None) -> None:
        """m committed, k drafts accepted out of n_drafts in the window; flags are per draft slot.

        grew/eligible: the growth mask M on each draft when it was proposed (what VP can see);
        grew_verify/eligible_verify: growth over the last N iterations ending at this verification."""
        self.iterations += 1
        self.accept_len_hist[m] += 1
        if n_drafts == 0:
            return
        n_verified = min(k + 1, n_drafts)
        verified = np.zeros(n_drafts, dtype=bool)
        verified[:n_verified] = True
        accepted = np.zeros(n_drafts, dtype=bool)
        accepted[:k] = True
        verified &= content
        accepted &= content
        self.verified += int(verified.sum())
        self.accepted += int(accepted.sum())
        self.verified_no_fresh += int((verified & ~fresh).sum())
        self.accepted_no_fresh += int((accepted & ~fresh).sum())
        self.slot_verified[:n_drafts] += verified
        self.slot_accepted[:n_drafts] += accepted
        if grew is None:
            return  # no probability history kept: growth statistics are not tracked
        acc_t = torch.from_numpy(accepted).to(grew.device)
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
            "mean_accepted_length": ratio(float((self.accept_len_hist * np.arange(self.window + 1)).sum()), self.iterations),
            "accept_len_hist": self.accept_len_hist[: last + 1].tolist(),
            "slot_accepted": self.slot_accepted.tolist(),
            "slot_verified": self.slot_verified.tolist(),
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
        return row
