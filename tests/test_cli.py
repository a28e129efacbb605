"""The command line through typer's CliRunner."""

from typer.testing import CliRunner

from sjdbench.cli import app

runner = CliRunner()


def test_help_everywhere():
    for args in (["--help"], ["run", "--help"], ["list", "--help"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and "Usage" in result.output


def test_list_groups_and_one_group():
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0
    assert "decoder:" in result.output and "sjd_vp" in result.output
    result = runner.invoke(app, ["list", "decoder"])
    assert "lantern_vp" in result.output and "model:" not in result.output


def test_list_decoder_marks_the_drafter_presets_and_their_availability():
    result = runner.invoke(app, ["list", "decoder"])
    (line,) = [x for x in result.output.splitlines() if "need a trained drafter" in x]
    named = line.split(":", 1)[1].split(";")[0].replace(" ", "").split(",")
    assert named == ["eagle", "eagle2", "eagle2_adt", "eagle_chain", "lantern_adt", "lantern_eagle", "lantern_pp"]
    assert "model=toy: available" in line  # the toy ships its drafter
    result = runner.invoke(app, ["list", "decoder", "--model", "lumina"])
    assert "model=lumina: not available" in result.output and "train-drafter" in result.output
    result = runner.invoke(app, ["list", "decoder", "--model", "nope"])
    assert result.exit_code != 0 and "unknown model 'nope'; choose one of:" in result.output


def test_run_prints_a_summary_table(tmp_path):
    args = [
        "run",
        "model=debug",
        "model.options.grid_h=4",
        "model.options.grid_w=4",
        "data.limit=2",
        f"results_dir={tmp_path}",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "step x" in result.output and "accept" in result.output and "NFE" in result.output
    again = runner.invoke(app, args)
    assert "already stored (nothing decoded)" in again.output


def test_bad_choice_is_one_line_without_traceback():
    result = runner.invoke(app, ["run", "decoder=bogus"])
    assert result.exit_code == 2
    assert "unknown decoder 'bogus'; choose one of:" in result.output
    assert "Traceback" not in result.output


def test_show_config():
    result = runner.invoke(app, ["run", "decoder=sjd_vp", "--show-config"])
    assert result.exit_code == 0 and "growth_steps: 3" in result.output


def test_the_summary_table_marks_decoders_that_need_a_drafter():
    from rich.console import Console

    from sjdbench.cli.tables import summary_table

    drafter = {"window": 26, "proposal": {"name": "drafter"}, "verifier": {"name": "exact"}}
    jacobi = {"window": 16, "proposal": {"name": "resample"}, "verifier": {"name": "exact"}}
    rows = [{"decoder": "eagle", "decoder_spec": drafter}, {"decoder": "sjd", "decoder_spec": jacobi}]
    console = Console(width=200, record=True)
    console.print(summary_table("t", rows))
    text = console.export_text()
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert lines["eagle"].split()[1] == "†" and lines["sjd"].split()[1] != "†"
    assert "† = needs a trained drafter" in " ".join(text.split())
