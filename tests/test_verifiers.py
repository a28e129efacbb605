"""Single-token behaviour of each verification rule, computed exactly from the rule's own code:
the output distribution of "draft d ~ q, verify, replace on rejection" for given p and q."""

import pytest
import torch

from sjdbench.decoding.verifiers.exact import ExactVerifier
from sjdbench.decoding.verifiers.greedy import GreedyVerifier
from sjdbench.decoding.verifiers.gsd import GSDConfig, GSDVerifier
from sjdbench.decoding.verifiers.lantern import LanternConfig, LanternVerifier, model_k, neighbour_table
from sjdbench.errors import UserError

U_GRID = (torch.arange(20000, dtype=torch.float64) + 0.5).float() / 20000  # acceptance prob by quadrature


def output_distribution(verifier, p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, float]:
    """(V,) distribution of the emitted token, and the acceptance probability."""
    V = p.shape[0]
    out, accept_total = torch.zeros(V), 0.0
    for d in range(V):
        if q[d] == 0:
            continue
        drafts = torch.full((U_GRID.numel(),), d)
        accept = (
            verifier.accept(p.expand(U_GRID.numel(), V), q.expand(U_GRID.numel(), V), drafts, U_GRID).float().mean()
        )
        out[d] += q[d] * accept
        out += q[d] * (1 - accept) * verifier.replacement(p[None], q[None], torch.tensor([d]))[0]
        accept_total += float(q[d] * accept)
    return out, accept_total


def random_pair(V: int, seed: int, one_hot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(V, generator=g) * 2, 0)
    if one_hot:
        q = torch.zeros(V)
        q[int(torch.randint(V, (1,), generator=g))] = 1.0
    else:
        q = torch.softmax(torch.randn(V, generator=g) * 2, 0)
    return p, q


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("one_hot", [False, True])
def test_exact_rule_emits_p(seed, one_hot):
    p, q = random_pair(12, seed, one_hot)
    out, _ = output_distribution(ExactVerifier(), p, q)
    assert torch.allclose(out, p, atol=2e-4)


def test_greedy_rule():
    p = torch.tensor([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]])
    v = GreedyVerifier()
    assert v.accept(p, p, torch.tensor([1, 1]), torch.zeros(2)).tolist() == [True, False]
    assert v.replacement(p[1:2], p[1:2], torch.tensor([1]))[0].tolist() == [1.0, 0.0, 0.0]


def lantern(V: int, delta: float, k: int = 4, reading: str = "ours_all") -> LanternVerifier:
    g = torch.Generator().manual_seed(0)
    codebook = torch.randn(V, 3, generator=g)
    config = LanternConfig(k=k, delta=delta, reading=reading)
    return LanternVerifier(config, neighbour_table(codebook, k + 1), torch.arange(V), V)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("one_hot", [False, True])
@pytest.mark.parametrize("delta", [0.05, 0.2, 1.5, 2.0])
@pytest.mark.parametrize("reading", ["ours_all", "ours_moved", "official_llamagen"])
def test_lantern_tv_shift_is_bounded_by_delta(seed, one_hot, delta, reading):
    """Our residuals and the released LlamaGen/Anole one keep the per-token shift within the rule's
    bound for a deterministic draft (the Lumina-mGPT one does not: tests/test_official_readings.py):
    delta, or for delta = λ > 1 (LANTERN++'s multiplicative bound, as the released code tests
    `cumsum <= (λ - 1) p(x)`) (λ - 1) p(x) of the draft x."""
    p, q = random_pair(12, seed, one_hot)
    out, accept = output_distribution(lantern(12, delta, reading=reading), p, q)
    _, accept_exact = output_distribution(ExactVerifier(), p, q)
    tv = float(0.5 * (out - p).abs().sum())
    assert abs(float(out.sum()) - 1) < 1e-4
    assert accept >= accept_exact - 1e-6
    if one_hot:  # deterministic draft (fresh init, a chosen tree node): the shift is the moved mass
        draft = int(q.argmax())
        assert tv <= (delta if delta <= 1 else (delta - 1) * float(p[draft])) + 2e-4
    else:
        # stochastic drafts (Jacobi resamples): the output is a q-mixture over drafts d, so by the
        # triangle inequality TV <= sum_d q(d) [(a(d) - a0(d)) + (1 - a(d)) TV(res_d, res0_d)], with
        # a/a0 the relaxed/exact acceptance and res/res0 the relaxed/exact residuals; this can exceed
        # delta (each draft gains up to min(q(d), moved(d)) of acceptance)
        verifier, exact = lantern(12, delta, reading=reading), ExactVerifier()
        bound = 0.0
        for d in range(12):
            drafts = torch.full((U_GRID.numel(),), d)
            args = (p.expand(U_GRID.numel(), 12), q.expand(U_GRID.numel(), 12), drafts, U_GRID)
            a, a0 = verifier.accept(*args).float().mean(), exact.accept(*args).float().mean()
            res_shift = (
                0.5
                * (
                    verifier.replacement(p[None], q[None], torch.tensor([d]))[0]
                    - exact.replacement(p[None], q[None], torch.tensor([d]))[0]
                )
                .abs()
                .sum()
            )
            bound += float(q[d] * ((a - a0) + (1 - a) * res_shift))
        assert tv <= bound + 2e-4


