"""Improved precision and recall: the k-NN manifold on sets whose answer is known, the evaluators
against a hand computation of the definition, precision's paired resample against the definition,
the refusals below k + 1 samples, the VGG-16 fc2 cut and preprocessing against torchvision's own path
(LANTERN's), the real VGG-16 loading on random weights (slow), and the one-line failure without
weights."""

import time

import eval_helpers as helpers
import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from sjdbench.errors import UserError
from sjdbench.eval.evaluators.precision_recall import Precision, Recall
from sjdbench.eval.evaluators.settings import compose_eval
from sjdbench.eval.evaluators.vgg16 import VGG16_FILE, Vgg16Fc2, load_vgg16_fc2, vgg16_weights
from sjdbench.eval.metrics.manifold import knn_radii, on_manifold
from sjdbench.eval.score import score_run

GENERATED = [1, 2, 7, 31, 100, 104, 118, 134, 165, 170]  # precision 0.9, recall 0.917 at k = 3
REFERENCE = [1, 2, 30, 44, 150, 151, 9, 77, 250, 13, 19, 88]


def precision_recall(real: np.ndarray, fake: np.ndarray, k: int = 3) -> tuple[float, float]:
    return float(_inside(fake, real, k).mean()), float(_inside(real, fake, k).mean())


def _inside(queries, centres, k):
    q, c = torch.from_numpy(queries), torch.from_numpy(centres)
    return on_manifold(q, c, knn_radii(c, k)).numpy()


def hand_precision_recall(real: np.ndarray, fake: np.ndarray, k: int = 3) -> tuple[float, float]:
    """The definition, with full distance matrices: a point is on a set's manifold when its distance
    to some member is at most that member's distance to its k-th nearest other member."""

    def distances(a, b):
        return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))

    def radii(x):
        return np.sort(distances(x, x), axis=1)[:, k]  # column 0 is the point itself

    precision = (distances(fake, real) <= radii(real)[None]).any(1).mean()
    recall = (distances(real, fake) <= radii(fake)[None]).any(1).mean()
    return float(precision), float(recall)


# ---------------------------------------------------------------- the manifold on known answers


def test_identical_sets_have_precision_and_recall_one():
    features = np.random.default_rng(0).standard_normal((40, 16))
    assert precision_recall(features, features.copy()) == (1.0, 1.0)


def test_disjoint_far_sets_have_precision_and_recall_zero():
    rng = np.random.default_rng(1)
    real = rng.standard_normal((30, 16))
    fake = rng.standard_normal((30, 16)) + 1000.0
    assert precision_recall(real, fake) == (0.0, 0.0)


def test_a_subset_has_precision_one_and_recall_below_one():
    rng = np.random.default_rng(2)
    near, far = rng.standard_normal((10, 8)), rng.standard_normal((10, 8)) + 100.0
    real = np.concatenate([near, far])
    precision, recall = precision_recall(real, near.copy())
    assert precision == 1.0 and recall == 0.5  # the far half lies outside every ball of the near half


def test_radii_are_the_kth_other_neighbour_and_the_ball_is_closed():
    points = torch.tensor([[0.0], [1.0], [3.0], [6.0], [10.0]])
    assert knn_radii(points, 1).tolist() == [1.0, 1.0, 2.0, 3.0, 4.0]
    assert knn_radii(points, 3).tolist() == [6.0, 5.0, 3.0, 5.0, 9.0]
    twice = torch.tensor([[0.0], [0.0], [5.0]])
    assert knn_radii(twice, 1).tolist() == [0.0, 0.0, 5.0]  # a duplicate is a neighbour at distance 0
    centres = torch.tensor([[0.0], [1.0], [3.0]])  # k = 1 radii 1, 1, 2
    assert on_manifold(torch.tensor([[5.0], [5.001]]), centres, knn_radii(centres, 1)).tolist() == [True, False]
    with pytest.raises(ValueError, match="at least 4"):
        knn_radii(torch.zeros(3, 2), 3)


def test_the_manifold_equals_the_hand_definition_on_random_sets():
    rng = np.random.default_rng(3)
    real, fake = rng.standard_normal((50, 6)), 1.3 * rng.standard_normal((40, 6)) + 0.4
    for k in (1, 3, 5):
        assert precision_recall(real, fake, k) == hand_precision_recall(real, fake, k)


def test_blocks_give_the_same_answer_as_one_matrix(monkeypatch):
    import sjdbench.eval.metrics.manifold as manifold

    rng = np.random.default_rng(4)
    real, fake = rng.standard_normal((37, 5)), rng.standard_normal((29, 5))
    whole = precision_recall(real, fake)
    monkeypatch.setattr(manifold, "_BLOCK_ELEMENTS", 64)  # a few rows at a time
    assert precision_recall(real, fake) == whole


