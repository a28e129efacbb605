"""Percentile bootstrap over prompts: confidence intervals for a run's score and for paired
differences between two runs on the same prompts and seeds.

Why resample prompts, not images: samples of one prompt (samples_per_prompt > 1) are correlated,
and the question is how a score would move on other prompts from the same distribution. Rows are
resampled as whole prompt groups; a paired difference resamples the same groups in both runs, so
prompt difficulty cancels and the interval is much tighter than two separate intervals would be.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

LEVEL = 0.95


def prompt_groups(prompt_ids: np.ndarray) -> list[np.ndarray]:
    """Row indices of each prompt, in first-seen order."""
    order: dict[int, list[int]] = {}
    for row, prompt_id in enumerate(np.asarray(prompt_ids).tolist()):
        order.setdefault(prompt_id, []).append(row)
    return [np.asarray(rows) for rows in order.values()]


def bootstrap_ci(
    statistic: Callable[[np.ndarray], float], groups: list[np.ndarray], n_boot: int, seed: int = 0
) -> list[float] | None:
    """[lo, hi] 95 % percentile interval of statistic(rows) over n_boot resamples of the groups.

    None when it cannot be estimated (fewer than 2 groups or n_boot < 1).
    """
    if n_boot < 1 or len(groups) < 2:
        return None
    rng = np.random.default_rng(seed)
    values = np.empty(n_boot)
    for b in range(n_boot):
        chosen = rng.integers(len(groups), size=len(groups))
        values[b] = statistic(np.concatenate([groups[g] for g in chosen]))
    alpha = (1.0 - LEVEL) / 2
    lo, hi = np.quantile(values, [alpha, 1.0 - alpha])
    return [float(lo), float(hi)]
