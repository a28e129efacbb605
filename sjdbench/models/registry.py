"""Every model, by name: one spec each, found by convention so that a model is one file plus one YAML.

Model `<name>` is `conf/model/<name>.yaml` (its user-visible defaults) and the module
`sjdbench.models.<name>` (a package for the toy), whose `SPEC` says how to check its options, build
it, identify and check its weight files, and count its image tokens before loading. Modules are
imported on first use, so listing models or checking a config never loads model code it does not need.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from sjdbench.errors import UserError
from sjdbench.models.options import ModelOptions

DEVICES_HELP = "use auto, cpu, cuda, cuda:N or mps"


def _no_files(options: Any) -> None:
    return None


def _nothing_to_check(options: Any) -> None:
    return None


@dataclass(frozen=True)
class ModelEntry:
    """One model, registered once."""

    options: type[ModelOptions]  # its options: the shared ones plus its own, with its defaults and choices
    build: Callable[[Any, str], Any]  # (options, device) -> adapter
    # identity of the weight files (name, size, mtime or content), cheap, without loading: part of the
    # run id, so results of different weights never mix; None: no files (seeded random weights)
    fingerprint: Callable[[Any], str | None] = _no_files
    verify: Callable[[Any], None] = _nothing_to_check  # truncation, checksum, shapes of the files, before loading
    # image tokens the model samples from, known without loading (so sampling.top_k is checked before
    # any weights load); None: checked right after loading instead
    image_tokens: Callable[[Any], int | None] = _no_files

    def load(self, device: str = "cpu", **options: Any) -> Any:
        """The adapter from keyword options (`janus.SPEC.load(weights="random", size="tiny")`); a bad
        option or missing file raises ValueError / FileNotFoundError (the registry's functions turn
        them into one-line UserErrors naming the model)."""
        return self.build(self.options.from_dict(options), device)


ENTRIES: dict[str, ModelEntry] = {}  # loaded specs, by name


def model_names() -> list[str]:
    """Every model a run may name: the YAMLs of the model config group."""
    from sjdbench.paths import config_dirs

    return sorted({p.stem for root in config_dirs() for p in (root / "model").glob("*.yaml")})


def entry(name: str) -> ModelEntry:
    """The registry entry of model `name` (UserError for unknown models or modules that do not load)."""
    if name in ENTRIES:
        return ENTRIES[name]
    names = model_names()
    if name not in names:
        raise UserError(f"unknown model '{name}'; choose one of: {', '.join(names)}")
    try:
        module = importlib.import_module(f"sjdbench.models.{name}")
    except ImportError as error:
        raise UserError(f"model '{name}' cannot be loaded: {error}") from None
    found = getattr(module, "SPEC", None)
    if not isinstance(found, ModelEntry):
        raise UserError(f"model '{name}' cannot be loaded: sjdbench.models.{name} defines no SPEC")
    ENTRIES[name] = found
    return found


def model_options(name: str, options: dict[str, Any]) -> ModelOptions:
    """A run's `model.options` as the model's options object: unknown keys and values outside the
    choices are one line naming the valid ones, before anything loads."""
    model = entry(name)
    try:
        return model.options.from_dict(options)
    except (ValueError, TypeError) as error:
        text = str(error)
        raise UserError(
            f"model '{name}' {text}" if text.startswith("does not take") else f"model '{name}': {text}"
        ) from None


def check_options(name: str, options: dict[str, Any]) -> None:
    model_options(name, options)


def weights_fingerprint(name: str, options: dict[str, Any]) -> str | None:
    """Identity of the weights a run would load: part of the run id. Raises UserError for unknown
    models or missing files (as loading would)."""
    resolved = model_options(name, options)
    try:
        return entry(name).fingerprint(resolved)
    except (ValueError, FileNotFoundError) as error:  # missing or unreachable weights
        raise UserError(f"model '{name}': {error}") from None


def verify_weights(name: str, options: dict[str, Any]) -> None:
    """Raise a one-line UserError naming a missing, truncated, corrupt or mismatched weight file."""
    entry(name).verify(model_options(name, options))


def image_token_count(name: str, options: dict[str, Any]) -> int | None:
    """How many image tokens the model samples from, without loading it (None: not known before)."""
    resolved = model_options(name, options)
    try:
        count = entry(name).image_tokens(resolved)
    except FileNotFoundError as error:
        raise UserError(f"model '{name}': {error}") from None
    return None if count is None else int(count)


def build_adapter(name: str, options: dict[str, Any], device: str) -> Any:
    resolved = model_options(name, options)
    try:
        return entry(name).build(resolved, device)
    except (ValueError, FileNotFoundError) as error:  # bad option values, missing weights
        raise UserError(f"model '{name}': {_first_line(error)}") from None
    except RuntimeError as error:  # a state dict that does not fit the model (after the checks above)
        raise UserError(f"model '{name}' cannot load its weights: {_first_line(error)}") from None


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


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return "; ".join(lines[:2]) if lines else type(error).__name__
