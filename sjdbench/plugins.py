"""One plugin convention for decoder parts, models and evaluators: a name is a YAML in a config group,
and the YAML's `_target_` names the Python object behind it.

    conf/decoder/verifier/lantern.yaml   _target_: sjdbench.decoding.verifiers.lantern.LanternVerifier
    conf/model/janus.yaml                _target_: sjdbench.models.janus.MODEL
    conf/evaluator/fid.yaml              _target_: sjdbench.eval.evaluators.inception.Fid

Why YAMLs and not Python entry points: the config group is already what a run names and what
`sjdbench list` shows, so the list of names and the registry are one thing; a directory in
SJDBENCH_CONFIG_PATH adds names (or replaces shipped ones) for every kind alike; and a researcher who
adds a decoder part, a model or a metric in a checkout needs no reinstall, which entry points (read
from installed package metadata) would. Nothing is imported until a name is used, so listing names
never loads a model or a backbone.

What each kind's object must be (a `Part` class, a `ModelEntry`, an `Evaluator` class) is checked by
its registry (decoding.registry, models.registry, eval.evaluators); this module only finds them.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import yaml

from sjdbench.errors import UserError
from sjdbench.paths import config_dirs


def names(group: str) -> list[str]:
    """Every name of a config group ("model", "evaluator", "decoder/verifier"), over all config dirs."""
    return sorted({path.stem for root in config_dirs() for path in (root / group).glob("*.yaml")})


def yaml_path(group: str, name: str) -> Path | None:
    """The YAML that defines `name` in `group`; a directory of SJDBENCH_CONFIG_PATH wins over the
    shipped tree (the last one listed wins), so a user may replace a shipped name."""
    for root in reversed(config_dirs()):
        path = root / group / f"{name}.yaml"
        if path.exists():
            return path
    return None


def read_yaml(path: Path) -> dict[str, Any]:
    """A plugin YAML as a mapping (one line naming the file when it is not one)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UserError(f"cannot read {path}: {reason}; fix or remove it") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise UserError(f"{path} is not a mapping of keys to values; fix or remove it")
    return doc


def locate(target: str, where: str) -> Any:
    """The object a dotted `_target_` names (`package.module.attribute`); `where` starts the
    one-line error when it cannot be imported."""
    module_name, _, attribute = str(target).rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as error:
        raise UserError(f"{where}: cannot import _target_ '{target}' ({error})") from None


def find(group: str, name: str, what: str) -> tuple[str, Any]:
    """(`_target_`, the object it names) of `name` in `group`; `what` names the kind in the errors
    ("model", "evaluator", "decoder.verifier"): an unknown name lists the valid ones."""
    path = yaml_path(group, name)
    if path is None:
        raise UserError(f"unknown {what} '{name}'; choose one of: {', '.join(names(group))}")
    target = read_yaml(path).get("_target_")
    if not target or not isinstance(target, str):
        raise UserError(f"{what} '{name}': {path} has no _target_ naming its Python object")
    return target, locate(target, f"{what} '{name}'")
