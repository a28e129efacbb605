"""Equivalence to AR within a margin (TOST, sjdbench.eval.metrics.equivalence): the statistic on
synthetic data with known truth, its level, the margins' parsing, and the column it adds to the
report's and the CLI's quality tables."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from synthetic_store import scored_store

from sjdbench.errors import UserError
from sjdbench.eval.metrics.equivalence import (
    ALPHA,
    claimed,
    default_margin,
    equivalence,
    is_mean_of_samples,
    margin_for,
    parse_margins,
    prompt_differences,
    tost,
)
from sjdbench.report.build import build_report

CLIP_SD = 12.0  # per-image toy CLIP-Score spread: per-prompt paired differences of about 17 points


def clip_scores(rng, n, shift=0.0):
    """(AR, decoder) per-prompt CLIP-Scores of two independent exact samplers, the decoder's shifted."""
    ar = rng.normal(77.0, CLIP_SD, n)
    return ar, rng.normal(77.0 + shift, CLIP_SD, n)


def test_a_decoder_equal_to_ar_with_enough_prompts_is_equivalent_within_one_point():
    rng = np.random.default_rng(0)
    ar, decoder = clip_scores(rng, 4000)
    result = tost(decoder - ar, margin=1.0)
    assert result.n == 4000 and result.equivalent
    assert result.text() == "equivalent to AR within ±1"
    assert -1.0 < result.lo < result.mean < result.hi < 1.0
    assert result.p_value < ALPHA


def test_a_decoder_shifted_by_two_points_is_not_shown_equivalent():
    rng = np.random.default_rng(1)
    ar, decoder = clip_scores(rng, 4000, shift=2.0)
    result = tost(decoder - ar, margin=1.0)
    assert not result.equivalent and result.text() == "not shown"
    assert result.lo > 1.0  # the data show a difference, not merely no equivalence
    assert result.p_value > ALPHA


def test_too_few_prompts_show_nothing_even_for_an_equal_decoder():
    rng = np.random.default_rng(2)
    ar, decoder = clip_scores(rng, 8)
    result = tost(decoder - ar, margin=1.0)
    assert not result.equivalent and result.text() == "not shown"
    assert result.hi - result.lo > 2.0  # the 90 % interval is far wider than the margin
    one = tost([0.3], margin=1.0)
    assert one.n == 1 and one.lo is None and not one.equivalent and one.p_value is None
    assert not tost([], margin=1.0).equivalent


def test_the_interval_is_the_paired_t_interval_at_ninety_percent():
    from scipy.stats import t as student

    differences = np.array([0.4, -0.2, 0.1, 0.5, -0.3, 0.2])
    result = tost(differences, margin=1.0)
    half = student.ppf(0.95, 5) * differences.std(ddof=1) / np.sqrt(6)
    assert result.mean == pytest.approx(differences.mean())
    assert (result.lo, result.hi) == pytest.approx((differences.mean() - half, differences.mean() + half))
    assert result.equivalent and result.p_value < ALPHA
    assert not tost(differences, margin=0.3).equivalent and tost(differences, margin=0.3).p_value > ALPHA


def test_identical_samples_are_equivalent():
    """A decoder that reproduces AR's images (greedy Jacobi against greedy AR) differs by exactly 0."""
    result = tost(np.zeros(16), margin=1.0)
    assert result.equivalent and result.lo == result.hi == 0.0 and result.p_value == 0.0


def test_the_test_says_equivalent_at_most_alpha_of_the_time_at_the_margin():
    """Under a true difference equal to the margin, 'equivalent' is a false claim: its rate is α
    (less when the interval is nearly as wide as the margin: TOST is then conservative)."""
    rng = np.random.default_rng(3)
    trials, n = 4000, 30
    claims = sum(tost(rng.normal(1.0, 1.0, n), margin=1.0).equivalent for _ in range(trials))
    assert 0.035 < claims / trials < 0.065  # α = 0.05; the binomial s.e. at 4,000 trials is 0.0034
    noisy = sum(tost(rng.normal(1.0, 3.0, n), margin=1.0).equivalent for _ in range(trials))
    assert noisy / trials < 0.05
    inside = sum(tost(rng.normal(0.0, 1.0, n), margin=1.0).equivalent for _ in range(1000))
    assert inside / 1000 > 0.95  # and it has power inside the margin


def test_paired_differences_are_per_prompt_means_over_the_keys_both_runs_hold():
    run = [
        {"prompt_id": 0, "sample": 0, "value": 5.0},
        {"prompt_id": 0, "sample": 1, "value": 7.0},
        {"prompt_id": 1, "sample": 0, "value": 1.0},
        {"prompt_id": 2, "sample": 0, "value": 9.0},  # AR lacks it: not paired
    ]
    ar = [
        {"prompt_id": 0, "sample": 0, "value": 4.0},
        {"prompt_id": 0, "sample": 1, "value": 4.0},
        {"prompt_id": 1, "sample": 0, "value": 3.0},
    ]
    assert prompt_differences(run, ar).tolist() == [2.0, -2.0]  # prompt 0: mean of +1 and +3
    assert not equivalence(run, None, 1.0).equivalent and equivalence(run, None, 1.0).n == 0


