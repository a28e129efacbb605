"""FID and KID through sjdbench's evaluators equal a hand computation; reference features are
cached bit for bit; FID refuses N below the feature dimension; the real Inception path runs on a
random-weight state dict in torch-fidelity's layout and matches torchmetrics end to end."""

import time
from pathlib import Path

import eval_helpers as helpers
import numpy as np
import pytest
import scipy.linalg
import torch
from typer.testing import CliRunner

from sjdbench.errors import UserError
from sjdbench.eval.evaluators.inception import INCEPTION_FILE, inception_weights
from sjdbench.eval.evaluators.settings import compose_eval
from sjdbench.eval.score import score_run

GENERATED = [3, 17, 42, 5, 99, 123, 7, 64, 200, 11]
REFERENCE = [1, 2, 30, 44, 150, 151, 9, 77, 250, 13, 19, 88]


def settings(*extra):
    return compose_eval(
        [
            "eval.inception.feature=eval_helpers:gaussian_features",
            "eval.force=true",
            "eval.inception.bootstrap=0",
            *extra,
        ]
    )


def hand_fid(a: np.ndarray, b: np.ndarray) -> float:
    mu_a, mu_b = a.mean(0), b.mean(0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    return float((mu_a - mu_b) @ (mu_a - mu_b) + np.trace(cov_a + cov_b - 2 * scipy.linalg.sqrtm(cov_a @ cov_b).real))


def hand_kid(fake: np.ndarray, real: np.ndarray, degree: int = 3) -> float:
    """Unbiased MMD^2 with the polynomial kernel (x.y / d + 1)^degree over the full sets."""
    d = fake.shape[1]
    kernel = lambda x, y: (x @ y.T / d + 1.0) ** degree  # noqa: E731
    m = len(fake)
    k_xx, k_yy, k_xy = kernel(real, real), kernel(fake, fake), kernel(real, fake)
    return float(
        (k_xx.sum() - np.trace(k_xx)) / (m * (m - 1))
        + (k_yy.sum() - np.trace(k_yy)) / (m * (m - 1))
        - 2 * k_xy.sum() / m**2
    )


@pytest.fixture
def run(tmp_path):
    refs = helpers.reference_folder(tmp_path / "refs", REFERENCE)
    return helpers.synthetic_run(tmp_path / "results", "debug-sjd-000000000001", GENERATED, [f"data.images={refs}"])


def test_fid_equals_the_hand_computation(run):
    outcome = score_run(run, "fid", settings())
    table = helpers.table()
    assert outcome.status == "scored"
    assert outcome.doc["value"] == pytest.approx(hand_fid(table[GENERATED], table[REFERENCE]), rel=1e-9)
    assert outcome.doc["n"] == len(GENERATED) and outcome.doc["extra"]["n_reference"] == len(REFERENCE)


def test_kid_caps_its_subset_size_at_n_and_is_reproducible(run):
    first = score_run(run, "kid", settings("eval.kid.subsets=5"))
    assert first.doc["extra"]["subset_size"] == len(GENERATED)  # 1000 asked, capped at N
    first.path.unlink()
    again = score_run(run, "kid", settings("eval.kid.subsets=5"))
    assert again.doc["value"] == first.doc["value"]  # subsets drawn from a seeded generator


def test_kid_equals_the_hand_computation_on_equal_sets(tmp_path):
    refs = helpers.reference_folder(tmp_path / "refs", REFERENCE[:10])
    run = helpers.synthetic_run(tmp_path / "results", "debug-sjd-000000000002", GENERATED, [f"data.images={refs}"])
    outcome = score_run(run, "kid", settings("eval.kid.subsets=1", "eval.kid.subset_size=10"))
    table = helpers.table()
    # with subset_size = N on both sides, a subset is a permutation of the whole set: no randomness left
    assert outcome.doc["value"] == pytest.approx(hand_kid(table[GENERATED], table[REFERENCE[:10]]), rel=1e-9)


def test_reference_cache_round_trip_is_bit_identical(run, tmp_path, monkeypatch):
    monkeypatch.setenv("SJDBENCH_CACHE", str(tmp_path / "cache"))
    first = score_run(run, "fid", settings())
    [stored] = sorted((tmp_path / "cache" / "references").glob("inception-*.npy"))
    cached = np.load(stored)
    first.path.unlink()  # score again: reference read back from the cache, run features from theirs
    second = score_run(run, "fid", settings())
    assert second.status == "scored" and second.doc["value"] == first.doc["value"]
    stored.unlink()  # and recomputed from the images: the same bits
    third_path = score_run(run, "fid", settings()).path
    assert np.array_equal(np.load(stored), cached)
    assert np.array_equal(cached, helpers.table()[REFERENCE].astype(np.float32))
    assert third_path == first.path


def test_reference_features_are_cached_per_preprocessing(run, tmp_path, monkeypatch):
    monkeypatch.setenv("SJDBENCH_CACHE", str(tmp_path / "cache"))
    score_run(run, "fid", settings())
    score_run(run, "fid", settings("eval.inception.preprocess=clean"))
    score_run(run, "fid", settings())
    assert len(sorted((tmp_path / "cache" / "references").glob("inception-*.npy"))) == 2


def test_fid_is_refused_below_the_feature_dimension_unless_forced(run):
    enough = score_run(run, "fid", compose_eval(["eval.inception.feature=eval_helpers:gaussian_features"]))
    assert enough.status == "scored"  # N = 10 >= 8 feature dimensions
    small = helpers.synthetic_run(
        run.dir.parent.parent, "debug-sjd-000000000003", GENERATED[:5], [f"data.images={run.config.data.images}"]
    )
    refused = score_run(small, "fid", compose_eval(["eval.inception.feature=eval_helpers:gaussian_features"]))
    assert refused.status == "refused" and refused.path is None
    assert not (small.dir / "scores").exists() or not list((small.dir / "scores").glob("fid-*.json"))
    assert "N = 5 samples is below the 8 feature dimensions" in refused.message and "eval.force=true" in refused.message
    forced = score_run(
        small, "fid", compose_eval(["eval.inception.feature=eval_helpers:gaussian_features", "eval.force=true"])
    )
    assert forced.status == "scored" and forced.doc["n"] == 5


def test_fid_protocol_records_extractor_preprocessing_reference_and_versions(run):
    doc = score_run(run, "fid", settings("eval.inception.preprocess=clean")).doc
    protocol = doc["protocol"]
    for key in (
        "extractor",
        "feature_dim",
        "weights_sha256",
        "preprocessing",
        "preprocessing_steps",
        "antialias",
        "quantisation",
        "n",
        "reference",
        "versions",
        "statistics",
        "samples_sha256",
    ):
        assert key in protocol, key
    assert protocol["preprocessing"] == "clean" and "Lanczos" in protocol["preprocessing_steps"]
    assert protocol["reference"]["n"] == len(REFERENCE) and len(protocol["reference"]["sha256"]) == 64
    assert protocol["versions"]["torchmetrics"] and doc["protocol_hash"] in doc["protocol_hash"]
    assert Path(doc["protocol"]["reference"]["folder"]).name == "refs"


def test_missing_inception_weights_fail_at_once_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    start = time.perf_counter()
    with pytest.raises(UserError) as error:
        inception_weights(None)
    assert time.perf_counter() - start < 2.0
    message = str(error.value)
    assert INCEPTION_FILE in message and str(tmp_path / "torch" / "hub" / "checkpoints") in message
    assert "eval.inception.weights=" in message and "\n" not in message


@pytest.fixture(scope="module")
def random_inception(tmp_path_factory):
    """A random-weight state dict in torch-fidelity's layout (its loader stubbed out while building)."""
    from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

    original = FeatureExtractorInceptionV3.load_state_dict
    FeatureExtractorInceptionV3.load_state_dict = lambda self, state, *a, **k: None
    try:
        import torch_fidelity.feature_extractor_inceptionv3 as module

        saved_loader = module.load_state_dict_from_url
        module.load_state_dict_from_url = lambda *a, **k: {}
        torch.manual_seed(0)
        net = FeatureExtractorInceptionV3("inception-v3-compat", ["2048"])
    finally:
        FeatureExtractorInceptionV3.load_state_dict = original
        module.load_state_dict_from_url = saved_loader
    path = tmp_path_factory.mktemp("inception") / INCEPTION_FILE
    torch.save(net.state_dict(), path)
    return path


@pytest.mark.slow  # about 20 s on 2 shared cores: two 24M-parameter Inception builds and forwards at 299 px
def test_real_inception_path_matches_torchmetrics_on_random_weights(tmp_path, random_inception):
    from torchmetrics.image.fid import FrechetInceptionDistance

    from sjdbench.eval.evaluators.imaging import for_inception

    rng = np.random.default_rng(0)
    generated = [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8) for _ in range(4)]
    reference = [rng.integers(0, 256, (80, 60, 3), dtype=np.uint8) for _ in range(5)]
    refs = tmp_path / "refs"
    refs.mkdir()
    for k, image in enumerate(reference):
        helpers.save_png(refs / f"r{k}.png", image)
    run = helpers.synthetic_run(tmp_path / "results", "debug-sjd-000000000004", [0] * 4, [f"data.images={refs}"])
    for sample, image in zip(run.samples, generated):
        helpers.save_png(sample.image, image)
    doc = score_run(
        run,
        "fid",
        compose_eval(
            [
                f"eval.inception.weights={random_inception}",
                "eval.force=true",
                "eval.inception.bootstrap=0",
                "eval.device=cpu",
            ]
        ),
    ).doc
    assert doc["protocol"]["weights_file"] == INCEPTION_FILE and doc["protocol"]["feature_dim"] == 2048

    metric = FrechetInceptionDistance(
        feature=2048, feature_extractor_weights_path=str(random_inception), antialias=False
    )
    as_batch = lambda images: torch.from_numpy(np.stack([for_inception(i, "sjd") for i in images])).permute(0, 3, 1, 2)  # noqa: E731
    metric.update(as_batch(reference), real=True)
    metric.update(as_batch(generated), real=False)
    assert doc["value"] == pytest.approx(float(metric.compute()), rel=1e-4)


def test_eval_cli_reports_missing_weights_in_one_line(tmp_path, monkeypatch, run):
    from sjdbench.cli import app

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    result = CliRunner().invoke(app, ["eval", str(run.dir), "eval.evaluators=[fid]", "eval.force=true"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert INCEPTION_FILE in result.output
