"""`uniform` — uniform over the legal image tokens, like `random`, but the draft's reference q is that
uniform distribution rather than one-hot (SJD-PAC's released code). Both are exact, since the draft
is drawn from the distribution it claims; with q uniform a fresh draft d is accepted with
probability min(1, K p(d)) (K image tokens) instead of p(d), and a rejection draws from
norm([p - 1/K]_+).
"""

from __future__ import annotations

import numpy as np
import torch

from sjdbench.decoding.inits.random import RandomInit
from sjdbench.decoding.parts import InitContext, SampleView
from sjdbench.decoding.processing import one_hot


class UniformInit(RandomInit):
    def fill(self, state: InitContext, sample: SampleView, positions: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Drafts (F,), with references (F, V): uniform over the image tokens at image positions,
        one-hot at forced ones."""
        drafts, _ = super().fill(state, sample, positions)
        vocab_size = state.vocab_size
        uniform = torch.zeros(vocab_size, dtype=state.dtype, device=drafts.device)
        uniform[state.legal] = 1.0 / state.legal.numel()
        forced = state.forced[torch.as_tensor(positions, device=drafts.device)] >= 0
        return drafts, torch.where(forced[:, None], one_hot(drafts, vocab_size), uniform.expand(len(positions), -1))
