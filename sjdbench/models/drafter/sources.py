"""Which drafter a model uses: the one shipped or released for it, or one named by the user.

A source is a folder (a drafter `sjdbench toy train-drafter` wrote, `<name>_drafter.json` +
`.safetensors`, or a released layout, `config.json` + `pytorch_model.bin`) or a hub id of a released
drafter (found in the local hub cache). Defaults: the toy's shipped drafter (beside the toy weights
it was trained on), jadohu/anole_drafter for Anole, jadohu/llamagen_drafter (256 px) and
jadohu/llamagen2_drafter (512 px) for LlamaGen. Other models have none released: train one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sjdbench.models.drafter import Drafter, bind
from sjdbench.models.drafter.files import load_released, load_trained, released_dir
from sjdbench.models.weights import WeightsError

TRAINED_SUFFIX = "_drafter.json"
LLAMAGEN_DRAFTERS = {256: "jadohu/llamagen_drafter", 512: "jadohu/llamagen2_drafter"}


def default_source(model: str, options: dict[str, Any]) -> str | None:
    """The drafter a model uses unless told otherwise (None: none is shipped or released for it)."""
    if model == "toy":
        from sjdbench.models.toy.model import WEIGHTS_DIR

        return str(Path(options.get("weights_dir") or WEIGHTS_DIR))
    if model == "anole":
        return "jadohu/anole_drafter"
    if model == "llamagen":
        return LLAMAGEN_DRAFTERS.get(int(options.get("resolution") or 0))
    return None


def available(model: str, options: dict[str, Any], source: str | None = None) -> tuple[bool, str]:
    """(whether the drafter is here without a download, a line saying which one or what to do),
    read without loading anything: for listings."""
    source = source or default_source(model, options)
    if source is None:
        return (
            False,
            f"no drafter is released for model '{model}'; train one with `sjdbench toy train-drafter model={model}`",
        )
    folder = Path(source).expanduser()
    if folder.is_dir():
        found = _trained_names(folder) or (["released"] if (folder / "config.json").exists() else [])
        return (bool(found), str(folder) if found else f"{folder} holds no drafter")
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(source, "config.json")
    except Exception:  # no huggingface_hub, a malformed id
        cached = None
    return (isinstance(cached, str), source if isinstance(cached, str) else f"{source} (not in the local hub cache)")


def load_drafter(adapter: Any, model: str, options: dict[str, Any], source: str | None = None) -> Drafter:
    """The drafter for `adapter` (the model `model` built from `options`), bound to its hidden states
    and LM head; WeightsError / FileNotFoundError / ValueError in one line otherwise."""
    source = source or default_source(model, options)
    if source is None:
        raise FileNotFoundError(
            f"no drafter is released for model '{model}'; train one with `sjdbench toy train-drafter model={model}` "
            "and name its folder as the drafter"
        )
    folder = Path(source).expanduser()
    names = _trained_names(folder) if folder.is_dir() else []
    if len(names) > 1:
        raise ValueError(f"{folder} holds several drafters ({', '.join(names)}); name the folder of one")
    if names:
        net, _ = load_trained(folder, names[0])
        return bind(adapter, net, names[0])
    if folder.is_dir() and not (folder / "config.json").exists() and model == "toy":
        raise WeightsError(
            f"{folder} holds no toy drafter (toy_drafter.json, toy_drafter.safetensors); restore the package's "
            "weights or train one with `sjdbench toy train-drafter`"
        )
    repo = None if folder.is_dir() else source
    net = load_released(released_dir(source), repo=repo)
    return bind(adapter, net, repo or str(folder))


def _trained_names(folder: Path) -> list[str]:
    return sorted(p.name[: -len(".json")] for p in folder.glob(f"*{TRAINED_SUFFIX}"))
