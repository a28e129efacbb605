"""Measured tables are written by the scripts that measure them (`--markdown FILE` and the scripts'
docs fragments, sjdbench.report.generated): the fragment format, and each script's table-writing code
on tiny inputs (the measurements themselves are long and belong to a quiet machine)."""

import importlib.util
import io
import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from synthetic_store import scored_store

from sjdbench.report import generated

ROOT = Path(__file__).resolve().parents[1]


def script(name: str):
    """A script of scripts/ as a module (its main() is not run)."""
    spec = importlib.util.spec_from_file_location(f"script_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_fragment_states_its_command_machine_date_and_code(tmp_path):
    path = generated.write_fragment(
        tmp_path / "sub" / "t.md",
        "| a |\n|---|\n| 1 |\n",
        "python x.py",
        "a 2-core CPU",
        "2026-01-02",
        "sjdbench 0.1.0",
    )
    assert path.read_text().splitlines() == [
        generated.MARKER,
        "",
        "Measured with `python x.py` on a 2-core CPU, 2026-01-02 (sjdbench 0.1.0).",
        "",
        "| a |",
        "|---|",
        "| 1 |",
    ]
    default = generated.write_fragment(tmp_path / "d.md", "x", "cmd").read_text()
    assert "CPUs" in default.splitlines()[2] and "sjdbench" in default.splitlines()[2]  # this machine, this code


def test_printed_output_becomes_markdown():
    printed = "# model=toy prompts=8\n# TV: 8000 samples\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert generated.printed_markdown(printed).splitlines() == [
        "- model=toy prompts=8",
        "- TV: 8000 samples",
        "",
        "| a | b |",
        "|---|---|",
        "| 1 | 2 |",
    ]
    headings = "## Part 1\n\n| a |\n|---|\n\n## Part 2\n\n| b |\n|---|\n"
    assert generated.printed_markdown(headings) == headings.strip()
    assert generated.text_block("x  1\ny  2\n") == "```text\nx  1\ny  2\n```"


def test_stdout_is_kept_while_it_is_printed(monkeypatch):
    screen = io.StringIO()
    monkeypatch.setattr(sys, "stdout", screen)
    kept = generated.tee_stdout()
    print("a table")
    assert screen.getvalue() == kept.getvalue() == "a table\n"


def test_the_command_is_the_one_a_reader_reruns(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert (
        generated.script_command([str(tmp_path / "benchmarks" / "b.py"), "--x", "1"]) == "python benchmarks/b.py --x 1"
    )
    assert generated.script_command(["/elsewhere/b.py"]) == "python /elsewhere/b.py"


def test_the_study_table_comes_from_the_store(tmp_path):
    root = tmp_path / "results"
    ids = scored_store(root)
    table = script("study").study_table(root)
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert header == ["decoder", "lossless", "step x", "toy CLIP", "Δ toy CLIP vs AR", "equivalence (±1)"]
    cells = {r.split("|")[1].strip(): [c.strip() for c in r.strip("|").split("|")] for r in rows[1:]}
    assert list(cells)[0] == "ar (seed 0)"  # AR first, then the decoders as the report orders them
    assert cells["sjd"][1:] == [
        "yes",
        f"{20 * 5 / sum([8, 10, 9, 7, 8]):.2f}",
        "75.0",
        "-0.0 [-9.0, +9.0]",
        cells["sjd"][5],
    ]
    assert cells["sjd"][5] == "equivalent to AR within ±1" and cells["sjd_vp"][5] == "not shown"
    assert cells["lantern"][1] == "no" and cells["lantern"][5] == "–"
    assert cells["jacobi"][1] == "greedy"
    assert "two one-sided tests (TOST)" in table and ids["sjd"] not in table
    # one study's runs: those of another batch size in the same store are not its rows
    assert script("study").study_table(root, batch=1) == table
    other = script("study").study_table(root, batch=32)
    assert not [line for line in other.splitlines() if line.startswith("| ")][1:]


def test_the_calibration_tables_render_the_shipped_measurements(tmp_path):
    module = script("toy_calibration")
    paths = module.write_tables(
        ROOT / "docs" / "toy_calibration.json", ROOT / "docs" / "toy_knobs.json", tmp_path, "a 2-core CPU", "2026-11-30"
    )
    measurements, knobs, objects = (p.read_text() for p in paths)
    cal = json.loads((ROOT / "docs" / "toy_calibration.json").read_text())
    assert f"**{cal['sjd_w16']['step_compression_mean']:.2f}×**" in measurements
    assert "on a 2-core CPU, 2026-11-30 (rendered from its JSON" in measurements
    rows = [line for line in knobs.splitlines() if line.startswith("| ") and "setting" not in line]
    assert len(rows) == len(json.loads((ROOT / "docs" / "toy_knobs.json").read_text()))
    assert rows[0].startswith("| **shipped** (CFG 3, top-k 100, T 1) |") and any("| top-k off |" in r for r in rows)
    assert "| **AR samples, shipped sampling** | **0.98** | **0.52** |" in objects


def test_the_calibration_script_refuses_to_date_old_measurements_as_new(monkeypatch):
    module = script("toy_calibration")
    monkeypatch.setattr(sys, "argv", ["toy_calibration.py", "--tables-only"])
    with pytest.raises(SystemExit) as exit_info:
        module.main()
    assert exit_info.value.code == 2


def test_the_toy_decoders_table_pivots_windows():
    frame = pd.DataFrame(
        [
            {"run_id": "a", "decoder": "ar", "is_ar": True, "greedy": False, "window": 1},
            *(
                {
                    "run_id": f"s{w}",
                    "decoder": "sjd",
                    "is_ar": False,
                    "greedy": False,
                    "window": w,
                    "step_compression": 2.5 + w / 100,
                    "acceptance_rate": 0.6,
                    "growth_share": 0.1,
                    "growth_precision": 0.55,
                }
                for w in (16, 32)
            ),
            {
                "run_id": "j",
                "decoder": "jacobi",
                "is_ar": False,
                "greedy": True,
                "window": 16,
                "step_compression": 3.0,
                "acceptance_rate": 0.66,
                "growth_share": 0.0,
                "growth_precision": float("nan"),
            },
        ]
    )
    lines = script("toy_decoders").decoders_table(frame, [16, 32]).splitlines()
    assert (
        lines[0] == "| decoder | step x W=16 | step x W=32 | accept W=16 | accept W=32 | growth W=16 | precision W=16 |"
    )
    assert "| jacobi (greedy) | 3.00 | – | 0.66 | – | 0.00 | - |" in lines
    assert "| sjd | 2.66 | 2.82 | 0.60 | 0.60 | 0.10 | 0.55 |" in lines
    assert not any(line.startswith("| ar ") for line in lines)


def test_the_toy_report_fragment_is_the_reports_main_table(tmp_path):
    main = tmp_path / "main.md"
    main.write_text("### toy on toy: decoders against AR\n\n| decoder |\n|---|\n| sjd |\n\n- model: toy\n")
    text = script("toy_report").main_table_fragment(main, tmp_path / "f.md", "make report-toy").read_text()
    assert "#### toy on toy: decoders against AR" in text and "Measured with `make report-toy` on" in text
    assert text.rstrip().endswith("- model: toy")
