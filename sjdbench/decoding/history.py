"""Per-absolute-position history of processed distributions across Jacobi iterations.

Window slots shift after every commit (and a tree or several rows in flight observe positions far
apart), so history is keyed by the absolute segment position. It lives in a ring of `n_rows` rows
with `depth` iterations per position (circular by observation count). A position gets a row when it
is first observed and keeps it while it is observed; when every row is taken, the row of the
position observed least recently is handed over (decided positions are never observed again). So
`n_rows` must only cover the positions observed in one iteration, not the span between them. Reads
gather the last k distributions of a whole window in one indexing op on the device.
"""

from __future__ import annotations

import numpy as np
import torch


class ProbabilityHistory:
    def __init__(self, n_rows: int, depth: int, vocab_size: int, device: torch.device, n_positions: int = 0) -> None:
        self.n_rows, self.depth = n_rows, depth
        self.probs = torch.zeros(n_rows, depth, vocab_size, device=device)  # (R, H, V)
        self.count = torch.zeros(n_rows, dtype=torch.long, device=device)  # observations so far
        self.row_of = torch.full((max(n_positions, 1),), -1, dtype=torch.long, device=device)  # position -> row
        self._row_host: dict[int, int] = {}  # the same map on the host
        self._owner = np.full(n_rows, -1, dtype=np.int64)  # host: position owning each row
        self._last_seen = np.full(n_rows, -1, dtype=np.int64)  # host: push counter of each row's last observation
        self._clock = 0
        self._back = torch.arange(depth, device=device)

    def _assign(self, host_positions: list[int]) -> torch.Tensor:
        """Rows (L,) for positions (L,): kept by positions that own one, handed over otherwise."""
        self._clock += 1
        wanted = set(host_positions)
        if len(wanted) > self.n_rows:
            raise ValueError(f"{len(wanted)} positions observed at once exceed the history's {self.n_rows} rows")
        rows, released, new_owners = [], [], []
        order = iter(np.argsort(self._last_seen, kind="stable"))  # least recently observed first
        for pos in host_positions:
            row = self._row_host.get(pos)
            if row is None:
                row = next(r for r in order if self._owner[r] not in wanted)
                if self._owner[row] >= 0:
                    del self._row_host[int(self._owner[row])]
                    released.append(int(self._owner[row]))
                self._owner[row] = pos
                self._row_host[pos] = row
                new_owners.append(row)
            self._last_seen[row] = self._clock
            rows.append(row)
        device = self.row_of.device
        if host_positions and max(host_positions) >= self.row_of.shape[0]:
            grown = torch.full((max(host_positions) + 1,), -1, dtype=torch.long, device=device)
            grown[: self.row_of.shape[0]] = self.row_of
            self.row_of = grown
        if released:
            self.row_of[torch.as_tensor(released, device=device)] = -1
        rows_t = torch.as_tensor(rows, dtype=torch.long, device=device)
        self.row_of[torch.as_tensor(host_positions, dtype=torch.long, device=device)] = rows_t
        if new_owners:
            self.count[torch.as_tensor(new_owners, dtype=torch.long, device=device)] = 0
        return rows_t

    def push(
        self, positions: torch.Tensor, probs: torch.Tensor, host_positions: np.ndarray | list[int] | None = None
    ) -> None:
        """Record this iteration's distributions probs (L, V) at distinct positions (L,).

        host_positions: the same positions on the host (the loop knows them; passing them avoids a
        device-to-host copy)."""
        host = [int(p) for p in (positions.tolist() if host_positions is None else host_positions)]
        rows = self._assign(host)
        count = self.count[rows]
        self.probs[rows, count % self.depth] = probs
        self.count[rows] = count + 1

    def _rows(self, positions: torch.Tensor) -> torch.Tensor:
        """(L,) ring rows of positions, -1 for positions never observed (or handed over)."""
        inside = positions < self.row_of.shape[0]
        return torch.where(inside, self.row_of[positions.clamp_max(self.row_of.shape[0] - 1)], -1)

    def observations(self, positions: torch.Tensor) -> torch.Tensor:
        rows = self._rows(positions)
        return torch.where(rows >= 0, self.count[rows.clamp_min(0)], 0)

    def last(self, positions: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The last k distributions, newest first: (L, k, V), and validity (L, k)."""
        k = min(k, self.depth)
        rows = self._rows(positions).clamp_min(0)
        count = self.observations(positions)  # (L,)
        back = self._back[:k]  # (k,)
        slots = (count[:, None] - 1 - back) % self.depth  # (L, k)
        return self.probs[rows[:, None], slots], count[:, None] > back

    def growth_mask(self, positions: torch.Tensor, steps: int, strict_increases: bool = True) -> torch.Tensor:
        """M (L, V): token probability rose strictly over the last `steps` iterations.

        strict_increases=True: N strict increases, needs N+1 observations (our default reading).
        strict_increases=False: N observations (N-1 increases), the other reading of the paper.
        Positions with too few observations get M = 0.
        """
        n_obs = steps + 1 if strict_increases else steps
        if n_obs < 2 or n_obs > self.depth:
            return torch.zeros(positions.shape[0], self.probs.shape[-1], dtype=torch.bool, device=positions.device)
        recent, valid = self.last(positions, n_obs)  # (L, n_obs, V) newest first
        rising = (recent[:, :-1] > recent[:, 1:]).all(dim=1)  # (L, V)
        return rising & valid[:, -1:]

    def trajectory(self, position: int, token: int) -> list[float]:
        """Probabilities of `token` at `position`, oldest first, over the kept iterations."""
        row = self._row_host.get(int(position))
        if row is None:
            return []
        count = int(self.count[row])
        kept = min(count, self.depth)
        slots = [(count - kept + i) % self.depth for i in range(kept)]
        return self.probs[row, slots, token].round(decimals=5).tolist()
