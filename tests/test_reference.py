"""Published tables as targets: the shipped reference files load and validate, a broken file fails in
one line naming the file and the key, and `sjdbench report --reference` puts each run of a synthetic
store beside its published row with both values, the ratio and the settings that differ, each checked
against a hand computation (a reference file made for the test)."""

import dataclasses
import io
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from synthetic_store import LANTERN_NFE, LANTERN_RATIOS, SJD_NFE, SJD_RATIOS, make_store, write_score
from typer.testing import CliRunner

import sjdbench
from sjdbench.cli import app
from sjdbench.config.schema import group_choices
from sjdbench.errors import UserError
from sjdbench.reference.load import describe, load_reference, reference_names
from sjdbench.reference.schema import METRIC_KEYS, NOT_STATED
from sjdbench.report.build import build_report
from sjdbench.report.reference import differences
from sjdbench.results.runs import runs_frame

runner = CliRunner()
SHIPPED = ["lantern_pp_paper", "sjd_pac_readme", "sjd_pp_paper", "sjd_vp_paper"]

# -- the shipped tables ------------------------------------------------------------------------------


def test_the_shipped_tables_load_and_name_what_sjdbench_has():
    assert reference_names() == SHIPPED
    presets, models, datasets = group_choices("decoder"), group_choices("model"), group_choices("data")
    for name in SHIPPED:
        table = load_reference(name)
        assert table.name == name and table.rows and table.source.url.startswith("https://")
        assert describe(table).startswith(f"{name}: ")
        for row in table.rows:
            assert row.preset is None or row.preset in presets, (name, row.method, row.preset)
            assert row.model is None or row.model in models, (name, row.method, row.model)
            assert row.data is None or row.data in datasets, (name, row.method, row.data)
            assert row.metrics and set(row.metrics) <= set(METRIC_KEYS)
            assert row.where.strip()


def test_the_sjd_pac_readme_table_is_whole():
    """Both models on both data sets, one AR row each (1x by definition), every method of the README
    and no FID on PartiPrompts (the README gives none)."""
    table = load_reference("sjd_pac_readme")
    assert len(table.rows) == 22
    blocks = {(r.model, r.data) for r in table.rows}
    assert blocks == {("lumina", "coco2017"), ("lumina", "parti"), ("emu3", "coco2017"), ("emu3", "parti")}
    for block in blocks:
        ar = [r for r in table.rows if (r.model, r.data) == block and r.method == "AR"]
        assert len(ar) == 1 and ar[0].preset == "ar"
        assert ar[0].metrics["step_compression"].value == 1.0 and ar[0].metrics["latency_speedup"].value == 1.0
    methods = {r.method for r in table.rows if r.model == "lumina"}
    assert methods == {"AR", "EAGLE", "SJD", "LANTERN++", "GSD", "SJD²", "SJD-PAC"}
    assert {r.method for r in table.rows if r.model == "emu3"} == {"AR", "SJD", "SJD²", "SJD-PAC"}
    assert not any("fid" in r.metrics for r in table.rows if r.data == "parti")
    assert all(r.checked for r in table.rows)


def test_load_reference_in_the_python_api_is_one_row_per_published_row():
    frame = sjdbench.load_reference("sjd_pac_readme")
    assert len(frame) == 22 and {"method", "preset", "step_compression", "source_url", "checked"} <= set(frame)
    pac = frame[(frame["method"] == "SJD-PAC") & (frame["model"] == "lumina") & (frame["data"] == "parti")].iloc[0]
    assert (pac["step_compression"], pac["latency_speedup"], pac["clip"]) == (4.62, 3.97, 32.07)
    assert pac["window"] == 64 and pac["knob.topology.width"] == 4 and pac["temperature"] is None
    span = sjdbench.load_reference("sjd_pp_paper").iloc[0]
    assert pd.isna(span["latency_speedup"])
    assert (span["latency_speedup_min"], span["latency_speedup_max"]) == (2.0, 3.0)


