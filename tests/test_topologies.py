"""Window topologies: the chain is the loop it replaced, token for token; a draft tree and rows in
flight are one masked forward equal to separate forwards of each path or row; keeping a tree path or
rows' prefixes equals a fresh prefill; verification over siblings, the bonus after a fully accepted
path, the row schedule and the statistics behave as specified."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from chain_reference import REFERENCE, decode_case

from sjdbench.adapter import WindowInputs
from sjdbench.config import build_preset, compose_run, decoder_spec
from sjdbench.decoding.loop import jacobi_decode, verify_windows
from sjdbench.decoding.parts import SampleView, Window
from sjdbench.decoding.processing import one_hot
from sjdbench.decoding.registry import resolve_part
from sjdbench.decoding.state import Drafts, PendingDrafts
from sjdbench.decoding.topologies.forest import ancestor_mask, children_of
from sjdbench.decoding.topologies.rows import RowsConfig, RowsTopology
from sjdbench.decoding.topologies.tree import TreeConfig, TreeTopology, tree_size
from sjdbench.decoding.verifiers.exact import ExactVerifier
from sjdbench.errors import UserError
from sjdbench.models.debug import build_debug_adapter
from sjdbench.models.llama_adapter import CODE_OFFSET

PROMPT = "a red circle at the top left"


@pytest.fixture(scope="module")
def debug():
    return build_debug_adapter(grid_h=6, grid_w=6, n_codes=32, init_std=0.5)


@pytest.fixture(scope="module")
def toy():
    from sjdbench.models.toy.model import build_toy_adapter

    return build_toy_adapter()


def part(kind: str, name: str, adapter=None, **knobs):
    return resolve_part(kind, {"name": name, **knobs}, f"decoder.{kind}").build(adapter)


# -- the chain is the loop it replaced ------------------------------------------------------------


@pytest.mark.slow
def test_chain_topology_reproduces_the_loop_before_topologies():
    """42 decodes (10 presets on the debug model at W = 1, 5, 16, four on the toy) saved from the loop
    before topologies were parts (tests/chain_reference.py): same tokens, same statistics. Traced
    probabilities match to 1e-4: the CPU attention path that reads only the written keys changes
    float sums in the last digits."""
    adapters: dict = {}
    for record in json.loads(REFERENCE.read_text()):
        case = {k: record[k] for k in ("model", "preset", "window", "prompt", "seed")}
        got = decode_case(case, adapters)
        for key, value in record["result"].items():
            if key == "trajectories":
                assert [(t["pos"], t["token"]) for t in got[key]] == [(t["pos"], t["token"]) for t in value], case
                for mine, saved in zip(got[key], value):
                    assert mine["probs"] == pytest.approx(saved["probs"], abs=1e-4), f"{case}: trajectories differ"
            else:
                assert got[key] == value, f"{case}: {key} differs"


def test_width_one_tree_is_the_chain(debug):
    """A tree with one child per slot is a chain: the same decode, token for token."""
    chain = build_preset("mc_sjd", debug, "decoder.window=16")
    tree = replace(chain, topology=TreeTopology(TreeConfig(width=1, depth=3)))
    for seed in range(3):
        a = jacobi_decode(debug, PROMPT, chain, debug.default_sampling, torch.Generator().manual_seed(seed))
        b = jacobi_decode(debug, PROMPT, tree, debug.default_sampling, torch.Generator().manual_seed(seed))
        assert torch.equal(a.tokens, b.tokens) and a.stats.nfe == b.stats.nfe


# -- one masked forward = separate forwards; compaction = fresh prefill ----------------------------


def codes(adapter, n: int, seed: int) -> torch.Tensor:
    return torch.randint(
        CODE_OFFSET, CODE_OFFSET + adapter.n_codes, (n,), generator=torch.Generator().manual_seed(seed)
    )


def committed_cache(adapter, prefix: torch.Tensor, extra: int = 40):
    """A fresh cache holding the prompt and `prefix` (segment positions 0..len-1)."""
    prompt = adapter.encode_prompt(PROMPT)
    cache = adapter.new_cache(1, prompt.length, extra)
    adapter.prefill(cache, [0], [prompt])
    adapter.forward(cache, WindowInputs(prefix[None], torch.arange(prefix.numel())[None]))[0]
    adapter.commit(cache, torch.arange(prefix.numel())[None])
    return cache


@pytest.mark.parametrize("model", ["debug", "toy"])
def test_tree_forward_equals_each_path_and_path_compaction_equals_prefill(model, request):
    adapter = request.getfixturevalue(model)
    prefix = codes(adapter, 4, 0)  # positions 0..3 committed; the root re-feeds position 3
    cache = committed_cache(adapter, prefix[:3])
    level1, level2 = codes(adapter, 3, 1), codes(adapter, 2, 2)
    # root; three children; two grandchildren under each child; one more under the first grandchild
    parent = [-1, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4]
    tokens = torch.cat([prefix[3:4], level1, level2.repeat(3), codes(adapter, 1, 3)])
    depth = np.array([0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3])
    mask = torch.from_numpy(ancestor_mask(np.array(parent)))
    logits = adapter.forward(cache, WindowInputs(tokens[None], torch.as_tensor(3 + depth)[None], mask[None]))[
        0
    ]  # (2, 11, V)

    def path(slot: int) -> list[int]:
        return ([] if parent[slot] < 0 else path(parent[slot])) + [slot]

    for slot in range(len(parent)):
        slots = path(slot)
        cache = committed_cache(adapter, prefix[:3])
        alone = adapter.forward(cache, WindowInputs(tokens[slots][None], torch.arange(3, 3 + len(slots))[None]))[0]
        torch.testing.assert_close(logits[:, slot], alone[:, -1], atol=1e-4, rtol=1e-4)

    # keep the path root -> child 2 -> its second grandchild (slots 0, 2, 7): equals prefilling it
    cache = committed_cache(adapter, prefix[:3])
    adapter.forward(cache, WindowInputs(tokens[None], torch.as_tensor(3 + depth)[None], mask[None]))
    adapter.commit(cache, torch.tensor([0, 2, 7])[None])
    probe = codes(adapter, 3, 4)
    after = adapter.forward(cache, WindowInputs(probe[None], torch.arange(6, 9)[None]))[0]
    cache = committed_cache(adapter, torch.cat([prefix[:4], tokens[[2, 7]]]))
    fresh = adapter.forward(cache, WindowInputs(probe[None], torch.arange(6, 9)[None]))[0]
    torch.testing.assert_close(after, fresh, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("model", ["debug", "toy"])
def test_rows_forward_equals_each_row_and_prefix_compaction_equals_separate_commits(model, request):
    """Two rows in flight with the row-causal mask at raster positions: each row's logits equal a
    forward of that row alone; keeping both rows' prefixes (a cache with a hole between them) equals
    committing them by separate forwards."""
    adapter = request.getfixturevalue(model)
    width = adapter.layout.grid_hw[1] + 1  # a row and its row end token
    committed = codes(adapter, width + 3, 5)  # row 0 (and its end) decided, row 1 decided up to col 2
    committed[width - 1] = 3  # <eol>
    cache = committed_cache(adapter, committed)
    a_pos = torch.arange(width + 2, width + 6)  # row 1: re-fed col 2, drafts for cols 3..5
    b_pos = torch.arange(2 * width - 1, 2 * width + 3)  # row 2: its anchor (row 1's end), drafts cols 0..2
    a, b = codes(adapter, 4, 6), codes(adapter, 4, 7)
    a[0] = committed[-1]
    b[0] = 3  # <eol>
    mask = torch.zeros(8, 8, dtype=torch.bool)
    mask[:4, :4] = torch.ones(4, 4, dtype=torch.bool).tril()
    mask[4:, 4:] = torch.ones(4, 4, dtype=torch.bool).tril()
    mask[1:4, 0] = False  # row 1's re-fed token is already cached: its drafts see that copy
    both = adapter.forward(cache, WindowInputs(torch.cat([a, b])[None], torch.cat([a_pos, b_pos])[None], mask[None]))[0]

    cache = committed_cache(adapter, committed)
    alone_a = adapter.forward(cache, WindowInputs(a[1:][None], a_pos[1:][None]))[0]  # drafts after the cached token
    root_a = adapter.forward(cache, WindowInputs(a[:1][None], a_pos[:1][None]))[0]
    cache = committed_cache(adapter, committed)
    alone_b = adapter.forward(cache, WindowInputs(b[None], b_pos[None]))[0]
    torch.testing.assert_close(both[:, 1:4], alone_a, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(both[:, :1], root_a, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(both[:, 4:], alone_b, atol=1e-4, rtol=1e-4)

    # keep row 1's cols 3..4 and row 2's anchor and col 0 (a cache with a hole between the rows),
    # then probe row 1's col 5 and row 2's col 1
    cache = committed_cache(adapter, committed)
    adapter.forward(cache, WindowInputs(torch.cat([a, b])[None], torch.cat([a_pos, b_pos])[None], mask[None]))
    adapter.commit(cache, torch.tensor([1, 2, 4, 5])[None])
    probe_tokens, probe_pos = torch.cat([a[3:4], b[2:3]]), torch.stack([a_pos[3], b_pos[2]])
    probe_mask = torch.eye(2, dtype=torch.bool)
    after = adapter.forward(cache, WindowInputs(probe_tokens[None], probe_pos[None], probe_mask[None]))[0]

    cache = committed_cache(adapter, committed)  # the same keys by separate forwards: row 2 first, as it never saw
    adapter.forward(cache, WindowInputs(b[:2][None], b_pos[:2][None]))  # row 1's cols 3..4
    adapter.commit(cache, torch.arange(2)[None])
    adapter.forward(cache, WindowInputs(a[1:3][None], a_pos[1:3][None]))
    adapter.commit(cache, torch.arange(2)[None])
    fresh = adapter.forward(cache, WindowInputs(probe_tokens[None], probe_pos[None], probe_mask[None]))[0]
    torch.testing.assert_close(after, fresh, atol=1e-4, rtol=1e-4)


# -- the tree's plan -----------------------------------------------------------------------------


def plan_tree(adapter, topology: TreeTopology, window: int, state_after: int = 1):
    """Plan the first tree window of a decode (the root is segment position 0)."""
    from sjdbench.decoding.loop import loop_constants
    from sjdbench.decoding.parts import InitContext

    constants = loop_constants(adapter)
    N, V = adapter.layout.n_positions, adapter.vocab_size
    tokens = torch.full((N,), -1, dtype=torch.long)
    tokens[:state_after] = CODE_OFFSET
    decided = np.zeros(N, dtype=bool)
    decided[:state_after] = True
    init = part("init", "random")
    ctx = InitContext(
        adapter.layout,
        constants.forced,
        adapter.image_token_ids,
        constants.left_of,
        constants.above_of,
        V,
        torch.float32,
        1,
    )
    view = SampleView(
        0,
        tokens,
        decided,
        np.zeros(N, dtype=bool),
        adapter.layout,
        constants.forced,
        adapter.image_token_ids,
        PendingDrafts(1, window, V, adapter.device, torch.float32),
        torch.Generator().manual_seed(0),
    )
    layout = topology.plan(view, window)  # nothing waits yet: the init drafts every wanted position
    drafted, refs = init.fill(init.begin(ctx), view, layout.wanted)
    fresh = Drafts.new(layout.wanted, drafted, refs, V, fresh=True)
    return topology.place(layout, fresh, view), fresh


def test_tree_plan_shape_mask_positions_and_siblings(debug):
    window, fresh = plan_tree(debug, TreeTopology(TreeConfig(width=3, depth=3)), 30)
    assert len(window) == 30 and tree_size([3, 3]) == 13
    depth = window.depth
    assert (np.bincount(depth)[:3] == [1, 3, 9]).all() and (np.bincount(depth)[3:] == 1).all()
    assert (window.positions == depth).all()  # the root re-feeds position 0; a slot's position = its depth
    mask = window.mask.numpy()
    for slot in range(len(window)):
        ancestors = {slot}
        s = slot
        while window.parent[s] >= 0:
            s = window.parent[s]
            ancestors.add(s)
        assert set(np.flatnonzero(mask[slot])) == ancestors
    kids = children_of(window)
    node_of = {int(s): i for i, s in enumerate(window.node_slots)}
    for children in kids:
        if len(children) < 2:
            continue
        toks = [int(window.tokens[c]) for c in children]
        assert len(set(toks)) == len(toks), "siblings are distinct"
        refs = window.nodes.refs[[node_of[c] for c in children]]
        torch.testing.assert_close(refs.sum(-1), torch.ones(len(children)))
        for k in range(1, len(children)):
            assert float(refs[k, toks[:k]].sum()) == 0.0, "a sibling's q excludes the earlier siblings"
    # the root's children are the same tokens under every parent of a level
    assert [int(window.tokens[c]) for c in kids[kids[0][0]]] == [int(window.tokens[c]) for c in kids[kids[0][1]]]
    # every sibling-0 draft is the chain draft of its position (here the init's, which plan_tree returns)
    first = [c for c in range(len(window)) if window.parent[c] >= 0 and window.sibling[c] == 0]
    drafted = dict(zip(fresh.positions.tolist(), fresh.tokens.tolist()))
    assert all(int(window.tokens[c]) == drafted[int(window.positions[c])] for c in first)


def test_tree_forced_positions_have_one_child_and_the_tree_fits_the_window(debug):
    """The debug grid has a row end at position 6: a tree rooted at position 5 branches at 6 once."""
    window, _ = plan_tree(debug, TreeTopology(TreeConfig(width=3, depth=4)), 64, state_after=6)
    kids = children_of(window)
    assert len(kids[0]) == 1  # position 6 is <eol>
    assert len(kids[kids[0][0]]) == 3 and all(len(kids[c]) == 3 for c in kids[kids[0][0]])
    small, _ = plan_tree(debug, TreeTopology(TreeConfig(width=3, depth=3)), 8)
    # 13 slots do not fit in 8: the tree keeps the levels that fit (root + 3), then a chain of 4
    assert len(small) == 8 and list(np.bincount(small.depth)) == [1, 3, 1, 1, 1, 1]


# -- verification over siblings -----------------------------------------------------------------


def star(p_tokens: list[int], q_tokens: list[int], V: int = 8) -> tuple[Window, torch.Tensor]:
    """A root with siblings q_tokens (one-hot references), each with one child; p given per slot."""
    K = len(q_tokens)
    parent = np.array([-1] + [0] * K + list(range(1, K + 1)))
    sibling = np.array([0] + list(range(K)) + [0] * K)
    drafts = torch.tensor(q_tokens + p_tokens)
    nodes = Drafts.new(np.array([1] * K + [2] * K), drafts, one_hot(drafts, V), V, fresh=False)
    window = Window(
        np.array([0] + [1] * K + [2] * K),
        parent,
        sibling,
        np.array([0] + [1] * K + [2] * K),
        torch.tensor([0]),
        np.array([True] + [False] * 2 * K),
        np.array([True] + [False] * 2 * K),
        torch.from_numpy(ancestor_mask(parent)),
        np.array([1, 2]),
        tokens=torch.cat([torch.tensor([0]), drafts]),
        nodes=nodes,
    )
    return window, parent


def verify(topology, window: Window, p: torch.Tensor, seed: int):
    """One window's verdict and emitted token, as the loop makes them."""
    (verdict,), emitted, _ = verify_windows(
        topology, ExactVerifier(), [window], p[None], window.nodes, [torch.Generator().manual_seed(seed)]
    )
    return verdict, emitted


