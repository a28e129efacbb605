"""The options a model is built from: one dataclass per model, extending the shared ones here.

`ModelOptions` holds what every model takes (the sampling defaults, the precision, whether the window
forward is compiled); `CheckpointOptions` adds what every model loaded from a released checkpoint
takes (where the weights are, random weights of the same architecture, its size and resolution).
A model's own options class extends one of them with its own keys and defaults, and states its
choices (sizes, resolutions, precisions) as class variables, so every check below is written once.

A run's `model.options` (plus the top-level keys of `TOP_LEVEL`, `model.weights=random`) become one
of these objects in the registry, before any weights load: an unknown key or a value outside the
choices is one line naming the valid ones. No torch import at module level: the run config imports
this module.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, ContextManager, Iterable, Optional, TypeVar

# the shared options a run config may also spell at the top level of the model group
# (`model.weights=random` is `model.options.weights=random`); config.ModelConfig declares them
TOP_LEVEL = ("path", "weights", "dtype", "resolution", "size", "compile")

WEIGHT_CHOICES = ("pretrained", "random")
DTYPE_NAMES = {  # option value -> torch dtype name; the torch spellings are accepted too
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp32": "float32",
    "fp64": "float64",
    "bfloat16": "bfloat16",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
}


def check_choice(what: str, value: Any, choices: Iterable[Any]) -> None:
    """One line listing the choices when `value` is not one of them (ValueError; the registry adds
    the model's name)."""
    choices = list(choices)
    if value not in choices:
        raise ValueError(f"{what} {value!r} is not available; choose one of: {', '.join(map(str, choices))}")


def _check_type(key: str, value: Any, hint: Any) -> None:
    """A value of the annotated type (an int where a float is wanted; None where Optional)."""
    allowed = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if value is None and type(None) in allowed:
        return
    for kind in allowed:
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return
        if kind in (str, bool) and isinstance(value, kind):
            return
    names = " or ".join("null" if kind is type(None) else kind.__name__ for kind in allowed)
    raise ValueError(f"model.options.{key} must be {names}, got {value!r}")


def fold_top_level(options: dict[str, Any], top_level: dict[str, Any]) -> dict[str, Any]:
    """`options` with every top-level key that is set (not None) folded in; a key set both ways to
    different values is refused (ValueError), so a run says one thing about its model."""
    folded = dict(options)
    for key, value in top_level.items():
        if value is None:
            continue
        if key in folded and folded[key] != value:
            raise ValueError(f"model.{key}={value} contradicts model.options.{key}={folded[key]}; set one of them")
        folded[key] = value
    return folded


OptionsT = TypeVar("OptionsT", bound="ModelOptions")


@dataclass
class ModelOptions:
    """What every model takes. Subclasses override the defaults with their model's own."""

    dtypes: ClassVar[tuple[str, ...]] = ("fp32",)  # precisions the model runs in (besides auto)
    guidance: ClassVar[str] = "always"  # the released pipeline's CFG rule at scales <= 1 (adapter.GUIDANCE)

    cfg_scale: float = 1.0  # sampling defaults: the model's released pipeline's (sampling.* overrides them)
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    dtype: str = "auto"  # auto: the model's usual precision on the device (torch_dtype)
    compile: bool = False  # torch.compile the window forward (static shapes; the warm-up absorbs compilation)

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls: type[OptionsT], options: dict[str, Any]) -> OptionsT:
        """Options from a run's `model.options`: unknown keys are refused (ValueError naming the valid
        ones), values are checked (`check`)."""
        unknown = sorted(set(options) - set(cls.keys()))
        if unknown:
            raise ValueError(f"does not take {', '.join(unknown)}; its options are: {', '.join(cls.keys())}")
        hints = typing.get_type_hints(cls)
        for key, value in options.items():
            _check_type(key, value, hints[key])
        made = cls(**options)
        made.check()
        return made

    def check(self) -> None:
        """Value checks that need no files (ValueError, one line)."""
        check_choice("model.dtype", self.dtype, ["auto", *self.dtypes, *self._dtype_aliases()])

    def _dtype_aliases(self) -> list[str]:
        torch_names = {DTYPE_NAMES[d] for d in self.dtypes}
        return [name for name in DTYPE_NAMES if DTYPE_NAMES[name] in torch_names and name not in self.dtypes]

    def torch_dtype(self, device: str) -> Any:
        """The weights' precision: `auto` is fp32 (subclasses choose otherwise)."""
        import torch

        return torch.float32 if self.dtype == "auto" else getattr(torch, DTYPE_NAMES[self.dtype])

    def sampling(self) -> Any:
        from sjdbench.adapter import Sampling

        return Sampling(
            cfg_scale=self.cfg_scale,
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            guidance=self.guidance,
        )


@dataclass
class CheckpointOptions(ModelOptions):
    """What every model loaded from a released checkpoint takes. `sizes` are the released
    architectures; weights=random also builds `tiny` (a shrunken one, for CPU smoke runs)."""

    dtypes: ClassVar[tuple[str, ...]] = ("bf16", "fp16", "fp32")
    sizes: ClassVar[tuple[str, ...]] = ()
    resolution_step: ClassVar[int] = 16  # pixels per code (the side must be a multiple, >= 2 codes)
    released_resolutions: ClassVar[Optional[tuple[int, ...]]] = None  # pretrained weights exist only for these

    path: Optional[str] = None  # local weights directory (None: the hub repository's cached snapshot)
    weights: str = "pretrained"  # pretrained | random (the architecture with random weights: timing only)
    size: str = ""
    resolution: int = 0  # image side in pixels
    init_seed: int = 0  # of random weights: two runs measure the same network

    @property
    def random(self) -> bool:
        return self.weights == "random"

    def check(self) -> None:
        super().check()
        check_choice("model.weights", self.weights, WEIGHT_CHOICES)
        check_choice("model.size", self.size, (*self.sizes, "tiny") if self.random else self.sizes)
        step = self.resolution_step
        if self.resolution % step or self.resolution < 2 * step:
            raise ValueError(f"model.resolution {self.resolution} must be a multiple of {step} (at least {2 * step})")
        if self.released_only() and self.released_resolutions is not None:
            check_choice("model.resolution", self.resolution, self.released_resolutions)

    def released_only(self) -> bool:
        """Whether the resolution must be a released checkpoint's (pretrained weights)."""
        return not self.random

    def fingerprint(self, files: Callable[[], Iterable[Any]]) -> str:
        """Identity of the weights a run loads (part of its run id): random weights say so (their
        tokens mean nothing); pretrained ones are named by their files' names, sizes and mtimes."""
        if self.random:
            return f"random weights ({self.size}): meaningless tokens"
        from sjdbench.models.hf_common import file_fingerprint

        return file_fingerprint(files())

    def torch_dtype(self, device: str) -> Any:
        """auto: bf16 on CUDA (the precision the released pipelines use), fp32 elsewhere."""
        import torch

        if self.dtype == "auto":
            return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
        return super().torch_dtype(device)

    def random_weights(self, device: str) -> ContextManager[None]:
        """Context for building random weights: the seed is fixed and modules are created on `device`
        in the run's precision directly (a random 7B model never exists in fp32 first, or on the host)."""
        from sjdbench.models import hf_common

        hf_common.seed_everything(self.init_seed)
        return hf_common.building(device, self.torch_dtype(device))
