"""Model name -> adapter builder, imported lazily so listing models never loads heavy code."""
from __future__ import annotations

import importlib
import inspect
from typing import Any

from sjdbench.errors import UserError

BUILDERS = {
    "debug": "sjdbench.models.debug:build_debug_adapter",
    "toy": "sjdbench.models.toy.model:build_toy_adapter",
    "lumina": "sjdbench.models.lumina:build_lumina_adapter",
    "llamagen": "sjdbench.models.llamagen:build_llamagen_adapter",
    "janus": "sjdbench.models.janus:build_janus_adapter",
    "emu3": "sjdbench.models.emu3:build_emu3_adapter",
}


# model name -> fingerprint of its weight files (cheap, without loading the model); models not
# listed have no files (debug: seeded random weights, fully described by their options)
FINGERPRINTS = {
    "toy": "sjdbench.models.toy.model:weights_fingerprint",
    "lumina": "sjdbench.models.lumina:weights_fingerprint",
    "llamagen": "sjdbench.models.llamagen:weights_fingerprint",
    "janus": "sjdbench.models.janus:weights_fingerprint",
    "emu3": "sjdbench.models.emu3:weights_fingerprint",
}


def _check_known(name: str) -> None:
    if name not in BUILDERS:
        raise UserError(f"unknown model '{name}'; choose one of: {', '.join(sorted(BUILDERS))}")


def _import(name: str, spec: str):
    """The function behind 'module:function', imported on first use; unknown models are a UserError."""
    _check_known(name)
    module_name, func_name = spec.split(":")
    try:
        return getattr(importlib.import_module(module_name), func_name)
    except ImportError as error:
        raise UserError(f"model '{name}' cannot be loaded: {error}") from None


def weights_fingerprint(name: str, options: dict[str, Any]) -> str | None:
    """Identity of the weights a run would load: part of the run id, so results of different
    weights never mix. Raises UserError for unknown models or missing files (as loading would)."""
    _check_known(name)
    if name not in FINGERPRINTS:  # no weight files (debug)
        return None
    fingerprint = _import(name, FINGERPRINTS[name])
    accepted = inspect.signature(fingerprint).parameters
    try:
        return fingerprint(**{k: v for k, v in options.items() if k in accepted})
    except (ValueError, FileNotFoundError) as error:  # missing or unreachable weights, bad option values
        raise UserError(f"model '{name}': {error}") from None


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={device} asked for but no CUDA device is visible; use device=cpu")
    return device


def build_adapter(name: str, options: dict[str, Any], device: str):
    builder = _import(name, BUILDERS.get(name, ""))
    accepted = inspect.signature(builder).parameters
    unknown = sorted(set(options) - set(accepted))
    if unknown:  # options, or the top-level model keys (model.weights=...) the model does not take
        valid = ", ".join(p for p in accepted if p != "device")
        raise UserError(f"model '{name}' does not take {', '.join(unknown)}; its options are: {valid}")
    try:
        return builder(**options, device=device)
    except (ValueError, FileNotFoundError) as error:  # bad option values, missing weights
        raise UserError(f"model '{name}': {error}") from None