def test_first_accepted_sibling_wins_and_longest_path_can_skip_a_passing_sibling():
    """Root p = uniform over {1, 2}; siblings 1 and 2 (one-hot q). Sibling 1's child fails (p
    excludes it), sibling 2's child passes. RRS takes sibling 1 whenever it passes (u < 1/2); the
    longest-path reading takes sibling 2 then, which is the departure the exactness suite catches."""
    V = 8
    window, _ = star(p_tokens=[5, 6], q_tokens=[1, 2], V=V)
    p = torch.zeros(len(window), V)
    p[0, [1, 2]] = 0.5
    p[1, 7] = 1.0  # under sibling 1, position 2 must be 7: its child 5 fails
    p[2, 6] = 1.0  # under sibling 2, its child 6 passes
    p[3:, 0] = 1.0
    first, longest = TreeTopology(TreeConfig(2, 2, "first")), TreeTopology(TreeConfig(2, 2, "longest"))
    picks = {"first": [], "longest": []}
    for seed in range(200):
        for name, topo in (("first", first), ("longest", longest)):
            verdict, _ = verify(topo, window, p, seed)
            picks[name].append(int(verdict.accepted[0]) if len(verdict.accepted) else None)
    first_share = picks["first"].count(1) / 200
    assert 0.35 < first_share < 0.65  # sibling 1 passes with probability p(1)/q(1) = 1/2
    assert picks["longest"].count(1) == 0  # longest never keeps sibling 1: its path is shorter
    assert picks["longest"].count(2) > picks["first"].count(2)