def test_who_claims_equality_with_ar():
    assert claimed(is_ar=False, lossless=True, greedy=False, baseline_greedy=False)
    assert not claimed(is_ar=True, lossless=True, greedy=False, baseline_greedy=False)
    assert not claimed(is_ar=False, lossless=False, greedy=False, baseline_greedy=False)
    assert not claimed(is_ar=False, lossless=True, greedy=True, baseline_greedy=False)  # greedy vs sampled AR
    assert claimed(is_ar=False, lossless=True, greedy=True, baseline_greedy=True)


def test_default_margins_are_one_clip_point_on_each_scale():
    assert default_margin("toy_clip", "toy CLIP-Score (100 * max(cos, 0))") == 1.0
    assert default_margin("clip_score", "CLIP-Score (100 * max(cos, 0) per sample, ViT-B-16-quickgelu)") == 1.0
    assert default_margin("clip_score", "CLIP-Score (raw cosine per sample, ViT-B-32)") == 0.01
    assert default_margin("fid", "FID") is None and default_margin("toy_objects", "object accuracy") is None
    assert margin_for("toy_clip", "", {"toy_clip": 0.5}) == 0.5
    assert margin_for("toy_clip", "", {"toy_clip": None}) is None
    assert margin_for("toy_clip", "", {"clip_score": 2.0}) == 1.0


def test_only_scores_that_are_means_of_per_sample_values_are_testable():
    assert is_mean_of_samples("toy_clip") and is_mean_of_samples("clip_score")
    assert not any(is_mean_of_samples(name) for name in ("toy_objects", "toy_fd", "fid", "kid", "nope"))


def test_margins_are_parsed_and_bad_ones_refused_in_one_line():
    assert parse_margins(["toy_clip=0.5", "clip_score=none"]) == {"toy_clip": 0.5, "clip_score": None}
    assert parse_margins([]) == {}
    cases = {
        "toy_fd=1": "choose one of: clip_score, hpsv2, toy_clip",
        "toy_clip": "give EVALUATOR=MARGIN",
        "toy_clip=-1": "positive number",
        "toy_clip=abc": "positive number",
        "toy_clip=nan": "positive number",
    }
    for word, expected in cases.items():
        with pytest.raises(UserError, match=expected):
            parse_margins([word])
    with pytest.raises(UserError, match="given twice"):
        parse_margins(["toy_clip=1", "toy_clip=2"])


# -- the column in the tables ---------------------------------------------------------------------


def equivalence_column(out, header="equivalence (±1)") -> dict[str, str]:
    quality = pd.read_csv(out / "quality.csv")
    return dict(zip(quality["run_id"], quality[header])) if header in quality else {}


@pytest.mark.slow  # about 4 s: a whole report
def test_the_report_says_equivalent_where_the_data_show_it(tmp_path):
    root = tmp_path / "results"
    ids = scored_store(root)
    build_report([f"results_dir={root}"], tmp_path / "out", figures=False)
    column = equivalence_column(tmp_path / "out")
    assert column[ids["sjd"]] == "equivalent to AR within ±1"
    assert column[ids["vp"]] == "not shown"  # 2 points above AR on every prompt
    assert column[ids["ar"]] == "–" and column[ids["lantern"]] == "–"  # AR itself; a lossy decoder claims nothing
    assert column[ids["jacobi"]] == "–"  # greedy, and the store holds only a sampled AR
    markdown = (tmp_path / "out" / "quality.md").read_text()
    assert "equivalent to AR within ±1" in markdown and "two one-sided tests (TOST) at α = 0.05" in markdown
    assert "--equivalence-margin toy_clip=M" in markdown
    # a margin the 5 prompts cannot resolve, and a metric switched off
    build_report([f"results_dir={root}"], tmp_path / "tight", figures=False, margins={"toy_clip": 0.01})
    assert equivalence_column(tmp_path / "tight", "equivalence (±0.01)")[ids["sjd"]] == "not shown"
    build_report([f"results_dir={root}"], tmp_path / "off", figures=False, margins={"toy_clip": None})
    assert not any("equivalence" in c for c in pd.read_csv(tmp_path / "off" / "quality.csv").columns)


def test_the_cli_quality_table_has_the_equivalence_column(tmp_path):
    from rich.console import Console

    from sjdbench.cli.scores import quality_table, run_speedups

    root = tmp_path / "results"
    ids = scored_store(root)
    runs = [root / "runs" / ids[name] for name in ("ar", "sjd", "vp", "lantern")]
    table = quality_table(runs, run_speedups(runs))
    console = Console(width=400, record=True)
    console.print(table)
    lines = console.export_text().splitlines()
    header = next(line for line in lines if line.lstrip().startswith("decoder"))
    assert "equiv. ±1" in header

    def row(name):
        return next(line for line in lines if line.split() and line.split()[0] == name)

    assert row("sjd").rstrip().endswith("equivalent")
    assert row("sjd_vp").rstrip().endswith("not shown")
    assert row("lantern").rstrip().endswith("-") and row("ar").rstrip().endswith("-")
    assert quality_table(runs, run_speedups(runs), {"toy_clip": None}).columns[-1].header != "equiv. ±1"


def test_report_refuses_a_bad_margin_in_one_line(tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    (root / "store.json").write_text(json.dumps({"schema": 2}))
    result = subprocess.run(
        [sys.executable, "-m", "sjdbench", "report", f"results_dir={root}", "--equivalence-margin", "toy_fd=1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --equivalence-margin toy_fd=1: 'toy_fd' has no equivalence test (its score is not a mean of "
        "per-sample values); choose one of: clip_score, hpsv2, toy_clip"
    ]
