"""Report figures: each has the series it should; report.html links only files that exist."""

import json
import re
from pathlib import Path

import pytest
from synthetic_store import make_store, write_score

from sjdbench.report import figures as figs
from sjdbench.report.build import build_report, collect
from sjdbench.report.tables import main_table, quality_metrics, with_numbers
from sjdbench.results.select import parse_selection


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    root = tmp_path_factory.mktemp("figures") / "results"
    ids = make_store(root)
    write_score(root, ids["ar"], "toy_clip", 30.0, (29.0, 31.0))
    write_score(root, ids["sjd"], "toy_clip", 29.8, (28.9, 30.9))
    write_score(root, ids["lantern"], "toy_clip", 28.0, (27.0, 29.0))
    store = collect(parse_selection([f"results_dir={root}"]))
    metrics, quality = quality_metrics(store.scores, store.runs["run_id"])
    numbers = with_numbers(store.runs, store.pairings, quality)
    main = main_table(store.runs, store.pairings, store.scores, ("toy", "toy")).frame
    return root, ids, store, numbers, main, metrics


def legend(plot) -> list[list[str]]:
    """Legend labels of every axes (the figure's series)."""
    labels = [ax.get_legend_handles_labels()[1] for ax in plot.figure.axes]
    figs.plt.close(plot.figure)
    return labels


def test_speedup_and_step_compression_vs_window_one_line_per_decoder(frames):
    _, _, store, numbers, _, _ = frames
    plot = figs.fig_speedup_vs_window(store.runs, numbers)
    assert legend(plot)[0] == ["sjd"]  # only sjd was run at two windows


def test_nfe_vs_growth_steps(frames):
    _, _, store, numbers, _, _ = frames
    # the store holds two windows, so the series names its own
    assert legend(figs.fig_nfe_vs_growth_steps(store.runs, numbers)) == [["sjd_vp W=16"]]


def test_per_decoder_figures_have_one_series_per_main_decoder(frames):
    _, _, _, _, main, _ = frames
    decoders = ["sjd", "sjd_vp", "lantern"]  # the main table's decoders (AR has no window)
    assert sorted(legend(figs.fig_acceptance_by_position(main))[0]) == sorted(decoders)
    assert sorted(legend(figs.fig_accepted_length_hist(main))[0]) == sorted(decoders)
    growth = legend(figs.fig_growth(main))[0]
    assert len(growth) == 2 and growth[0].startswith("growth share") and growth[1].startswith("growth precision")


def test_trajectories_fall_back_to_committed_tokens_without_draft_traces(frames):
    _, _, store, _, main, _ = frames
    plot = figs.fig_trajectories(main, store.samples)
    titles = [ax.get_title() for ax in plot.figure.axes if ax.get_title()]
    panels = [labels for labels in legend(plot) if labels]
    assert len(panels) == 3 and all(labels == ["committed"] for labels in panels)
    assert titles == ["sjd  (15 committed)", "sjd_vp  (15 committed)", "lantern  (15 committed)"]
    assert "--trace-drafts" in plot.caption


def test_trajectories_accepted_vs_rejected_from_draft_traces(frames, tmp_path):
    _, ids, store, _, main, _ = frames
    run_dir = Path(main.set_index("run_id").loc[ids["sjd"], "run_dir"])
    drafts = [{"pos": 3, "token": 1, "accepted": i % 3 != 0, "probs": [0.1, 0.2 + 0.01 * i, 0.5]} for i in range(30)]
    traced = main.copy()
    traced["has_draft_traces"] = traced["run_id"] == ids["sjd"]
    (run_dir / "draft_traces.jsonl").write_text(
        json.dumps({"prompt_id": 0, "sample": 0, "matches_stored": True, "drafts": drafts}) + "\n"
    )
    try:
        plot = figs.fig_trajectories(traced, store.samples)
        assert [ax.get_title() for ax in plot.figure.axes if ax.get_title()] == ["sjd  (20 accepted, 10 rejected)"]
        assert [labels for labels in legend(plot) if labels] == [["accepted", "rejected"]]
        bands = figs._bands([d["probs"] for d in drafts if d["accepted"]])
        assert bands["offset"].tolist() == [0, -1, -2] and bands["median"].iloc[0] == 0.5
    finally:
        (run_dir / "draft_traces.jsonl").unlink()


def test_quality_vs_speed_marks_ar_lossless_and_lossy(frames):
    _, _, _, numbers, _, metrics = frames
    plot = figs.fig_quality_vs_speed(numbers, metrics)
    assert legend(plot) == [["AR", "lossless", "lossy"]]
    assert figs.fig_quality_vs_speed(numbers, []).startswith("no run of this table has quality scores")


def test_image_grid_rows_are_decoders_and_columns_prompts(frames):
    _, _, store, _, main, _ = frames
    plot = figs.fig_image_grid(main, store.samples)
    assert len(plot.figure.axes) == 4 * 5  # ar, sjd, sjd_vp, lantern x the 5 shared prompts
    assert [ax.get_ylabel() for ax in plot.figure.axes[::5]] == ["ar", "sjd", "sjd_vp", "lantern"]
    figs.plt.close(plot.figure)


@pytest.mark.slow  # about 4 s: every figure drawn
def test_report_html_links_only_files_that_exist(frames, tmp_path):
    root = frames[0]
    out = tmp_path / "report"
    report = build_report([f"results_dir={root}"], out)
    html = (out / "report.html").read_text()
    links = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert links and all(not link.startswith(("/", "http", "file:")) for link in links)
    assert all((out / link).is_file() for link in links), [link for link in links if not (out / link).is_file()]
    for name in (
        "trajectories.png",
        "quality_vs_speed.png",
        "quality_vs_speed.svg",
        "image_grid.png",
        "speedup_vs_window.svg",
        "nfe_vs_growth_steps.png",
    ):
        assert f"figures/toy-toy/{name}" in links
    assert {p.name for p in report.files} >= {
        "main.md",
        "main.tex",
        "main.csv",
        "runs.parquet",
        "samples.parquet",
        "report.html",
        "provenance.json",
    }
    assert "commit aaaaaaaaaa" in html and "record no timing session" in html  # provenance and its caveats