def test_sibling_k_is_tested_against_the_residual_left_by_the_earlier_siblings():
    """p = (0.5, 0.5) over {1, 2}; siblings 1 then 2 with one-hot q. After sibling 1 fails, the
    residual is p with token 1 removed, so sibling 2 passes surely: the root always accepts one."""
    window, _ = star(p_tokens=[0, 0], q_tokens=[1, 2])
    p = torch.zeros(len(window), 8)
    p[0, [1, 2]] = 0.5
    p[1:, 0] = 1.0
    counts = {1: 0, 2: 0}
    for seed in range(400):
        verdict, _ = verify(TreeTopology(TreeConfig(2, 2)), window, p, seed)
        counts[int(window.tokens[verdict.accepted[0]])] += 1
    assert counts[1] + counts[2] == 400 and 150 < counts[1] < 250


def test_a_fully_accepted_path_ends_with_a_bonus_from_the_leaf_p_not_a_uniform_pad():
    """When every draft on the path passes, the next token is drawn from the last slot's own p (the
    released code is suspected to take it from the uniform pad instead)."""
    window, _ = star(p_tokens=[5, 6], q_tokens=[1, 2])
    p = torch.zeros(len(window), 8)
    p[0, 1] = 1.0  # sibling 1 passes surely
    p[1, 5] = 1.0  # its child 5 passes surely
    p[3, 4] = 1.0  # the leaf below: the bonus must be 4
    p[[2, 4], 0] = 1.0
    for seed in range(50):
        verdict, emitted = verify(TreeTopology(TreeConfig(2, 2)), window, p, seed)
        assert verdict.accepted.tolist() == [1, 3] and verdict.emit_slots.tolist() == [3] and int(emitted[0]) == 4


