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
