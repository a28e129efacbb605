"""Released drafters (jadohu/LANTERN `llamagen_drafter`, `llamagen2_drafter`, `anole_drafter`): their
file layout loads strictly into our drafter, bad files are refused in one line, and our drafter's
logits equal the released network's on identical inputs (a prompt/committed prefix, then two tree
levels with ancestor masks, both CFG rows with their own positions and padding).

Two references for the released network:
* restated (always runs): the forward of `Model` in `models/drafters/cnets_llamagen.py` and
  `cnets_anole.py`, restated here from reading them (fc over [embedding; feature], LlamaGen's layer 0
  without input norm and 2-D interleaved rotary with 119 conditioning rows; Anole's input norm,
  per-head QK-LayerNorm and 1-D rotate-half rotary; fp32 softmax over additive masks; past keys
  concatenated in front).
* released (SJDBENCH_LANTERN_SRC=<a checkout of jadohu/LANTERN>): the released module itself, run
  unchanged. Two shims, both forced by the environment and applied here only: `models/__init__.py`
  is not executed (it imports the whole inference stack, which needs `LogitsWarper`, removed from
  transformers 5), by registering `models` as a bare package; and the configs' `rope_scaling` is
  set back to None after loading, because transformers 5 rewrites a null `rope_scaling` into
  `{"rope_theta": ..., "rope_type": "default"}`, which the released `_init_rope` reads as a scaling;
  for the same reason `rope_theta` is set back on the config (transformers 5 moved it into
  `rope_parameters`, and the released Chameleon attention reads `config.rope_theta`).
"""

from __future__ import annotations

import json
import math
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sjdbench.adapter import PromptStates
from sjdbench.models.drafter import Drafter
from sjdbench.models.drafter.files import load_released
from sjdbench.models.weights import WeightsError

VOCAB, D, HEADS = 300, 64, 4
LLAMAGEN_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "input_type": "t2i",
    "hidden_size": D,
    "intermediate_size": 96,
    "num_attention_heads": HEADS,
    "num_key_value_heads": HEADS,
    "num_hidden_layers": 1,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "max_position_embeddings": 2048,
    "pretraining_tp": 1,
    "rope_scaling": None,
    "vocab_size": VOCAB,
    "caption_dim": 32,
}
ANOLE_CONFIG = {
    "architectures": ["ChameleonForConditionalGeneration"],
    "model_type": "chameleon",
    "hidden_size": D,
    "intermediate_size": 96,
    "num_attention_heads": HEADS,
    "num_key_value_heads": HEADS,
    "num_hidden_layers": 1,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "mlp_bias": False,
    "model_parallel_size": 1,
    "vocab_size": VOCAB,
}
CONFIGS = {"llamagen": LLAMAGEN_CONFIG, "anole": ANOLE_CONFIG}