class CountBonuses(TreeTopology):
    """Counts the iterations whose accepted path reached a slot without children (a bonus draw)."""

    bonuses = 0

    def verify(self, window, p, rows, passed, verifier):
        verdict = super().verify(window, p, rows, passed, verifier)
        CountBonuses.bonuses += int((verdict.emit_rejected < 0).sum())
        return verdict


@pytest.mark.parametrize("window,width,depth", [(8, 2, 3), (32, 3, 3), (64, 4, 3)])
def test_greedy_tree_equals_greedy_ar_with_fully_accepted_paths(debug, window, width, depth):
    """At temperature 0 a draft passes iff it is the argmax; a tree decode must equal greedy AR token
    for token, including iterations where every draft of the path passed (bonus from p)."""
    greedy = replace(debug.default_sampling, temperature=0.0)
    ar = build_preset("ar", debug)
    tree = replace(
        build_preset("mc_sjd", debug, f"decoder.window={window}"),
        topology=CountBonuses(TreeConfig(width=width, depth=depth)),
    )
    CountBonuses.bonuses = 0
    for seed, prompt in enumerate(["a", "a red circle", "two squares"]):
        expected = jacobi_decode(debug, prompt, ar, greedy, torch.Generator().manual_seed(seed))
        got = jacobi_decode(debug, prompt, tree, greedy, torch.Generator().manual_seed(50 + seed))
        assert torch.equal(expected.tokens, got.tokens)
    assert CountBonuses.bonuses > 0, "no path was accepted to its end: the bonus case was not exercised"


