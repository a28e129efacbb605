"""One plugin convention (sjdbench.plugins): a model and an evaluator written outside the package each
join by one Python file and one YAML in an SJDBENCH_CONFIG_PATH directory, and work end to end, as a
decoder part does (tests/test_config.py::test_a_new_part_is_one_file_plus_one_yaml); a YAML that
names nothing usable is one line."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from sjdbench import plugins
from sjdbench.config import compose_run
from sjdbench.config.schema import group_choices
from sjdbench.errors import UserError

SMALL = ["data=smoke", "data.limit=2", "warmup=0"]
DEBUG = ["model=debug", "model.options.grid_h=3", "model.options.grid_w=3"]

MODEL_CODE = """
import dataclasses

from sjdbench.models import debug

# the debug model under another name: one registry entry, found through a YAML's _target_
MODEL = dataclasses.replace(debug.MODEL, build=lambda options, device: debug.build(options, device, "mine"))
NOT_AN_ENTRY = 42
"""

EVALUATOR_CODE = '''
import numpy as np

from sjdbench.eval.evaluators.base import SampleMetric


class Brightness(SampleMetric):
    """Mean pixel value of each image (a test's metric)."""

    name = "brightness"
    metric = "mean pixel value"
    cache_kind = "brightness"

    def measure_protocol(self) -> dict:
        return {"measure": "mean of the RGB values"}

    def measure(self, samples):
        return np.asarray([[float(image.mean())] for image in self.images(samples)])


class Misnamed(Brightness):
    name = "something_else"
'''


@pytest.fixture
def user_dir(tmp_path, monkeypatch) -> Path:
    """A config directory of one's own (SJDBENCH_CONFIG_PATH) and a folder of Python code on the path."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "my_models.py").write_text(MODEL_CODE)
    (code / "my_metrics.py").write_text(EVALUATOR_CODE)
    monkeypatch.syspath_prepend(str(code))
    conf = tmp_path / "conf"
    (conf / "model").mkdir(parents=True)
    (conf / "evaluator").mkdir()
    monkeypatch.setenv("SJDBENCH_CONFIG_PATH", str(conf))
    return conf


def write(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))


def test_a_new_model_is_one_object_plus_one_yaml(user_dir, tmp_path):
    from sjdbench.models.registry import resolve_model
    from sjdbench.run.runner import execute

    write(
        user_dir / "model" / "mine.yaml",
        """\
        # The debug model under another name (a test).
        _target_: my_models.MODEL
        name: mine
        options:
          grid_h: 3
          grid_w: 3
          n_codes: 16
        """,
    )
    assert "mine" in plugins.names("model") and plugins.names("model") == group_choices("model")
    config = compose_run(["model=mine", *SMALL, "decoder=sjd", "decoder.window=3", f"results_dir={tmp_path / 'r'}"])
    assert config.model._target_ == "my_models.MODEL" and config.model.options["n_codes"] == 16  # the YAML's
    assert resolve_model("mine", dict(config.model.options)).options.n_codes == 16
    outcome = execute(config)
    assert outcome.status == "finished" and outcome.summary["n_samples"] == 2
    assert outcome.run_id.startswith("mine-sjd-")
    recorded = (Path(outcome.run_dir) / "config.yaml").read_text()
    assert "_target_: my_models.MODEL" in recorded  # which code built the model, with the run


def test_a_new_evaluator_is_one_class_plus_one_yaml(user_dir, tmp_path):
    from sjdbench.eval.evaluators import evaluator_names
    from sjdbench.eval.evaluators.settings import compose_eval
    from sjdbench.eval.score import score
    from sjdbench.run.runner import execute

    write(user_dir / "evaluator" / "brightness.yaml", "_target_: my_metrics.Brightness\n")
    assert "brightness" in evaluator_names() and "toy_clip" in evaluator_names()
    assert evaluator_names() == group_choices("evaluator")  # the config group is the registry
    outcome = execute(compose_run([*DEBUG, *SMALL, "decoder=ar", f"results_dir={tmp_path / 'r'}"]))
    (scored,) = score([Path(outcome.run_dir)], compose_eval(["eval.evaluators=[brightness]"]))
    assert scored.status == "scored", scored.message
    doc = json.loads(scored.path.read_text())
    assert doc["evaluator"] == "brightness" and doc["n"] == 2 and 0 <= doc["value"] <= 255
    assert len(doc["per_sample"]) == 2


def test_plugin_yamls_that_name_nothing_usable_are_one_line(user_dir):
    from sjdbench.eval.evaluators import evaluator_class
    from sjdbench.eval.evaluators.settings import compose_eval
    from sjdbench.models.registry import entry

    write(user_dir / "model" / "untargeted.yaml", "name: untargeted\n")
    write(user_dir / "model" / "missing.yaml", "_target_: my_models.NOPE\nname: missing\n")
    write(user_dir / "model" / "number.yaml", "_target_: my_models.NOT_AN_ENTRY\nname: number\n")
    write(user_dir / "evaluator" / "misnamed.yaml", "_target_: my_metrics.Misnamed\n")
    write(user_dir / "evaluator" / "broken.yaml", "_target_: [not, a, name\n")
    cases = [
        (lambda: entry("untargeted"), "model 'untargeted': "),
        (lambda: entry("missing"), "model 'missing': cannot import _target_ 'my_models.NOPE'"),
        (lambda: entry("number"), "model 'number': its _target_ my_models.NOT_AN_ENTRY is not a ModelEntry"),
        (
            lambda: entry("nope"),
            "unknown model 'nope'; choose one of: anole, debug, emu3, janus, llamagen, lumina, missing,",
        ),
        (lambda: evaluator_class("misnamed"), "my_metrics.Misnamed.name is 'something_else'"),
        (lambda: evaluator_class("broken"), "cannot read "),
        (lambda: compose_eval(["eval.evaluators=[nope]"]), "unknown evaluator 'nope' in eval.evaluators; choose one"),
    ]
    for call, needle in cases:
        with pytest.raises(UserError) as error:
            call()
        assert needle in str(error.value) and "\n" not in str(error.value), str(error.value)
    assert "has no _target_" in str(pytest.raises(UserError, entry, "untargeted").value)


def test_a_user_yaml_replaces_a_shipped_name(user_dir):
    """The last config directory wins, for every kind alike."""
    shipped = plugins.yaml_path("evaluator", "toy_clip")
    assert shipped is not None and user_dir not in shipped.parents
    write(user_dir / "evaluator" / "toy_clip.yaml", "_target_: my_metrics.Brightness\n")
    assert plugins.yaml_path("evaluator", "toy_clip") == user_dir / "evaluator" / "toy_clip.yaml"
    assert plugins.names("evaluator").count("toy_clip") == 1
