"""Drafts from a trained drafter (EAGLE's feature-level drafter) as a chain, instead of from the
target's own distributions.

Each iteration the drafter first takes in what the target decided (every decided token paired with
the target's hidden state of the slot before it, `Drafter.extend`), then drafts the next window's
positions one after another: the draft at position j is *sampled* from the drafter's distribution q_j,
which is the drafter's logits through the same processing as the target's (CFG mix, structure mask,
temperature, top-k / top-p), and the next level reads that draft and the drafter's own feature
(`Drafter.draft`). q_j depends only on decided tokens and the drafts before j, each drawn from the q it
is verified against, so the chain's rejection sampling keeps AR's distribution exactly.

The drafter holds a KV cache of its own, in step with the target's decided tokens, so this proposal
keeps state between iterations, like an init does: `begin` makes it for a batch, and the loop hands
it the prompts' states (`start`), each iteration's decided tokens (`advance`) and asks for the chain
(`draft_chain`). `propose` is not used: every wanted position is drafted afresh each iteration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from sjdbench.adapter import PromptStates, Sampling, require_hidden_states
from sjdbench.decoding.parts import PartConfig, Proposal
from sjdbench.decoding.processing import StructureMasks, process_logits, sample
from sjdbench.decoding.randomness import Draws
from sjdbench.decoding.topologies.drafter_tree import DrafterTreeTopology, GrownTree, TreeBudget
from sjdbench.errors import UserError
from sjdbench.models.drafter import Drafter, DrafterCache, DrafterStep


@dataclass
class DrafterProposalConfig(PartConfig):
    drafter: str | None = None  # a drafter folder or released repo; None: the one shipped or released for the model


@dataclass
class DraftingState:
    """The drafter's cache for a batch, and each sample's last entry (its logits predict the frontier)."""

    cache: DrafterCache
    served: np.ndarray  # (B,) drafter forwards each sample needed since they were last taken (`take_served`)
    last: DrafterStep | None = None  # (B, 2, 1, ...) logits and feature of each sample's last committed entry


class DrafterProposal(Proposal[DrafterProposalConfig]):
    """A chain of drafts sampled from a drafter bound to the target (see the module docstring)."""

    Config = DrafterProposalConfig
    drafts_itself: ClassVar[bool] = True  # the loop asks `draft_chain` for every wanted position

    def __init__(self, config: DrafterProposalConfig | None = None, drafter: Drafter | None = None) -> None:
        super().__init__(config)
        self.drafter = drafter

    @classmethod
    def build(cls, config: DrafterProposalConfig, model: Any = None, **children: Any) -> DrafterProposal:
        if model is None:
            return cls(config)
        require_hidden_states(model, "the drafter proposal")
        from sjdbench.models.drafter.sources import load_drafter

        try:
            drafter = load_drafter(model, str(model.name), {}, config.drafter)
        except (FileNotFoundError, ValueError) as error:
            raise UserError(str(error)) from error
        return cls(config, drafter)

    @classmethod
    def lossless(cls, config: DrafterProposalConfig, **children: bool) -> bool:
        return True  # every draft is drawn from the q it is verified against (module docstring)

    def resolved(self) -> dict[str, Any]:
        return {} if self.drafter is None else {"drafter": self.drafter.name}

    @property
    def forwards(self) -> int:
        """Drafter forwards run so far (the loop records the difference per iteration)."""
        return 0 if self.drafter is None else self.drafter.forwards

    def _bound(self) -> Drafter:
        if self.drafter is None:
            raise UserError("the drafter proposal was built without a model; build the decoder against one")
        return self.drafter

    def propose(self, p: torch.Tensor, waiting: Any, ctx: Any) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError("the drafter proposal drafts in the plan step (draft_chain), not from p")

    # -- the drafter's state, driven by the loop -----------------------------------------------------

    def begin(self, batch: int, prompt_len: int, segment_len: int, drafts: int) -> DraftingState:
        """drafts: the most draft entries one iteration feeds (a chain's window, a tree's nodes)."""
        return DraftingState(
            self._bound().new_cache(batch, prompt_len, segment_len, max(drafts, 1)), np.zeros(batch, dtype=np.int64)
        )

    @staticmethod
    def take_served(state: DraftingState) -> np.ndarray:
        """(B,) the drafter forwards each sample needed since the last call: the forwards its own drafting
        ran, as many as decoded alone (a batched forward that serves several samples counts for each)."""
        served, state.served = state.served, np.zeros_like(state.served)
        return served

    def start(self, state: DraftingState, samples: list[int], states: PromptStates, first: torch.Tensor) -> None:
        """Samples start on their prompts; `first` (n,) their token at segment position 0, which
        pairs with the prompt's last slot."""
        drafter = self._bound()
        before = drafter.forwards
        drafter.start(state.cache, samples, states)
        state.served[samples] += drafter.forwards - before  # no forward for a one-slot prompt
        B = state.cache.base.shape[0] // 2
        tokens = torch.zeros(B, 1, dtype=torch.long, device=first.device)
        positions = torch.full((B, 1), -1, dtype=torch.long, device=first.device)
        hidden = states.hidden.new_zeros(B, 2, 1, states.hidden.shape[-1])
        index = torch.as_tensor(samples, device=first.device)
        tokens[index, 0] = first
        positions[index, 0] = 0
        hidden[index] = states.hidden[:, :, -1:]
        self._extend(state, tokens, hidden, positions, 1, index)

    def advance(
        self, state: DraftingState, tokens: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, reach: int
    ) -> None:
        """Decided tokens (B, K) at segment positions (B, K) (< 0: padding, real entries first), each
        with the target's hidden state of the slot before it (B, 2, K, D); every position < reach
        (a bound the loop knows on the host)."""
        self._extend(state, tokens, hidden, positions, reach, None)

    def _extend(
        self,
        state: DraftingState,
        tokens: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        reach: int,
        only: torch.Tensor | None,
    ) -> None:
        step = self._bound().extend(state.cache, tokens, hidden, positions, reach)
        last = (positions >= 0).sum(1).clamp_min(1) - 1  # (B,) each sample's last real entry
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        logits, features = step.logits[rows, :, last][:, :, None], step.features[rows, :, last][:, :, None]
        if state.last is None or state.last.logits.shape[0] != tokens.shape[0]:
            state.last = DrafterStep(logits.clone(), features.clone())
        keep = (
            (positions >= 0).any(1)
            if only is None
            else torch.zeros_like(rows, dtype=torch.bool).index_fill(0, only, True)
        )
        state.served += keep.cpu().numpy()
        state.last.logits[keep] = logits[keep].to(state.last.logits.dtype)
        state.last.features[keep] = features[keep].to(state.last.features.dtype)

    def retain(self, state: DraftingState, samples: list[int]) -> DraftingState:
        self._bound().retain(state.cache, samples)
        state.served = state.served[samples]
        if state.last is not None:
            index = torch.as_tensor(samples, device=state.last.logits.device)
            state.last = DrafterStep(state.last.logits[index], state.last.features[index])
        return state

    def draft_chain(
        self,
        state: DraftingState,
        starts: np.ndarray,
        counts: np.ndarray,
        masks: StructureMasks,
        sampling: Sampling,
        generators: list[torch.Generator],
        dtype: torch.dtype,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per sample b, `counts[b]` drafts at positions starts[b], starts[b] + 1, ... each sampled from
        the drafter's processed q. Returns drafts (B, K) and their q (B, K, V), K = counts.max()
        (entries past a sample's count are meaningless)."""
        drafter, last = self._bound(), state.last
        assert last is not None  # start() ran for every sample in the batch
        B, K = len(starts), int(counts.max())
        device = last.logits.device
        V = last.logits.shape[-1]
        drafts = torch.zeros(B, K, dtype=torch.long, device=device)
        refs = torch.zeros(B, K, V, dtype=dtype, device=device)
        state.cache.discard_drafts()
        logits, features = last.logits, last.features  # (B, 2, 1, V), (B, 2, 1, D)
        limit = masks.index.shape[0] - 1
        for k in range(K):
            active = counts > k
            target = torch.as_tensor(np.minimum(starts + k, limit), device=device)  # (B,)
            q = process_logits(logits, masks.rows[masks.index[target]][:, None], sampling)[:, 0].to(dtype)  # (B, V)
            rows = np.flatnonzero(active)
            index = torch.as_tensor(rows, device=device)
            picked = sample(q[index], Draws(generators, active.astype(int).tolist(), device))
            drafts[index, k], refs[index, k] = picked, q[index]
            if k + 1 < K:
                state.served += counts > k + 1
                step = drafter.draft(state.cache, drafts[:, k : k + 1], features, target[:, None])
                logits, features = step.logits, step.features
        return drafts, refs

    def draft_trees(
        self,
        state: DraftingState,
        topology: DrafterTreeTopology,
        frontiers: np.ndarray,
        window: int,
        masks: StructureMasks,
        sampling: Sampling,
        generators: list[torch.Generator],
        dtype: torch.dtype,
        budgets: list[TreeBudget] | None = None,
    ) -> list[GrownTree]:
        """Each sample's draft tree below its last decided token (frontiers (B,): its first undecided
        position; budgets: each one's tree shape from the topology's plan, None: the configured one):
        the topology picks the nodes, this runs the drafter one level at a time."""
        drafter, last = self._bound(), state.last
        assert last is not None  # start() ran for every sample in the batch
        cache = state.cache
        cache.discard_drafts()
        device = last.logits.device
        B, E = len(frontiers), cache.drafts
        limit = masks.index.shape[0] - 1
        frontier_t = torch.as_tensor(frontiers, device=device)

        def process(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            """(B, 2, L, V) raw drafter logits predicting positions targets (B, L) -> q (B, L, V)."""
            return process_logits(logits, masks.rows[masks.index[targets.clamp_max(limit)]], sampling).to(dtype)

        features = last.features.new_zeros(B, 2, E, last.features.shape[-1])  # (B, 2, E, D) each entry's output
        ancestors = torch.zeros(B, E, E, dtype=torch.bool, device=device)  # entry i sees entry j among the drafts
        rows = torch.arange(B, device=device)[:, None]

        def level(
            tokens: torch.Tensor, parents: torch.Tensor, depth: int, active: np.ndarray
        ) -> tuple[torch.Tensor, torch.Tensor]:
            state.served += active
            used, F = cache.used, tokens.shape[1]
            positions = (frontier_t[:, None] + depth - 1).expand(B, F).clamp_max(limit)  # the nodes' positions
            parent = parents.clamp_min(0)
            from_root = (parents < 0)[:, None, :, None]  # (B, 1, F, 1)
            D = features.shape[-1]
            own = features.gather(2, parent[:, None, :, None].expand(B, 2, F, D))  # (B, 2, F, D) the parents'
            inputs = torch.where(from_root, last.features.expand(B, 2, F, D).to(own.dtype), own)
            seen = ancestors[rows, parent, :used] | torch.nn.functional.one_hot(parent, max(used, 1))[..., :used].bool()
            seen = seen & ~from_root[:, 0]  # (B, F, used): a root child sees no draft entry
            mask = torch.cat([seen, torch.zeros(B, F, F, dtype=torch.bool, device=device)], -1)
            step = drafter.draft(cache, tokens, inputs, positions, mask)
            entries = used + torch.arange(F, device=device).expand(B, F)
            features[:, :, used : used + F] = step.features.to(features.dtype)
            ancestors[:, used : used + F, : used + F] = mask
            return process(step.logits, positions + 1), entries

        root_q = process(last.logits, frontier_t[:, None])[:, 0]  # (B, V) q for each frontier position
        return topology.grow_trees(root_q, level, frontiers, limit - 1, window, generators, budgets)
