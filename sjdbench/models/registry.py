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

# model name -> check of its weight files before loading (truncation, checksum, shapes); models
# not listed have no files to check
VERIFIERS = {
    "toy": "sjdbench.models.toy.model:verify_weights",
}

# model name -> number of image tokens, known without loading (so sampling.top_k is checked before
# any weights load); models not listed are checked right after loading instead
IMAGE_TOKENS = {
    "debug": "sjdbench.models.debug:image_token_count",
    "toy": "sjdbench.models.toy.model:image_token_count",
}

DEVICES_HELP = "use auto, cpu, cuda, cuda:N or mps"


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


def _call_with(spec_name: str, spec: str, options: dict[str, Any]):
    function = _import(spec_name, spec)
    accepted = inspect.signature(function).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    return function(**{k: v for k, v in options.items() if takes_any or k in accepted})


def verify_weights(name: str, options: dict[str, Any]) -> None:
    """Raise a one-line UserError naming a missing, truncated, corrupt or mismatched weight file."""
    _check_known(name)
    if name in VERIFIERS:
        _call_with(name, VERIFIERS[name], options)


def image_token_count(name: str, options: dict[str, Any]) -> int | None:
    """How many image tokens the model samples from, without loading it (None: not known before)."""
    _check_known(name)
    if name not in IMAGE_TOKENS:
        return None
    try:
        return int(_call_with(name, IMAGE_TOKENS[name], options))
    except FileNotFoundError as error:
        raise UserError(f"model '{name}': {error}") from None


def resolve_device(device: str) -> str:
    """`auto` -> cuda when visible, else cpu. Anything else must be a device torch parses and this
    machine has; the error says which devices are valid here."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise UserError(f"device={device} is not a device torch knows; {DEVICES_HELP}") from None
    if parsed.type == "cpu":
        return device
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise UserError(f"device={device} asked for but no CUDA device is visible; use device=cpu (or auto)")
        if parsed.index is not None and parsed.index >= count:
            raise UserError(f"device={device}: only {count} CUDA device(s) visible (cuda:0..cuda:{count - 1})")
        return device
    if parsed.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise UserError(f"device={device} asked for but Apple's MPS is not available here; use device=cpu")
        return device
    raise UserError(f"device={device}: sjdbench does not run on '{parsed.type}' devices; {DEVICES_HELP}")


def remote_device(device: str, gpus: int) -> str:
    """The device a job on another machine will use, checked for syntax only: `auto` means cuda
    when the job gets GPUs. (Availability is checked again on the job's machine.)"""
    import torch

    if device == "auto":
        return "cuda" if gpus > 0 else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise UserError(f"device={device} is not a device torch knows; {DEVICES_HELP}") from None
    if parsed.type == "cuda" and gpus < 1:
        raise UserError(f"device={device} but the jobs get no GPU; pass --gpus-per-task 1 (or more), or device=cpu")
    if parsed.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"device={device}: sjdbench does not run on '{parsed.type}' devices; {DEVICES_HELP}")
    return device


def check_options(name: str, options: dict[str, Any]) -> None:
    """model.options must be parameters of the model's builder (checked without building)."""
    builder = _import(name, BUILDERS.get(name, ""))
    accepted = inspect.signature(builder).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        return
    unknown = sorted(set(options) - set(accepted))
    if unknown:  # options, or the top-level model keys (model.weights=...) the model does not take
        valid = ", ".join(p for p in accepted if p != "device")
        raise UserError(f"model '{name}' does not take {', '.join(unknown)}; its options are: {valid}")


def build_adapter(name: str, options: dict[str, Any], device: str):
    check_options(name, options)
    builder = _import(name, BUILDERS.get(name, ""))
    try:
        return builder(**options, device=device)
    except (ValueError, FileNotFoundError) as error:  # bad option values, missing weights
        raise UserError(f"model '{name}': {_first_line(error)}") from None
    except RuntimeError as error:  # a state dict that does not fit the model (after the checks above)
        raise UserError(f"model '{name}' cannot load its weights: {_first_line(error)}") from None


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return "; ".join(lines[:2]) if lines else type(error).__name__
