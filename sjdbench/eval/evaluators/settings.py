"""Typed evaluation settings, composed with Hydra from `conf/evaluate.yaml` and the `conf/eval/`
presets: `sjdbench eval <runs> eval=coco eval.inception.preprocess=clean eval.clip.prefix="A photo depicts "`.

Nothing here changes a run: scores are written beside runs, keyed by the hash of their protocol.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, cast

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sjdbench.errors import UserError, check_at_least


def count(default: int, at_least: int) -> Any:
    """A count knob and the least value that means something, side by side (`validate` checks every one)."""
    return field(default=default, metadata={"at_least": at_least})


@dataclass
class ClipSettings:
    model: str = "ViT-B-16-quickgelu"  # open_clip name; -quickgelu = the activation OpenAI's weights were trained with
    pretrained: str = (
        "openai"  # an open_clip tag (resolved offline in the HF / open_clip caches) or a local weights file
    )
    prefix: str = ""  # prepended to every prompt ("A photo depicts " for LANTERN / LlamaGen)
    score: str = "100max0"  # 100max0: 100 * max(cos, 0) per sample (SJD, GSD) | cosine: raw cosine (LANTERN, LlamaGen)
    image_resize: str = "none"  # before CLIP's own transform: none | bilinear299 (SJD) | crop_lanczos256 (LANTERN)
    batch_size: int = count(64, at_least=1)
    model_kwargs: Dict[str, Any] = field(default_factory=dict)  # open_clip config overrides (tiny models in tests)
    cache_dir: Optional[str] = None  # open_clip's download cache (default: its own)


@dataclass
class InceptionSettings:
    """The Inception feature extractor shared by FID and KID."""

    preprocess: str = "sjd"  # sjd: raw image, bilinear to 299 | clean: centre crop, Lanczos 256, bicubic 299 | raw
    antialias: bool = False  # torchmetrics' own resize to 299 (only acts on `raw`: the presets already give 299)
    weights: Optional[str] = None  # torch-fidelity's Inception file; default $TORCH_HOME/hub/checkpoints/<its name>
    feature: str = "inception"  # inception | <module>:<factory> returning an nn.Module (N, 3, H, W) uint8 -> (N, D)
    reference: Optional[str] = None  # reference image folder; default the run's data.images
    batch_size: int = count(32, at_least=1)
    bootstrap: int = count(100, at_least=0)  # resamples for the CI of the paired difference against AR (0: none)


@dataclass
class KidSettings:
    subsets: int = count(100, at_least=1)
    subset_size: int = count(1000, at_least=2)  # capped at N (recorded)
    degree: int = count(3, at_least=1)
    bootstrap_subsets: int = count(10, at_least=1)  # subsets per bootstrap resample of the paired difference


@dataclass
class ToySettings:
    renders_per_caption: int = count(1, at_least=1)  # toy FD reference: renders of each scored caption
    reference_seed: int = 20261201
    bootstrap: int = count(200, at_least=0)  # resamples for the CI of the toy FD's paired difference against AR


@dataclass
class HpsSettings:
    """HPS v2 (OpenCLIP ViT-H-14 fine-tuned on human preferences), computed as the hpsv2 package does."""

    version: str = "v2.1"  # v2.1: HPS_v2.1_compressed.pt | v2.0: HPS_v2_compressed.pt (both from xswu/HPSv2)
    weights: Optional[str] = None  # a local checkpoint file; default: the Hugging Face hub cache, then ~/.cache/hpsv2
    scale: str = "cosine"  # cosine: the package's score() (LANTERN) | 100cos: 100 * cosine (the HPSv2 benchmark tables)
    precision: str = "amp"  # amp: float16 autocast on CUDA, as the package (no effect on the CPU) | fp32
    antialias: bool = True  # the tensor resize to 224 (torchvision >= 0.17 antialiases; older ones did not)
    batch_size: int = count(16, at_least=1)
    model: str = "ViT-H-14"  # open_clip architecture of the checkpoint
    model_kwargs: Dict[str, Any] = field(default_factory=dict)  # open_clip config overrides (tiny models in tests)


@dataclass
class PrecisionRecallSettings:
    """Improved precision and recall (Kynkäänniemi et al. 2019) against the FID reference images."""

    k: int = count(3, at_least=1)  # the k-th nearest neighbour sets each feature's radius
    feature: str = (
        "vgg16"  # vgg16: torchvision VGG-16 fc2 (LANTERN) | <module>:<factory>: (N, 3, 224, 224) uint8 -> (N, D)
    )
    weights: Optional[str] = None  # torchvision's vgg16-397923af.pth; default $TORCH_HOME/hub/checkpoints/<its name>
    batch_size: int = count(32, at_least=1)
    # resamples of prompts for precision's paired CI (recall has none: see docs/EVALUATION.md)
    bootstrap: int = count(2000, at_least=0)


@dataclass
class EvalConfig:
    name: str = "auto"
    evaluators: Optional[List[str]] = (
        None  # None: by run (toy model: toy_*; coco sets: clip_score, fid, kid; else clip_score)
    )
    clip: ClipSettings = field(default_factory=ClipSettings)
    inception: InceptionSettings = field(default_factory=InceptionSettings)
    kid: KidSettings = field(default_factory=KidSettings)
    toy: ToySettings = field(default_factory=ToySettings)
    hpsv2: HpsSettings = field(default_factory=HpsSettings)
    precision_recall: PrecisionRecallSettings = field(default_factory=PrecisionRecallSettings)
    bootstrap: int = count(2000, at_least=0)  # resamples of prompts for per-sample metrics' CIs
    stat_seed: int = 0
    floor_seed_offset: int = 1  # the noise floor's second AR run uses seed + this
    force: bool = False  # score set metrics even when N is below the feature dimension
    device: str = "auto"  # auto | cpu | cuda | cuda:N


def compose_eval(overrides: list[str]) -> EvalConfig:
    """Compose `conf/evaluate.yaml` with `eval=<preset>` and `eval.*` overrides into an EvalConfig."""
    from hydra.core.config_store import ConfigStore

    from sjdbench.config.schema import compose_raw

    # the typed schema is the first default of evaluate.yaml, so every eval.* key exists at compose time
    ConfigStore.instance().store(name="sjdbench_eval_schema", node={"eval": EvalConfig})
    try:
        raw = compose_raw(list(overrides), config_name="evaluate")
    except UserError as error:
        raise UserError(str(error).replace("sjdbench run --show-config", "sjdbench eval --show-config")) from None
    try:
        container = cast(dict, OmegaConf.to_container(raw, resolve=True))  # a composed config is a mapping
        plain = OmegaConf.create(container).get("eval") or {}
        merged = OmegaConf.merge(OmegaConf.structured(EvalConfig), plain)
        config = cast(EvalConfig, OmegaConf.to_object(merged))  # a structured EvalConfig converts to one
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None)
        message = str(error).splitlines()[0]
        raise UserError(f"invalid eval config{f' at eval.{key}' if key else ''}: {message}") from None
    validate(config)
    return config


def validate(config: EvalConfig) -> None:
    from sjdbench.eval.evaluators import check_evaluator

    for name in config.evaluators or []:
        check_evaluator(name, "eval.evaluators")
    choices = {
        "eval.clip.score": (config.clip.score, ("100max0", "cosine")),
        "eval.clip.image_resize": (config.clip.image_resize, ("none", "bilinear299", "crop_lanczos256")),
        "eval.inception.preprocess": (config.inception.preprocess, ("sjd", "clean", "raw")),
        "eval.hpsv2.version": (config.hpsv2.version, ("v2.1", "v2.0")),
        "eval.hpsv2.scale": (config.hpsv2.scale, ("cosine", "100cos")),
        "eval.hpsv2.precision": (config.hpsv2.precision, ("amp", "fp32")),
    }
    for key, (value, valid) in choices.items():
        if value not in valid:
            raise UserError(f"unknown {key} '{value}'; choose one of: {', '.join(valid)}")
    for count_key, number, least in _counts(config, "eval"):
        check_at_least(count_key, number, least)
    if config.floor_seed_offset == 0:
        raise UserError(
            "eval.floor_seed_offset=0 compares the AR run with itself (a noise floor of 0); use another seed "
            "offset, e.g. eval.floor_seed_offset=1"
        )


def _counts(settings: Any, prefix: str) -> Iterator[tuple[str, int, int]]:
    """(dotted key, value, least meaningful value) of every `count` knob in `settings` and below."""
    for knob in dataclasses.fields(settings):
        value = getattr(settings, knob.name)
        if dataclasses.is_dataclass(value):
            yield from _counts(value, f"{prefix}.{knob.name}")
        elif "at_least" in knob.metadata:
            yield f"{prefix}.{knob.name}", value, knob.metadata["at_least"]