# -- rows ----------------------------------------------------------------------------------------


class Recorder:
    """Wraps an adapter and records every window forward (positions, mask)."""

    def __init__(self, adapter) -> None:
        self.inner, self.calls = adapter, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def forward(self, cache, window):
        self.calls.append((window.positions[0].clone(), None if window.mask is None else window.mask[0].clone()))
        return self.inner.forward(cache, window)


def test_zipar_is_one_token_per_row_per_forward_with_the_row_lag(debug):
    """ZipAR on a 6x6 grid with row ends, s = 2: row r decides cell c at forward r*s + c, so the
    decode takes 1 + (H-1)*s + W forwards (the last for the final row end) and every forward holds
    one slot per row in flight."""
    s, (H, W) = 2, debug.layout.grid_hw
    decoder = build_preset("zipar", debug, f"decoder.topology.row_start={s}")
    recorder = Recorder(debug)
    result = jacobi_decode(recorder, PROMPT, decoder, debug.default_sampling, torch.Generator().manual_seed(0))
    assert result.stats.nfe == 1 + (H - 1) * s + W
    row = result.stats.to_row()
    assert row["accepted"] == 0 and row["verified"] == 0  # no drafts, no verification
    assert max(k for k, c in enumerate(row["rows_in_flight"]) if c) == -(-W // s)
    grid_row = debug.layout.row.numpy()
    for positions, _mask in recorder.calls:
        rows = [int(grid_row[p + 1]) for p in positions.tolist() if grid_row[p + 1] >= 0]
        assert len(rows) == len(set(rows)), "one slot per row"
    forced = debug.layout.forced
    assert torch.equal(result.tokens[forced >= 0], forced[forced >= 0])


def test_pjd_rows_schedule_and_row_causal_mask(debug):
    """PJD with s = 2: several rows in flight; a slot sees only its own row's slots; a row predicts
    only cells whose cell above is decided; only the top unfinished row emits a token."""
    decoder = build_preset("pjd", debug, "decoder.topology.row_start=2", "decoder.topology.row_window=4")
    recorder = Recorder(debug)
    decided_before: list[set] = []

    class Watch(RowsTopology):
        def plan(self, sample, window):
            decided_before.append(set(np.flatnonzero(sample.decided).tolist()))
            return super().plan(sample, window)

    decoder = replace(decoder, topology=Watch(RowsConfig(4, 2, "leading", 0)))
    result = jacobi_decode(recorder, PROMPT, decoder, debug.default_sampling, torch.Generator().manual_seed(1))
    grid_row, grid_col = debug.layout.row.numpy(), debug.layout.col.numpy()
    cells = debug.layout.position_of().numpy()
    multi = 0
    for (positions, mask), decided in zip(recorder.calls, decided_before):
        pos = positions.numpy()
        band = [int(grid_row[p + 1]) if grid_row[p + 1] >= 0 else int(grid_row[p]) for p in pos]
        multi += len(set(band)) > 1
        first_slots = {0} | {i for i in range(1, len(pos)) if band[i] != band[i - 1]}
        for i in range(len(pos)):
            for j in np.flatnonzero(mask[i].numpy()):
                assert band[i] == band[j] or (j in first_slots and pos[j] < pos[i]), "a slot sees another row's draft"
            target = pos[i] + 1
            r, c = grid_row[target], grid_col[target]
            if r > 0 and r != min(band):  # not the top row in flight: the cell above must be decided
                assert cells[r - 1, c] in decided or cells[r - 1, c] < min(decided_before[0] | {10**9}), (r, c)
    assert multi > 0, "rows never overlapped"
    row = result.stats.to_row()
    assert sum(row["row_verified"]) == row["verified"] and sum(row["row_accepted"]) == row["accepted"]
    committed = sum(m * c for m, c in enumerate(row["accept_len_hist"]))
    assert committed == debug.layout.n_positions - 1


# -- statistics ------------------------------------------------------------------------------------


def test_tree_statistics_add_up(toy):
    decoder = build_preset("sjd_pac", toy)
    result = jacobi_decode(toy, PROMPT, decoder, toy.default_sampling, torch.Generator().manual_seed(0))
    row = result.stats.to_row()
    assert row["nfe"] == row["iterations"] + 1
    assert sum(m * c for m, c in enumerate(row["accept_len_hist"])) == toy.layout.n_positions - 1
    assert sum(row["sibling_accepted"]) == row["accepted"] == sum(row["slot_accepted"])
    assert sum(row["sibling_verified"]) == row["verified"] == sum(row["slot_verified"])
    assert len(row["sibling_accepted"]) == 3 and row["sibling_accepted"][1] > 0  # the tree's siblings do get accepted
    assert row["slots_per_forward"] > 40
    assert row["growth_eligible_accepted"] > 0 and row["verify_eligible_accepted"] >= row["growth_eligible_accepted"]


def test_presets_run_on_the_toy_and_debug_models(debug, toy):
    for adapter in (debug, toy):
        for preset in ("sjd_pac", "lantern_pac", "pjd", "zipar"):
            decoder = build_preset(preset, adapter)
            result = jacobi_decode(adapter, PROMPT, decoder, adapter.default_sampling, torch.Generator().manual_seed(2))
            forced = adapter.layout.forced
            assert torch.equal(result.tokens[forced >= 0], forced[forced >= 0])
            content = result.tokens[forced < 0]
            assert bool(((content >= CODE_OFFSET) & (content < CODE_OFFSET + adapter.n_codes)).all())
            assert result.stats.nfe < adapter.layout.n_positions, preset


# -- configuration -------------------------------------------------------------------------------


def test_topology_is_a_part_choice_and_the_chain_keeps_run_ids():
    from sjdbench.config.identity import label, run_id_for

    sjd = decoder_spec(compose_run(["decoder=sjd"]))
    assert sjd.topology.name == "chain" and "topology" not in sjd.identity()
    ids = {
        run_id_for(compose_run(o), "sha", "cpu") for o in (["decoder=sjd"], ["decoder=sjd", "decoder/topology=chain"])
    }
    assert len(ids) == 1
    tree = compose_run(["decoder=sjd", "decoder.topology=tree", "decoder.topology.width=4"])
    assert decoder_spec(tree).topology.config.width == 4 and label(tree) == "sjd+tree(K=4)"
    assert label(compose_run(["decoder=sjd_pac", "decoder.topology.width=4"])) == "sjd_pac(K=4)"
    assert run_id_for(tree, "sha", "cpu") not in ids


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["decoder/topology=star"], "unknown decoder.topology 'star'; choose one of: chain, drafter_tree, rows, tree"),
        (["decoder=sjd_pac", "decoder.topology.width=0"], "decoder.topology.width must be >= 1"),
        (
            ["decoder=sjd_pac", "decoder.topology.select=best"],
            "select 'best' is unknown; choose one of: first, longest",
        ),
        (["decoder=pjd", "decoder.topology.emit=some"], "emit 'some' is unknown; choose one of: leading, all"),
        (
            ["decoder=sjd_pac", "decoder.topology.row_start=3"],
            "row_start belongs to topology rows (decoder/topology=rows)",
        ),
    ],
)
def test_bad_topology_input_fails_with_one_line(overrides, needle):
    from sjdbench.errors import UserError

    with pytest.raises(UserError) as error:
        compose_run(overrides)
    assert needle in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    "preset, overrides",
    [("sjd", ["decoder.window=16"]), ("sjd_pac", ["decoder.window=24"]), ("pjd", ["decoder.topology.row_start=2"])],
)
def test_draft_traces_list_every_verified_draft_and_change_nothing(debug, preset, overrides):
    """The loop's own draft tracing (what `sjdbench report --trace-drafts` replays with) lists each
    verified content draft once per test, accepted or not, and leaves the decode untouched."""
    spec = decoder_spec(compose_run([f"decoder={preset}", *overrides]))
    plain, traced = spec.build(debug), spec.build(debug, trace_drafts=True)
    a = jacobi_decode(debug, PROMPT, plain, debug.default_sampling, torch.Generator().manual_seed(5))
    b = jacobi_decode(debug, PROMPT, traced, debug.default_sampling, torch.Generator().manual_seed(5))
    assert torch.equal(a.tokens, b.tokens) and not a.stats.draft_traces
    drafts = b.stats.draft_traces
    assert len(drafts) == b.stats.verified and sum(d["accepted"] for d in drafts) == b.stats.accepted
    content = ~debug.layout.is_forced
    assert all(content[d["pos"]] and 1 <= len(d["probs"]) <= 16 and 0 <= d["probs"][-1] <= 1 for d in drafts)
    assert all(int(b.tokens[d["pos"]]) == d["token"] for d in drafts if d["accepted"])  # accepted = committed


