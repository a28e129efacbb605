"""One store, one answer: `sjdbench run`, `sweep`, `eval`, `report` and `sjdbench.load_runs` print the
same speedup, CI and N for every run, because they all pair through sjdbench.results.pairing.

The store is a small real sweep (the debug model at the toy's 16x16 layout, 2 toy captions, W = 4,
AR + SJD + LANTERN, timed paired) plus a one-caption greedy run added with `sjdbench run`, so one
decoder pairs fewer prompts than the others (and pairs with the sampled AR run: there is no greedy
one)."""

import re

import pytest
from typer.testing import CliRunner

from sjdbench.cli import app
from sjdbench.config import compose_run
from sjdbench.config.resolve import resolve_run
from sjdbench.results.pairing import pair_key
from sjdbench.results.runs import runs_frame

cli = CliRunner()
BASE = [
    "model=debug",
    "model.options.grid_h=16",
    "model.options.grid_w=16",
    "data=toy",
    "data.limit=2",
    "decoder.window=4",
    "warmup=0",
]
NUMBER = r"(\d+\.\d\d)(?: \[(\d+\.\d\d), (\d+\.\d\d)\])?"  # a speedup and its CI as every table prints it


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("instrument") / "results"
    swept = cli.invoke(app, ["sweep", *BASE, "decoder=sjd,lantern", f"results_dir={root}"])
    assert swept.exit_code == 0, swept.output
    one_prompt = [w if w != "data.limit=2" else "data.limit=1" for w in BASE]  # each key once
    single = cli.invoke(app, ["run", *one_prompt, "decoder=jacobi", f"results_dir={root}"])
    assert single.exit_code == 0, single.output
    reported = cli.invoke(app, ["report", f"results_dir={root}", "--out", str(root.parent / "report")])
    assert reported.exit_code == 0, reported.output
    evaluated = cli.invoke(app, ["eval", f"results_dir={root}", "eval.evaluators=[toy_clip]"])
    assert evaluated.exit_code == 0, evaluated.output
    return root, {"sweep": swept.stdout, "run": single.stdout, "eval": evaluated.stdout, "report": reported.stdout}


def rows(text: str, pattern: str) -> dict[str, tuple]:
    """decoder label -> (speedup, lo, hi, N) from the table lines that match `pattern`."""
    found = {}
    for line in text.splitlines():
        match = re.match(pattern, line.strip())
        if match:
            name, value, lo, hi, n = match.groups()
            found[name] = (value, lo, hi, int(n))
    return found


NEEDS = "(?:nothing|a trained drafter)"  # the report's needs column


def printed(outputs: dict[str, str]) -> dict[str, dict[str, tuple]]:
    return {
        # sweep and run: decoder W n NFE step accept acc.old len growth sec | vs AR [CI] N
        "sweep": rows(outputs["sweep"], rf"^(\S+)\s+\d+\s+\d+\s.*?\s{NUMBER}[~!]*\s+(\d+)$"),
        "run": rows(outputs["run"], rf"^(\S+)\s+\d+\s+\d+\s.*?\s{NUMBER}[~!]*\s+(\d+)$"),
        # eval: decoder step x | vs AR [CI] N | scores
        "eval": rows(outputs["eval"], rf"^(\S+)\s+\d+\.\d\d\s+{NUMBER}\s+(\d+)\s"),
        # report: decoder W lossless needs [n] latency | speedup [CI] N paired | images/s NFE ...
        "report": rows(
            outputs["report"],
            rf"^(\S+)\s+\S+\s+(?:yes|no|greedy)\s+{NEEDS}\s+(?:\d+\s+)?\d+\.\d{{3}}\s+{NUMBER}\s+(\d+)\s",
        ),
    }


def test_every_command_prints_the_same_speedup_and_n(store):
    root, outputs = store
    seen = printed(outputs)
    assert set(seen["report"]) == {"ar", "sjd", "lantern", "jacobi"}, outputs["report"]
    assert set(seen["sweep"]) == {"ar", "sjd", "lantern"}, outputs["sweep"]
    assert set(seen["eval"]) == set(seen["report"]), outputs["eval"]
    assert set(seen["run"]) == {"jacobi"}, outputs["run"]
    for command in ("sweep", "eval", "run"):
        for decoder, numbers in seen[command].items():
            assert numbers == seen["report"][decoder], (command, decoder)
    assert seen["report"]["sjd"][3] == seen["report"]["lantern"][3] == 2  # both prompts paired
    assert seen["report"]["jacobi"][3] == 1 and seen["report"]["jacobi"][1] is None  # one prompt: no CI
    assert seen["report"]["ar"] == ("1.00", None, None, 2)


def test_the_python_api_gives_the_same_numbers(store):
    import sjdbench

    root, outputs = store
    report = printed(outputs)["report"]
    runs = sjdbench.load_runs(root).set_index("decoder")
    for decoder, (value, lo, hi, n) in report.items():
        assert f"{runs.loc[decoder, 'speedup']:.2f}" == value and int(runs.loc[decoder, "speedup_n"]) == n
        if lo is not None:
            assert f"{runs.loc[decoder, 'speedup_lo']:.2f}" == lo and f"{runs.loc[decoder, 'speedup_hi']:.2f}" == hi


def test_planned_and_stored_runs_have_one_pairing_key(store):
    """The key a sweep groups a planned run by is the key the store reads back for it, and it is
    the AR baseline's own run id."""
    root, _ = store
    runs = runs_frame(root).set_index("decoder")
    planned = resolve_run(compose_run([*BASE, "decoder=lantern", f"results_dir={root}"]))
    assert pair_key(planned.facts) == runs.loc["lantern", "pair_key"] == runs.loc["ar", "run_id"]
    assert runs.loc["jacobi", "pair_key"] == runs.loc["ar", "run_id"]  # data.limit does not change the key


def test_eval_of_a_run_folder_with_results_dir_scores_that_run(store):
    root, _ = store
    ids = runs_frame(root).set_index("decoder")["run_id"]
    folder = root / "runs" / ids["sjd"]
    result = cli.invoke(app, ["eval", str(folder), f"results_dir={root}", "eval.evaluators=[toy_objects]"])
    assert result.exit_code == 0, result.output
    assert list((folder / "scores").glob("toy_objects-*.json"))
    assert not list(
        (root / "runs" / runs_frame(root).set_index("decoder").loc["ar", "run_id"]).glob("scores/toy_objects-*")
    )


@pytest.mark.parametrize(
    "words, needle",
    [
        (["model=nothing_like_it"], "no runs match model=nothing_like_it"),
        (["colour=red"], "unknown eval filter 'colour'; use model, data, seed"),
    ],
)
def test_eval_with_nothing_to_score_fails_in_one_line(store, words, needle):
    root, _ = store
    result = cli.invoke(app, ["eval", f"results_dir={root}", *words])
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines


def test_eval_refuses_two_stores(store, tmp_path):
    root, _ = store
    run_id = runs_frame(root)["run_id"].iloc[0]
    result = cli.invoke(app, ["eval", str(root / "runs" / run_id), f"results_dir={tmp_path}"])
    assert result.exit_code == 2 and "stores" in result.stderr and len(result.stderr.strip().splitlines()) == 1
