"""The write side under damage and mistakes, on the debug model (a 3x3 grid: 12 positions per image,
milliseconds per sample): `run` repairs what the readers refuse; a sweep skips a run another process
writes and runs the others; legal-but-wrong settings are refused with the range or clamped with a
note; counts say what is true; a long sample gets a heartbeat when the output is piped; a set
metric that needs more samples than a run holds says so in one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sjdbench.cli import app
from sjdbench.config import compose_run
from sjdbench.config.resolve import resolve_run
from sjdbench.results.runs import check_rows, read_run
from sjdbench.results.store import read_jsonl

runner = CliRunner()
DEBUG = ["model=debug", "model.options.grid_h=3", "model.options.grid_w=3", "warmup=0", "data.limit=2"]
POSITIONS = 12  # a 3x3 grid with an end-of-line token per row


def words(root: Path, *extra: str) -> list[str]:
    return [*DEBUG, f"results_dir={root}", *extra]


def run(root: Path, *extra: str):
    return runner.invoke(app, ["run", *words(root, *extra)])


def one_line(result, needle: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and needle in errors[0], result.stderr
    assert errors == result.stderr.strip().splitlines()[-1:] and "Traceback" not in result.output
    return errors[0]


def notes(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("note: ")]


def only_run(root: Path) -> Path:
    (folder,) = (root / "runs").iterdir()
    return folder


# -- run repairs what the readers refuse --------------------------------------------------------------


def _random(path: Path) -> None:
    path.write_bytes(b"\xff\xfe\x80" + bytes(range(256)))


REPAIRS = {
    "summary.json": (lambda d: _random(d / "summary.json"), "summary.json is not UTF-8 text", "rebuilt from"),
    "env.json": (lambda d: (d / "env.json").write_text("{"), "env.json is not JSON", "rewritten from this run's"),
    "config.yaml": (lambda d: (d / "config.yaml").unlink(), "config.yaml is missing", "rewritten from this run's"),
    "a garbage line": (
        lambda d: (d / "samples.jsonl").write_bytes(b"garbage\n" + (d / "samples.jsonl").read_bytes()),
        "samples.jsonl line 1 is not JSON",
        "set aside in samples.jsonl.damaged",
    ),
}


@pytest.mark.parametrize("damage", list(REPAIRS))
def test_run_repairs_a_damaged_run_and_the_readers_read_it_again(tmp_path, damage):
    apply, problem, repair = REPAIRS[damage]
    assert run(tmp_path).exit_code == 0
    folder = only_run(tmp_path)
    rows = read_jsonl(folder / "samples.jsonl")
    apply(folder)
    assert check_rows(read_run(folder))["status"] == "damaged"
    again = run(tmp_path)
    assert again.exit_code == 0, again.output
    assert any(problem in n and repair in n for n in notes(again)), again.stderr
    record = check_rows(read_run(folder))
    assert record["status"] == "finished" and record["n_rows"] == 2, record["problem"]
    assert read_jsonl(folder / "samples.jsonl") == rows  # nothing finished was lost or decoded again
    if damage == "a garbage line":
        assert (folder / "samples.jsonl.damaged").read_bytes() == b"garbage\n"  # kept, not deleted


def test_the_torn_line_repair_is_a_note_like_every_other_repair(tmp_path, caplog):
    """A line cut short by a killed writer is removed before the next append, and said in a `note:`
    line of the command (never a logger's `WARNING sjdbench.results.store:` line)."""
    assert run(tmp_path).exit_code == 0
    folder = only_run(tmp_path)
    with (folder / "samples.jsonl").open("a") as handle:
        handle.write('{"prompt_id": 2, "tok')  # killed mid-write
    again = run(tmp_path)
    assert again.exit_code == 0, again.output
    assert any("removed the torn last line of samples.jsonl (21 bytes)" in n for n in notes(again)), again.stderr
    assert not caplog.records and "WARNING" not in again.stderr
    assert len(read_jsonl(folder / "samples.jsonl")) == 2


def test_library_log_lines_read_as_the_command_lines_own():
    import logging

    from sjdbench.cli.commands import OneLine

    record = logging.LogRecord("sjdbench.results.store", logging.WARNING, __file__, 1, "a %s\nb", ("line",), None)
    assert OneLine().format(record) == "warning: a line b"


def test_run_decodes_again_the_samples_a_deleted_file_held(tmp_path):
    assert run(tmp_path).exit_code == 0
    folder = only_run(tmp_path)
    rows = read_jsonl(folder / "samples.jsonl")
    (folder / "samples.jsonl").unlink()
    assert check_rows(read_run(folder))["status"] == "damaged"
    again = run(tmp_path)
    assert again.exit_code == 0 and "finished: 2 new samples" in again.stdout
    assert [r["tokens"] for r in read_jsonl(folder / "samples.jsonl")] == [r["tokens"] for r in rows]
    assert check_rows(read_run(folder))["status"] == "finished"


@pytest.mark.parametrize("name", ["summary.json", "env.json", "config.yaml", "samples.jsonl"])
def test_a_folder_where_a_file_of_the_run_belongs_is_one_line_everywhere(tmp_path, name):
    """No command deletes a folder it did not make: run and the readers say the same thing (move it
    out of the way), before anything loads, instead of "rebuilt" and then "cannot write"."""
    assert run(tmp_path).exit_code == 0
    folder = only_run(tmp_path)
    (folder / name).unlink()
    (folder / name).mkdir()
    needle = f"{name} is a folder, not a file (move it out of the way; the next run writes the file again)"
    again = run(tmp_path)
    one_line(again, needle)
    assert "loading model" not in again.stderr and not notes(again)
    report = runner.invoke(app, ["report", f"results_dir={tmp_path}", "--out", str(tmp_path / "out")])
    assert report.exit_code == 2 and needle in report.stderr
    (folder / name).rmdir()
    assert run(tmp_path).exit_code == 0


def test_run_refuses_a_run_written_by_a_newer_sjdbench(tmp_path):
    assert run(tmp_path).exit_code == 0
    summary = only_run(tmp_path) / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "schema": 9}))
    one_line(run(tmp_path), "was written by a newer sjdbench (schema 9")