def test_list_reference_lists_each_table_on_one_line():
    result = runner.invoke(app, ["list", "reference"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == SHIPPED
    assert all("rows; https://" in line or "row; https://" in line for line in lines)
    everything = runner.invoke(app, ["list"])
    assert f"reference: {', '.join(SHIPPED)}" in everything.output
    bad = runner.invoke(app, ["list", "colour"])
    assert bad.exit_code == 2 and "unknown group 'colour'" in bad.output and "reference" in bad.output


def test_an_unknown_name_lists_the_valid_ones():
    with pytest.raises(UserError, match=f"unknown reference 'bogus'; choose one of: {', '.join(SHIPPED)}"):
        load_reference("bogus")
    with pytest.raises(UserError, match="does not exist"):
        load_reference("missing/table.yaml")


# -- a broken file fails in one line naming the file and the key -------------------------------------

ROW = {
    "method": "SJD",
    "preset": "sjd",
    "model": "toy",
    "data": "toy",
    "training_free": True,
    "lossless": True,
    "metrics": {"latency_speedup": 1.5},
    "where": "table 1",
    "checked": True,
}
DOC = {"title": "t", "summary": "s", "source": {"title": "a source", "url": "https://example.org"}, "rows": [ROW]}


def _with(**changes):
    doc = yaml.safe_load(yaml.safe_dump(DOC))
    row = doc["rows"][0]
    for key, value in changes.items():
        if key == "top":
            doc.update(value)
        elif value is KeyError:
            row.pop(key)
        else:
            row[key] = value
    return doc


@pytest.mark.parametrize(
    "doc, expected",
    [
        (_with(top={"colour": "red"}), "key colour is not a key here; valid keys: title, summary, source, rows, notes"),
        (_with(metrics={"fidd": 3.0}), "key rows[0].metrics.fidd is not a key here; valid keys: one of step_compr"),
        (_with(checked="yes please"), "key rows[0].checked must be true or false, not the text 'yes please'"),
        (_with(settings={"window": [16]}), "key rows[0].settings.window must be a whole number or a number or text"),
        (_with(settings={"knobs": {"Width": 4}}), "key rows[0].settings.knobs.Width is not a key here"),
        (_with(settings={"windw": 16}), "key rows[0].settings.windw is not a key here; valid keys: model_variant"),
        (_with(where=KeyError), "key rows[0].where is missing"),
        (_with(metrics={"latency_speedup": {"min": 3, "max": 2}}), "rows[0].metrics.latency_speedup has min 3.0 above"),
        (_with(metrics={"nfe": {"mean": 3}}), "rows[0].metrics.nfe must be a number or a span"),
        (_with(metrics={}), "key rows[0].metrics is empty"),
        (_with(preset="SJD"), "key rows[0].preset must be an sjdbench name (lower case, digits, _), not 'SJD'"),
        (_with(source={"title": "x"}), "key rows[0].source.url is missing"),
        (_with(top={"rows": "all of them"}), "key rows must be a list, not the text 'all of them'"),
        ([1, 2], "the file must be a mapping (keys title, summary, source, rows, notes), not a list"),
    ],
)
def test_a_broken_file_fails_in_one_line_naming_file_and_key(tmp_path, doc, expected):
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    with pytest.raises(UserError) as caught:
        load_reference(str(path))
    message = str(caught.value)
    assert message.startswith(f"reference file {path}: ") and expected in message, message
    assert "\n" not in message


def test_a_file_that_is_not_yaml_fails_in_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("title: [unclosed\n")
    with pytest.raises(UserError, match=r"reference file .*bad.yaml is not valid YAML \(line 2\)"):
        load_reference(str(path))


def test_a_good_file_reads_every_kind_of_value(tmp_path):
    doc = _with(metrics={"latency_speedup": {"max": 2.56}, "nfe": 720.65}, settings={"window": 64, "cfg": 3.0})
    path = tmp_path / "good.yaml"
    path.write_text(yaml.safe_dump(doc))
    row = load_reference(str(path)).rows[0]
    assert row.metrics["latency_speedup"].text() == "≤ 2.56" and row.metrics["nfe"].text() == "720.65"
    assert row.settings.window == 64 and row.settings.cfg == 3.0 and row.settings.top_k == NOT_STATED


# -- our runs beside a table made for the test --------------------------------------------------------

TEST_TABLE = {
    "title": "A table made for the tests",
    "summary": "AR, SJD (twice), LANTERN and EAGLE",
    "source": {"title": "a made-up source", "url": "https://example.org/table"},
    "notes": ["a note of the table"],
    "rows": [
        {
            **ROW,
            "method": "AR",
            "preset": "ar",
            "metrics": {"step_compression": 1.0, "latency_speedup": 1.0, "clip": 20.0},
            "settings": {"top_k": 100, "cfg": 3.0},
            "where": "row 1",
        },
        {**ROW, "method": "SJD far", "model": "lumina", "data": "coco2017", "settings": {"window": 16}},
        {
            **ROW,
            "checked": False,
            "metrics": {"step_compression": 2.5, "latency_speedup": 1.25, "nfe": 10.0, "clip": 20.0},
            "settings": {"window": 32, "top_k": 2000, "cfg": 3.0, "temperature": 1.0, "gpu": "H100", "data_size": 5},
        },
        {
            **ROW,
            "method": "LANTERN",
            "preset": "lantern",
            "lossless": None,
            "metrics": {"latency_speedup": {"min": 1, "max": 2}, "step_compression": {"max": 4}},
            "settings": {"knobs": {"verifier.delta": 0.2, "verifier.k": 1000}},
        },
        {**ROW, "method": "EAGLE", "preset": None},
    ],
}


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    base = tmp_path_factory.mktemp("reference")
    root = base / "results"
    ids = make_store(root)
    write_score(root, ids["sjd"], "toy_clip", 25.0, (24.0, 26.0))
    table_path = base / "made_for_the_test.yaml"
    table_path.write_text(yaml.safe_dump(TEST_TABLE, allow_unicode=True))
    report = build_report([f"results_dir={root}"], base / "out", figures=False, reference=str(table_path))
    frame = pd.read_csv(base / "out" / "reference-made_for_the_test.csv")
    return ids, report, frame, base, table_path


def _lines(frame, run_id):
    return frame[frame["run_id"] == run_id].set_index("metric")


def test_each_run_stands_beside_the_closest_row_of_its_method(compared):
    ids, report, frame, _, _ = compared
    pairs = frame.drop_duplicates("pair").set_index("run_id")["method"].to_dict()
    # AR beside AR; both SJD runs beside the SJD row on their own model and data, not the lumina one;
    # sjd_vp has no row; the incomplete mc_sjd run is not a usable run
    assert pairs == {ids["ar"]: "AR", ids["sjd"]: "SJD", ids["sjd32"]: "SJD", ids["lantern"]: "LANTERN"}
    assert list(frame.drop_duplicates("pair")["pair"]) == [1, 2, 3, 4]
    first_sjd = sorted([ids["sjd"], ids["sjd32"]])[0]
    assert frame.loc[frame["pair"] == 2, "run_id"].iloc[0] == first_sjd  # table order, then run id
    notes = report.reference[0].notes
    assert "no row of made_for_the_test runs the decoder of: sjd_vp (2 runs)" in notes
    assert "no sjdbench preset, so no run of ours beside: EAGLE" in notes
    assert "a note of the table" in notes


def test_values_and_ratios_are_the_reports_own(compared):
    ids, report, frame, base, _ = compared
    main = pd.read_csv(base / "out" / "main.csv").set_index("run_id")
    sjd = _lines(frame, ids["sjd"])
    step = sum([20] * 5) / sum(SJD_NFE)  # tokens / forwards, pooled over the run's rows
    assert sjd.loc["step_compression", "ours"] == pytest.approx(step, rel=1e-12)
    assert sjd.loc["step_compression", "ratio"] == pytest.approx(step / 2.5, rel=1e-12)
    assert sjd.loc["nfe", "ours"] == pytest.approx(np.mean(SJD_NFE), rel=1e-12)
    assert sjd.loc["nfe", "ratio"] == pytest.approx(np.mean(SJD_NFE) / 10.0, rel=1e-12)
    speedup = math.exp(np.mean(np.log(SJD_RATIOS)))
    assert sjd.loc["latency_speedup", "ours"] == pytest.approx(speedup, rel=1e-12)
    for column, theirs in (("ours", "speedup"), ("ours_lo", "speedup ci_lo"), ("ours_hi", "speedup ci_hi")):
        assert sjd.loc["latency_speedup", column] == main.loc[ids["sjd"], theirs]  # the pairing, not a recount
    assert sjd.loc["latency_speedup", "ours_n"] == 5
    assert sjd.loc["latency_speedup", "ratio"] == pytest.approx(speedup / 1.25, rel=1e-12)
    assert (sjd.loc["clip", "ours"], sjd.loc["clip", "ours_lo"], sjd.loc["clip", "ours_hi"]) == (25.0, 24.0, 26.0)
    assert sjd.loc["clip", "ours_from"] == "toy_clip" and sjd.loc["clip", "ratio"] == 25.0 / 20.0
    ar = _lines(frame, ids["ar"])
    assert ar.loc["latency_speedup", "ours"] == 1.0 and ar.loc["latency_speedup", "ratio"] == 1.0
    assert ar.loc["clip", "ours_from"] == "not scored" and pd.isna(ar.loc["clip", "ratio"])


def test_a_span_is_compared_end_by_end(compared):
    ids, report, frame, _, _ = compared
    lantern = _lines(frame, ids["lantern"])
    speedup = math.exp(np.mean(np.log(LANTERN_RATIOS)))
    line = lantern.loc["latency_speedup"]
    assert (line["published_min"], line["published_max"]) == (1.0, 2.0) and pd.isna(line["published"])
    assert line["ratio_vs_min"] == pytest.approx(speedup, rel=1e-12)
    assert line["ratio_vs_max"] == pytest.approx(speedup / 2, rel=1e-12) and pd.isna(line["ratio"])
    step = 100 / sum(LANTERN_NFE)
    assert lantern.loc["step_compression", "ratio_vs_max"] == pytest.approx(step / 4, rel=1e-12)
    shown = report.reference[0].frame
    start = shown.index[shown["#"] == "#4"][0]
    block = shown.loc[start : start + 1]
    assert list(block["metric"]) == ["step compression", "latency speedup"]
    assert list(block["published"]) == ["≤ 4.00", "1.00–2.00"]
    assert list(block["ours/published"]) == [f"{step / 4:.2f} (vs max)", f"{speedup / 2:.2f}–{speedup:.2f}"]


def test_every_setting_that_differs_is_named(compared):
    ids, report, frame, base, table_path = compared
    first = frame.drop_duplicates("run_id").set_index("run_id")
    assert first.loc[ids["sjd"], "differs"] == "W: 16 vs 32; top-k: 100 vs 2000; GPU: none (cpu) vs H100"
    assert first.loc[ids["sjd"], "not_stated"] == "resolution, metric protocol"
    assert first.loc[ids["sjd32"], "differs"] == "top-k: 100 vs 2000; GPU: none (cpu) vs H100"
    assert first.loc[ids["sjd32"], "not_stated"] == "resolution"
    # k null, and this synthetic run has no env.json record of the value its model gave: a dash
    assert first.loc[ids["lantern"], "differs"] == "δ: 0.1 vs 0.2; k: – vs 1000"
    assert first.loc[ids["lantern"], "not_stated"] == "resolution, W, top-k, CFG, temperature, prompts, GPU, lossless"
    lantern_row = load_reference(str(table_path)).rows[3]
    runs = runs_frame(base / "results", rows=True).set_index("run_id", drop=False)
    claimed = differences(dataclasses.replace(lantern_row, lossless=True), runs.loc[ids["lantern"]])
    assert (
        claimed.differ == ["δ: 0.1 vs 0.2", "k: – vs 1000", "lossless: no vs yes"]
        and "lossless" not in claimed.unstated
    )
    assert pd.isna(first.loc[ids["ar"], "differs"])  # nothing it states differs (top-k 100, CFG 3, lossless)
    notes = report.reference[0].notes
    pair = 2 if ids["sjd"] < ids["sjd32"] else 3
    assert (
        f"#{pair}: sjd W=16 (toy, toy) [{ids['sjd']}] vs SJD (toy, toy) — differs: W: 16 vs 32; top-k: 100 vs 2000; "
        "GPU: none (cpu) vs H100 — not stated there: resolution, metric protocol — its figures are not yet checked "
        "against the source (checked: false)"
    ) in notes
    ar_note = f"#1: ar (toy, toy) [{ids['ar']}] vs AR (toy, toy) — no stated setting differs — not stated there: "
    assert ar_note + "resolution, W, temperature, prompts, GPU" in notes


def test_the_table_as_shown(compared):
    ids, report, frame, base, _ = compared
    table = report.reference[0]
    assert table.labels == ["#", "published row", "our run", "metric", "ours", "published", "ours/published"]
    shown = table.frame
    assert list(shown["#"]) == ["#1", "", "", "#2", "", "", "", "#3", "", "", "", "#4", ""]
    sjd_pair = 2 if ids["sjd"] < ids["sjd32"] else 3
    start = shown.index[shown["#"] == f"#{sjd_pair}"][0]
    block = shown.loc[start : start + 3]
    assert list(block["metric"]) == ["step compression", "latency speedup", "NFE", "CLIP-Score (ours: toy_clip)"]
    assert block.iloc[0]["published row"] == "SJD (toy, toy)" and block.iloc[0]["our run"] == "sjd W=16 (toy, toy)"
    assert list(block["published"]) == ["2.50", "1.25", "10.00", "20.00"]
    assert block.iloc[3]["ours"] == "25.00 [24.00, 26.00]" and block.iloc[3]["ours/published"] == "1.25"
    markdown = (base / "out" / "reference-made_for_the_test.md").read_text()
    assert "| #1  | AR (toy, toy)" in markdown and "- a note of the table" in markdown
    assert table.title in (base / "out" / "report.html").read_text()


def test_compare_reference_in_the_python_api_is_the_reports_frame(compared):
    ids, _, frame, base, table_path = compared
    again = sjdbench.compare_reference(str(table_path), str(base / "results"))
    assert list(again.columns) == list(frame.columns) and len(again) == len(frame)
    written = pd.read_csv(io.StringIO(again.to_csv(index=False)))  # the frame as the report writes it
    pd.testing.assert_frame_equal(written, frame, check_exact=True)
    only_sjd = sjdbench.compare_reference(str(table_path), str(base / "results"), decoder="sjd")
    assert set(only_sjd["run_id"]) == {ids["sjd"], ids["sjd32"], ids["ar"]}  # the selection and its AR baseline


@pytest.mark.slow  # about 6 s: the whole report command
def test_report_reference_on_the_command_line(compared, tmp_path):
    ids, _, _, base, table_path = compared
    result = runner.invoke(
        app,
        ["report", f"results_dir={base / 'results'}", "--out", str(tmp_path / "out"), "--reference", str(table_path)],
    )
    assert result.exit_code == 0, result.output
    assert "A table made for the tests: our runs beside it" in result.output
    assert f"[{ids['lantern']}] vs LANTERN (toy, toy) — differs: δ: 0.1 vs 0.2" in result.output
    assert "reference-made_for_the_test.csv" in result.output


def test_an_unknown_reference_fails_in_one_line_before_any_work(tmp_path):
    result = runner.invoke(app, ["report", f"results_dir={tmp_path / 'nowhere'}", "--reference", "bogus"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert lines == [
        f"error: unknown reference 'bogus'; choose one of: {', '.join(SHIPPED)} (or the path of a "
        "reference YAML file; `sjdbench list reference` describes them)"
    ]
    empty = runner.invoke(app, ["report", "--reference", " "])
    assert empty.exit_code == 2 and "--reference needs a table name" in empty.output


def test_a_null_knob_is_compared_by_the_value_the_run_used(compared):
    """LANTERN's k: null takes the model's value when built; env.json records it, and the comparison
    with a row that states k reads that value, not a dash."""
    ids, _, _, base, table_path = compared
    row = load_reference(str(table_path)).rows[3]
    run = runs_frame(base / "results", rows=True).set_index("run_id", drop=False).loc[ids["lantern"]].copy()
    run["env.lantern_k"] = 62  # what the toy's build records (tests/test_runner.py)
    assert "k: 62 vs 1000" in differences(row, run).differ
    run["env.lantern_k"] = 1000  # a real model's book: the released value, so k agrees
    assert "k" in differences(row, run).same
