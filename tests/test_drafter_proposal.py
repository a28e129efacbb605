"""The drafter proposal: a chain of drafts sampled from a drafter over the target's hidden states.

Exactness: on the enumerable model (run live, not from its table, because the drafter reads hidden
states the table does not keep) a randomly initialised drafter's chains, verified by the exact
verifier, must give sequences distributed as exact AR (chi-square against the enumerated
probabilities, batched decoding). The preset runs end to end on the toy with its shipped drafter.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from sjdbench.decoding.loop import Decoder, Request, jacobi_decode_batch
from sjdbench.decoding.proposals.drafter import DrafterProposal
from sjdbench.decoding.registry import resolve_part
from sjdbench.errors import UserError
from sjdbench.exactness import TabulatedAdapter, chi_square, enumerable_model, exact_probabilities
from sjdbench.models.drafter import DrafterConfig, DrafterNet, bind
from sjdbench.models.drafter.network import init_drafter

PROMPT = "ab"
N = 8_000  # the exactness suite's fast size
BATCH = 64
P_PASS = 1e-3  # as the exactness suite's


def part(kind: str, name: str, adapter=None):
    return resolve_part(kind, {"name": name}, f"decoder.{kind}").build(adapter)


def random_drafter(adapter, seed: int = 0):
    cfg = DrafterConfig("llama", adapter.hidden_size, 64, 4, 2, adapter.vocab_size, num_hidden_layers=1)
    net = init_drafter(DrafterNet(cfg), std=0.2, seed=seed)
    with torch.no_grad():
        net.embed_tokens.weight.copy_(adapter.token_embeddings())
    return bind(adapter, net, "random")


class FlattenedReferenceProposal(DrafterProposal):
    """Deliberately wrong: drafts ~ q, but each is verified against a flattened q (sqrt q, renormalised)."""

    def draft_chain(self, *args, **kwargs):
        drafts, refs = super().draft_chain(*args, **kwargs)
        flat = refs.sqrt()
        return drafts, flat / flat.sum(-1, keepdim=True).clamp_min(1e-30)


def drafter_decoder(adapter, window: int = 4, proposal_class: type[DrafterProposal] = DrafterProposal) -> Decoder:
    proposal = proposal_class(DrafterProposal.Config(), random_drafter(adapter))
    return Decoder(
        window, proposal, part("verifier", "exact"), part("init", "random"), track_growth=False, trace_positions=0
    )


def draw(proposal_class: type[DrafterProposal]) -> tuple[Counter, Counter, dict]:
    """N live decodes of the enumerable model, BATCH in lockstep; (counts, totals, exact AR)."""
    torch.set_num_threads(1)
    model = enumerable_model()
    model.model.requires_grad_(False)
    table = TabulatedAdapter(model, PROMPT)
    exact = exact_probabilities(table, table.default_sampling)
    decoder = drafter_decoder(model, proposal_class=proposal_class)
    requests = [Request(PROMPT, torch.Generator().manual_seed(7_000_003 + i)) for i in range(N)]
    counts: Counter = Counter()
    totals: Counter = Counter()
    for _, result in jacobi_decode_batch(model, requests, decoder, model.default_sampling, BATCH):
        counts[tuple(result.tokens.tolist())] += 1
        row = result.stats.to_row()
        for key in ("nfe", "accepted", "verified", "drafter_forwards"):
            totals[key] += row[key]
    return counts, totals, exact


def test_drafter_chain_matches_exact_ar():
    counts, totals, exact = draw(DrafterProposal)
    stat, dof, p_value = chi_square(counts, exact)
    print(f"drafter chain n={N}: chi2={stat:.1f} dof={dof} p={p_value:.3g} totals={dict(totals)}")
    assert sum(counts.values()) == N
    assert 0 < totals["accepted"] < totals["verified"], "the drafts must be tested, and some rejected"
    assert totals["drafter_forwards"] > N  # a start per sample and a chain per iteration
    assert p_value > P_PASS, f"the drafter chain is distinguishable from AR: chi2={stat:.1f} dof={dof} p={p_value:.2e}"


def test_a_model_without_hidden_states_is_refused_in_one_line():
    table = TabulatedAdapter(enumerable_model(), PROMPT)  # serves logits only
    with pytest.raises(UserError) as error:
        DrafterProposal.build(DrafterProposal.Config(), table)
    assert "hidden states" in str(error.value) and "\n" not in str(error.value)


def test_eagle_chain_preset_runs_on_the_toy(tmp_path):
    from sjdbench.config.schema import compose_run
    from sjdbench.results.store import RunStore
    from sjdbench.run.runner import execute

    overrides = ["model=toy", "data=toy", "data.limit=1", "warmup=0", "decoder=eagle_chain"]
    outcome = execute(compose_run([*overrides, f"results_dir={tmp_path}"]))
    (row,) = RunStore(tmp_path, outcome.run_id).rows()
    assert row["drafter_forwards"] > 0
    assert row["n_tokens"] > row["nfe"]  # the drafter's chains decide more than one token per forward


def test_a_wrong_drafter_reference_is_detected():
    """The negative control: the same chains verified against the wrong q fail the same test."""
    counts, _, exact = draw(FlattenedReferenceProposal)
    stat, dof, p_value = chi_square(counts, exact)
    print(f"flattened drafter reference n={N}: chi2={stat:.1f} dof={dof} p={p_value:.3g}")
    assert p_value < P_PASS