# ---------------------------------------------------------------- the evaluators on custom features


def settings(*extra):
    return compose_eval(["eval.precision_recall.feature=eval_helpers:gaussian_features", "eval.device=cpu", *extra])


@pytest.fixture
def run(tmp_path):
    refs = helpers.reference_folder(tmp_path / "refs", REFERENCE)
    return helpers.synthetic_run(tmp_path / "results", "debug-sjd-000000000001", GENERATED, [f"data.images={refs}"])


def test_precision_and_recall_equal_the_hand_computation(run):
    table = helpers.table()
    expected = hand_precision_recall(table[REFERENCE], table[GENERATED])
    precision = score_run(run, "precision", settings()).doc
    recall = score_run(run, "recall", settings()).doc
    assert (precision["value"], recall["value"]) == pytest.approx(expected, abs=1e-12)
    assert 0.0 < expected[0] < 1.0 and 0.0 < expected[1] < 1.0  # a case that tells the two apart
    for doc in (precision, recall):
        assert doc["lower_is_better"] is False and doc["ci95"] is None and doc["n"] == len(GENERATED)
        assert doc["extra"]["n_reference"] == len(REFERENCE) and doc["extra"]["k"] == 3
        assert doc["protocol"]["k"] == 3 and "<=" in doc["protocol"]["rule"]
    assert precision["protocol"]["statistics"]["bootstrap"] == 2000
    assert recall["protocol"]["statistics"]["bootstrap"] == 0 and "none" in recall["protocol"]["paired_ci"]


def test_k_is_a_setting_and_changes_the_protocol(run):
    table = helpers.table()
    one = score_run(run, "recall", settings("eval.precision_recall.k=1")).doc
    three = score_run(run, "recall", settings()).doc
    assert one["value"] == pytest.approx(hand_precision_recall(table[REFERENCE], table[GENERATED], k=1)[1])
    assert one["protocol_hash"] != three["protocol_hash"]


def test_precision_resamples_are_the_definition_on_the_resampled_set(run):
    config = settings()
    evaluator = Precision(config, run)
    table = helpers.table()
    vectors, reference = table[GENERATED], table[REFERENCE]
    to_reference = evaluator.reference_distance(reference)
    resample = evaluator.resampled(vectors, reference, to_reference)
    rng = np.random.default_rng(5)
    for _ in range(5):
        rows = rng.integers(len(vectors), size=len(vectors))  # with repeats, as the bootstrap draws
        assert resample(rows) == pytest.approx(hand_precision_recall(reference, vectors[rows])[0], abs=1e-12)
    assert Recall(config, run).bootstrap_reps() == 0 and evaluator.bootstrap_reps() == 2000


def test_fewer_than_k_plus_one_samples_are_refused_whatever_force_says(tmp_path):
    refs = helpers.reference_folder(tmp_path / "refs", REFERENCE)
    small = helpers.synthetic_run(tmp_path / "results", "debug-sjd-000000000002", [3, 17, 42], [f"data.images={refs}"])
    outcome = score_run(small, "precision", settings("eval.force=true"))
    assert outcome.status == "refused" and "at least 4" in outcome.message and "\n" not in outcome.message
    few_refs = helpers.reference_folder(tmp_path / "few", [1, 2])
    run = helpers.synthetic_run(tmp_path / "results", "debug-sjd-000000000003", GENERATED, [f"data.images={few_refs}"])
    outcome = score_run(run, "recall", settings())
    assert outcome.status == "refused" and "2 reference images" in outcome.message


def test_without_reference_images_precision_is_refused_naming_the_setting(tmp_path):
    run = helpers.synthetic_run(tmp_path / "results", "debug-sjd-000000000004", GENERATED)
    outcome = score_run(run, "precision", settings())
    assert outcome.status == "refused" and "eval.inception.reference=" in outcome.message


# ---------------------------------------------------------------- VGG-16 fc2


