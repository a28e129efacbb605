"""The drafter and the hidden-state capability it reads, on the debug model in fp64.

The reference for every drafter forward is one plain forward of the network (no cache) over the
whole sequence of entries an entry may see: the cache's prompt, committed and draft regions, the
rotary positions and the tree masks must reproduce it exactly."""

from __future__ import annotations

import pytest
import torch

from sjdbench.adapter import WindowInputs, require_hidden_states, returns_hidden_states
from sjdbench.errors import UserError
from sjdbench.models.debug import build_debug_adapter
from sjdbench.models.drafter import DrafterConfig, DrafterNet, bind
from sjdbench.models.drafter.network import NoCache, init_drafter


@pytest.fixture(scope="module")
def adapter():
    built = build_debug_adapter(grid_h=3, grid_w=3, n_codes=16, dtype="fp64")
    built.model.requires_grad_(False)
    return built


def make_drafter(adapter, family="llama", layers=1, seed=0):
    cfg = DrafterConfig(
        family, adapter.hidden_size, 96, 4, 2 if family == "llama" else 4, adapter.vocab_size, num_hidden_layers=layers
    )
    net = init_drafter(DrafterNet(cfg), std=0.2, seed=seed)
    with torch.no_grad():
        net.embed_tokens.weight.copy_(adapter.token_embeddings())
        if family == "chameleon":  # QK-norm affines other than the identity
            for layer in net.layers:
                for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                    norm.weight.normal_(1.0, 0.2)
                    norm.bias.normal_(0.0, 0.2)
    return bind(adapter, net)


def ar_sequence(adapter, caption, length, seed=0):
    """Prompt states and a random segment of `length` tokens with the target's hidden states."""
    generator = torch.Generator().manual_seed(seed)
    prompt = adapter.encode_prompt(caption)
    cache = adapter.new_cache(1, prompt.length, length)
    _, states = adapter.prefill_states(cache, [0], [prompt])
    ids = adapter.image_token_ids
    tokens = ids[torch.randint(len(ids), (length,), generator=generator)]
    forced = adapter.layout.forced[:length]
    tokens = torch.where(forced >= 0, forced, tokens)
    _, hidden = adapter.forward_states(cache, WindowInputs(tokens[None], torch.arange(length)[None]))  # (1, 2, L, D)
    return prompt, states, tokens, hidden


def reference(drafter, states, tokens, hidden, row, upto):
    """Output features (n, D) of a plain forward over row `row`'s entries: prompt entries 1..P-1
    and segment entries 0..upto-1, features = the target's hidden states."""
    P = states.hidden.shape[2]
    real = states.valid[0, row]
    first = int(real.nonzero()[0])  # left padding ends here
    prompt_tokens = states.tokens[0, row, first + 1 :]
    prompt_features = states.hidden[0, row, first:-1]
    prompt_rotary = states.rotary[0, row, first:-1]
    seg_features = torch.cat([states.hidden[0, row, -1:], hidden[0, row, : upto - 1]])
    seg_rotary = states.base[0, row] + torch.arange(upto) - 1
    all_tokens = torch.cat([prompt_tokens, tokens[:upto]])[None]
    all_features = torch.cat([prompt_features, seg_features])[None]
    all_rotary = torch.cat([prompt_rotary, seg_rotary])[None]
    n = all_tokens.shape[1]
    mask = torch.ones(n, n, dtype=torch.bool).tril()[None, None]
    with torch.no_grad():
        out = drafter.net(all_tokens, all_features.to(drafter.net.dtype), all_rotary, mask, NoCache())
    assert P - 1 - first + upto == n
    return out[0, -upto:]


