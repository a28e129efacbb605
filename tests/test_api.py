"""The Python API: the README's example runs as written; decode reproduces stored samples; overrides
are the command line's; load_runs carries the report's speedup columns."""

import math
import re
from pathlib import Path

import numpy as np
import pytest
from synthetic_store import SJD_RATIOS, make_store

import sjdbench
from sjdbench.config import compose_run, decoder_spec
from sjdbench.errors import UserError
from sjdbench.results.store import RunStore
from sjdbench.run.runner import execute

README = Path(__file__).resolve().parent.parent / "README.md"
DEBUG = {"grid_h": 4, "grid_w": 4}


def readme_example() -> str:
    text = README.read_text()
    section = text[text.index("## Python API") :]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def test_the_readme_example_runs_as_written(tmp_path, monkeypatch):
    from sjdbench.models.registry import build_adapter

    monkeypatch.chdir(tmp_path)
    adapter = build_adapter("toy", {}, "cpu")
    for decoder in ("ar", "sjd"):  # the store the example reads: `sjdbench sweep` would leave the same
        execute(
            compose_run(["model=toy", "data=toy", "data.limit=1", "warmup=0", f"decoder={decoder}"]), adapter=adapter
        )
    namespace: dict = {}
    exec(compile(readme_example(), "README.md", "exec"), namespace)  # noqa: S102 - the documented example
    out, runs = namespace["out"], namespace["runs"]
    assert np.asarray(out.image).shape == (64, 64, 3) and out.tokens.ndim == 1
    assert out.stats.nfe > 0 and out.stats.step_compression == pytest.approx(out.stats.n_tokens / out.stats.nfe)
    assert {"speedup", "speedup_lo", "speedup_hi", "speedup_n"} <= set(runs.columns)
    assert (tmp_path / "sample.png").is_file()


def test_decode_reproduces_a_stored_sample(tmp_path):
    outcome = execute(
        compose_run(
            [
                "model=debug",
                *(f"model.options.{k}={v}" for k, v in DEBUG.items()),
                "decoder=sjd",
                "decoder.window=4",
                "data.limit=1",
                "warmup=0",
                f"results_dir={tmp_path}",
            ]
        )
    )
    row = RunStore(tmp_path, outcome.run_id).rows()[0]
    model = sjdbench.load_model("debug", device="cpu", **DEBUG)
    decoder = sjdbench.build_decoder("sjd", window=4)
    out = sjdbench.decode(model, row["prompt"], decoder, seed=row["seed"])
    assert out.tokens.tolist() == row["tokens"]
    assert (out.stats.nfe, out.stats.accepted) == (row["nfe"], row["accepted"])
    assert sjdbench.decode(model, row["prompt"], decoder, seed=row["seed"] + 1).tokens.tolist() != row["tokens"]


def test_build_decoder_takes_the_command_lines_overrides():
    spec = sjdbench.build_decoder("sjd", window=32, verifier="lantern", growth_steps=2, **{"verifier.delta": 0.2})
    same = decoder_spec(
        compose_run(
            [
                "decoder=sjd",
                "decoder.window=32",
                "decoder/verifier=lantern",
                "decoder.growth_steps=2",
                "decoder.verifier.delta=0.2",
            ]
        )
    )
    assert spec.identity() == same.identity() and spec.verifier.config.delta == 0.2
    vp = sjdbench.build_decoder("sjd_vp", **{"proposal.inner": {"name": "coupled", "tau": 0.9}})
    assert vp.proposal.children["inner"].config.tau == 0.9
    with pytest.raises(UserError, match="decoder.verifier.delta must be >= 0, got -1") as error:
        sjdbench.build_decoder("lantern", **{"verifier.delta": -1})
    assert "\n" not in str(error.value)
    with pytest.raises(UserError, match="unknown decoder 'nope'"):
        sjdbench.build_decoder("nope")


def test_load_model_checks_options_in_one_line():
    with pytest.raises(UserError, match="unknown model 'nope'"):
        sjdbench.load_model("nope")
    with pytest.raises(UserError) as error:
        sjdbench.load_model("toy", weights_dir="/no/such/folder")
    assert "\n" not in str(error.value)


def test_decode_takes_sampling_overrides_and_checks_them():
    model = sjdbench.load_model("debug", device="cpu", **DEBUG)
    greedy = [sjdbench.decode(model, "a red circle", "jacobi", seed=s, temperature=0).tokens.tolist() for s in (0, 1)]
    assert greedy[0] == greedy[1]  # argmax everywhere: the seed does not matter
    with pytest.raises(UserError, match="sampling.top_p must be in"):
        sjdbench.decode(model, "a red circle", "sjd", top_p=2.0)


