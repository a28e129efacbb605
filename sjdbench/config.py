"""Typed run configuration composed with Hydra's compose API from the YAML groups in `conf/`.

`compose_run(["model=toy", "decoder=sjd_vp", "decoder.window=32"])` returns a validated `RunConfig`.
YAML files are merged into these dataclass schemas, so unknown keys and wrong types fail early with
one readable line; unknown group choices list the valid ones. `run_id` hashes only the fields that
change what is computed (not where results go), so re-running a command resumes the same run.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sjdbench.errors import UserError

CONF_GROUPS = ("model", "decoder", "data")


@dataclass
class ModelConfig:
    name: str = "debug"
    options: Dict[str, Any] = field(default_factory=dict)


@dataclass
class LanternConfig:
    k: int = 1000  # neighbourhood search size
    delta: float = 0.1  # TV budget per token (> 1: LANTERN++ multiplicative bound)
    zero_on: str = "all"  # residual: q zeroed on all k neighbours (LANTERN) | moved: only those in A


@dataclass
class GSDConfig:
    group_size: int = 50  # G
    p_thr: float = 0.15
    # squared L2 between token input embeddings; null: the model's own value (`adapter.gsd_d_thr`),
    # because the distance is in the units of each model's embedding table
    d_thr: Optional[float] = None


@dataclass
class DecoderConfig:
    name: str = "sjd"
    window: int = 16  # W; 1 = autoregressive
    proposal: str = "resample"  # resample | coupled
    verifier: str = "exact"  # exact | greedy | lantern | gsd
    init: str = "random"  # random | left | above | argmax_left
    tau: Optional[float] = None  # coupled only: non-exact keep-if-ratio>=tau reading of SJD++
    vp: bool = False  # wrap the proposal in verification prediction
    growth_steps: int = 3  # N (VP mask and growth statistics)
    growth_reading: str = "increases"  # increases: N strict increases | observations: N observations
    gamma: float = 0.5  # EWA decay of the VP reference
    history: int = 4  # H, iterations in the EWA reference
    lam: float = 1.0  # lambda, scale of the log-gain score
    fusion: str = "fused"  # fused | prior | none
    fusion_top_k: int = 64
    reference: str = "fused"  # fused: q := p' (exact) | p: q := p_t (literal reading, lossy)
    lantern: LanternConfig = field(default_factory=LanternConfig)
    gsd: GSDConfig = field(default_factory=GSDConfig)
    trace_positions: int = 8


@dataclass
class DataConfig:
    name: str = "smoke"
    path: Optional[str] = None  # one prompt per line, or .tsv/.csv with a prompt column
    column: str = "prompt"
    limit: Optional[int] = None  # first n prompts
    shard: Optional[str] = None  # "i/n": every n-th prompt starting at i


@dataclass
class SamplingOverrides:
    """None = the model's default."""

    cfg_scale: Optional[float] = None
    temperature: Optional[float] = None
    top_k: Optional[int] = None
    top_p: Optional[float] = None


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    data: DataConfig = field(default_factory=DataConfig)
    sampling: SamplingOverrides = field(default_factory=SamplingOverrides)
    seed: int = 0
    samples_per_prompt: int = 1
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    results_dir: str = "results"
    save_images: bool = True
    warmup: int = 1  # untimed decodes before the first timed one