class TinyVgg(torch.nn.Module):
    """VGG's two parts with VGG's classifier layout, small: features to (2, 7, 7), then fc1, ReLU,
    dropout, fc2, ReLU, dropout, fc3."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 2, 32, stride=32), torch.nn.ReLU())
        self.classifier = torch.nn.Sequential(
            torch.nn.Linear(98, 16),
            torch.nn.ReLU(True),
            torch.nn.Dropout(),
            torch.nn.Linear(16, 8),
            torch.nn.ReLU(True),
            torch.nn.Dropout(),
            torch.nn.Linear(8, 10),
        )


def lantern_fc2(net, images: list[np.ndarray]) -> np.ndarray:
    """LANTERN's extraction: torchvision Resize([224, 224]) on the PIL image, ToTensor, ImageNet
    Normalize, then features, flattened, through classifier[:4]."""
    from torchvision import transforms

    transform = transforms.Compose(
        [
            transforms.Resize([224, 224]),
            transforms.ToTensor(),
            transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ]
    )
    batch = torch.stack([transform(Image.fromarray(image).convert("RGB")) for image in images])
    with torch.no_grad():
        return net.classifier[:4](net.features(batch).flatten(1)).numpy()


def test_fc2_features_and_preprocessing_match_torchvisions_path():
    from sjdbench.eval.evaluators.imaging import for_vgg16

    rng = np.random.default_rng(6)
    images = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in [(256, 256, 3), (300, 200, 3), (100, 180, 3)]]
    net = TinyVgg().eval()
    ours = Vgg16Fc2(net).eval()
    pixels = torch.from_numpy(np.stack([for_vgg16(i) for i in images])).permute(0, 3, 1, 2)
    with torch.no_grad():
        got = ours(pixels).numpy()
    assert got.shape == (3, 8)
    assert got == pytest.approx(lantern_fc2(net, images), abs=1e-5)


@pytest.fixture(scope="module")
def random_vgg16(tmp_path_factory):
    """torchvision's VGG-16 with random weights, saved as a state dict (torchvision's layout)."""
    from torchvision.models import vgg16

    torch.manual_seed(0)
    net = vgg16(weights=None).eval()
    path = tmp_path_factory.mktemp("vgg") / VGG16_FILE
    torch.save(net.state_dict(), path)
    return net, path


@pytest.mark.slow  # a 528 MB random VGG-16 written and read back, and two forwards at 224 px
def test_real_vgg16_path_scores_as_lantern_extracts(tmp_path, random_vgg16):
    net, path = random_vgg16
    rng = np.random.default_rng(7)
    generated = [rng.integers(0, 256, (64, 48, 3), dtype=np.uint8) for _ in range(6)]
    reference = [rng.integers(0, 256, (80, 60, 3), dtype=np.uint8) for _ in range(7)]
    refs = tmp_path / "refs"
    refs.mkdir()
    for k, image in enumerate(reference):
        helpers.save_png(refs / f"r{k}.png", image)
    run = helpers.synthetic_run(tmp_path / "results", "debug-sjd-000000000005", [0] * 6, [f"data.images={refs}"])
    for sample, image in zip(run.samples, generated):
        helpers.save_png(sample.image, image)
    config = compose_eval([f"eval.precision_recall.weights={path}", "eval.device=cpu"])
    precision = score_run(run, "precision", config).doc
    recall = score_run(run, "recall", config).doc
    assert precision["protocol"]["weights_file"] == VGG16_FILE and precision["protocol"]["feature_dim"] == 4096
    expected = hand_precision_recall(
        lantern_fc2(net, reference).astype(np.float64), lantern_fc2(net, generated).astype(np.float64)
    )
    assert (precision["value"], recall["value"]) == pytest.approx(expected, abs=1e-12)


def test_missing_vgg16_weights_fail_at_once_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    start = time.perf_counter()
    with pytest.raises(UserError) as error:
        vgg16_weights(None)
    assert time.perf_counter() - start < 2.0
    message = str(error.value)
    assert VGG16_FILE in message and str(tmp_path / "torch" / "hub" / "checkpoints") in message
    assert "download.pytorch.org" in message and "eval.precision_recall.weights=" in message and "\n" not in message


def test_a_file_that_is_not_vgg16_fails_in_one_line(tmp_path):
    wrong = tmp_path / "wrong.pth"
    torch.save({"features.0.weight": torch.zeros(1)}, wrong)
    with pytest.raises(UserError, match="is not torchvision's VGG-16 state dict") as error:
        load_vgg16_fc2(wrong, "cpu")
    assert "\n" not in str(error.value)
    (tmp_path / "text.pth").write_text("not a checkpoint")
    with pytest.raises(UserError, match="not a readable VGG-16 state dict"):
        load_vgg16_fc2(tmp_path / "text.pth", "cpu")


def test_eval_cli_reports_missing_vgg16_weights_in_one_line(tmp_path, monkeypatch, run):
    from sjdbench.cli import app

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    result = CliRunner().invoke(app, ["eval", str(run.dir), "eval.evaluators=[precision,recall]"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert VGG16_FILE in result.output
