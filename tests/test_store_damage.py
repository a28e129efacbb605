"""A damaged store, read by report, eval, the Python API and migrate: one line naming the file, what is
wrong with it and the fix, exit code 2, no traceback; what is not damage (a torn last line, rows
written after the summary) is read as what it is. On synthetic stores (tests/synthetic_store.py):
nothing decodes here."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from synthetic_store import SJD_NFE, make_store, write_score
from typer.testing import CliRunner

import sjdbench
from sjdbench.cli import app
from sjdbench.errors import UserError
from sjdbench.report.build import build_report
from sjdbench.results.files import parse_lines, read_json
from sjdbench.results.runs import check_rows, read_run, runs_frame

runner = CliRunner()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("pristine") / "results"
    ids = make_store(root)
    (root / "store.json").write_text(json.dumps({"schema": 2}))
    return root, ids


@pytest.fixture
def store(pristine, tmp_path):
    """A fresh copy of the synthetic store to damage: (root, ids, the sjd run's folder)."""
    root, ids = pristine
    copy = tmp_path / "results"
    shutil.copytree(root, copy)
    return copy, ids, copy / "runs" / ids["sjd"]


def one_line(result, *needles: str) -> str:
    """exit 2, one stderr line `error: ...` holding every needle, nothing on stdout, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in result.output and result.stdout == ""
    return lines[0]


def report(root: Path, out: Path, *words: str):
    return runner.invoke(app, ["report", f"results_dir={root}", "--out", str(out), *words])


def built(root: Path, out: Path, *words: str):
    """The report without its figures (what these tests read is the tables and the listing)."""
    return build_report([f"results_dir={root}", *words], out, figures=False)


def evaluate(root: Path, *words: str):
    return runner.invoke(app, ["eval", f"results_dir={root}", *words])


def _json(path: Path, **changes) -> None:
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, **changes}))


def _random(path: Path) -> None:
    path.write_bytes(bytes([0xFF, 0xFE, 0x80, 0x81]) + os.urandom(200))


# damage -> (what is done to the sjd run's folder, what the line must say)
DAMAGE = {
    "summary empty": (lambda d: (d / "summary.json").write_text(""), "summary.json is empty"),
    "summary random bytes": (lambda d: _random(d / "summary.json"), "summary.json is not UTF-8 text"),
    "summary truncated": (
        lambda d: (d / "summary.json").write_text((d / "summary.json").read_text()[:40]),
        "summary.json is not JSON (truncated or damaged",
    ),
    "summary a list": (lambda d: (d / "summary.json").write_text("[1, 2]"), "summary.json holds a JSON list"),
    "summary wrong type": (
        lambda d: _json(d / "summary.json", n_samples="five"),
        'summary.json has n_samples = "five", not int',
    ),
    "summary complete not a bool": (
        lambda d: _json(d / "summary.json", complete="yes"),
        "summary.json has complete",
    ),
    "summary newer schema": (
        lambda d: _json(d / "summary.json", schema=99),
        "was written by a newer sjdbench (schema 99",
    ),
    "summary names another window": (
        lambda d: _json(d / "summary.json", window=99),
        "summary.json says window = 99 but its decoder (env.json) says 16",
    ),
    "summary names another decoder": (
        lambda d: _json(d / "summary.json", decoder="lantern(δ=.3)"),
        "summary.json labels the run 'lantern(δ=.3)', which is not its decoder (sjd, per config.yaml)",
    ),
    "summary names another model": (
        lambda d: _json(d / "summary.json", model="janus"),
        'summary.json says model = "janus" but config.yaml says "toy"',
    ),
    "env random bytes": (lambda d: _random(d / "env.json"), "env.json is not UTF-8 text"),
    "env missing": (lambda d: (d / "env.json").unlink(), "env.json is missing"),
    "env wrong type": (lambda d: _json(d / "env.json", sampling=[1, 2]), "env.json has sampling"),
    "env newer schema": (lambda d: _json(d / "env.json", schema=3), "newer sjdbench (schema 3"),
    "config random bytes": (lambda d: _random(d / "config.yaml"), "config.yaml is not UTF-8 text"),
    "config missing": (lambda d: (d / "config.yaml").unlink(), "config.yaml is missing"),
    "config not a mapping": (lambda d: (d / "config.yaml").write_text("- a\n- b\n"), "config.yaml holds a YAML list"),
    "config without the model": (lambda d: (d / "config.yaml").write_text("model: [1]\n"), "has no model.name"),
    "config not YAML": (lambda d: (d / "config.yaml").write_text("model: {name: toy\n"), "config.yaml is not YAML"),
    "samples deleted": (
        lambda d: (d / "samples.jsonl").unlink(),
        "summary.json counts 5 samples but the sample files hold 0",
    ),
    "samples emptied": (
        lambda d: (d / "samples.jsonl").write_text(""),
        "summary.json counts 5 samples but the sample files hold 0",
    ),
    "a garbage line": (
        lambda d: _insert(d / "samples.jsonl", 2, b"garbage\n"),
        "samples.jsonl line 3 is not JSON",
    ),
    "random bytes in the middle": (
        lambda d: _insert(d / "samples.jsonl", 1, b"\x80\xff\xfe{\n"),
        "samples.jsonl line 2 is not UTF-8 text",
    ),
    "a JSON line that is no row": (
        lambda d: _insert(d / "samples.jsonl", 0, b"[1, 2, 3]\n"),
        "samples.jsonl line 1 is a JSON list, not a sample row",
    ),
    "a row without prompt_id": (
        lambda d: _insert(d / "samples.jsonl", 0, b'{"sample": 0, "nfe": 3}\n'),
        "samples.jsonl line 1 has no prompt_id",
    ),
    "a row with a count of the wrong type": (
        lambda d: _edit_row(d / "samples.jsonl", 0, nfe="nine"),
        'samples.jsonl line 1 has nfe = "nine", not a number',
    ),
    "a row with a negative latency": (
        lambda d: _edit_row(d / "samples.jsonl", 1, latency_s=-0.25),
        "samples.jsonl line 2 has latency_s = -0.25, below 0",
    ),
    "a row with a negative stream time": (
        lambda d: _edit_row(d / "samples.jsonl", 0, stream={"id": "x", "batch_size": 1, "images": 1, "decode_s": -1}),
        "samples.jsonl line 1 has stream.decode_s = -1, not a number >= 0",
    ),
    "a shard file of garbage": (
        lambda d: (d / "samples.0of2.jsonl").write_bytes(b"\x00\x01\x02\n"),
        "samples.0of2.jsonl line 1",
    ),
}


EVAL_TOO = (
    "summary random bytes",
    "summary newer schema",
    "env missing",
    "config missing",
    "samples deleted",
    "a garbage line",
)


def _insert(path: Path, index: int, line: bytes) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(index, line)
    path.write_bytes(b"".join(lines))


def _edit_row(path: Path, index: int, **changes) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[index].update(changes)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_run_is_one_line_for_report_eval_and_the_api(store, tmp_path, damage):
    root, ids, run = store
    apply, needle = DAMAGE[damage]
    apply(run)
    line = one_line(report(root, tmp_path / "out"), ids["sjd"], needle)
    if "newer" not in needle:  # the fix is named: the run's own command repairs it, or the folder goes
        assert "re-run the command that wrote it" in line and f"move {run} out of the store" in line
    else:
        assert "upgrade sjdbench" in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing half-written
    if damage in EVAL_TOO:  # eval selects through the same reader: a few classes suffice
        one_line(evaluate(root, "model=toy"), ids["sjd"], needle)
    with pytest.raises(UserError, match=re.escape(needle)):
        sjdbench.load_runs(root)


def test_a_damaged_run_that_is_not_selected_does_not_stop_the_others(store, tmp_path):
    root, ids, run = store
    _random(run / "summary.json")
    built(root, tmp_path / "out", "decoder=lantern")
    assert ids["sjd"] not in pd.read_csv(tmp_path / "out" / "main.csv")["run_id"].tolist()


def test_several_damaged_runs_are_named_in_one_line(store, tmp_path):
    root, ids, run = store
    _random(run / "summary.json")
    (root / "runs" / ids["lantern"] / "env.json").unlink()
    line = one_line(report(root, tmp_path / "out"), "2 selected runs cannot be read", ids["sjd"], ids["lantern"])
    assert "and 1 more" in line


@pytest.mark.parametrize(
    "marker,needle",
    [
        (b"\x89PNG\r\n", "store.json is not UTF-8 text"),
        (b'{"schema": "two"}', 'store.json has schema = "two", not int'),
        (b'{"schema": 7}', "was written by a newer sjdbench (schema 7"),
        (b"", "store.json is empty"),
    ],
)
def test_a_damaged_or_newer_store_marker_is_one_line_everywhere(store, tmp_path, marker, needle):
    root, ids, _ = store
    (root / "store.json").write_bytes(marker)
    one_line(report(root, tmp_path / "out"), needle)
    one_line(evaluate(root, "model=toy"), needle)
    one_line(runner.invoke(app, ["migrate", f"results_dir={root}"]), needle)
    with pytest.raises(UserError, match="store.json|newer sjdbench"):
        sjdbench.load_runs(root)


@pytest.mark.parametrize(
    "content,needle",
    [
        (None, "score file"),  # random bytes
        (b"[]", "holds a JSON list"),
        (b'{"schema": 9, "evaluator": "toy_clip", "value": 1.0}', "newer sjdbench (score schema 9"),
        (b'{"schema": 1, "evaluator": "toy_clip", "value": "high"}', 'has value = "high"'),
        (b'{"schema": 1, "evaluator": "toy_clip"}', "is not a score file"),
    ],
)
def test_a_damaged_score_file_is_one_line_for_report(store, tmp_path, content, needle):
    root, ids, run = store
    path = write_score(root, ids["sjd"], "toy_clip", 30.0, (29.0, 31.0))
    if content is None:
        _random(path)
    else:
        path.write_bytes(content)
    line = one_line(report(root, tmp_path / "out"), str(path), needle)
    assert "sjdbench eval" in line or "upgrade" in line


def test_damaged_draft_traces_are_one_line(store, tmp_path):
    root, ids, run = store
    (run / "draft_traces.jsonl").write_text('{"prompt_id": 0, "drafts": "none"}\n')
    line = one_line(report(root, tmp_path / "out"), "draft_traces.jsonl row 1", ids["sjd"])
    assert "--trace-drafts" in line


def test_a_damaged_sweep_file_is_one_line(store, tmp_path):
    root, ids, _ = store
    sweep = root / "sweeps" / "0123456789ab"
    sweep.mkdir(parents=True)
    (sweep / "sweep.yaml").write_bytes(b"runs: [\x80\x81")
    one_line(report(root, tmp_path / "out", "0123456789ab"), "sweep 0123456789ab", "sweep.yaml is not UTF-8 text")
    (sweep / "sweep.yaml").write_text("runs: 5\n")
    one_line(report(root, tmp_path / "out", "0123456789ab"), "holds no list of runs")


# -- what is not damage -----------------------------------------------------------------------------


def test_a_torn_last_line_is_neither_a_sample_nor_damage(store, tmp_path):
    root, ids, run = store
    with (run / "samples.jsonl").open("a") as handle:
        handle.write('{"prompt_id": 4, "sample": 0, "nfe": 1')  # a write killed half-way: no newline
    built(root, tmp_path / "out")
    table = pd.read_csv(tmp_path / "out" / "main.csv").set_index("run_id")
    assert table.loc[ids["sjd"], "NFE"] == pytest.approx(sum(SJD_NFE) / 5)
    read = parse_lines((run / "samples.jsonl").read_bytes())
    assert read.torn_tail and not read.bad and len(read.rows) == 5


def test_rows_written_after_the_summary_make_the_run_incomplete_not_used(store, tmp_path):
    """A run killed after appending rows (or being written now) has more rows than its summary counts:
    listed as incomplete, never shown with the summary's older numbers."""
    root, ids, run = store
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    _json(run / "summary.json", n_samples=3, complete=False, finished=True)
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    record = check_rows(read_run(run))
    assert record["status"] == "incomplete" and "interrupted" in record["incomplete_why"]
    result = built(root, tmp_path / "out")
    assert ids["sjd"] not in pd.read_csv(tmp_path / "out" / "main.csv")["run_id"].tolist()
    unused = [line for line in result.unused if ids["sjd"] in line]
    assert len(unused) == 1 and "5 of 5 samples, interrupted after its summary was written" in unused[0]
    # a data.limit=2 summary beside the rows of a larger selection being written: never "5 of 2 samples"
    _json(run / "summary.json", n_samples=2, selection_n=2, complete=False, finished=True)
    (unused,) = [line for line in built(root, tmp_path / "out2").unused if ids["sjd"] in line]
    assert "incomplete, 5 samples stored, more than the 2 its summary.json was written for" in unused, unused


def test_every_number_is_computed_from_the_rows_present(store, tmp_path):
    """A summary that disagrees with its rows (edited, or from another version) is not believed."""
    root, ids, run = store
    _json(run / "summary.json", step_compression=99.0, nfe_mean=1.0, latency_s_mean=1e-9)
    built(root, tmp_path / "out")
    table = pd.read_csv(tmp_path / "out" / "main.csv").set_index("run_id")
    assert table.loc[ids["sjd"], "step compression"] == pytest.approx(100 / sum(SJD_NFE))
    assert table.loc[ids["sjd"], "NFE"] == pytest.approx(sum(SJD_NFE) / 5)
    assert table.loc[ids["sjd"], "latency (s)"] > 0.1
    runs = sjdbench.load_runs(root)
    assert runs.set_index("run_id").loc[ids["sjd"], "step_compression"] == pytest.approx(100 / sum(SJD_NFE))


def test_the_report_header_counts_what_it_says(store, tmp_path):
    root, ids, _ = store
    built(root, tmp_path / "out")
    html = (tmp_path / "out" / "report.html").read_text()
    # 6 usable runs, none holding a set larger than the synthetic 5 prompts: all are complete
    assert "sjdbench report of 6 runs (6 complete: their whole prompt set), 1 more listed as not used" in html
    assert "complete runs in" not in html


# -- scores follow the run's current samples ---------------------------------------------------------


def _score(root, run_id, value, n, sha, name="toy_clip", digest="abc123def456"):
    path = write_score(root, run_id, name, value, (value - 1, value + 1), metric="toy CLIP-Score")
    doc = json.loads(path.read_text())
    doc.update(n=n, protocol={"backbone": "toy", "samples_sha256": sha}, protocol_hash=digest)
    target = path.with_name(f"{name}-{digest}.json")
    path.unlink()
    target.write_text(json.dumps(doc))
    return target


def test_a_stale_score_is_never_shown_beside_a_fresh_one(store, tmp_path):
    root, ids, _ = store
    record = check_rows(read_run(root / "runs" / ids["sjd"]))
    old = _score(root, ids["sjd"], 20.0, 3, "0" * 64, digest="000000000001")
    fresh = _score(root, ids["sjd"], 30.0, 5, record["samples_sha"], digest="000000000002")
    ar_sha = check_rows(read_run(root / "runs" / ids["ar"]))["samples_sha"]
    _score(root, ids["ar"], 31.0, 5, ar_sha, digest="000000000002")  # the same protocol as the fresh score
    result = built(root, tmp_path / "out")
    table = pd.read_csv(tmp_path / "out" / "main.csv")
    clip = [c for c in table.columns if c.startswith("toy CLIP-Score") and "ci_" not in c]
    assert len(clip) == 1  # one column per metric: the superseded protocol is not a second column
    assert table.set_index("run_id").loc[ids["sjd"], clip[0]] == pytest.approx(30.0)
    unused = [line for line in result.unused if old.name in line]
    assert len(unused) == 1 and "superseded by scores of the 5 samples it holds now (kept, not shown)" in unused[0]
    assert old.exists() and fresh.exists()  # kept on disk


def test_a_run_grown_after_scoring_shows_no_score_until_scored_again(store, tmp_path):
    root, ids, _ = store
    _score(root, ids["sjd"], 20.0, 3, "0" * 64)
    result = built(root, tmp_path / "out")
    assert not any(c.startswith("toy CLIP") for c in pd.read_csv(tmp_path / "out" / "main.csv").columns)
    assert any(f"stale, the run holds 5 samples now; `sjdbench eval {ids['sjd']}`" in line for line in result.unused)


def test_a_row_outside_the_prompt_set_is_neither_exported_nor_counted(store, tmp_path):
    """The summary counts the rows of the run's prompt set; samples.parquet (and the pairing) read
    the same rows, so a row whose prompt id the set does not have is never exported."""
    root, ids, run = store
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    with (run / "samples.jsonl").open("a") as handle:
        handle.write(json.dumps({**rows[0], "prompt_id": 999}) + "\n")
    built(root, tmp_path / "out")
    exported = pd.read_parquet(tmp_path / "out" / "samples.parquet")
    mine = exported[exported["run_id"] == ids["sjd"]]
    assert sorted(mine["prompt_id"]) == sorted(r["prompt_id"] for r in rows) and 999 not in set(exported["prompt_id"])


@pytest.mark.slow  # about 5 s: a whole report
def test_the_report_table_is_whole_when_output_is_not_a_terminal(store, tmp_path, capsys):
    """In a log or a pipe a table keeps every column and every cell: one line per row at the table's
    own width, never cut to '…' to fit a width the output does not have (the toy's quality table
    is about 280 columns wide)."""
    from rich.table import Table

    from sjdbench.cli.console import table

    wide = Table()
    headers = [f"toy CLIP-Score number {i} (100 * max(cos, 0)) ↑" for i in range(8)]
    for header in headers:
        wide.add_column(header, no_wrap=True)
    wide.add_row(*[f"{70 + i}.00 [68.12, 72.34]" for i in range(8)])
    table(wide)
    printed = capsys.readouterr().out
    assert "…" not in printed and all(h in printed for h in headers)
    assert len([line for line in printed.splitlines() if "[68.12, 72.34]" in line]) == 1
    root, ids, _ = store
    result = report(root, tmp_path / "out")
    assert result.exit_code == 0 and "…" not in result.stdout and ids["sjd"] not in result.stderr


# -- where the store is ------------------------------------------------------------------------------


def test_eval_names_the_store_by_option_environment_or_word_alike(store, tmp_path, monkeypatch):
    """`eval --results-dir STORE` and `SJDBENCH_RESULTS=STORE sjdbench eval` do what `eval
    results_dir=STORE` does: select every finished run of the store (the synthetic store's prompts
    are not on disk, so each ends at the same line about them, after the same selection)."""
    root, ids, _ = store
    monkeypatch.chdir(tmp_path)
    outcomes = set()
    for words, env in ((["--results-dir", str(root)], None), ([], str(root)), ([f"results_dir={root}"], None)):
        if env is None:
            monkeypatch.delenv("SJDBENCH_RESULTS", raising=False)
        else:
            monkeypatch.setenv("SJDBENCH_RESULTS", env)
        result = runner.invoke(app, ["eval", *words])
        outcomes.add((result.exit_code, result.stdout, result.stderr))
    assert len(outcomes) == 1, outcomes
    (code, _, stderr), *_ = outcomes
    assert f"{ids['partial']} skipped: not finished" in stderr and "name the runs" not in stderr
    monkeypatch.delenv("SJDBENCH_RESULTS", raising=False)
    one_line(runner.invoke(app, ["eval"]), "name the runs to score", "--results-dir DIR or $SJDBENCH_RESULTS")


@pytest.mark.parametrize(
    "where,needle",
    [
        ("{tmp}/missing", "results_dir {tmp}/missing does not exist; name the store that holds runs/"),
        ("/dev/null", "results_dir /dev/null is not a folder (a device or another special file); name the store"),
        ("{tmp}/a_file", "results_dir {tmp}/a_file is a file; name the store, the folder that holds runs/"),
    ],
)
def test_a_store_that_is_missing_a_file_or_a_device_is_named(tmp_path, where, needle):
    (tmp_path / "a_file").write_text("x")
    where, needle = where.format(tmp=tmp_path), needle.format(tmp=tmp_path)
    for result in (
        runner.invoke(app, ["eval", "--results-dir", where]),
        runner.invoke(app, ["eval", f"results_dir={where}", "model=toy"]),
        runner.invoke(app, ["report", f"results_dir={where}"]),
    ):
        assert "store.json" not in one_line(result, needle)
    with pytest.raises(UserError, match=re.escape(needle)):
        sjdbench.load_runs(where)


def test_a_store_this_user_may_not_read_is_one_line(store, tmp_path, monkeypatch):
    """Unreadable is not damaged: the fix is read access, not a re-run. (As root every file is
    readable, so the test takes the permission away where the check asks for it.)"""
    import sjdbench.results.store as store_module

    root, ids, run = store
    real = os.access
    for denied in (root, root / "runs", run, run / "env.json", run / "samples.jsonl"):
        monkeypatch.setattr(store_module.os, "access", lambda p, mode, d=denied: Path(p) != d and real(p, mode))
        needle = f"cannot read {denied}: permission denied for this user; ask its owner for read access"
        one_line(report(root, tmp_path / "out"), needle)
        one_line(evaluate(root), needle)
        with pytest.raises(UserError, match=re.escape(needle)):
            sjdbench.load_runs(root)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_a_store_this_user_may_not_read_for_real(store, tmp_path):
    root, ids, run = store
    (run / "summary.json").chmod(0)
    try:
        one_line(report(root, tmp_path / "out"), f"cannot read {run / 'summary.json'}: permission denied")
    finally:
        (run / "summary.json").chmod(0o644)


# -- migrate -----------------------------------------------------------------------------------------


def test_migrate_refuses_a_missing_folder_or_a_file_and_reads_damage_without_a_traceback(store, tmp_path):
    root, ids, run = store
    one_line(
        runner.invoke(app, ["migrate", f"results_dir={tmp_path / 'nowhere'}"]), "does not exist; nothing to migrate"
    )
    (tmp_path / "a_file").write_text("x")
    one_line(runner.invoke(app, ["migrate", "--results-dir", str(tmp_path / "a_file")]), "is a file")
    (tmp_path / "empty").mkdir()  # an empty folder is an empty store: nothing to migrate
    assert "0 run(s)" in runner.invoke(app, ["migrate", f"results_dir={tmp_path / 'empty'}"]).stdout
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    one_line(runner.invoke(app, ["migrate", f"results_dir={tmp_path / 'other'}"]), "is not a results folder")
    _random(run / "env.json")
    _random(run / "summary.json")
    result = runner.invoke(app, ["migrate", f"results_dir={root}"])
    assert result.exit_code == 0 and "Traceback" not in result.output
    assert "0 run(s) from an older sjdbench" in result.stdout


def test_readers_never_raise_on_any_file(store):
    """read_run and the file readers give a record or a phrase for any bytes, never an exception."""
    root, ids, run = store
    for name in ("summary.json", "env.json", "config.yaml", "samples.jsonl"):
        for content in (b"", b"\x00" * 10, os.urandom(300), b"{}", b"null", b"[]", b"1e999", b'{"schema": []}'):
            (run / name).write_bytes(content)
            record = check_rows(read_run(run))
            assert record["status"] in ("damaged", "incomplete", "complete", "finished"), (name, content)
            assert read_json(run / name).doc is None or isinstance(read_json(run / name).doc, dict)
    assert not runs_frame(root, rows=True).empty


# -- report --out targets ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target,needle",
    [
        ("{tmp}/a_file", "--out {tmp}/a_file is a file, not a folder"),
        ("{tmp}/a_file/sub", "is under {tmp}/a_file, which is a file"),
        ("/dev/null", "--out /dev/null is a file, not a folder"),
        ("/proc/sjdbench-report", "cannot write the report to --out /proc/sjdbench-report"),
        ("{root}/runs/some-run", "is inside the store's runs/ folder"),
        ("{root}", "is a results folder, not a report folder"),
        ("", "--out needs a folder"),
        ("   ", "--out needs a folder"),
    ],
)
def test_out_targets_that_cannot_hold_a_report_are_one_line(store, tmp_path, target, needle):
    root, ids, _ = store
    (tmp_path / "a_file").write_text("not a folder")
    target, needle = (t.format(tmp=tmp_path, root=root) for t in (target, needle))
    one_line(runner.invoke(app, ["report", f"results_dir={root}", "--out", target]), needle)
    assert (tmp_path / "a_file").read_text() == "not a folder"


def test_an_unwritable_out_is_one_line(store, tmp_path, monkeypatch):
    """As root, permissions do not stop writes, so access(2) is simulated (as for results_dir)."""
    import sjdbench.results.store as store_module

    root, ids, _ = store
    monkeypatch.setattr(store_module, "_writable", lambda folder: False)
    one_line(runner.invoke(app, ["report", f"results_dir={root}", "--out", str(tmp_path / "r")]), "is not writable")
