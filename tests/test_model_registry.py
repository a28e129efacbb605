"""The model registry: one entry per model, named by its YAML's `_target_`, options checked before
loading (one line naming the valid choices), YAML defaults that agree with each model's options
dataclass, the run config's top-level model keys held to the shared options, and a model of one's
own added by a YAML in SJDBENCH_CONFIG_PATH."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import yaml

from sjdbench import plugins
from sjdbench.config import ModelConfig, compose_run
from sjdbench.errors import UserError
from sjdbench.models import registry
from sjdbench.models.options import TOP_LEVEL, CheckpointOptions, ModelOptions
from sjdbench.paths import conf_dir

NAMES = plugins.names("model")  # every model: a new one is checked here without editing this file
REAL = ("emu3", "janus", "llamagen", "lumina")


def test_every_yaml_is_a_model_with_an_entry():
    assert set(NAMES) >= {"debug", "toy", *REAL}
    for name in NAMES:
        raw = yaml.safe_load((conf_dir() / "model" / f"{name}.yaml").read_text())
        assert raw["_target_"].endswith(".MODEL") and raw["name"] == name
        assert issubclass(registry.entry(name).options, ModelOptions)
    for name in REAL:
        assert issubclass(registry.entry(name).options, CheckpointOptions)


@pytest.mark.parametrize("name", NAMES)
def test_yaml_defaults_are_the_options_dataclass_defaults(name):
    """A model's YAML names its user-visible defaults; each equals its options dataclass's default,
    so the YAML and the code cannot drift apart."""
    raw = yaml.safe_load((conf_dir() / "model" / f"{name}.yaml").read_text())
    fields = {f.name: f.default for f in dataclasses.fields(registry.entry(name).options)}
    listed = {**raw.get("options", {}), **{k: raw[k] for k in TOP_LEVEL if k in raw}}
    assert listed, name
    for key, value in listed.items():
        if value is None and key == "path":
            continue
        assert key in fields, f"{name}.yaml lists {key}, which the model does not take"
        assert value == fields[key], f"{name}.yaml: {key}={value!r}, the options dataclass says {fields[key]!r}"


def test_top_level_model_keys_are_the_shared_checkpoint_options():
    top = [f for f in dataclasses.fields(ModelConfig) if f.name not in ("name", "_target_", "options")]
    assert [f.name for f in top] == list(TOP_LEVEL)
    shared = typing.get_type_hints(CheckpointOptions)
    for f in top:
        assert typing.Optional[shared[f.name]] == typing.get_type_hints(ModelConfig)[f.name], f.name


def test_options_are_checked_before_loading_with_one_line():
    cases = [
        ("toy", {"weights": "random"}, "model 'toy' does not take weights; its options are: cfg_scale,"),
        ("debug", {"grid_h": "abc"}, "model 'debug': model.options.grid_h must be int, got 'abc'"),
        ("debug", {"dtype": "bf16"}, "model 'debug': model.dtype 'bf16' is not available; choose one of: auto, fp32"),
        ("janus", {"size": "3B"}, "model.size '3B' is not available; choose one of: 1B, 7B"),
        ("janus", {"weights": "random", "size": "3B"}, "choose one of: 1B, 7B, tiny"),
        ("janus", {"weights": "maybe"}, "model.weights 'maybe' is not available; choose one of: pretrained, random"),
        ("lumina", {"resolution": 640}, "model.resolution 640 is not available; choose one of: 512, 768, 1024"),
        ("emu3", {"resolution": 30}, "model.resolution 30 must be a multiple of 8"),
    ]
    for name, options, needle in cases:
        with pytest.raises(UserError) as error:
            registry.resolve_model(name, options)
        assert needle in str(error.value) and "\n" not in str(error.value), (name, str(error.value))


def test_unknown_model_lists_the_models():
    with pytest.raises(UserError) as error:
        registry.build_adapter("nope", {}, "cpu")
    assert str(error.value) == f"unknown model 'nope'; choose one of: {', '.join(NAMES)}"


def test_a_local_checkpoint_may_have_any_resolution_of_the_grid():
    registry.resolve_model("lumina", {"path": "/somewhere", "resolution": 640})  # no released-size check


def test_fp64_reaches_the_toy_through_the_run_config():
    config = compose_run(["model=toy", "model.dtype=fp64"])
    adapter = registry.build_adapter("toy", dict(config.model.options), "cpu")
    import torch

    assert adapter.dtype == torch.float64 and adapter.model.head.weight.dtype == torch.float64


def test_fingerprints_of_random_weights_say_so():
    options = {"weights": "random", "size": "tiny", "resolution": 64}
    for name in ("lumina", "llamagen", "janus"):
        assert registry.resolve_model(name, options).fingerprint() == "random weights (tiny): meaningless tokens"
    assert registry.resolve_model("debug", {}).fingerprint() is None
    assert registry.resolve_model("debug", {"n_codes": 12}).image_tokens() == 12
    assert registry.resolve_model("janus", options).image_tokens() is None


def test_a_run_parses_its_model_options_once(tmp_path, monkeypatch):
    """resolve_run checks, fingerprints and verifies the model from one parse of its options, and the
    runner builds the model from that same parse."""
    from sjdbench.config.resolve import resolve_run
    from sjdbench.run.runner import execute_runs

    parses = []
    parse = ModelOptions.from_dict.__func__  # type: ignore[attr-defined]

    def counting(cls, options):
        parses.append(cls.__name__)
        return parse(cls, options)

    monkeypatch.setattr(ModelOptions, "from_dict", classmethod(counting))
    small = ["model=debug", "model.options.grid_h=3", "model.options.grid_w=3", "data.limit=1", "warmup=0"]
    run = resolve_run(compose_run([*small, f"results_dir={tmp_path}"]))
    assert parses == ["DebugOptions"]
    (outcome,) = execute_runs([run])
    assert outcome.status == "finished" and parses == ["DebugOptions"]
