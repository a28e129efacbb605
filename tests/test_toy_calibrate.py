"""Toy calibration decodes through the runner: its samples are ordinary, resumable runs."""
import json
from pathlib import Path

from sjdbench.models.toy.calibrate import calibrate


def test_calibration_runs_are_ordinary_resumable_runs(tmp_path):
    first = calibrate(n=2, windows=(16,), n_objects=3, results_dir=tmp_path, with_clip=False)
    runs = sorted((tmp_path / "runs").iterdir())
    summaries = {json.loads((r / "summary.json").read_text())["decoder"]: json.loads((r / "summary.json").read_text()) for r in runs}
    assert set(summaries) == {"ar", "sjd"} and all(s["complete"] for s in summaries.values())
    assert summaries["ar"]["n_samples"] == 3  # the AR run was extended from 2 to 3 captions for the object finder
    assert first["ar"]["step_compression_mean"] == 1.0 and first["sjd_w16"]["n"] == 2
    assert first["objects"]["n_images"] == 3
    lines = {r.name: (r / "samples.jsonl").read_text() for r in runs}
    second = calibrate(n=2, windows=(16,), n_objects=3, results_dir=tmp_path, with_clip=False)
    assert {r.name: (r / "samples.jsonl").read_text() for r in runs} == lines  # nothing decoded again
    assert second["sjd_w16"]["step_compression_mean"] == first["sjd_w16"]["step_compression_mean"]
    assert Path(tmp_path / "runs").is_dir()