@pytest.mark.parametrize("family", ["llama", "chameleon"])
@pytest.mark.parametrize("tight", [False, True], ids=["whole-segment", "keys-to-reach"])
def test_extend_in_pieces_equals_one_plain_forward(adapter, family, tight):
    """tight: each extend names the host bound of its positions, and the forwards' keys stop there."""
    drafter = make_drafter(adapter, family)
    prompt, states, tokens, hidden = ar_sequence(adapter, "a blue square", 9)
    dcache = drafter.new_cache(1, prompt.length, adapter.layout.n_positions, 8)
    drafter.start(dcache, [0], states)
    features_of = torch.cat([states.hidden[:, :, -1:], hidden[:, :, :-1]], dim=2)  # (1, 2, 9, D) slot before
    outs = []
    for start, stop in [(0, 1), (1, 4), (4, 9)]:
        positions = torch.arange(start, stop)[None]
        reach = stop if tight else None
        step = drafter.extend(dcache, tokens[None, start:stop], features_of[:, :, start:stop], positions, reach)
        assert dcache.reach == (stop if tight else adapter.layout.n_positions)
        outs.append(step.features)
        assert torch.allclose(step.logits, adapter.lm_head(step.features))
    got = torch.cat(outs, dim=2)[0]  # (2, 9, D)
    for row in (0, 1):
        assert torch.allclose(got[row], reference(drafter, states, tokens, hidden, row, 9), atol=1e-10)


@pytest.mark.parametrize("reach", [None, 3], ids=["whole-segment", "keys-to-reach"])
def test_a_tree_level_sees_its_ancestors_only(adapter, reach):
    """Two siblings at position 3 and a child of the second at 4: each output equals the plain
    forward of its own path (with the keys stopping after the committed entries, too)."""
    drafter = make_drafter(adapter, layers=2)
    prompt, states, tokens, hidden = ar_sequence(adapter, "a red cat", 5)
    dcache = drafter.new_cache(1, prompt.length, adapter.layout.n_positions, 8)
    drafter.start(dcache, [0], states)
    features_of = torch.cat([states.hidden[:, :, -1:], hidden[:, :, :-1]], dim=2)
    drafter.extend(dcache, tokens[None, :3], features_of[:, :, :3], torch.arange(3)[None], reach)
    ids = adapter.image_token_ids
    siblings = torch.stack([tokens[3], ids[5]])[None]  # (1, 2)
    level1 = drafter.draft(
        dcache,
        siblings,
        features_of[:, :, 3:4].expand(-1, -1, 2, -1),
        torch.tensor([[3, 3]]),
        torch.eye(2, dtype=torch.bool)[None],
    )
    child = drafter.draft(
        dcache,
        tokens[None, 4:5],
        level1.features[:, :, 1:2],
        torch.tensor([[4]]),
        torch.tensor([[[False, True, True]]]),
    )
    for row in (0, 1):
        # sibling 0 is the committed path's own token with the target's feature: the plain forward's entry 3
        assert torch.allclose(
            level1.features[0, row, 0], reference(drafter, states, tokens, hidden, row, 4)[-1], atol=1e-10
        )
        # the child's path: tokens 0..2 committed, sibling 1 (feature of slot 2), token 4 with sibling 1's output
        path_tokens = torch.cat([tokens[:3], ids[5:6], tokens[4:5]])
        path_hidden = torch.cat([hidden[:, :, :3], level1.features[:, :, 1:2], hidden[:, :, 4:]], dim=2)
        want = reference(drafter, states, path_tokens, path_hidden, row, 5)[-1]
        assert torch.allclose(child.features[0, row, 0], want, atol=1e-10)


def test_batched_samples_equal_each_alone(adapter):
    drafter = make_drafter(adapter, "chameleon")
    runs = [ar_sequence(adapter, caption, 6, seed=i) for i, caption in enumerate(["a cat", "two big red squares left"])]
    P = max(r[0].length for r in runs)
    tcache = adapter.new_cache(2, P, 4)
    _, states = adapter.prefill_states(tcache, [0, 1], [r[0] for r in runs])
    dcache = drafter.new_cache(2, P, adapter.layout.n_positions, 4)
    drafter.start(dcache, [0, 1], states)
    lengths = [6, 4]  # sample 1 extends fewer tokens: padding after them
    tokens = torch.zeros(2, 6, dtype=torch.long)
    feats = torch.zeros(2, 2, 6, adapter.hidden_size, dtype=torch.float64)
    positions = torch.full((2, 6), -1)
    for b, (_, st, tok, hid) in enumerate(runs):
        n = lengths[b]
        tokens[b, :n] = tok[:n]
        feats[b, :, :n] = torch.cat([st.hidden[0, :, -1:], hid[0, :, : n - 1]], dim=1)
        positions[b, :n] = torch.arange(n)
    step = drafter.extend(dcache, tokens, feats, positions)
    for b, (prompt, st, tok, _) in enumerate(runs):
        alone = drafter.new_cache(1, prompt.length, adapter.layout.n_positions, 4)
        drafter.start(alone, [0], st)
        n = lengths[b]
        own = drafter.extend(alone, tok[None, :n], feats[b : b + 1, :, :n], torch.arange(n)[None])
        assert torch.allclose(step.features[b, :, :n], own.features[0], atol=1e-10)