def conf_dir() -> Path:
    """The config tree: `sjdbench/conf` in a wheel, `<repo>/conf` in a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "config.yaml").exists():
            return candidate
    raise UserError("sjdbench's config directory is missing; reinstall the package (pip install -e .)")


def group_choices(group: str) -> list[str]:
    folder = conf_dir() / group
    if not folder.is_dir():
        raise UserError(f"unknown config group '{group}'; choose one of: {', '.join(available_groups())}")
    return sorted(p.stem for p in folder.glob("*.yaml"))


def available_groups() -> list[str]:
    return sorted(p.name for p in conf_dir().iterdir() if p.is_dir() and any(p.glob("*.yaml")))


def _check_choices(overrides: list[str]) -> None:
    """Give a one-line error listing valid choices before Hydra's multi-line one."""
    for word in overrides:
        match = re.fullmatch(r"\+?([A-Za-z_]+)=([^,\s]+)", word)
        if match and match.group(1) in available_groups():
            group, choice = match.groups()
            if choice not in group_choices(group):
                raise UserError(f"unknown {group} '{choice}'; choose one of: {', '.join(group_choices(group))}")


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def register_schema() -> None:
    """The typed schema is the first default of config.yaml, so every key exists at compose time."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="sjdbench_schema", node=RunConfig)


def _two_lines(error: Exception) -> str:
    """Hydra puts the what on line 1 and the why on line 2; keep both on one line."""
    def meaningful(e: BaseException) -> list[str]:
        skip = ("full_key", "reference_type", "object_type")
        return [line.strip() for line in str(e).splitlines() if line.strip() and not line.strip().startswith(skip)]

    lines = meaningful(error)[:2]
    if error.__cause__ is not None:
        lines += meaningful(error.__cause__)[:1]
    return ": ".join(lines) if lines else type(error).__name__


def compose_raw(overrides: list[str], config_name: str = "config") -> Any:
    """Compose the YAML tree with Hydra (context-manager form: no global state leaks)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    overrides = list(overrides)
    for word in overrides:
        if "=" not in word.lstrip("~"):
            raise UserError(f"'{word}' is not an override; write key=value, e.g. decoder=sjd or decoder.window=32")
    _check_choices(overrides)
    register_schema()
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            return compose(config_name=config_name, overrides=overrides)
    except HydraException as error:
        text = str(error) + str(error.__cause__ or "")
        if "Key" in text and ("not in struct" in text or "not in '" in text) and "Could not override" in text:
            key = re.search(r"override '([^']+)'", text)
            name = key.group(1) if key else "that key"
            raise UserError(f"unknown config key {name}; see `sjdbench run --show-config` for valid keys") from None
        raise UserError(_two_lines(error)) from None
    except OmegaConfBaseException as error:
        raise UserError(_first_line(error)) from None


def to_run_config(raw: Any) -> RunConfig:
    """Merge a composed tree into the typed schema: unknown keys and bad types fail here."""
    try:
        plain = OmegaConf.create(OmegaConf.to_container(raw, resolve=True))  # drop Hydra's node types
        merged = OmegaConf.merge(OmegaConf.structured(RunConfig), plain)
        config: RunConfig = OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None)
        message = _first_line(error)
        raise UserError(f"invalid config{f' at {key}' if key else ''}: {message}") from None
    validate(config)
    return config


def compose_run(overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    return to_run_config(compose_raw(list(overrides)))


def validate(config: RunConfig) -> None:
    """Checks Hydra cannot make: value ranges and part names."""
    from sjdbench.decoding.build import validate_decoder

    validate_decoder(config.decoder)
    if config.samples_per_prompt < 1:
        raise UserError("samples_per_prompt must be >= 1")
    if config.data.limit is not None and config.data.limit < 1:
        raise UserError("data.limit must be >= 1 (or null for all prompts)")
    if config.data.shard is not None and not re.fullmatch(r"\d+/\d+", config.data.shard):
        raise UserError(f"data.shard must look like i/n (e.g. 0/4), got '{config.data.shard}'")
    if config.data.shard is not None:
        i, n = map(int, config.data.shard.split("/"))
        if not 0 <= i < n:
            raise UserError(f"data.shard {config.data.shard}: need 0 <= i < n")


def results_root(config: RunConfig) -> Path:
    """`results_dir`, unless left at the default and SJDBENCH_RESULTS is set."""
    if config.results_dir == "results" and os.environ.get("SJDBENCH_RESULTS"):
        return Path(os.environ["SJDBENCH_RESULTS"])
    return Path(config.results_dir)


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def semantic_fields(config: RunConfig, prompts_sha: str, device_type: str, weights: str | None = None) -> dict:
    """What determines the samples: not the output path, not limit/shard (prompt-level resume).

    weights: a fingerprint of the model's weight files, so a retrained model never resumes (and
    mixes into) the results of the previous one. None for models without files (debug).
    """
    decoder = asdict(config.decoder)
    decoder.pop("trace_positions")
    data = {"name": config.data.name, "prompts_sha": prompts_sha}
    fields = {
        "model": asdict(config.model),
        "decoder": decoder,
        "data": data,
        "sampling": asdict(config.sampling),
        "seed": config.seed,
        "samples_per_prompt": config.samples_per_prompt,
        "device": device_type,
    }
    if weights is not None:
        fields["weights"] = weights
    return fields


def run_id_for(config: RunConfig, prompts_sha: str, device_type: str, weights: str | None = None) -> str:
    digest = hashlib.sha256(canonical_json(semantic_fields(config, prompts_sha, device_type, weights)).encode()).hexdigest()
    return f"{config.model.name}-{config.decoder.name}-{digest[:12]}"


def to_yaml(config: RunConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))