@pytest.mark.parametrize(("runs", "width"), [(1, 4), (2, 2), (3, 1), (8, 1)])
def test_the_adaptive_tree_narrows_where_the_neighbours_were_easy(debug, runs, width):
    """ADT-Tree's width: K / r, r = the tokens decided by the iterations that decided the left and
    upper neighbours; the first undecided position without a decided neighbour gets the full width."""
    from sjdbench.decoding.loop import loop_constants

    constants = loop_constants(debug)
    N = debug.layout.n_positions
    topology = TreeTopology(TreeConfig(width=4, depth=3, adapt="neighbours"))
    grid_w = int(debug.layout.col.max()) + 1
    n = int(np.flatnonzero((debug.layout.row.numpy() == 1) & (debug.layout.col.numpy() == 1))[0])  # row 1, col 1
    run = np.zeros(N, dtype=np.int64)
    run[:n] = runs
    view = SimpleNamespace(n_positions=N, run=run, neighbours=(constants.left_of, constants.above_of))
    assert topology.adapted_width(view, n) == width
    run[:] = 0
    assert topology.adapted_width(view, n) == 4  # nothing decided around it
    assert grid_w > 1


def test_an_unknown_adaptation_is_one_line():
    with pytest.raises(UserError) as error:
        TreeConfig(adapt="wild").check()
    assert "adapt 'wild' is unknown; choose one of: none, neighbours" in str(error.value)
