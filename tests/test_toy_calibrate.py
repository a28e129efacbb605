"""Toy calibration decodes through the runner: its samples are ordinary, resumable runs."""

import json

import pytest

from sjdbench.models.toy.model import build_toy_adapter
from sjdbench.run.toy_calibration import image_sets, sjd_runs


@pytest.mark.slow  # about 7 s: decodes a calibration set
def test_calibration_runs_are_ordinary_resumable_runs(tmp_path):
    adapter = build_toy_adapter()
    stats, rows = sjd_runs(adapter, 2, 16, tmp_path)
    assert stats["n"] == 2 and len(rows) == 2 and stats["step_compression_mean"] > 1.0
    _, ar_rows = sjd_runs(adapter, 2, 1, tmp_path)
    assert [r["nfe"] for r in ar_rows] == [r["n_tokens"] for r in ar_rows]  # AR: one token per forward
    scenes, sets = image_sets(adapter, 3, tmp_path)  # resumes the AR run with a third caption
    assert len(scenes) == 3 and sets["ar"].shape == (3, 64, 64, 3)

    runs = sorted((tmp_path / "runs").iterdir())
    summaries = {
        json.loads((r / "summary.json").read_text())["decoder"]: json.loads((r / "summary.json").read_text())
        for r in runs
    }
    assert set(summaries) == {"ar", "sjd"} and all(s["finished"] for s in summaries.values())
    assert summaries["ar"]["n_samples"] == 3
    lines = {r.name: (r / "samples.jsonl").read_text() for r in runs}
    again, _ = sjd_runs(adapter, 2, 16, tmp_path)
    assert {r.name: (r / "samples.jsonl").read_text() for r in runs} == lines  # nothing decoded again
    assert again["step_compression_mean"] == stats["step_compression_mean"]