# -- one run's lock never fails another run ------------------------------------------------------------


@pytest.mark.parametrize("timing", ["paired", "single"])
def test_a_sweep_skips_the_run_another_process_writes_and_runs_the_others(tmp_path, timing):
    spec = resolve_run(compose_run(words(tmp_path, "decoder=sjd")))
    with spec.store.writer():  # another process holds this run's lock (flock: per open file)
        result = runner.invoke(app, ["sweep", *words(tmp_path, "decoder=sjd"), "--timing", timing])
        assert run(tmp_path, "decoder=sjd").exit_code == 2  # and a plain run of it is refused, one line
    assert result.exit_code == 0, result.output
    assert f"warning: skipped {spec.run_id}: run {spec.run_id} is being written by another" in result.stderr
    ar = resolve_run(compose_run(words(tmp_path, "decoder=ar")))
    assert len(read_jsonl(ar.store.samples_path)) == 2  # the AR baseline nobody else was writing
    assert not spec.store.samples_path.exists()
    status = json.loads(next((tmp_path / "sweeps").glob("*/status.json")).read_text())
    assert status[spec.run_id]["status"] == "skipped" and status[ar.run_id]["status"] == "finished"
    finished = runner.invoke(app, ["sweep", *words(tmp_path, "decoder=sjd"), "--timing", timing])  # lock free
    assert finished.exit_code == 0 and len(read_jsonl(spec.store.samples_path)) == 2


def test_a_plain_run_of_a_locked_run_is_one_line(tmp_path):
    spec = resolve_run(compose_run(words(tmp_path, "decoder=sjd")))
    with spec.store.writer():
        one_line(run(tmp_path, "decoder=sjd"), f"run {spec.run_id} is being written by another sjdbench process")


# -- counts are true -------------------------------------------------------------------------------------


def test_sweep_counts_each_run_once_and_calls_nothing_complete_that_is_not(tmp_path):
    sweep = ["sweep", *words(tmp_path, "decoder=sjd", "seed=0,1"), "--timing", "paired"]
    assert run(tmp_path, "decoder=sjd").exit_code == 0  # one point already stored: re-timed in its group
    result = runner.invoke(app, sweep)
    assert result.exit_code == 0, result.output
    progress = [line for line in result.stderr.splitlines() if line.startswith("sweep ") and " runs; " in line]
    counts = [tuple(map(int, line.split(": ")[1].split(" runs")[0].split("/"))) for line in progress]
    assert [k for k, _ in counts] == [1, 2, 3, 4] and {n for _, n in counts} == {4}  # never "5/4 runs"
    final = next(line for line in result.stdout.splitlines() if line.startswith("sweep ") and " -> " in line)
    assert "4 runs (" in final and "none holds its whole prompt set (they hold 2 of 8 samples: data.limit)" in final
    again = runner.invoke(app, sweep)
    assert "4 runs (4 already stored)" in again.stdout
    plain = run(tmp_path, "decoder=sjd")
    assert "already stored (nothing decoded)" in plain.stdout and "not complete: a data.limit selection" in plain.stdout
    whole = runner.invoke(app, ["run", *[w for w in words(tmp_path, "decoder=sjd") if w != "data.limit=2"]])
    assert "8 of 8 samples of the prompt set stored; complete: the whole set" in whole.stdout


