"""One grammar selects runs for eval, report and the Python API; one precedence names the store."""

import pytest
from synthetic_store import SJD_NFE, SJD_RATIOS, SynthRun, make_store, write_run

from sjdbench.config import compose_run
from sjdbench.errors import UserError
from sjdbench.results.root import results_root, split_results_dir
from sjdbench.results.runs import runs_frame
from sjdbench.results.select import parse_selection, select_runs
from sjdbench.results.summary import SUMMARY_FIELDS


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("select") / "results"
    ids = make_store(root)
    ids["tree"] = write_run(root, SynthRun(["decoder=sjd_pac"], SJD_RATIOS, SJD_NFE))
    return root, ids


def chosen(root, *words, baselines=True) -> set[str]:
    selection = parse_selection([f"results_dir={root}", *words])
    return set(select_runs(runs_frame(root), selection, baselines=baselines)["run_id"])


def test_the_topology_and_every_summary_field_filter(store):
    root, ids = store
    assert chosen(root, "decoder/topology=tree") == {ids["tree"], ids["ar"]}
    chains = chosen(root, "decoder.topology=chain", baselines=False)  # chain runs leave their topology out
    assert ids["tree"] not in chains and {ids["sjd"], ids["lantern"]} <= chains and ids["ar"] not in chains
    assert chosen(root, "decoder_lossless=false", baselines=False) == {ids["lantern"]}
    assert chosen(root, "decoder_family=sjd_vp", baselines=False) == {ids["vp"], ids["vp_n2"]}
    assert chosen(root, "n_samples=2", baselines=False) == {ids["partial"]}
    assert chosen(root, "decoder.verifier.delta=0.1", baselines=False) == {ids["lantern"]}


def test_run_ids_patterns_and_folders(store):
    root, ids = store
    assert chosen(root, ids["sjd"], baselines=False) == {ids["sjd"]}
    assert chosen(root, "synth-lantern-*") == {ids["lantern"], ids["ar"]}
    assert chosen(root, str(root / "runs" / ids["vp"]), baselines=False) == {ids["vp"]}
    assert parse_selection([str(root)]).root == root  # a results folder names the store
    with pytest.raises(UserError, match="is neither a filter nor a sweep id, and is neither a run id"):
        parse_selection([f"results_dir={root}", "synth-nothing-*"])


def test_unknown_keys_are_refused_with_the_valid_ones(store):
    root, _ = store
    with pytest.raises(UserError) as error:
        parse_selection([f"results_dir={root}", "colour=red"], command="eval")
    message = str(error.value)
    assert message.startswith("unknown eval filter 'colour'; use model, data, seed, device, decoder, window")
    assert all(field in message for field in SUMMARY_FIELDS) and "\n" not in message


def test_one_store_at_a_time(store, tmp_path):
    root, ids = store
    with pytest.raises(UserError, match="the runs named are in 2 stores"):
        parse_selection([str(root / "runs" / ids["sjd"]), f"results_dir={tmp_path}"])
    with pytest.raises(UserError, match="two results folders given"):
        split_results_dir([f"results_dir={root}"], str(tmp_path))
    assert split_results_dir([f"results_dir={root}", "model=toy"], str(root)) == (["model=toy"], str(root))


def test_results_root_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("SJDBENCH_RESULTS", raising=False)
    assert results_root() == results_root(None) == results_root(compose_run([]).results_dir)
    with pytest.raises(UserError, match="results_dir= is empty"):  # an unset shell variable names no store
        results_root("")
    assert str(results_root()) == "results"
    monkeypatch.setenv("SJDBENCH_RESULTS", str(tmp_path / "env"))
    assert results_root() == tmp_path / "env"
    assert results_root(compose_run([]).results_dir) == tmp_path / "env"
    # an explicit results_dir wins, even when it is spelled like the default
    assert results_root(compose_run(["results_dir=results"]).results_dir) == results_root("results")
    assert str(results_root("results")) == "results"


def test_migrate_takes_results_dir_like_every_command(tmp_path):
    from typer.testing import CliRunner

    from sjdbench.cli import app

    for words in ([f"results_dir={tmp_path}"], ["--results-dir", str(tmp_path)]):
        result = CliRunner().invoke(app, ["migrate", *words, "--dry-run"])
        assert result.exit_code == 0 and f"0 run(s) from an older sjdbench in {tmp_path}" in result.stdout
    bad = CliRunner().invoke(app, ["migrate", "model=toy"])
    assert bad.exit_code == 2 and "migrate takes only results_dir=DIR" in bad.stderr


def test_a_summary_holds_exactly_the_listed_fields(tmp_path):
    from sjdbench.run.runner import execute

    outcome = execute(
        compose_run(
            [
                "model=debug",
                "model.options.grid_h=3",
                "model.options.grid_w=3",
                "data.limit=1",
                "warmup=0",
                "save_images=false",
                f"results_dir={tmp_path}",
            ]
        )
    )
    assert set(outcome.summary) == set(SUMMARY_FIELDS)


def test_a_run_resolves_its_decoder_once_and_carries_it(tmp_path, monkeypatch):
    """After the one checking pass, nothing in the run re-resolves the decoder from the config."""
    import sjdbench.decoding.build as build
    from sjdbench.config.resolve import resolve_run
    from sjdbench.run.runner import execute_runs

    config = compose_run(
        [
            "model=debug",
            "model.options.grid_h=3",
            "model.options.grid_w=3",
            "decoder=sjd_vp",
            "data.limit=2",
            "warmup=0",
            "save_images=false",
            f"results_dir={tmp_path}",
        ]
    )
    calls = []
    real = build.resolve_decoder
    monkeypatch.setattr(build, "resolve_decoder", lambda c: calls.append(c) or real(c))
    spec = resolve_run(config)
    assert len(calls) == 1 and spec.decoder.proposal.name == "vp"
    outcome = execute_runs([spec])[0]
    assert outcome.status == "finished" and len(calls) == 1
    assert outcome.summary["decoder_spec"] == spec.decoder.identity() and outcome.summary["decoder"] == spec.label
