"""The drafter proposal: drafts from a drafter over the target's hidden states, as a chain or as
the drafter's own tree (static: siblings drawn without replacement; dynamic: chosen, point masses).

Exactness: on the enumerable model (run live, not from its table, because the drafter reads hidden
states the table does not keep) a randomly initialised drafter's chains and trees, verified by the
exact verifier, must give sequences distributed as exact AR (chi-square against the enumerated
probabilities, batched decoding). Two negative controls (a flattened chain reference; static siblings
that keep the full q instead of q without their elders) fail the same test. ADT-Tree's adaptive
trees (`adapt: neighbours`) pass the same tests, with a count showing that their shape did change
with the neighbours. The presets run end to end on the toy with its shipped drafter.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from sjdbench.decoding.loop import Decoder, Request, jacobi_decode_batch
from sjdbench.decoding.proposals.drafter import DrafterProposal
from sjdbench.decoding.registry import resolve_part
from sjdbench.decoding.topologies.drafter_tree import DrafterTreeTopology, GrownTree
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


class ElderBlindTree(DrafterTreeTopology):
    """Deliberately wrong: a static tree whose later siblings claim the parent's full q as their
    reference, although they were drawn from q without their elder siblings."""

    def grow(self, layout, tree: GrownTree, vocab_size, dtype):
        refs = tree.refs.clone()
        first = {}
        for slot in range(1, len(tree.parent)):
            first.setdefault(int(tree.parent[slot]), slot)
            refs[slot - 1] = tree.refs[first[int(tree.parent[slot])] - 1]
        return super().grow(
            layout, GrownTree(tree.parent, tree.sibling, tree.depth, tree.tokens, refs), vocab_size, dtype
        )


STATIC = {"shape": "static"}  # the released mc_sim_7b_63 paths: four root children exhaust the 4 codes
DYNAMIC = {"shape": "dynamic", "top_k": 6, "depth": 3}  # top-6 of 4 legal codes: unusable candidates too
ADAPTIVE_STATIC = {**STATIC, "adapt": "neighbours"}
ADAPTIVE_DYNAMIC = {**DYNAMIC, "adapt": "neighbours"}
# On the model's 2 x 2 grid only the last content position has a neighbour decided in a run (r > 1),
# with no position after it to deepen into; so the shapes' own machinery (narrowed and deepened trees,
# mixed in a batch) is also run with r set by position, on shallow trees with room to deepen
SHALLOW_STATIC = {"shape": "static", "choices": "[[0],[1],[2],[3]]", "adapt": "neighbours"}  # K = 4, D = 1
SHALLOW_DYNAMIC = {"shape": "dynamic", "top_k": 6, "depth": 1, "adapt": "neighbours"}


class BudgetCount(DrafterTreeTopology):
    """The topology as it is, counting the tree budgets its plans chose (one counter per class)."""

    budgets: Counter = Counter()

    def plan(self, sample, window):
        layout = super().plan(sample, window)
        type(self).budgets[layout.budget] += 1
        return layout


class ShapeByPosition(BudgetCount):
    """The adaptive shapes at an r set by the first undecided position (3 at the first row's second
    code, 2 at the second row's first): a fixed function of decided positions, so still exact."""

    def budget(self, sample, n, window):
        return self.shaped({1: 3.0, 3: 2.0}.get(n), sample.n_positions - 1 - n, window)


def drafter_decoder(
    adapter,
    window: int = 4,
    proposal_class: type[DrafterProposal] = DrafterProposal,
    tree: dict | None = None,
    tree_class: type[DrafterTreeTopology] = DrafterTreeTopology,
) -> Decoder:
    proposal = proposal_class(DrafterProposal.Config(), random_drafter(adapter))
    extra = {} if tree is None else {"topology": tree_class(DrafterTreeTopology.Config(**tree))}
    return Decoder(
        window,
        proposal,
        part("verifier", "exact"),
        part("init", "random"),
        track_growth=False,
        trace_positions=0,
        **extra,
    )


def draw(
    proposal_class: type[DrafterProposal] = DrafterProposal,
    tree: dict | None = None,
    window: int = 4,
    tree_class: type[DrafterTreeTopology] = DrafterTreeTopology,
) -> tuple[Counter, Counter, dict]:
    """N live decodes of the enumerable model, BATCH in lockstep; (counts, totals, exact AR)."""
    torch.set_num_threads(1)
    model = enumerable_model()
    model.model.requires_grad_(False)
    table = TabulatedAdapter(model, PROMPT)
    exact = exact_probabilities(table, table.default_sampling)
    decoder = drafter_decoder(model, window, proposal_class, tree, tree_class)
    requests = [Request(PROMPT, torch.Generator().manual_seed(7_000_003 + i)) for i in range(N)]
    counts: Counter = Counter()
    totals: Counter = Counter()
    for _, result in jacobi_decode_batch(model, requests, decoder, model.default_sampling, BATCH):
        counts[tuple(result.tokens.tolist())] += 1
        row = result.stats.to_row()
        for key in ("nfe", "accepted", "verified", "drafter_forwards"):
            totals[key] += row[key]
    return counts, totals, exact


@pytest.mark.slow  # the drafter trees below stand for the drafter in the fast suite
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


SLOW = pytest.mark.slow  # the fast suite runs a dynamic and a static tree, exact and relaxed


@pytest.mark.parametrize(
    "preset",
    [
        pytest.param("eagle_chain", marks=SLOW),
        pytest.param("eagle", marks=SLOW),
        "eagle2",
        pytest.param("lantern_eagle", marks=SLOW),
        "lantern_pp",
        pytest.param("eagle2_adt", marks=SLOW),
        pytest.param("lantern_adt", marks=SLOW),
    ],
)
def test_drafter_presets_run_on_the_toy_and_say_what_they_need(tmp_path, preset):
    import sjdbench
    from sjdbench.config.schema import compose_run
    from sjdbench.results.store import RunStore
    from sjdbench.run.runner import execute

    overrides = ["model=toy", "data=toy", "data.limit=1", "warmup=0", f"decoder={preset}"]
    outcome = execute(compose_run([*overrides, f"results_dir={tmp_path}"]))
    (row,) = RunStore(tmp_path, outcome.run_id).rows()
    assert row["drafter_forwards"] > 0
    assert row["n_tokens"] > row["nfe"]  # the drafter's drafts decide more than one token per forward
    (run,) = sjdbench.load_runs(tmp_path).to_dict("records")
    assert run["needs"] == "a trained drafter"
    assert run["drafter_forwards_mean"] == row["drafter_forwards"]


@pytest.mark.slow
def test_a_wrong_drafter_reference_is_detected():
    """The negative control: the same chains verified against the wrong q fail the same test."""
    counts, _, exact = draw(FlattenedReferenceProposal)
    stat, dof, p_value = chi_square(counts, exact)
    print(f"flattened drafter reference n={N}: chi2={stat:.1f} dof={dof} p={p_value:.3g}")
    assert p_value < P_PASS


@pytest.mark.parametrize(
    ("tree", "window"),
    [
        (STATIC, 26),
        (DYNAMIC, 12),
        pytest.param(ADAPTIVE_STATIC, 26, marks=SLOW),
        pytest.param(ADAPTIVE_DYNAMIC, 12, marks=SLOW),
    ],
    ids=["eagle", "eagle2", "eagle_adt", "eagle2_adt"],
)
def test_drafter_trees_match_exact_ar(tree, window):
    """With the neighbours rule the model only ever narrows a tree (see SHALLOW_*)."""
    BudgetCount.budgets.clear()
    counts, totals, exact = draw(tree=tree, window=window, tree_class=BudgetCount)
    stat, dof, p_value = chi_square(counts, exact)
    budgets = dict(BudgetCount.budgets)
    print(f"drafter tree {tree} n={N}: chi2={stat:.1f} dof={dof} p={p_value:.3g} totals={dict(totals)} {budgets}")
    assert sum(counts.values()) == N
    if "adapt" in tree:  # the rule acted: narrower trees than configured
        assert any(b.width < BudgetCount(BudgetCount.Config(**tree)).configured().width for b in budgets), budgets
    else:
        assert len(budgets) == 1
    assert 0 < totals["accepted"] < totals["verified"], "the drafts must be tested, and some rejected"
    assert p_value > P_PASS, f"the drafter tree is distinguishable from AR: chi2={stat:.1f} dof={dof} p={p_value:.2e}"


@pytest.mark.slow
@pytest.mark.parametrize("tree", [SHALLOW_STATIC, SHALLOW_DYNAMIC], ids=["static", "dynamic"])
def test_narrowed_and_deepened_trees_match_exact_ar(tree):
    ShapeByPosition.budgets.clear()
    counts, totals, exact = draw(tree=tree, window=12, tree_class=ShapeByPosition)
    stat, dof, p_value = chi_square(counts, exact)
    budgets = dict(ShapeByPosition.budgets)
    print(f"shaped by position {tree} n={N}: chi2={stat:.1f} dof={dof} p={p_value:.3g} {budgets}")
    base = ShapeByPosition(ShapeByPosition.Config(**tree)).configured()
    assert any(b.width < base.width for b in budgets) and any(b.depth > base.depth for b in budgets), budgets
    assert 0 < totals["accepted"] < totals["verified"]
    assert p_value > P_PASS, f"the shaped tree is distinguishable from AR: chi2={stat:.1f} dof={dof} p={p_value:.2e}"


@pytest.mark.slow
def test_siblings_that_forget_their_elders_are_detected():
    """The tree's negative control: siblings drawn without replacement but verified against the full q."""
    counts, _, exact = draw(tree=STATIC, window=26, tree_class=ElderBlindTree)
    stat, dof, p_value = chi_square(counts, exact)
    print(f"elder-blind siblings n={N}: chi2={stat:.1f} dof={dof} p={p_value:.3g}")
    assert p_value < P_PASS


@pytest.mark.parametrize(
    "tree",
    [pytest.param(None, marks=pytest.mark.slow), STATIC, DYNAMIC, ADAPTIVE_STATIC, ADAPTIVE_DYNAMIC],
    ids=["chain", "eagle", "eagle2", "eagle_adt", "eagle2_adt"],
)
def test_batched_equals_unbatched_in_float64(tree):
    """Samples of different prompts finish at different iterations, leave the batch and let the next
    one in: at B = 1, 3 and 5 every sample's tokens and statistics equal its decode alone (float64)."""
    from sjdbench.decoding.loop import jacobi_decode
    from sjdbench.models.debug import build_debug_adapter

    adapter = build_debug_adapter(grid_h=4, grid_w=4, n_codes=16, init_std=0.5, dtype="float64")
    BudgetCount.budgets.clear()
    decoder = drafter_decoder(adapter, 4 if tree is None else 10, tree=tree, tree_class=BudgetCount)
    decoder.proposal.drafter.net.double()
    prompts = ["a red circle", "x", "two blue squares on a striped background", "yy", "b"]

    def requests():
        return [Request(p, torch.Generator().manual_seed(50 + i), key=i) for i, p in enumerate(prompts)]

    alone = {
        r.key: jacobi_decode(adapter, r.prompt, decoder, adapter.default_sampling, r.generator) for r in requests()
    }
    assert len({a.stats.nfe for a in alone.values()}) > 1, "every sample finished at the same iteration"
    if tree is not None and "adapt" in tree:  # the batch mixes narrower and deeper trees (a 4 x 4 grid)
        base, budgets = decoder.topology.configured(), BudgetCount.budgets
        assert any(b.width < base.width for b in budgets) and any(b.depth > base.depth for b in budgets), budgets
    for batch in (1, 3, 5):
        got = {
            r.key: res for r, res in jacobi_decode_batch(adapter, requests(), decoder, adapter.default_sampling, batch)
        }
        for i, result in got.items():
            assert torch.equal(result.tokens, alone[i].tokens), (tree, batch, i)
            assert result.stats.to_row() == alone[i].stats.to_row(), (tree, batch, i)
