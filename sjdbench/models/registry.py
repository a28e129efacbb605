"""Every model, by name: one `ModelEntry` each, registered by its YAML, so that a model is one Python
object plus one YAML.

Model `<name>` is `conf/model/<name>.yaml`: its user-visible defaults, and a `_target_` naming the
`ModelEntry` object (`sjdbench.models.janus.MODEL`), which says how to check its options, build it,
identify and check its weight files, and count its image tokens before loading. This is the one
plugin convention decoder parts and evaluators share (sjdbench.plugins): a YAML of your own in an
SJDBENCH_CONFIG_PATH directory adds a model. Modules are imported on first use, so listing models or
checking a config never loads model code it does not need.

A run resolves its model once (`resolve_model`, in config.resolve.resolve_run): the options are
parsed and checked there, and the `ResolvedModel` it carries fingerprints, verifies and builds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from sjdbench import plugins
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
        """The adapter from keyword options (`janus.MODEL.load(weights="random", size="tiny")`); a bad
        option or missing file raises ValueError / FileNotFoundError (`ResolvedModel` turns them into
        one-line UserErrors naming the model)."""
        return self.build(self.options.from_dict(options), device)


def entry(name: str, target: str | None = None) -> ModelEntry:
    """The registry entry of model `name`: the object its YAML's `_target_` names (or `target`, a run
    config's `model._target_`). UserError for unknown models and targets that do not load."""
    return _located(name, target)[1]


def _located(name: str, target: str | None) -> tuple[str, ModelEntry]:
    if target is None:
        target, found = plugins.find("model", name, "model")
    else:
        found = plugins.locate(target, f"model '{name}'")
    if not isinstance(found, ModelEntry):
        raise UserError(f"model '{name}': its _target_ {target} is not a ModelEntry (sjdbench.models.registry)")
    return target, found


@dataclass(frozen=True)
class ResolvedModel:
    """A model with its options parsed and checked, before anything loads: what a run fingerprints,
    verifies and builds. Picklable (a name, a target and an options dataclass), so a sweep's job
    carries it to another process."""

    name: str
    target: str
    options: ModelOptions

    @property
    def entry(self) -> ModelEntry:
        return entry(self.name, self.target)

    def fingerprint(self) -> str | None:
        """Identity of the weights a run would load: part of the run id. UserError for missing files
        (as loading would)."""
        try:
            return self.entry.fingerprint(self.options)
        except (ValueError, FileNotFoundError) as error:  # missing or unreachable weights
            raise UserError(f"model '{self.name}': {error}") from None

    def verify(self) -> None:
        """Raise a one-line UserError naming a missing, truncated, corrupt or mismatched weight file."""
        self.entry.verify(self.options)

    def image_tokens(self) -> int | None:
        """How many image tokens the model samples from, without loading it (None: not known before)."""
        try:
            count = self.entry.image_tokens(self.options)
        except FileNotFoundError as error:
            raise UserError(f"model '{self.name}': {error}") from None
        return None if count is None else int(count)

    def build(self, device: str) -> Any:
        """The adapter, loaded on `device` (the one model load of a run or a group of runs)."""
        try:
            return self.entry.build(self.options, device)
        except (ValueError, FileNotFoundError) as error:  # bad option values, missing weights
            raise UserError(f"model '{self.name}': {_first_line(error)}") from None
        except RuntimeError as error:  # a state dict that does not fit the model (after the checks above)
            raise UserError(f"model '{self.name}' cannot load its weights: {_first_line(error)}") from None


def resolve_model(name: str, options: dict[str, Any], target: str | None = None) -> ResolvedModel:
    """A run's `model.options` as the model's options object: unknown keys and values outside the
    choices are one line naming the valid ones, before anything loads. `target`: the run config's
    `model._target_` (None: the YAML's)."""
    target, model = _located(name, target)
    try:
        parsed = model.options.from_dict(options)
    except (ValueError, TypeError) as error:
        text = str(error)
        raise UserError(
            f"model '{name}' {text}" if text.startswith("does not take") else f"model '{name}': {text}"
        ) from None
    return ResolvedModel(name, target, parsed)


def build_adapter(name: str, options: dict[str, Any], device: str) -> Any:
    """Model `name` with these options, built on `device` (checked as a run checks it)."""
    return resolve_model(name, options).build(device)


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
