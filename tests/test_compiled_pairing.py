"""A compiled decoder is paired with a compiled AR only, an eager one with an eager AR only."""

from __future__ import annotations

import json

import pandas as pd
from typer.testing import CliRunner

from sjdbench.cli import app
from sjdbench.config.resolve import resolve_run
from sjdbench.config.schema import compose_run
from sjdbench.results.pairing import find_baseline, find_noise_floor, pair_key
from sjdbench.results.store import USABLE

STATUS = sorted(USABLE)[0]


def _resolved(*words: str):
    return resolve_run(compose_run(["model=toy", *words]))


def test_the_pairing_key_of_a_compiled_decoder_is_the_compiled_ar_run():
    eager_ar, compiled_ar = _resolved("decoder=ar"), _resolved("decoder=ar", "model.compile=true")
    eager_sjd, compiled_sjd = _resolved("decoder=sjd"), _resolved("decoder=sjd", "model.compile=true")
    assert pair_key(compiled_sjd.facts) == compiled_ar.run_id != eager_ar.run_id
    assert pair_key(eager_sjd.facts) == eager_ar.run_id


def _row(run_id: str, is_ar: bool, compiled: object, seed_key: str = "k") -> dict:
    return {
        "run_id": run_id,
        "pair_key": seed_key,
        "is_ar": is_ar,
        "status": STATUS,
        "greedy": False,
        "n_samples": 4,
        "env.sampling": None,
        "env.compiled": compiled,
    }


def test_find_baseline_never_mixes_compiled_and_eager_even_under_one_key():
    # a store whose options lost the compile flag (hand-written, older versions): env.json decides
    runs = pd.DataFrame([_row("ar-eager", True, False), _row("ar-compiled", True, True)])
    compiled = pd.Series(_row("sjd-compiled", False, True))
    eager = pd.Series(_row("sjd-eager", False, False))
    legacy = pd.Series(_row("sjd-legacy", False, float("nan")))  # no `compiled` in env.json: eager
    assert find_baseline(compiled, runs)["run_id"] == "ar-compiled"
    assert find_baseline(eager, runs)["run_id"] == "ar-eager"
    assert find_baseline(legacy, runs)["run_id"] == "ar-eager"
    assert find_baseline(compiled, runs[runs["run_id"] == "ar-eager"]) is None
    assert find_baseline(eager, runs[runs["run_id"] == "ar-compiled"]) is None
    older = runs[runs["run_id"] == "ar-eager"].drop(columns=["env.compiled"])  # written before env.json recorded it
    assert find_baseline(compiled, older) is None and find_baseline(eager, older)["run_id"] == "ar-eager"


def test_find_noise_floor_keeps_the_execution_too():
    facts = _resolved("decoder=sjd").facts
    floor_key = pair_key(facts, 1)
    runs = pd.DataFrame([_row("ar1-eager", True, False, floor_key), _row("ar1-compiled", True, True, floor_key)])
    run = pd.Series({**_row("sjd", False, True), "sample_facts": facts.__dict__ | {"options": dict(facts.options)}})
    assert find_noise_floor(run, runs, 1)["run_id"] == "ar1-compiled"


def test_env_json_records_whether_the_forward_was_compiled(tmp_path):
    words = ["run", "model=debug", "model.options.grid_h=3", "model.options.grid_w=3", "data.limit=1"]
    result = CliRunner().invoke(app, [*words, f"results_dir={tmp_path}"])
    assert result.exit_code == 0, result.output
    (env_file,) = tmp_path.rglob("env.json")
    assert json.loads(env_file.read_text())["compiled"] is False
