"""`sjdbench report` tables on a synthetic store: every value against a hand computation."""

import dataclasses
import json
import math
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from synthetic_store import (
    AR_LATENCY,
    LANTERN_NFE,
    LANTERN_RATIOS,
    SJD_NFE,
    SJD_RATIOS,
    SynthRun,
    make_store,
    write_run,
    write_score,
)

from sjdbench.config import compose_run, decoder_spec
from sjdbench.errors import UserError
from sjdbench.report.build import build_report
from sjdbench.report.tables import Metric, Table
from sjdbench.results.decoders import is_lossless
from sjdbench.results.pairing import geometric_mean_ci
from sjdbench.results.runs import runs_frame
from sjdbench.results.select import parse_selection, select_runs


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "results"
    return root, make_store(root)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One store and its report (without figures), shared by the tests that only read them."""
    base = tmp_path_factory.mktemp("report")
    root = base / "results"
    ids = make_store(root)
    report = report_of(root, base / "out")
    return root, ids, base / "out", report


def report_of(root, out, *words, **kwargs):
    return build_report([f"results_dir={root}", *words], out, figures=False, **kwargs)


def main_frame(out) -> pd.DataFrame:
    return pd.read_csv(out / "main.csv")


def test_speedup_is_the_paired_geometric_mean_with_a_bootstrap_ci(built):
    root, ids, out, report = built
    table = main_frame(out).set_index("run_id")
    expected = math.exp(np.mean(np.log(SJD_RATIOS)))
    assert table.loc[ids["sjd"], "speedup"] == pytest.approx(expected, rel=1e-12)
    assert table.loc[ids["lantern"], "speedup"] == pytest.approx(math.exp(np.mean(np.log(LANTERN_RATIOS))), rel=1e-12)
    assert table.loc[ids["ar"], "speedup"] == 1.0 and pd.isna(table.loc[ids["ar"], "speedup ci_lo"])
    # an independent percentile bootstrap over prompts (other RNG, more resamples) agrees within its noise
    rng = np.random.default_rng(12345)
    logs = np.log(SJD_RATIOS)
    means = logs[rng.integers(0, 5, size=(40_000, 5))].mean(axis=1)
    lo, hi = np.exp(np.quantile(means, [0.025, 0.975]))
    assert table.loc[ids["sjd"], "speedup ci_lo"] == pytest.approx(lo, abs=0.02)
    assert table.loc[ids["sjd"], "speedup ci_hi"] == pytest.approx(hi, abs=0.02)
    assert (
        min(SJD_RATIOS)
        <= table.loc[ids["sjd"], "speedup ci_lo"]
        < expected
        < table.loc[ids["sjd"], "speedup ci_hi"]
        <= max(SJD_RATIOS)
    )


def test_geometric_mean_ci_edge_cases():
    assert geometric_mean_ci(np.array([2.0])) == (2.0, None, None)
    value, lo, hi = geometric_mean_ci(np.full(7, 1.5))
    assert value == pytest.approx(1.5) and lo == pytest.approx(1.5) and hi == pytest.approx(1.5)
    assert geometric_mean_ci(np.array([1.0, 4.0]))[0] == pytest.approx(2.0)


def test_main_table_values_equal_hand_computations(built):
    root, ids, out, report = built
    table = main_frame(out).set_index("run_id")
    assert list(table.index) == [ids["ar"], ids["sjd"], ids["vp"], ids["lantern"]]  # AR, lossless, lossy
    assert table.loc[ids["sjd"], "step compression"] == pytest.approx(100 / sum(SJD_NFE))
    assert table.loc[ids["sjd"], "NFE"] == pytest.approx(np.mean(SJD_NFE))
    sjd_latency = np.mean([a / r for a, r in zip(AR_LATENCY, SJD_RATIOS)])
    assert table.loc[ids["sjd"], "latency (s)"] == pytest.approx(sjd_latency)
    assert table.loc[ids["ar"], "lossless"] == "yes" and table.loc[ids["lantern"], "lossless"] == "no"
    assert set(table["needs"]) == {"nothing"}  # the training-free family: no drafter
    assert (table["drafter forwards"] == 0).all()  # rows from before drafters count none
    assert ids["sjd32"] not in table.index and ids["partial"] not in table.index


def test_best_value_per_column_is_bold_in_markdown_and_latex(built):
    root, ids, out, report = built
    md = (out / "main.md").read_text()
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:-1]]
        for line in md.splitlines()
        if line.startswith("| ") and not line.startswith("| decoder")
    }
    header = [
        c.strip() for c in next(line for line in md.splitlines() if line.startswith("| decoder")).split("|")[1:-1]
    ]
    column = {name: i for i, name in enumerate(header)}
    assert "step compression ↑" in column and "NFE ↓" in column and "latency (s) ↓" in column
    best_step = f"**{100 / sum(LANTERN_NFE):.2f}**"
    assert rows["lantern"][column["step compression ↑"]] == best_step
    assert rows["lantern"][column["NFE ↓"]] == f"**{np.mean(LANTERN_NFE):.1f}**"
    assert not rows["sjd"][column["step compression ↑"]].startswith("**")
    speedups = {name: row[column["speedup ↑"]] for name, row in rows.items()}
    assert speedups["lantern"].startswith("**") and sum(v.startswith("**") for v in speedups.values()) == 1
    latencies = {name: float(row[column["latency (s) ↓"]].strip("*")) for name, row in rows.items()}
    fastest = min(latencies, key=latencies.get)
    assert rows[fastest][column["latency (s) ↓"]].startswith("**")
    assert not any(v.startswith("**") for v in (rows[n][column["growth share"]] for n in rows))  # no direction
    tex = (out / "main.tex").read_text()
    lantern_row = next(line for line in tex.splitlines() if line.startswith("lantern &"))
    assert f"\\textbf{{{100 / sum(LANTERN_NFE):.2f}}}" in lantern_row


def test_ties_are_all_bold_and_directionless_columns_never():
    frame = pd.DataFrame({"decoder": ["a", "b", "c"], "x": [2.001, 2.004, 1.0], "y": [1.0, 3.0, 2.0]})
    table = Table("t", "t", ["decoder"], [Metric("x", "x", 2, "max"), Metric("y", "y", 2)], frame)
    assert table.best(table.metrics[0]).tolist() == [True, True, False]  # 2.00 and 2.00 as displayed
    assert not table.best(table.metrics[1]).any()


def _tex_tables(tex: str) -> list[list[str]]:
    """Structural parse: balanced environments; the data rows of each tabular."""
    stack = []
    for match in re.finditer(r"\\(begin|end)\{(\w+)\}", tex):
        kind, env = match.groups()
        if kind == "begin":
            stack.append(env)
        else:
            assert stack and stack.pop() == env, f"unbalanced \\end{{{env}}}"
    assert not stack, f"unclosed environments {stack}"
    tables = []
    for body in re.findall(r"\\midrule\n(.*?)\\bottomrule", tex, flags=re.S):
        tables.append([line for line in body.splitlines() if line.strip()])
    return tables


def test_main_tex_parses_with_one_row_per_decoder(built):
    root, ids, out, report = built
    tex = (out / "main.tex").read_text()
    tables = _tex_tables(tex)
    assert len(tables) == 1 and len(tables[0]) == 4  # ar, sjd, sjd_vp, lantern
    n_columns = len(re.search(r"\\begin\{tabular\}\{(\w+)\}", tex).group(1))
    header = re.search(r"\\toprule\n(.*?)\\\\", tex).group(1)
    assert header.count("&") == n_columns - 1 and "$\\uparrow$" in header and "$\\downarrow$" in header
    for row in tables[0]:
        assert row.endswith(r"\\") and row.count(" & ") == n_columns - 1
    assert [row.split(" & ")[0] for row in tables[0]] == ["ar", "sjd", r"sjd\_vp", "lantern"]
    assert tex.count("\\toprule") == tex.count("\\midrule") == tex.count("\\bottomrule") == 1
    assert all(line.startswith("%") for line in tex.splitlines() if "commit" in line)  # provenance as comments


def test_ablations_pivot_over_what_differs_and_label_rows_by_it(built):
    root, ids, out, report = built
    csv = pd.read_csv(out / "ablations.csv")
    tables = dict(list(csv.groupby("table")))
    over_w = next(t for name, t in tables.items() if name.endswith("-W") and "resample_exact" in name)
    assert over_w["W"].tolist() == [16, 32] and set(over_w["run_id"]) == {ids["sjd"], ids["sjd32"]}
    over_n = next(t for name, t in tables.items() if name.endswith("-N"))
    assert over_n["N"].tolist() == [2, 3] and over_n["decoder"].tolist() == ["sjd_vp(N=2)", "sjd_vp"]
    assert over_n["step compression"].tolist() == pytest.approx([2.0, 100 / 45])
    md = (out / "ablations.md").read_text()
    assert "sjd (resample+exact) over W" in md and "sjd_vp (vp(resample)+exact) over N" in md


def test_incomplete_runs_are_listed_not_used(built):
    root, ids, out, report = built
    assert any(ids["partial"] in line and "2 of 5" in line for line in report.unused)
    html = (out / "report.html").read_text()
    assert ids["partial"] in html
    for name in ("main.csv", "ablations.csv"):
        assert ids["partial"] not in (out / name).read_text()


def test_finished_part_of_the_prompt_set_is_used_and_flagged(tmp_path):
    """A `data.limit` run holds final samples: it is used, paired over the prompts both runs hold,
    and a table mixing sample counts says so."""
    root = tmp_path / "results"
    ar = write_run(root, SynthRun(["decoder=ar"], [1.0] * 5, [20] * 5))
    short = write_run(root, SynthRun(["decoder=sjd"], SJD_RATIOS, SJD_NFE, complete=False, summary={"finished": True}))
    report = report_of(root, tmp_path / "out")
    assert not report.unused
    main = main_frame(tmp_path / "out").set_index("run_id")
    assert {ar, short} <= set(main.index)
    assert main.loc[short, "speedup"] == pytest.approx(float(np.exp(np.mean(np.log(SJD_RATIOS[:2])))), rel=1e-3)
    assert any("2 to 5 samples" in w for t in report.main for w in t.warnings)


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"git_commit": "b" * 40}, "mixes runs from 2 commits"),
        ({"platform": "Linux-other", "cpu_count": 64}, "mixes hardware"),
        ({"sampling": {"cfg_scale": 4.0, "temperature": 1.0, "top_k": 100, "top_p": 1.0}}, "mixes sampling settings"),
    ],
)
def test_mixed_provenance_produces_a_warning(tmp_path, env, expected):
    root = tmp_path / "results"
    make_store(root, sjd=env)
    report = report_of(root, tmp_path / "out")
    md = (tmp_path / "out" / "main.md").read_text()
    assert expected in md
    assert any(expected in line for line in report.main[0].warnings)
    assert expected not in " ".join(report_of(root, tmp_path / "out2", "decoder=lantern").main[0].warnings)


def test_warnings_for_busy_machines_and_timing_sessions(store, tmp_path):
    root, ids = store
    for key, busy, session in (("ar", False, "s1"), ("sjd", True, "s2"), ("lantern", False, "s1")):
        path = root / "runs" / ids[key] / "samples.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:
            row["machine"] = {"load_1m": 3.0 if busy else 0.2, "cpus": 2, "torch_threads": 1, "busy": busy}
            row["timing"] = {"mode": "run", "session": session}
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = root / "runs" / ids["vp"] / "samples.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for k, row in enumerate(rows):
        row["machine"] = {"load_1m": 3.0 if k < 2 else 0.2, "cpus": 2, "torch_threads": 1, "busy": k < 2}
        row["timing"] = {"mode": "run", "session": "s1"}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # a summary that claims busy latencies its rows do not record is not believed: numbers come from the rows
    summary_path = root / "runs" / ids["lantern"] / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary_path.write_text(json.dumps({**summary, "busy_samples": 7, "latency_trusted": False}))
    warnings = " ".join(report_of(root, tmp_path / "out").main[0].warnings)
    assert "sjd W=16: 5 of 5 latencies were taken on a busy machine" in warnings
    assert "sjd W=16 and its AR baseline were timed in different sessions" in warnings
    assert "sjd_vp W=16: 2 of 5 latencies were taken on a busy machine" in warnings
    assert "lantern W=16 and its AR" not in warnings and "lantern W=16:" not in warnings


def test_quality_scores_enter_the_main_table_with_their_ci(store, tmp_path):
    root, ids = store
    write_score(root, ids["ar"], "toy_clip", 30.0, (29.0, 31.0), metric="toy CLIP-Score")
    write_score(
        root,
        ids["sjd"],
        "toy_clip",
        29.9,
        (28.9, 30.9),
        metric="toy CLIP-Score",
        delta=(-0.1, -0.3, 0.1),
        ar_run_id=ids["ar"],
    )
    write_score(
        root,
        ids["lantern"],
        "toy_clip",
        28.0,
        (27.0, 29.0),
        metric="toy CLIP-Score",
        delta=(-2.0, -2.5, -1.5),
        ar_run_id=ids["ar"],
    )
    write_score(root, ids["lantern"], "toy_fd", 12.5, None, lower_is_better=True, metric="toy FD")
    report_of(root, tmp_path / "out")
    table = main_frame(tmp_path / "out").set_index("run_id")
    assert table.loc[ids["sjd"], "toy CLIP-Score"] == 29.9 and table.loc[ids["sjd"], "toy CLIP-Score ci_lo"] == 28.9
    assert pd.isna(table.loc[ids["vp"], "toy CLIP-Score"])
    md = (tmp_path / "out" / "main.md").read_text()
    assert "toy CLIP-Score ↑" in md and "toy FD ↓" in md and "**30.00 [29.00, 31.00]**" in md
    quality = (tmp_path / "out" / "quality.md").read_text()
    assert "-2.00 [-2.50, -1.50]" in quality and "noise floor" in quality


def test_per_category_tables_from_sample_meta(built):
    root, ids, out, report = built
    csv = pd.read_csv(out / "categories.csv")
    step = csv[csv["table"] == "category-step_compression-toy-toy"].set_index("Category")
    sjd_column = "sjd"
    assert step.loc["Animals", sjd_column] == pytest.approx(40 / (SJD_NFE[0] + SJD_NFE[1]))
    assert step.loc["Vehicles", sjd_column] == pytest.approx(20 / SJD_NFE[4])
    speed = csv[csv["table"] == "challenge-speedup-toy-toy"].set_index("Challenge")
    basic = [SJD_RATIOS[i] for i in (0, 2, 3)]
    assert speed.loc["Basic", sjd_column] == pytest.approx(math.exp(np.mean(np.log(basic))))
    # sjd_vp(N=2) and sjd W=32 have no meta: only main-table decoders get category columns
    assert "sjd_vp(N=2)" not in csv.columns


def test_no_category_metadata_skips_the_table_with_a_note(tmp_path):
    root = tmp_path / "results"
    write_run(root, SynthRun(["decoder=ar"], [1.0] * 5, [20] * 5))
    write_run(root, SynthRun(["decoder=sjd"], SJD_RATIOS, SJD_NFE))
    report = report_of(root, tmp_path / "out")
    assert not (tmp_path / "out" / "categories.md").exists()
    assert any("per-category" in line and "Category" in line for line in report.skipped)


def test_parquet_holds_every_run_and_sample(built):
    root, ids, out, report = built
    runs = pd.read_parquet(out / "runs.parquet")
    samples = pd.read_parquet(out / "samples.parquet")
    assert set(runs["run_id"]) == set(ids.values()) and len(runs) == 7
    assert runs.set_index("run_id").loc[ids["partial"], "status"] == "incomplete"
    assert len(samples) == 6 * 5 + 2
    assert {"latency_s", "nfe", "spec.window", "meta.Category"} <= set(samples.columns) | set(runs.columns)
    assert list(samples.loc[samples["run_id"] == ids["sjd"], "accept_len_hist"].iloc[0]) == [0, 3, 2, 1]


def test_filters_select_decoders_and_keep_their_ar_baselines(store, tmp_path):
    root, ids = store
    filters = parse_selection([f"results_dir={root}", "decoder=sjd", "window=16,32"])
    chosen = set(select_runs(runs_frame(root), filters)["run_id"])
    assert chosen == {ids["ar"], ids["sjd"], ids["sjd32"]}
    filters = parse_selection([f"results_dir={root}", "decoder=sjd_vp*", "decoder.growth_steps=2"])
    assert set(select_runs(runs_frame(root), filters)["run_id"]) == {ids["ar"], ids["vp_n2"]}
    filters = parse_selection([f"results_dir={root}", "decoder/verifier=lantern"])
    assert set(select_runs(runs_frame(root), filters)["run_id"]) == {ids["ar"], ids["lantern"]}
    sweep = root / "sweeps" / "0123456789ab"
    sweep.mkdir(parents=True)
    (sweep / "sweep.yaml").write_text(json.dumps({"runs": [{"run_id": ids["vp"]}, {"run_id": ids["ar"]}]}))
    assert set(select_runs(runs_frame(root), parse_selection([f"results_dir={root}", "0123456789ab"]))["run_id"]) == {
        ids["vp"],
        ids["ar"],
    }


@pytest.mark.parametrize(
    "words, message",
    [
        (["colour=red"], "unknown report filter 'colour'"),
        (["decoder=nope"], "no runs match decoder=nope"),
        (["fedcba987654"], "no sweep 'fedcba987654'"),
        (["model"], "neither a filter nor a sweep id"),
    ],
)
def test_bad_filters_are_one_line_errors(built, tmp_path, words, message):
    root = built[0]
    with pytest.raises(UserError, match=re.escape(message)) as error:
        report_of(root, tmp_path / "out", *words)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "preset, lossless",
    [
        ("ar", True),
        ("jacobi", True),
        ("sjd", True),
        ("sjd_pp", True),
        ("mc_sjd", True),
        ("sjd_vp", True),
        ("lantern", False),
        ("lantern_vp", False),
        ("gsd", False),
        ("gsd_vp", False),
        ("sjd_pac", True),
        ("lantern_pac", False),
        ("pjd", False),
        ("zipar", False),
    ],
)
def test_lossless_follows_the_parts(preset, lossless):
    """The parts' own claim (stored with each run) and the report's fallback for older runs agree."""
    spec = decoder_spec(compose_run([f"decoder={preset}"]))
    assert spec.lossless() is lossless
    assert is_lossless(spec.identity()) is lossless


@pytest.mark.parametrize(
    "overrides, lossless",
    [
        (["decoder=sjd_pp", "decoder.proposal.tau=0.5"], False),
        (["decoder=sjd_vp", "decoder.proposal.reference=p"], False),
        (["decoder=sjd_vp", "decoder.proposal.fusion=none"], True),
        (["decoder=sjd_vp", "decoder.proposal.inner=coupled"], True),
        (["decoder=sjd_vp", "decoder.proposal.inner={name:coupled,tau:0.9}"], False),
        (["decoder=sjd", "decoder/init=above"], True),
        (["decoder=mc_sjd", "decoder.proposal.reference=old_q"], False),
        (["decoder=sjd_pac", "decoder.topology.select=longest"], False),
        (["decoder=sjd_pac", "decoder/init=random"], True),
        (["decoder=sjd", "decoder/proposal=reuse"], False),
    ],
)
def test_lossless_reads_the_knobs(overrides, lossless):
    spec = decoder_spec(compose_run(overrides))
    assert spec.lossless() is lossless
    assert is_lossless(spec.identity()) is lossless


def test_a_part_that_claims_nothing_is_lossy():
    """A part that does not claim losslessness (e.g. one of a user's own that keeps the base class's
    `lossless`) makes the decoder lossy."""
    from sjdbench.decoding.parts import NoKnobs
    from sjdbench.decoding.registry import ResolvedPart

    spec = decoder_spec(compose_run(["decoder=sjd"]))
    silent = ResolvedPart("verifier", "mine", "sjdbench.decoding.parts.Verifier", NoKnobs())
    assert spec.lossless() and not dataclasses.replace(spec, verifier=silent).lossless()


def test_unknown_parts_and_knobs_count_as_lossy():
    spec = decoder_spec(compose_run(["decoder=sjd"])).identity()
    assert not is_lossless({**spec, "verifier": {"name": "exact", "reading": "official"}})
    assert not is_lossless({**spec, "proposal": {"name": "mystery"}})
    assert not is_lossless({**spec, "topology": {"name": "tree"}})  # a tree that does not say how it selects
    assert not is_lossless({**spec, "topology": {"name": "rows", "row_window": 8}})
    assert is_lossless({**spec, "topology": {"name": "tree", "width": 3, "depth": 3, "select": "first"}})


def test_a_two_setting_grid_gives_a_table_per_setting_and_one_over_both(tmp_path):
    root = tmp_path / "results"
    write_run(root, SynthRun(["decoder=ar"], [1.0] * 5, [20] * 5))
    for window in (16, 32):
        for steps in (2, 3):
            write_run(
                root,
                SynthRun(
                    ["decoder=sjd_vp", f"decoder.window={window}", f"decoder.growth_steps={steps}"],
                    [1.0 + window / 100 + steps / 10] * 5,
                    [10] * 5,
                ),
            )
    report = report_of(root, tmp_path / "out")
    titles = [t.title for t in report.main] + [
        line for line in (tmp_path / "out" / "ablations.md").read_text().splitlines() if line.startswith("### ")
    ]
    assert [t for t in titles if "over" in t] == [
        "### toy on toy: sjd_vp (vp(resample)+exact) over W",
        "### toy on toy: sjd_vp (vp(resample)+exact) over N",
        "### toy on toy: sjd_vp (vp(resample)+exact) over W × N",
    ]
    csv = pd.read_csv(tmp_path / "out" / "ablations.csv")
    both = csv[csv["table"].str.endswith("W-N")]
    assert list(zip(both["W"], both["N"])) == [(16, 2), (16, 3), (32, 2), (32, 3)]
    assert both["speedup"].tolist() == pytest.approx([1.36, 1.46, 1.52, 1.62])
    assert len(main_frame(tmp_path / "out")) == 2  # AR and sjd_vp at its preset's settings
    every = report_of(root, tmp_path / "every", every_run=True)
    assert len(every.main[0].frame) == 5 and "sjd_vp(N=2)" in set(every.main[0].frame["decoder"])


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="needs pdflatex (texlive-latex-recommended for booktabs)")
def test_main_and_ablation_tex_compile(built, tmp_path):
    _, _, out, _ = built
    (tmp_path / "doc.tex").write_text(
        "\\documentclass{article}\\usepackage[utf8]{inputenc}\\usepackage{booktabs}"
        "\\usepackage[landscape,margin=1cm]{geometry}\\begin{document}"
        f"\\input{{{out / 'main.tex'}}}\\input{{{out / 'ablations.tex'}}}\\end{{document}}\n"
    )
    result = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-2000:]


def test_a_greedy_verifier_reads_greedy_in_the_lossless_column():
    """Greedy Jacobi equals greedy AR token for token, not the sampled AR it is usually shown against,
    so its column says `greedy`, not `yes`."""
    from sjdbench.report.tables import _labelled

    presets = ["ar", "jacobi", "sjd", "lantern"]
    specs = [decoder_spec(compose_run([f"decoder={name}"])) for name in presets]
    frame = pd.DataFrame({"decoder_spec": [s.identity() for s in specs], "lossless": [s.lossless() for s in specs]})
    assert list(_labelled(frame, {"lossless": "lossless"})["lossless"]) == ["yes", "greedy", "yes", "no"]