def test_every_public_function_checks_its_arguments_with_the_command_lines_line():
    """Misuse raises UserError with one line (never an AttributeError or TypeError from deep inside),
    and what the command line refuses the API refuses, with the same line."""
    model = sjdbench.load_model("debug", device="cpu", **DEBUG)
    misuse = [
        (lambda: sjdbench.decode(model, 5), "prompt must be text (a str), got int"),
        (lambda: sjdbench.decode(model, "  "), "prompt is empty"),
        (lambda: sjdbench.decode(model, "x" * 10_001), "prompt has 10,001 characters (over 10,000, the most"),
        (
            lambda: sjdbench.decode(model, "a red circle", tempreature=1.0),
            "unknown sampling keyword 'tempreature'; choose among: cfg_scale, temperature, top_k, top_p",
        ),
        (lambda: sjdbench.decode(model, "a red circle", top_k="many"), "sampling.top_k must be an integer, got 'many'"),
        (lambda: sjdbench.decode(model, "a red circle", seed="1"), "seed must be an integer, got '1'"),
        (lambda: sjdbench.decode(model, "a red circle", seed=-1), "seed must be in 0..2**64-1"),
        (lambda: sjdbench.decode(model, "a red circle", decoder=3), "decoder must be a preset name such as 'sjd'"),
        (lambda: sjdbench.decode("debug", "a red circle"), "model must be a model of sjdbench.load_model"),
        (lambda: sjdbench.load_model(3), "name must be a model name such as 'toy'"),
        (lambda: sjdbench.load_model("toy", top_k=-5), "model.options.top_k must be >= 0 (0 = off), got -5"),
        (lambda: sjdbench.load_model("toy", top_k="x"), "model.options.top_k"),
        (lambda: sjdbench.build_decoder(["sjd"]), "preset must be a decoder preset such as 'sjd'"),
        (lambda: sjdbench.build_decoder("sjd", window="wide"), "decoder.window must be an integer, got 'wide'"),
        (lambda: sjdbench.load_runs(results_dir=""), "results_dir= is empty"),
        (lambda: sjdbench.load_runs(results_dir=7), "results_dir must be a folder"),
        (lambda: sjdbench.load_reference(5), "name must be a published table's name"),
        (lambda: sjdbench.compare_reference("sjd_pac_readme", results_dir=7), "results_dir must be a folder"),
    ]
    for call, needle in misuse:
        with pytest.raises(UserError) as error:
            call()
        assert needle in str(error.value) and "\n" not in str(error.value), (needle, str(error.value))
    cli = compose_run  # the command line's line for the same mistake
    with pytest.raises(UserError) as from_cli:
        cli(["model=toy", "model.options.top_k=-5"])
    with pytest.raises(UserError) as from_api:
        sjdbench.load_model("toy", top_k=-5)
    assert str(from_cli.value) == str(from_api.value)


def test_a_prompt_longer_than_the_model_takes_says_the_limit():
    model = sjdbench.load_model("toy", device="cpu")
    with pytest.raises(UserError, match=r"toy has 512 positions, 272 of them for the image, so a prompt may have at"):
        sjdbench.decode(model, "a red circle " * 200, "ar")


def test_load_runs_has_the_reports_speedup_columns(tmp_path):
    root = tmp_path / "results"
    ids = make_store(root)
    runs = sjdbench.load_runs(root).set_index("run_id")
    assert runs.loc[ids["sjd"], "speedup"] == pytest.approx(math.exp(np.mean(np.log(SJD_RATIOS))), rel=1e-12)
    assert runs.loc[ids["sjd"], "speedup_n"] == 5 and runs.loc[ids["sjd"], "ar_run_id"] == ids["ar"]
    assert runs.loc[ids["sjd"], "speedup_lo"] < runs.loc[ids["sjd"], "speedup"] < runs.loc[ids["sjd"], "speedup_hi"]
    assert runs.loc[ids["partial"], "status"] == "incomplete" and runs.loc[ids["partial"], "speedup_n"] == 0
    chosen = sjdbench.load_runs(root, decoder="lantern")
    assert set(chosen["run_id"]) == {ids["lantern"], ids["ar"]}  # with the baseline its speedup needs
    windows = sjdbench.load_runs(root, decoder="sjd", window=[16, 32])
    assert set(windows["run_id"]) == {ids["sjd"], ids["sjd32"], ids["ar"]}
    with pytest.raises(UserError, match="unknown filter 'colour'"):
        sjdbench.load_runs(root, colour="red")


def test_import_sjdbench_is_cheap_and_lists_the_api():
    assert set(sjdbench.__all__) == {
        "load_model",
        "build_decoder",
        "decode",
        "load_runs",
        "load_reference",
        "compare_reference",
    }
    assert set(sjdbench.__all__) <= set(dir(sjdbench))
    with pytest.raises(AttributeError):
        sjdbench.no_such_function  # noqa: B018
