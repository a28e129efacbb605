"""hpsv2, precision and recall through `sjdbench.eval.score` on real toy runs (AR at seeds 0 and 1,
SJD): each paired with its AR baseline and read against the noise floor, precision with a paired
bootstrap interval and recall without one; and the report's quality columns for them, with their
direction. Tiny random HPS weights and a custom feature module stand in for the real networks."""

import eval_helpers as helpers
import numpy as np
import open_clip
import pytest
import torch
from PIL import Image
from test_hpsv2 import TINY
from test_precision_recall import hand_precision_recall

from sjdbench.eval.evaluators.settings import compose_eval
from sjdbench.eval.score import score

REFERENCE = [5, 40, 80, 120, 160, 200, 240, 250]


pytestmark = pytest.mark.slow  # about 20 s: decodes and scores two toy runs


@pytest.fixture(scope="module")
def toy_store(tmp_path_factory):
    """AR (seeds 0 and 1) and SJD on two smoke prompts, eight constant reference images and a tiny
    HPS checkpoint."""
    from sjdbench.config import compose_run
    from sjdbench.models.registry import build_adapter
    from sjdbench.run.runner import execute

    root = tmp_path_factory.mktemp("toy-quality") / "results"
    refs = helpers.reference_folder(root.parent / "refs", REFERENCE)
    torch.manual_seed(0)
    checkpoint = root.parent / "tiny_hps.pt"
    torch.save({"state_dict": open_clip.create_model("ViT-H-14", pretrained=None, **TINY).state_dict()}, checkpoint)
    adapter = build_adapter("toy", {}, "cpu")
    ids = {}
    base = ["model=toy", "data=smoke", "data.limit=2", "warmup=0", f"results_dir={root}"]
    for name, extra in {"ar": ["decoder=ar"], "ar1": ["decoder=ar", "seed=1"], "sjd": ["decoder=sjd"]}.items():
        ids[name] = execute(compose_run([*base, *extra]), adapter=adapter).run_id
    return root, refs, checkpoint, ids


def features_of(run_dir) -> np.ndarray:
    """The custom feature module's rows for a run's images, in prompt order."""
    from sjdbench.eval.evaluators.imaging import for_vgg16

    paths = sorted((run_dir / "images").glob("*.png"))
    return helpers.table()[[int(for_vgg16(np.asarray(Image.open(p).convert("RGB")))[0, 0, 0]) for p in paths]]


@pytest.fixture(scope="module")
def scored(toy_store):
    root, refs, checkpoint, ids = toy_store
    config = compose_eval(
        [
            "eval.evaluators=[hpsv2,precision,recall]",
            "eval.precision_recall.feature=eval_helpers:gaussian_features",
            "eval.precision_recall.k=1",  # two samples per run: a k = 1 manifold
            f"eval.inception.reference={refs}",
            f"eval.hpsv2.weights={checkpoint}",
            "eval.device=cpu",
        ]
    )
    config.hpsv2.model_kwargs = TINY
    outcomes = score([root / "runs" / i for i in ids.values()], config)
    assert {o.status for o in outcomes} == {"scored"}, [o.message for o in outcomes]
    return {(o.run_id, o.evaluator): o.doc for o in outcomes}


def test_precision_and_recall_are_paired_with_ar_and_read_against_the_noise_floor(toy_store, scored):
    root, _, _, ids = toy_store
    reference = helpers.table()[REFERENCE]
    run, ar, floor = (features_of(root / "runs" / ids[n]) for n in ("sjd", "ar", "ar1"))
    hand = lambda real, fake: hand_precision_recall(real, fake, k=1)  # noqa: E731

    precision, recall = scored[(ids["sjd"], "precision")], scored[(ids["sjd"], "recall")]
    assert precision["value"] == pytest.approx(hand(reference, run)[0], abs=1e-12)
    assert recall["value"] == pytest.approx(hand(reference, run)[1], abs=1e-12)
    paired = precision["paired_vs_ar"]
    assert paired["ar_run_id"] == ids["ar"] and paired["ar_value"] == pytest.approx(hand(reference, ar)[0])
    assert paired["delta"] == pytest.approx(precision["value"] - paired["ar_value"], abs=1e-12)
    assert paired["ci95"] is not None and -1.0 <= paired["ci95"][0] <= paired["ci95"][1] <= 1.0
    assert recall["paired_vs_ar"]["ci95"] is None  # resampled sets repeat images: no interval
    assert recall["paired_vs_ar"]["delta"] == pytest.approx(hand(reference, run)[1] - hand(reference, ar)[1])
    # the noise floor: AR at seed 0 against the manifold of AR at seed 1 (as FID's: AR against AR)
    assert precision["noise_floor"]["runs"] == [ids["ar"], ids["ar1"]]
    assert precision["noise_floor"]["value"] == pytest.approx(hand(floor, ar)[0], abs=1e-12)
    assert recall["noise_floor"]["value"] == pytest.approx(hand(floor, ar)[1], abs=1e-12)
    assert precision["extra"]["vs_ar_other_seed"] == pytest.approx(hand(floor, run)[0], abs=1e-12)


def test_hpsv2_is_paired_prompt_by_prompt_with_ar(toy_store, scored):
    _, _, _, ids = toy_store
    sjd, ar, ar1 = (scored[(ids[n], "hpsv2")] for n in ("sjd", "ar", "ar1"))
    per = lambda doc: np.array([row["value"] for row in doc["per_sample"]])  # noqa: E731
    assert sjd["paired_vs_ar"]["delta"] == pytest.approx((per(sjd) - per(ar)).mean(), abs=1e-12)
    assert sjd["noise_floor"]["value"] == pytest.approx((per(ar1) - per(ar)).mean(), abs=1e-12)
    assert sjd["ci95"] is not None and sjd["paired_vs_ar"]["ci95"] is not None


def test_the_report_shows_each_new_metric_with_its_direction(toy_store, scored):
    from sjdbench.report.tables import quality_metrics
    from sjdbench.results.runs import load_scores, runs_frame

    root, _, _, ids = toy_store
    runs = runs_frame(root)
    metrics, frame = quality_metrics(load_scores(runs), runs["run_id"])
    by_header = {m.header: m for m in metrics}
    for header in (
        "HPS v2.1 (cosine per sample)",
        "precision (k-NN, Kynkäänniemi et al.)",
        "recall (k-NN, Kynkäänniemi et al.)",
    ):
        assert by_header[header].better == "max" and by_header[header].arrow == "↑"
    hps = by_header["HPS v2.1 (cosine per sample)"]
    assert frame.loc[ids["sjd"], hps.key] == pytest.approx(scored[(ids["sjd"], "hpsv2")]["value"])
    assert hps.digits >= 2