def test_lantern_moved_mass_is_the_neighbour_prefix():
    verifier = lantern(6, 0.25, k=5)  # ours_all: all 5 other codes
    p = torch.tensor([[0.3, 0.1, 0.2, 0.15, 0.05, 0.2]])
    draft = torch.tensor([0])
    moved, included = verifier.moved_mass(p, draft)
    order = verifier.neighbour_tokens[0].tolist()
    cum, expected = 0.0, []
    for token in order:
        if cum + float(p[0, token]) > 0.25 + 1e-7:
            break
        cum += float(p[0, token])
        expected.append(token)
    assert abs(float(moved) - cum) < 1e-6
    assert [t for t in included[0].tolist() if t >= 0] == expected


def test_lantern_multiplicative_bound():
    verifier = lantern(6, 3.0, k=5)  # delta > 1: moved mass <= (delta - 1) p(x)
    p = torch.softmax(torch.randn(1, 6), -1)
    moved, _ = verifier.moved_mass(p, torch.tensor([2]))
    assert float(moved) <= 2.0 * float(p[0, 2]) + 1e-6


def test_neighbour_table_excludes_self_and_sorts(tmp_path):
    codebook = torch.tensor([[0.0], [1.0], [3.0], [0.5]])
    table = neighbour_table(codebook, 3, tmp_path, "t")
    assert table[0].tolist() == [3, 1, 2]
    assert table[2].tolist() == [1, 3, 0]
    assert len(list(tmp_path.glob("lantern-t-K4-k3-*.pt"))) == 1
    assert torch.equal(neighbour_table(codebook, 3, tmp_path, "t"), table)  # served from the cache


@pytest.mark.parametrize("seed", range(4))
def test_gsd_accepts_at_least_as_often_and_reduces_to_sjd_with_singleton_groups(seed):
    V = 10
    p, q = random_pair(V, seed, one_hot=False)
    embeddings = torch.randn(V, 4, generator=torch.Generator().manual_seed(seed))
    grouped, accept = output_distribution(GSDVerifier(GSDConfig("ours", 4, 0.3, 100.0), embeddings), p, q)
    _, accept_exact = output_distribution(ExactVerifier(), p, q)
    assert abs(float(grouped.sum()) - 1) < 1e-4
    assert accept >= accept_exact - 1e-6
    single, _ = output_distribution(GSDVerifier(GSDConfig("ours", 0, 0.3, 100.0), embeddings), p, q)
    assert torch.allclose(single, p, atol=2e-4)


def test_gsd_group_filters():
    p = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    embeddings = torch.tensor([[0.0], [0.1], [5.0], [0.2]])
    group = GSDVerifier(GSDConfig("ours", 4, 0.15, 0.5), embeddings).group(p, torch.tensor([1]))
    kept = sorted(t for t in group[0].tolist() if t >= 0)
    # token 0: |0.4-0.3| < 0.15 and close embedding -> kept; token 2: far embedding -> dropped;
    # token 3: |0.1-0.3| >= 0.15 -> dropped
    assert kept == [0, 1]


def test_gsd_distance_threshold_defaults_to_the_models_value():
    """d_thr is in each model's embedding units: null takes the adapter's value."""
    from types import SimpleNamespace

    from sjdbench.decoding.verifiers.gsd import PAPER_D_THR as PAPER_GSD_D_THR
    from sjdbench.decoding.verifiers.gsd import GSDConfig, model_d_thr
    from sjdbench.models.toy.model import GSD_D_THR, build_toy_adapter

    cfg = GSDConfig()
    assert cfg.d_thr is None
    toy = build_toy_adapter()
    assert model_d_thr(cfg, toy) == GSD_D_THR
    assert model_d_thr(cfg, SimpleNamespace(gsd_d_thr=0.9)) == 0.9  # any model's own value
    assert model_d_thr(GSDConfig(d_thr=0.7), toy) == 0.7
    # on the toy, the paper's absolute 0.5 leaves every code alone (GSD would equal SJD); GSD_D_THR does not
    emb = toy.token_embeddings()[toy.image_token_ids].float()
    dist = torch.cdist(emb, emb).pow(2).fill_diagonal_(float("inf"))
    assert (dist < PAPER_GSD_D_THR).sum() == 0
    neighbours = (dist < GSD_D_THR).sum(1).float().mean()
    assert 1.0 < neighbours < 20.0