def test_rollback_and_commit_drafts_give_what_extending_gives(adapter):
    drafter = make_drafter(adapter)
    prompt, states, tokens, hidden = ar_sequence(adapter, "a green circle", 6)
    features_of = torch.cat([states.hidden[:, :, -1:], hidden[:, :, :-1]], dim=2)
    dcache = drafter.new_cache(1, prompt.length, adapter.layout.n_positions, 4)
    drafter.start(dcache, [0], states)
    drafter.extend(dcache, tokens[None, :5], features_of[:, :, :5], torch.arange(5)[None])
    drafter.rollback(dcache, torch.tensor([3]))  # positions 3, 4 forgotten
    drafter.draft(dcache, tokens[None, 3:5], features_of[:, :, 3:5], torch.tensor([[3, 4]]))  # a chain
    drafter.commit_drafts(dcache, torch.tensor([[0, 1]]))
    last = drafter.extend(dcache, tokens[None, 5:6], features_of[:, :, 5:6], torch.tensor([[5]]))
    for row in (0, 1):
        assert torch.allclose(
            last.features[0, row, 0], reference(drafter, states, tokens, hidden, row, 6)[-1], atol=1e-10
        )


def test_retain_keeps_the_named_samples(adapter):
    drafter = make_drafter(adapter)
    runs = [ar_sequence(adapter, c, 3, seed=i) for i, c in enumerate(["a cat", "a dog"])]
    P = max(r[0].length for r in runs)
    tcache = adapter.new_cache(2, P, 4)
    _, states = adapter.prefill_states(tcache, [0, 1], [r[0] for r in runs])
    dcache = drafter.new_cache(2, P, adapter.layout.n_positions, 4)
    drafter.start(dcache, [0, 1], states)
    tok = torch.stack([r[2][:1] for r in runs])
    feats = states.hidden[:, :, -1:]
    both = drafter.extend(dcache, tok, feats, torch.zeros(2, 1, dtype=torch.long))
    drafter.retain(dcache, [1])
    drafter.rollback(dcache, torch.tensor([0]))
    again = drafter.extend(dcache, tok[1:], feats[1:], torch.zeros(1, 1, dtype=torch.long))
    assert torch.allclose(again.features[0], both.features[1], atol=1e-12)


def test_hidden_states_are_what_the_head_reads(adapter):
    prompt = adapter.encode_prompt("a cat")
    cache = adapter.new_cache(1, prompt.length, 4)
    logits, states = adapter.prefill_states(cache, [0], [prompt])
    assert torch.equal(adapter.lm_head(states.hidden[:, :, -1]), logits)
    assert states.hidden.shape == (1, 2, prompt.length, adapter.hidden_size)
    assert torch.equal(states.valid[0], prompt.pad_mask)
    tokens = adapter.image_token_ids[:3][None]
    positions = torch.arange(3)[None]
    with_states, hidden = adapter.forward_states(cache, WindowInputs(tokens, positions))
    plain = adapter.forward(cache, WindowInputs(tokens, positions))
    assert torch.equal(with_states, plain)
    assert torch.equal(adapter.lm_head(hidden), plain)
    # the rotary positions continue the prompt's: segment position 0 sits right after the last slot
    assert torch.equal(states.base[0], states.rotary[0, :, -1] + 1)


def test_a_model_without_hidden_states_is_refused_in_one_line(adapter):
    class Plain:
        name = "plain"

    assert returns_hidden_states(adapter) and not returns_hidden_states(Plain())
    with pytest.raises(UserError) as error:
        require_hidden_states(Plain(), "decoder eagle")
    assert "'plain'" in str(error.value) and "\n" not in str(error.value)


def test_a_drafter_of_another_width_is_refused(adapter):
    cfg = DrafterConfig("llama", 32, 64, 4, 4, adapter.vocab_size)
    with pytest.raises(ValueError, match="use a drafter trained for this model"):
        bind(adapter, DrafterNet(cfg))
