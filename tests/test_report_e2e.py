"""`sjdbench report` end to end on real toy runs, through the CLI; draft traces replay the loop exactly."""

import json
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from sjdbench.cli import app
from sjdbench.config import compose_run
from sjdbench.report.draft_traces import record_run
from sjdbench.results.store import RunStore
from sjdbench.run.runner import execute


@pytest.fixture(scope="module")
def toy_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy") / "results"
    ids = {}
    for decoder in ("ar", "sjd"):
        config = compose_run(
            ["model=toy", "data=toy", "data.limit=2", "warmup=0", f"decoder={decoder}", f"results_dir={root}"]
        )
        ids[decoder] = execute(config).run_id
    return root, ids


def test_report_over_real_toy_runs(toy_store, tmp_path):
    root, ids = toy_store
    out = tmp_path / "report"
    result = CliRunner().invoke(
        app, ["report", f"results_dir={root}", "model=toy", "--out", str(out), "--trace-drafts", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "toy on toy: decoders against AR" in result.output
    written = [line.split(" ", 1)[1] for line in result.output.splitlines() if line.startswith("wrote ")]
    assert str(out / "main.md") in written and str(out / "report.html") in written
    main = pd.read_csv(out / "main.csv").set_index("run_id")
    assert list(main.index) == [ids["ar"], ids["sjd"]]
    summary = RunStore(root, ids["sjd"]).summary()
    assert main.loc[ids["sjd"], "step compression"] == pytest.approx(summary["step_compression"])
    rows = {r["prompt_id"]: r for r in RunStore(root, ids["sjd"]).rows()}
    ar_rows = {r["prompt_id"]: r for r in RunStore(root, ids["ar"]).rows()}
    ratios = [ar_rows[p]["latency_s"] / rows[p]["latency_s"] for p in rows]
    assert main.loc[ids["sjd"], "speedup"] == pytest.approx((ratios[0] * ratios[1]) ** 0.5)
    traces = [json.loads(line) for line in (root / "runs" / ids["sjd"] / "draft_traces.jsonl").read_text().splitlines()]
    assert len(traces) == 1 and traces[0]["matches_stored"]
    html = (out / "report.html").read_text()
    assert all((out / link).is_file() for link in re.findall(r'(?:src|href)="([^"]+)"', html))
    assert (out / "figures" / "toy-toy" / "trajectories.png").is_file()
    assert "accepted vs rejected" in html


def test_bad_report_input_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["report", f"results_dir={tmp_path}", "colour=red"])
    assert result.exit_code == 2
    assert (
        result.output.strip().startswith("error: unknown report filter 'colour'")
        and len(result.output.strip().splitlines()) == 1
    )
    empty = CliRunner().invoke(app, ["report", f"results_dir={tmp_path}"])
    assert empty.exit_code == 2 and "no runs in" in empty.output and "Traceback" not in empty.output


def test_draft_traces_replay_the_stored_samples_and_count_like_the_loop(tmp_path):
    """Every verified draft is recorded once, accepted ones as accepted: the counts equal the loop's."""
    config = compose_run(
        [
            "model=debug",
            "model.options.grid_h=4",
            "model.options.grid_w=4",
            "decoder=sjd",
            "decoder.window=4",
            "data.limit=3",
            "warmup=0",
            "save_images=false",
            f"results_dir={tmp_path}",
        ]
    )
    outcome = execute(config)
    path = record_run(tmp_path / "runs" / outcome.run_id, prompts=3)
    traces = [json.loads(line) for line in path.read_text().splitlines()]
    for trace, row in zip(traces, RunStore(tmp_path, outcome.run_id).rows()):
        assert trace["matches_stored"]
        assert len(trace["drafts"]) == row["verified"]
        assert sum(d["accepted"] for d in trace["drafts"]) == row["accepted"]
        assert all(len(d["probs"]) >= 1 and 0 <= d["probs"][-1] <= 1 for d in trace["drafts"])