def test_a_greedy_ar_run_is_labelled_greedy(tmp_path):
    assert run(tmp_path, "decoder=ar", "sampling.temperature=0").exit_code == 0
    summary = json.loads((only_run(tmp_path) / "summary.json").read_text())
    assert summary["decoder"] == "ar(greedy)"
    assert resolve_run(compose_run(words(tmp_path, "decoder=sjd", "sampling.temperature=0"))).label == "sjd(T=0)"


# -- legal but almost certainly wrong -------------------------------------------------------------------


@pytest.fixture
def no_model_loads(monkeypatch):
    from sjdbench.models.registry import ResolvedModel

    def forbidden(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(ResolvedModel, "build", forbidden)


@pytest.mark.parametrize(
    "extra,needle",
    [
        (
            ["decoder=gsd", "decoder.verifier.p_thr=2"],
            "decoder.verifier.p_thr=2.0 is out of range: it is a probability",
        ),
        (["decoder=gsd", "decoder.verifier.p_thr=-0.5"], "decoder.verifier.p_thr=-0.5 is out of range"),
        (["data.shard=5/8"], "data.shard=5/8 selects no prompt: the selection holds 2 prompts"),
    ],
)
def test_refused_with_the_range_before_the_model_loads(tmp_path, no_model_loads, extra, needle):
    one_line(run(tmp_path, *extra), needle)
    sweep = runner.invoke(app, ["sweep", *words(tmp_path, *extra)])
    assert sweep.exit_code == 2 and needle in sweep.stderr and "nothing was run" in sweep.stderr
    assert not (tmp_path / "runs").exists()


def test_growth_steps_no_history_can_reach_are_refused_before_decoding(tmp_path):
    line = one_line(run(tmp_path, "decoder.growth_steps=1000"), "decoder.growth_steps=1000 can never be reached")
    assert f"an image has {POSITIONS} positions" in line and f"use decoder.growth_steps=1..{POSITIONS - 1}" in line
    assert not (tmp_path / "runs").exists()  # refused after the model loaded, before any lock, row or folder
    observations = run(tmp_path, "decoder.growth_steps=13", "decoder.growth_reading=observations")
    assert "use decoder.growth_steps=1..12" in observations.stderr
    sweep = runner.invoke(app, ["sweep", *words(tmp_path, "decoder.growth_steps=3,1000")])
    assert sweep.exit_code == 1  # that one point failed with its line; the others ran
    assert "can never be reached" in sweep.stderr
    assert len(list(tmp_path.glob("runs/*/samples.jsonl"))) == 2  # N = 3 and its AR baseline


def test_a_row_start_past_the_grid_is_noted_once_the_model_is_built(tmp_path):
    """rows' row_start counts tokens of the row above: at the grid's width or beyond it no two rows
    are ever decoded together (the debug grid here is 3 wide, PJD's default row_start 8)."""
    wide = run(tmp_path, "decoder=pjd")
    assert wide.exit_code == 0, wide.output
    needle = "decoder.topology.row_start=8 is not below the 3 tokens of an image row"
    assert any(needle in n and "use decoder.topology.row_start=1..2 for rows in parallel" in n for n in notes(wide))
    fits = run(tmp_path, "decoder=pjd", "decoder.topology.row_start=2")
    assert fits.exit_code == 0 and not any("row_start" in n for n in notes(fits))


def test_a_chain_window_too_short_for_the_growth_steps_is_noted(tmp_path):
    result = run(tmp_path, "decoder.window=2")
    assert result.exit_code == 0
    assert any(
        "at decoder.window=2 a position stays in the window for at most 2 iterations" in n for n in notes(result)
    )


@pytest.mark.parametrize("preset,largest", [("sjd", POSITIONS), ("pjd", POSITIONS), ("sjd_pac", 13 + POSITIONS)])
def test_a_window_larger_than_any_forward_can_use_is_clamped_with_a_note(tmp_path, preset, largest):
    """Clamping changes nothing decoded: the same tokens as the largest useful window."""
    huge = run(tmp_path / "huge", f"decoder={preset}", "decoder.window=100000")
    assert huge.exit_code == 0, huge.output
    expected = f"decoder.window=100000 is more than a forward can use on debug's images ({POSITIONS} positions)"
    assert any(expected in n and f"use decoder.window=1..{largest}" in n for n in notes(huge)), huge.stderr
    folder = only_run(tmp_path / "huge")
    assert json.loads((folder / "env.json").read_text())["window_used"] == largest
    exact = run(tmp_path / "exact", f"decoder={preset}", f"decoder.window={largest}")
    assert not any("is more than a forward can use" in n for n in notes(exact))
    tokens = [
        [r["tokens"] for r in read_jsonl(only_run(tmp_path / name) / "samples.jsonl")] for name in ("huge", "exact")
    ]
    assert tokens[0] == tokens[1]


def test_clamped_and_inert_settings_are_noted_before_the_model_loads(tmp_path, no_model_loads):
    base = [w for w in words(tmp_path) if w != "data.limit=2"]
    spec = resolve_run(compose_run([*base, "data.limit=1000", "threads=4096", "batch_size=64"]))
    text = " | ".join(spec.notes)
    assert "data.limit=1000 exceeds the 8 prompts of data=smoke; all are used" in text
    assert "threads=4096 exceeds the" in text and "the run uses" in text
    assert "batch_size=64 but the run decodes at most 8 samples" in text


def test_eval_settings_that_compare_a_run_with_itself_are_refused(tmp_path):
    one_line(runner.invoke(app, ["eval", str(tmp_path), "eval.floor_seed_offset=0"]), "eval.floor_seed_offset=0")
    one_line(runner.invoke(app, ["eval", str(tmp_path), "eval.kid.subset_size=1"]), "eval.kid.subset_size must be >= 2")


# -- a score that needs more samples than a run holds ---------------------------------------------------


def test_a_set_metric_on_one_sample_says_so_and_the_other_scores_are_computed(tmp_path):
    from eval_helpers import synthetic_run

    synthetic_run(
        tmp_path,
        "one-sample",
        [3],
        size=(64, 64),
        texts=["a big red circle in the center, on a blue striped background"],
    )
    result = runner.invoke(app, ["eval", str(tmp_path / "runs" / "one-sample"), "eval.evaluators=[toy_objects,toy_fd]"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "ValueError" not in result.output
    refused = [n for n in notes(result) if "toy_fd refused" in n]
    assert len(refused) == 1 and "holds 1 sample; a distance between feature sets needs at least 2" in refused[0]
    assert [p.name.split("-")[0] for p in (tmp_path / "runs" / "one-sample" / "scores").glob("*.json")] == [
        "toy_objects"
    ]


# -- progress when the output is piped ------------------------------------------------------------------


def test_a_long_sample_gets_a_heartbeat_when_piped(monkeypatch, capsys):
    import sjdbench.cli.progress as progress

    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.2)
    monkeypatch.setattr(progress, "TICK_S", 0.02)
    reporter = progress.CliReporter(None, "toy / sjd")
    reporter.model_loading("toy", "cpu")
    time.sleep(0.35)  # a slow model load
    reporter.model_loaded("toy", 0.35)
    reporter.sample_done(0, 2, None)
    time.sleep(0.5)  # one long sample: at least two heartbeats
    reporter.sample_done(1, 2, {})
    reporter.sample_done(2, 2, {})
    time.sleep(0.3)  # nothing in progress: silent
    reporter.close()
    lines = capsys.readouterr().err.splitlines()
    beats = [line for line in lines if "so far)" in line]
    assert any(line.startswith("toy / sjd: still loading model toy (") for line in beats), lines
    assert sum(line.startswith("toy / sjd: 0/2 samples; the next one is still decoding (") for line in beats) >= 2
    assert lines[-1].startswith("toy / sjd: 2/2 samples")  # the last line: no heartbeat after the work is over


def test_quiet_runs_still_show_notes(tmp_path):
    assert run(tmp_path).exit_code == 0
    (only_run(tmp_path) / "env.json").write_text("{")
    quiet = runner.invoke(app, ["run", *words(tmp_path), "--quiet"])
    assert quiet.exit_code == 0 and "loading model" not in quiet.stderr
    assert any("env.json is not JSON" in n for n in notes(quiet))