def released_state(config: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights under the released key names (every tensor, norms included, away from 1/0)."""
    g = torch.Generator().manual_seed(seed)
    hd, inter = D // HEADS, config["intermediate_size"]
    shapes = {
        "embed_tokens.weight": (VOCAB, D),
        "fc.weight": (D, 2 * D),
        "fc.bias": (D,),
        "layers.0.self_attn.q_proj.weight": (D, D),
        "layers.0.self_attn.k_proj.weight": (D, D),
        "layers.0.self_attn.v_proj.weight": (D, D),
        "layers.0.self_attn.o_proj.weight": (D, D),
        "layers.0.mlp.gate_proj.weight": (inter, D),
        "layers.0.mlp.up_proj.weight": (inter, D),
        "layers.0.mlp.down_proj.weight": (D, inter),
        "layers.0.post_attention_layernorm.weight": (D,),
    }
    if config["model_type"] == "chameleon":
        shapes.update(
            {
                "layers.0.input_layernorm.weight": (D,),
                "layers.0.self_attn.q_norm.weight": (HEADS, hd),
                "layers.0.self_attn.q_norm.bias": (HEADS, hd),
                "layers.0.self_attn.k_norm.weight": (HEADS, hd),
                "layers.0.self_attn.k_norm.bias": (HEADS, hd),
            }
        )
    state = {}
    for name, shape in shapes.items():
        if "norm.weight" in name or "layernorm" in name:
            state[name] = 1.0 + 0.2 * torch.randn(shape, generator=g)
        elif "embed" in name:
            state[name] = torch.randn(shape, generator=g)
        else:
            state[name] = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
    return state


def write_released(folder: Path, kind: str) -> dict[str, torch.Tensor]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIGS[kind]))
    state = released_state(CONFIGS[kind])
    torch.save(state, folder / "pytorch_model.bin")
    return state


# -- the inputs: a prefix (prompt entries + committed entries) and two tree levels ----------------
P_SLOTS, COMMITTED, WIDTH = 7, 3, 3  # prompt slots, committed entries, nodes per tree level
SEGMENT = 16  # segment positions our drafter cache holds
PAD_UNCOND = 4  # the unconditional row's prompt is left padding except its last 3 slots
DIFF = PAD_UNCOND  # its positions run this much behind the conditional row's (Anole's input_position_diff)


def scenario(kind: str, seed: int = 1) -> dict:
    g = torch.Generator().manual_seed(seed)
    S = P_SLOTS - 1 + COMMITTED  # released prefix slots (drafter slot p: token p + 1, feature of slot p)
    ids = torch.randint(VOCAB, (2, S), generator=g)
    ids[1] = ids[0]  # the released code feeds both rows the same tokens
    hidden = torch.randn(2, S, D, generator=g)
    level1_ids = torch.randint(VOCAB, (WIDTH,), generator=g)
    level2_ids = torch.randint(VOCAB, (WIDTH,), generator=g)
    level2_parents = torch.tensor([0, 0, 2])  # level-1 nodes each level-2 node hangs under
    valid = torch.ones(2, S, dtype=torch.bool)
    positions = torch.arange(S).expand(2, S).clone()
    if kind == "anole":  # the unconditional row: left padding, positions shifted back (clamped at 0)
        valid[1, :PAD_UNCOND] = False
        positions[1] = (positions[1] - DIFF).clamp(min=0)
    return dict(
        S=S,
        ids=ids,
        hidden=hidden,
        valid=valid,
        positions=positions,
        level1_ids=level1_ids,
        level2_ids=level2_ids,
        level2_parents=level2_parents,
    )


def our_prefix(drafter: Drafter, sc: dict, drafts: int):
    """Our drafter on the scenario's prefix: start on the prompt slots, extend the committed ones.
    Returns (its cache, the committed entries' step)."""
    P = P_SLOTS
    # prompt slot i of ours = released slot i - 1 shifted: our entry i pairs token i with feature i - 1
    tokens = torch.zeros(1, 2, P, dtype=torch.long)
    tokens[0, :, 1:] = sc["ids"][:, : P - 1]
    hidden = torch.zeros(1, 2, P, D)
    hidden[0, :, : P - 1] = sc["hidden"][:, : P - 1]
    valid = torch.zeros(1, 2, P, dtype=torch.bool)
    valid[0, :, : P - 1] = sc["valid"][:, : P - 1]
    valid[0, :, P - 1] = True
    rotary = torch.zeros(1, 2, P, dtype=torch.long)
    rotary[0, :, : P - 1] = sc["positions"][:, : P - 1]
    base = (sc["positions"][:, P - 1] + 1)[None]  # segment position 0's entry reads slot P - 1's feature
    states = PromptStates(hidden=hidden, tokens=tokens, valid=valid, rotary=rotary, base=base)
    cache = drafter.new_cache(1, P, SEGMENT, drafts)
    drafter.start(cache, [0], states)
    # the start's own outputs: run the prompt entries again as a plain check is not needed; compare
    # the committed entries and the drafts (the prompt entries' keys feed them)
    seg = torch.arange(COMMITTED)[None]
    return cache, drafter.extend(cache, sc["ids"][0, P - 1 :][None], sc["hidden"][None, :, P - 1 :], seg)


def ours(net, head, sc: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Our drafter through its API: the prefix (`our_prefix`), then two draft levels. Returns logits
    (2, S, V) of the prefix (prompt entries padded in front), level 1 (2, W, V), level 2 (2, W, V)."""
    drafter = Drafter(net, head)
    cache, step = our_prefix(drafter, sc, 2 * WIDTH)
    last = step.features[:, :, -1:]  # (1, 2, 1, D) the root's feature for level 1
    level1 = drafter.draft(
        cache,
        sc["level1_ids"][None],
        last.expand(-1, -1, WIDTH, -1),
        torch.full((1, WIDTH), COMMITTED),
        torch.eye(WIDTH, dtype=torch.bool)[None],
    )
    parents = sc["level2_parents"]
    mask = torch.zeros(1, WIDTH, 2 * WIDTH, dtype=torch.bool)
    mask[0, torch.arange(WIDTH), parents] = True
    level2 = drafter.draft(
        cache,
        sc["level2_ids"][None],
        level1.features[:, :, parents],
        torch.full((1, WIDTH), COMMITTED + 1),
        mask,
    )
    return step.logits[0], level1.logits[0], level2.logits[0]


# -- the restated released forward ----------------------------------------------------------------
def restated_table(grid: int, head_dim: int, cls: int, base: float = 10000.0) -> torch.Tensor:
    half = head_dim // 2
    freqs = 1.0 / (base ** (torch.arange(0, half, 2)[: half // 2].float() / half))
    steps = torch.outer(torch.arange(grid).float(), freqs)
    both = torch.cat([steps[:, None, :].expand(-1, grid, -1), steps[None, :, :].expand(grid, -1, -1)], dim=-1)
    table = torch.stack([both.cos(), both.sin()], dim=-1).flatten(0, 1)
    return torch.cat([torch.zeros(cls, half, 2), table, torch.zeros(20, half, 2)])


def restated(state, config, hidden, ids, positions, add_mask, past):
    """One call of the released Model.forward (+ use_cache): returns (out, (k, v))."""
    chameleon = config["model_type"] == "chameleon"
    R, L, _ = hidden.shape
    hd = D // HEADS
    x = F.linear(torch.cat([state["embed_tokens.weight"][ids], hidden], -1), state["fc.weight"], state["fc.bias"])
    residual = x

    def rms(t, w, eps):
        return w * (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps))

    eps = config["rms_norm_eps"]
    h = rms(x, state["layers.0.input_layernorm.weight"], eps) if chameleon else x
    q = F.linear(h, state["layers.0.self_attn.q_proj.weight"])
    k = F.linear(h, state["layers.0.self_attn.k_proj.weight"])
    v = F.linear(h, state["layers.0.self_attn.v_proj.weight"]).view(R, L, HEADS, hd).transpose(1, 2)
    if chameleon:
        q = F.layer_norm(q.view(R, L, HEADS, hd), (hd,), eps=1e-5) * state["layers.0.self_attn.q_norm.weight"]
        q = q + state["layers.0.self_attn.q_norm.bias"]
        k = F.layer_norm(k.view(R, L, HEADS, hd), (hd,), eps=1e-5) * state["layers.0.self_attn.k_norm.weight"]
        k = k + state["layers.0.self_attn.k_norm.bias"]
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        inv = 1.0 / (config["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
        ang = positions[..., None].float() * inv
        ang = torch.cat([ang, ang], -1)
        cos, sin = ang.cos()[:, None], ang.sin()[:, None]

        def rot(t):
            return t * cos + torch.cat([-t[..., hd // 2 :], t[..., : hd // 2]], -1) * sin

        q, k = rot(q), rot(k)
    else:
        table = restated_table(16, hd, 119)[positions[0]]  # LlamaGen: one position row for both

        def rot(t):
            pairs = t.view(R, L, HEADS, hd // 2, 2)
            c, s = table[None, :, None, :, 0], table[None, :, None, :, 1]
            out = torch.stack([pairs[..., 0] * c - pairs[..., 1] * s, pairs[..., 1] * c + pairs[..., 0] * s], -1)
            return out.flatten(3).transpose(1, 2)

        q, k = rot(q), rot(k)
    if past is not None:
        k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
    scores = q @ k.transpose(2, 3) / math.sqrt(hd) + add_mask
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(R, L, D)
    x = residual + F.linear(y, state["layers.0.self_attn.o_proj.weight"])
    h = rms(x, state["layers.0.post_attention_layernorm.weight"], eps)
    mlp = F.linear(
        F.silu(F.linear(h, state["layers.0.mlp.gate_proj.weight"])) * F.linear(h, state["layers.0.mlp.up_proj.weight"]),
        state["layers.0.mlp.down_proj.weight"],
    )
    return x + mlp, (k, v)


def released_masks(sc: dict, kind: str):
    """The additive masks the released Model builds: causal + padding (Anole passes its input mask;
    LlamaGen none) for the prefix, then [all prefix | tree mask] for each level."""
    S, low = sc["S"], torch.finfo(torch.float32).min
    key_ok = sc["valid"] if kind == "anole" else torch.ones(2, S, dtype=torch.bool)
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    prefix = torch.where(causal[None] & key_ok[:, None, :], 0.0, low)
    prefix = prefix + torch.where(~causal[None] & ~key_ok[:, None, :], low, 0.0)  # both: the released sum
    tree1 = torch.eye(WIDTH, dtype=torch.bool)
    parents = sc["level2_parents"]
    tree2 = torch.cat([tree1[parents], torch.eye(WIDTH, dtype=torch.bool)], dim=1)
    level1 = torch.cat([key_ok[:, None, :].expand(-1, WIDTH, -1), tree1[None].expand(2, -1, -1)], -1)
    level2 = torch.cat([key_ok[:, None, :].expand(-1, WIDTH, -1), tree2[None].expand(2, -1, -1)], -1)
    as_add = lambda m: torch.where(m, 0.0, low)[:, None]  # noqa: E731
    return prefix[:, None].clamp(min=low), as_add(level1), as_add(level2)


def restated_run(state, config, head, sc, kind):
    pm, m1, m2 = released_masks(sc, kind)
    out, past = restated(state, config, sc["hidden"], sc["ids"], sc["positions"], pm, None)
    S = sc["S"]
    pos1 = torch.full((2, WIDTH), S)
    pos2 = torch.full((2, WIDTH), S + 1)
    if kind == "anole":
        pos1[1] -= DIFF
        pos2[1] -= DIFF
    root = out[:, -1:].expand(-1, WIDTH, -1)
    out1, past = restated(state, config, root, sc["level1_ids"].expand(2, -1), pos1, m1, past)
    feed = out1[:, sc["level2_parents"]]
    out2, _ = restated(state, config, feed, sc["level2_ids"].expand(2, -1), pos2, m2, past)
    return head(out), head(out1), head(out2)


def _head(seed: int = 3) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(D, VOCAB, bias=False).requires_grad_(False)


def _compare(kind: str, theirs: tuple, mine: tuple, sc: dict) -> None:
    prefix_theirs, l1_theirs, l2_theirs = theirs
    prefix_mine, l1_mine, l2_mine = mine
    P = P_SLOTS
    # the committed entries (released slots P-1 .. S-1), every row
    torch.testing.assert_close(prefix_mine, prefix_theirs[:, P - 1 :], atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(l1_mine, l1_theirs, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(l2_mine, l2_theirs, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["llamagen", "anole"])
def test_our_drafter_equals_the_restated_released_network(tmp_path, kind):
    state = write_released(tmp_path / kind, kind)
    net = load_released(tmp_path / kind)
    head = _head()
    sc = scenario(kind)
    with torch.no_grad():
        theirs = restated_run(state, CONFIGS[kind], head, sc, kind)
    _compare(kind, theirs, ours(net, head, sc), sc)


LANTERN = os.environ.get("SJDBENCH_LANTERN_SRC")


def released_module(kind: str):
    src = Path(LANTERN)
    if "models" not in sys.modules or getattr(sys.modules["models"], "__path__", None) != [str(src / "models")]:
        package = types.ModuleType("models")
        package.__path__ = [str(src / "models")]  # the package without its __init__ (see the docstring)
        sys.modules["models"] = package
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))
    import importlib

    module = importlib.import_module(f"models.drafters.cnets_{kind}")
    configs = importlib.import_module("models.configs.configs")
    return module, configs


@pytest.mark.skipif(not LANTERN, reason="set SJDBENCH_LANTERN_SRC to a checkout of jadohu/LANTERN")
@pytest.mark.parametrize("kind", ["llamagen", "anole"])
def test_our_drafter_equals_the_released_module(tmp_path, kind):
    module, configs = released_module(kind)
    folder = tmp_path / kind
    state = write_released(folder, kind)
    config_class = configs.EConfig if kind == "llamagen" else configs.EConfigAnole
    config = config_class.from_pretrained(str(folder / "config.json"))
    theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta")
    config.rope_scaling = None  # transformers 5 rewrote the null (see the docstring)
    if theta is not None and "rope_theta" not in config.__dict__:
        config.rope_theta = theta  # transformers 5 moved it into rope_parameters (see the docstring)
    model = module.Model(config, bias=True)
    model.load_state_dict(state, strict=True)
    model.eval()
    head, sc = _head(), scenario(kind)
    S = sc["S"]
    with torch.no_grad():
        extra = {}
        if kind == "anole":
            extra = {"attention_mask": sc["valid"].long(), "position_ids": sc["positions"]}
        out, past = model(sc["hidden"], input_ids=sc["ids"], use_cache=True, **extra)
        model.tree_mask = torch.eye(WIDTH)[None, None]
        pos1, pos2 = torch.full((2, WIDTH), S), torch.full((2, WIDTH), S + 1)
        if kind == "anole":
            pos1[1] -= DIFF
            pos2[1] -= DIFF
            extra = {"attention_mask": sc["valid"].long()}
        else:
            pos1, pos2 = pos1[:1], pos2[:1]
        root = out[:, -1:].expand(-1, WIDTH, -1)
        out1, past = model(
            root,
            input_ids=sc["level1_ids"].expand(2, -1),
            past_key_values=past,
            position_ids=pos1,
            use_cache=True,
            **extra,
        )
        parents = sc["level2_parents"]
        tree1 = torch.eye(WIDTH)
        model.tree_mask = torch.cat([tree1[parents], torch.eye(WIDTH)], dim=1)[None, None]
        out2, _ = model(
            out1[:, parents],
            input_ids=sc["level2_ids"].expand(2, -1),
            past_key_values=past,
            position_ids=pos2,
            use_cache=True,
            **extra,
        )
    net = load_released(folder)
    _compare(kind, (head(out), head(out1), head(out2)), ours(net, head, sc), sc)


@pytest.mark.skipif(not LANTERN, reason="set SJDBENCH_LANTERN_SRC to a checkout of jadohu/LANTERN")
@pytest.mark.parametrize(("top_k", "depth", "total"), [(4, 3, 12), (3, 4, 9)])
def test_our_dynamic_tree_equals_the_released_topk_genrate(tmp_path, top_k, depth, total):
    """EAGLE-2's tree from the same drafter weights and prefix: the released `Model.topK_genrate`
    (LlamaGen, no logits processor, CFG 3) run unchanged, against our `drafter_tree` topology
    (`shape: dynamic`) driven by our drafter proposal: the same drafted tokens in the same order,
    each under the same parent."""
    from sjdbench.adapter import Sampling
    from sjdbench.decoding.processing import StructureMasks
    from sjdbench.decoding.proposals.drafter import DrafterProposal, DraftingState
    from sjdbench.decoding.topologies.drafter_tree import DrafterTreeTopology
    from sjdbench.models.drafter import DrafterStep

    module, configs = released_module("llamagen")
    folder = tmp_path / "llamagen"
    state = write_released(folder, "llamagen")
    config = configs.EConfig.from_pretrained(str(folder / "config.json"))
    theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta")
    config.rope_scaling = None  # transformers 5 rewrote the null (see the docstring)
    if theta is not None and "rope_theta" not in config.__dict__:
        config.rope_theta = theta
    model = module.Model(config, bias=True, total_tokens=total, depth=depth, top_k=top_k)
    model.load_state_dict(state, strict=True)
    model.eval()
    model.init_tree()
    head, sc = _head(), scenario("llamagen")
    with torch.no_grad():  # topK_genrate drops input_ids' first column and drafts after its last
        ids = torch.cat([torch.zeros(2, 1, dtype=torch.long), sc["ids"]], dim=1)
        tokens, _, mask, _ = model.topK_genrate(sc["hidden"], ids, head, None, 3.0)
    released = tokens[0, 1:].tolist()
    ancestors = mask[0, 0].bool()  # (T, T) each node sees its ancestors and itself
    depths = ancestors.sum(-1) - 1
    released_parents = [
        max((j for j in range(i) if ancestors[i, j] and depths[j] == depths[i] - 1), default=0)
        for i in range(1, len(released) + 1)
    ]

    drafter = Drafter(load_released(folder), head)
    cache, step = our_prefix(drafter, sc, top_k * depth)
    proposal = DrafterProposal(DrafterProposal.Config(), drafter)
    drafting = DraftingState(
        cache, np.zeros(1, dtype=np.int64), DrafterStep(step.logits[:, :, -1:], step.features[:, :, -1:])
    )
    topology = DrafterTreeTopology(DrafterTreeTopology.Config(shape="dynamic", top_k=top_k, depth=depth))
    masks = StructureMasks(torch.full((SEGMENT,), -1), torch.ones(VOCAB, dtype=torch.bool))
    (tree,) = proposal.draft_trees(
        drafting, topology, np.array([COMMITTED]), total, masks, Sampling(cfg_scale=3.0), [], torch.float32
    )
    assert len(released) == total - 1 and int(depths.max()) >= 2  # a real tree, several levels deep
    assert tree.tokens.tolist() == released
    assert tree.parent[1:].tolist() == released_parents


# -- files ---------------------------------------------------------------------------------------
def test_released_layout_loads_strictly_with_the_released_key_names(tmp_path):
    for kind in CONFIGS:
        state = write_released(tmp_path / kind, kind)
        net = load_released(tmp_path / kind)
        assert set(net.state_dict()) == set(state)


def test_missing_files_are_named_with_the_download_command(tmp_path):
    write_released(tmp_path / "d", "anole")
    (tmp_path / "d" / "pytorch_model.bin").unlink()
    with pytest.raises(WeightsError) as error:
        load_released(tmp_path / "d", repo="jadohu/anole_drafter")
    text = str(error.value)
    assert "pytorch_model.bin" in text and "hf download jadohu/anole_drafter" in text and "\n" not in text
    (tmp_path / "d" / "config.json").unlink()
    with pytest.raises(WeightsError, match="config.json not found"):
        load_released(tmp_path / "d", repo="jadohu/anole_drafter")


def test_truncated_weights_are_refused_in_one_line(tmp_path):
    write_released(tmp_path / "d", "llamagen")
    path = tmp_path / "d" / "pytorch_model.bin"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(WeightsError) as error:
        load_released(tmp_path / "d", repo="jadohu/llamagen_drafter")
    assert "truncated or corrupt" in str(error.value) and "\n" not in str(error.value)


def test_weights_of_another_shape_are_refused_in_one_line(tmp_path):
    write_released(tmp_path / "d", "anole")
    config = dict(ANOLE_CONFIG, intermediate_size=128)  # the config of another drafter
    (tmp_path / "d" / "config.json").write_text(json.dumps(config))
    with pytest.raises(WeightsError) as error:
        load_released(tmp_path / "d")
    assert "mlp.gate_proj.weight has shape [96, 64]" in str(error.value)
    (tmp_path / "d" / "config.json").write_text(json.dumps(LLAMAGEN_CONFIG))  # a LlamaGen config: no QK norms
    with pytest.raises(WeightsError, match="has layers.0.input_layernorm.weight"):
        load_released(tmp_path / "d")