def cool_sd(omega: float, decay: float = 0.5):
    from sjdbench.decoding.verifiers.cool_sd import CoolSDConfig, CoolSDVerifier

    return CoolSDVerifier(CoolSDConfig(omega=omega, decay=decay))


class AtDepth:
    """A depth-reading verifier seen as a plain one: every draft at `depth`."""

    def __init__(self, verifier, depth: int) -> None:
        self.verifier, self.depth = verifier, depth

    def accept(self, p, q, drafts, u):
        return self.verifier.accept(p, q, drafts, u, depth=torch.full_like(drafts, self.depth))

    def replacement(self, p, q, drafts):
        return self.verifier.replacement(p, q, drafts, depth=torch.full_like(drafts, self.depth))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("one_hot", [False, True])
@pytest.mark.parametrize("depth", [1, 2, 4])
def test_cool_sd_moves_each_token_by_at_most_its_annealed_budget(seed, one_hot, depth):
    """TV(output, p) = sum over q > p of min(q - p, w q) <= w = omega decay^(d-1), for a drawn or a
    deterministic draft; acceptance never below exact speculative sampling's."""
    omega, decay = 0.3, 0.5
    p, q = random_pair(12, seed, one_hot)
    out, accept = output_distribution(AtDepth(cool_sd(omega, decay), depth), p, q)
    _, accept_exact = output_distribution(ExactVerifier(), p, q)
    w = omega * decay ** (depth - 1)
    tv = float(0.5 * (out - p).abs().sum())
    predicted = float(torch.minimum((q - p).clamp_min(0), w * q).sum())
    assert abs(float(out.sum()) - 1) < 1e-4
    assert tv == pytest.approx(predicted, abs=2e-4) and tv <= w + 2e-4
    assert accept >= accept_exact - 1e-6


def test_cool_sd_without_relaxation_is_the_exact_verifier():
    p, q = random_pair(12, 3, one_hot=False)
    drafts, depth = torch.arange(12), torch.ones(12, dtype=torch.long)
    u = torch.rand(12, generator=torch.Generator().manual_seed(0))
    P, Q = p.expand(12, 12), q.expand(12, 12)
    verifier = cool_sd(0.0)
    assert torch.equal(verifier.accept(P, Q, drafts, u, depth=depth), ExactVerifier().accept(P, Q, drafts, u))
    assert torch.allclose(verifier.replacement(P, Q, drafts, depth=depth), ExactVerifier().replacement(P, Q, drafts))
    assert type(verifier).lossless(verifier.config) and not type(verifier).lossless(cool_sd(0.1).config)


def test_cool_sd_relaxes_the_first_draft_most():
    p, q = random_pair(12, 1, one_hot=True)
    accepts = [output_distribution(AtDepth(cool_sd(0.3, 0.5), d), p, q)[1] for d in (1, 2, 3, 6)]
    assert accepts == sorted(accepts, reverse=True) and accepts[0] > accepts[-1]


@pytest.mark.parametrize(("knobs", "needle"), [({"omega": 1.5}, "omega must be in [0, 1]"), ({"decay": 0.0}, "decay")])
def test_cool_sd_knobs_are_checked(knobs, needle):
    from sjdbench.decoding.verifiers.cool_sd import CoolSDConfig

    with pytest.raises(UserError) as error:
        CoolSDConfig(**knobs).check()
    assert needle in str(error.value)


def test_lantern_k_defaults_to_the_released_share_of_the_codebook():
    assert model_k(None, 16384) == model_k(None, 8192) == 1000  # the released k on the released books
    assert model_k(None, 512) == 62  # the toy: 1000 in 8192, not every other code
    assert model_k(None, 6) == 1 and model_k(4, 6) == 4
    assert model_k(5, 6, "ours_all") == 5  # ours zero k neighbours: all K - 1 others is still a choice
    refused = r"decoder.verifier.k=1000 .* codebook of 512 codes .* k <= 510, or k=null .*\(62"
    with pytest.raises(UserError, match=refused):
        model_k(1000, 512)


def test_lantern_reports_the_k_in_use_for_env_json():
    codebook = torch.randn(512, 3, generator=torch.Generator().manual_seed(0))
    verifier = LanternVerifier(LanternConfig(), neighbour_table(codebook, 63), torch.arange(512), 512)
    assert verifier.k == 62 and verifier.resolved() == {"lantern_k": 62}
