"""`sjdbench eval` and `sjdbench sweep --eval` end to end on small toy runs: score files beside each
run with their comparisons to AR and the noise floor, resumable, never recomputed; comparisons that
wait for an AR run are filled in later."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sjdbench.cli import app
from sjdbench.config import compose_run
from sjdbench.eval.evaluators.base import open_run
from sjdbench.eval.evaluators.settings import compose_eval
from sjdbench.eval.score import comparison_runs, score
from sjdbench.run.runner import execute

BASE = ["model=toy", "data=smoke", "data.limit=2", "warmup=0"]
cli = CliRunner()


@pytest.fixture(scope="module")
def toy_results(tmp_path_factory):
    """AR (seeds 0 and 1) and SJD on two toy captions: the smallest complete study."""
    from sjdbench.models.registry import build_adapter

    root = tmp_path_factory.mktemp("toy-results")
    adapter = build_adapter("toy", {}, "cpu")
    ids = {}
    for name, extra in {"ar": ["decoder=ar"], "ar1": ["decoder=ar", "seed=1"], "sjd": ["decoder=sjd"]}.items():
        ids[name] = execute(compose_run([*BASE, *extra, f"results_dir={root}"]), adapter=adapter).run_id
    return root, ids


def scores_of(run_dir: Path) -> dict[str, dict]:
    return {p.name.split("-")[0]: json.loads(p.read_text()) for p in (run_dir / "scores").glob("*.json")}


def test_eval_scores_every_run_with_the_toy_evaluators(toy_results, tmp_path):
    source, ids = toy_results
    root = tmp_path / "results"
    shutil.copytree(source, root)
    result = cli.invoke(app, ["eval", str(root)])
    assert result.exit_code == 0, result.output
    assert "quality beside speed" in result.output and "toy_objects" in result.output
    sjd = scores_of(root / "runs" / ids["sjd"])
    assert set(sjd) == {"toy_clip", "toy_fd", "toy_objects"}
    for name, doc in sjd.items():
        for key in (
            "schema",
            "run_id",
            "evaluator",
            "metric",
            "lower_is_better",
            "value",
            "ci95",
            "n",
            "protocol",
            "protocol_hash",
            "paired_vs_ar",
            "noise_floor",
            "extra",
        ):
            assert key in doc, (name, key)
        assert doc["schema"] == 1 and doc["n"] == 2 and doc["pending"] == []
        assert doc["paired_vs_ar"]["ar_run_id"] == ids["ar"] and doc["paired_vs_ar"]["n_pairs"] == 2
        assert doc["noise_floor"]["runs"] == [ids["ar"], ids["ar1"]]
        assert (root / "runs" / ids["sjd"] / "scores" / f"{name}-{doc['protocol_hash']}.json").exists()
    assert sjd["toy_fd"]["lower_is_better"] and "per_sample" not in sjd["toy_fd"]
    assert sjd["toy_fd"]["protocol"]["reference"]["renders_per_caption"] == 1
    assert "small_n" in sjd["toy_fd"]["extra"]  # N = 2 is far below 64 dimensions: said in the score
    assert len(sjd["toy_clip"]["per_sample"]) == 2 and sjd["toy_clip"]["protocol"]["weights_sha256"]
    objects = sjd["toy_objects"]["extra"]
    assert {"present", "shape", "colour", "cell", "ceiling_on_renders"} <= set(objects)
    assert objects["ceiling_on_renders"]["colour"] >= objects["colour"] - 1e-9 or objects["colour"] <= 1


def test_paired_difference_is_the_mean_per_prompt_difference(toy_results, tmp_path):
    source, ids = toy_results
    root = tmp_path / "results"
    shutil.copytree(source, root)
    score([root / "runs" / i for i in ids.values()], compose_eval(["eval=toy"]))
    sjd, ar, ar1 = (scores_of(root / "runs" / ids[k])["toy_clip"] for k in ("sjd", "ar", "ar1"))
    per = lambda doc: np.array([row["value"] for row in doc["per_sample"]])  # noqa: E731
    assert sjd["paired_vs_ar"]["delta"] == pytest.approx((per(sjd) - per(ar)).mean(), abs=1e-9)
    assert sjd["noise_floor"]["value"] == pytest.approx((per(ar1) - per(ar)).mean(), abs=1e-9)
    assert ar["paired_vs_ar"] is None  # the AR run is the reference itself
    fd = scores_of(root / "runs" / ids["sjd"])["toy_fd"]
    assert fd["paired_vs_ar"]["delta"] == pytest.approx(fd["value"] - fd["paired_vs_ar"]["ar_value"], abs=1e-9)


def test_scores_are_never_recomputed_and_waiting_comparisons_are_filled_in_later(toy_results, tmp_path):
    source, ids = toy_results
    root = tmp_path / "results"
    (root / "runs").mkdir(parents=True)
    for key in ("ar", "sjd"):  # no second AR run yet: no noise floor
        shutil.copytree(source / "runs" / ids[key], root / "runs" / ids[key])
    config = compose_eval(["eval=toy"])
    first = {o.evaluator: o for o in score([root / "runs" / ids["sjd"]], config)}
    assert all(o.status == "scored" for o in first.values())
    assert first["toy_clip"].doc["noise_floor"] is None
    assert any(ids["ar1"] in item for item in first["toy_clip"].doc["pending"])
    again = score([root / "runs" / ids["sjd"]], config)
    assert {o.status for o in again} == {"present"}
    mtimes = {o.evaluator: o.path.stat().st_mtime_ns for o in again}

    shutil.copytree(source / "runs" / ids["ar1"], root / "runs" / ids["ar1"])
    later = {o.evaluator: o for o in score([root / "runs" / ids["sjd"]], config)}
    assert {o.status for o in later.values()} == {"updated"}
    for name, outcome in later.items():
        assert outcome.path == first[name].path and outcome.doc["value"] == first[name].doc["value"]
        assert outcome.doc["noise_floor"] is not None and outcome.doc["pending"] == []
        assert outcome.path.stat().st_mtime_ns != mtimes[name]
    assert {o.status for o in score([root / "runs" / ids["sjd"]], config)} == {"present"}


def test_eval_beside_a_score_file_whose_value_is_a_string_scores_it_again(toy_results, tmp_path):
    """A score file of the wrong shape (the trial's value "high") is damage: eval measures again and
    writes a sound file in its place, with no traceback."""
    source, ids = toy_results
    root = tmp_path / "results"
    for key in ("ar", "sjd"):
        shutil.copytree(source / "runs" / ids[key], root / "runs" / ids[key])
    assert cli.invoke(app, ["eval", f"results_dir={root}", "eval=toy"]).exit_code == 0
    (path,) = (root / "runs" / ids["sjd"] / "scores").glob("toy_clip-*.json")
    good = json.loads(path.read_text())
    path.write_text(json.dumps({**good, "value": "high"}))
    result = cli.invoke(app, ["eval", f"results_dir={root}", "eval=toy"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert json.loads(path.read_text())["value"] == pytest.approx(good["value"])


def test_the_ar_runs_eval_compares_with_are_the_sweep_baselines(toy_results):
    source, ids = toy_results
    run = open_run(source / "runs" / ids["sjd"])
    (ar, _), (floor, _) = comparison_runs(run, 1)
    assert ar == ids["ar"] and floor == ids["ar1"]


def test_sweep_eval_adds_the_noise_floor_run_and_scores_each_run(toy_results, tmp_path, monkeypatch):
    source, ids = toy_results
    root = tmp_path / "results"
    shutil.copytree(source, root)
    words = ["sweep", "decoder=sjd", *BASE, f"results_dir={root}", "--eval"]
    dry = cli.invoke(app, [*words, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert ids["ar1"] in dry.output and "seed=1" in dry.output  # the seed+1 AR run the floor needs
    import sjdbench.results.runs as runs_module

    pairings = []
    real = runs_module.pair_all
    monkeypatch.setattr(runs_module, "pair_all", lambda *a, **k: pairings.append(1) or real(*a, **k))
    result = cli.invoke(app, words)
    assert result.exit_code == 0, result.output
    assert "quality beside speed" in result.output
    assert len(pairings) == 1  # the sweep's speedups, computed once, serve both tables
    for key in ("ar", "ar1", "sjd"):
        assert set(scores_of(root / "runs" / ids[key])) == {"toy_clip", "toy_fd", "toy_objects"}
    assert scores_of(root / "runs" / ids["sjd"])["toy_clip"]["noise_floor"] is not None


def test_scoring_reads_each_run_once(toy_results, tmp_path, monkeypatch):
    """A run scored in one call and compared with by another (AR, its seed+1 floor) is read once."""
    from collections import Counter

    import sjdbench.eval.score as score_module

    source, ids = toy_results
    root = tmp_path / "results"
    shutil.copytree(source, root)
    opened: Counter = Counter()
    real = score_module.open_run
    monkeypatch.setattr(score_module, "open_run", lambda folder: opened.update([Path(folder).name]) or real(folder))
    outcomes = score([root / "runs" / run_id for run_id in ids.values()], compose_eval(["eval.evaluators=[toy_clip]"]))
    assert {o.status for o in outcomes} == {"scored"}
    assert opened == dict.fromkeys(ids.values(), 1)


def test_the_quality_table_reads_each_score_file_once(toy_results, tmp_path, monkeypatch):
    from collections import Counter

    import sjdbench.results.files as files_module
    import sjdbench.results.runs as runs_module
    import sjdbench.results.scorefile as scorefile_module
    from sjdbench.cli.scores import quality_table

    source, ids = toy_results
    root = tmp_path / "results"
    shutil.copytree(source, root)
    assert cli.invoke(app, ["eval", str(root), "eval.evaluators=[toy_clip,toy_objects]"]).exit_code == 0
    reads: Counter = Counter()
    real = files_module.read_json

    def counting(path, *args, **kwargs):
        if Path(path).parent.name == "scores":
            reads[Path(path)] += 1
        return real(path, *args, **kwargs)

    for module in (files_module, runs_module, scorefile_module):
        monkeypatch.setattr(module, "read_json", counting)
    assert quality_table([root / "runs" / run_id for run_id in ids.values()], {}) is not None
    files = sorted(root.glob("runs/*/scores/*.json"))
    assert len(files) == 6 and reads == dict.fromkeys(files, 1)


def test_eval_selects_runs_by_id_glob_and_filter(toy_results, tmp_path):
    source, ids = toy_results
    root = tmp_path / "results"
    shutil.copytree(source, root)
    result = cli.invoke(app, ["eval", "--results-dir", str(root), "toy-sjd-*", "eval.evaluators=[toy_clip]"])
    assert result.exit_code == 0, result.output
    assert set(scores_of(root / "runs" / ids["sjd"])) == {"toy_clip"}
    assert not (root / "runs" / ids["ar1"] / "scores").exists() or not scores_of(root / "runs" / ids["ar1"])
    result = cli.invoke(app, ["eval", "--results-dir", str(root), "seed=1", "eval.evaluators=[toy_clip]"])
    assert result.exit_code == 0 and set(scores_of(root / "runs" / ids["ar1"])) == {"toy_clip"}


@pytest.mark.parametrize(
    "words, message",
    [
        (["eval"], "name the runs to score"),
        (
            ["eval", "results", "eval=bogus"],
            "unknown eval 'bogus'; choose one of: auto, coco, coco_clean, lantern, parti, toy",
        ),
        (["eval", "results", "eval.clip.score=percent"], "choose one of: 100max0, cosine"),
        (["eval", "no-such-run"], "is neither a run id"),
    ],
)
def test_bad_eval_input_is_one_line(words, message):
    result = cli.invoke(app, words)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_toy_evaluators_refuse_captions_outside_the_toy_grammar(tmp_path):
    import eval_helpers as helpers

    run = helpers.synthetic_run(
        tmp_path, "debug-sjd-0000000000aa", [1, 2, 3], texts=["a cat", "a dog", "a bus"], size=(64, 64)
    )
    outcomes = {o.evaluator: o for o in score([run.dir], compose_eval(["eval=toy"]))}
    assert outcomes["toy_objects"].status == "refused" and "toy-world captions" in outcomes["toy_objects"].message
    assert outcomes["toy_fd"].status == "refused"
    assert outcomes["toy_clip"].status == "scored"  # the toy CLIP reads any text (unknown words: <unk>)
