"""Typed run configuration composed with Hydra's compose API from the YAML groups in `conf/`.

`compose_run(["model=toy", "decoder=sjd_vp", "decoder.window=32"])` returns a validated `RunConfig`.
YAML files are merged into these dataclass schemas, so unknown keys and wrong types fail early with
one readable line; unknown group choices list the valid ones. A decoder's parts are their own
config groups (`decoder/verifier=lantern`, knobs as `decoder.verifier.delta=0.2`); every part is
resolved and checked here, before any model loads. Run identity lives in identity.py.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sjdbench.errors import UserError
from sjdbench.paths import conf_dir, config_dirs

from sjdbench.decoding.parts import KINDS as PART_KINDS  # part groups: conf/decoder/<kind>/<name>.yaml


@dataclass
class ModelConfig:
    name: str = "debug"
    options: Dict[str, Any] = field(default_factory=dict)


@dataclass
class DecoderConfig:
    """A decoder preset (conf/decoder/<name>.yaml) names one part of each kind; each part's knobs
    live under its key (decoder.verifier.delta) and are checked against the part's own dataclass."""

    name: str = "sjd"  # the preset; labels compare against it, run ids never include it
    window: int = 16  # W; 1 = autoregressive
    proposal: Dict[str, Any] = field(default_factory=dict)
    verifier: Dict[str, Any] = field(default_factory=dict)
    init: Dict[str, Any] = field(default_factory=dict)
    topology: Dict[str, Any] = field(default_factory=dict)  # the window's shape; empty = chain
    growth_steps: int = 3  # N of the consecutive-growth mask (VP and the statistics)
    growth_reading: str = "increases"  # increases: N strict increases | observations: N observations
    trace_positions: int = 8  # probability trajectories recorded per sample (not part of the run id)


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


def group_choices(group: str) -> list[str]:
    """Choices of a config group ("decoder") or of a part group ("decoder/verifier")."""
    folders = [root / group for root in config_dirs() if (root / group).is_dir()]
    if not folders:
        raise UserError(f"unknown config group '{group}'; choose one of: {', '.join(available_groups())}")
    return sorted({p.stem for folder in folders for p in folder.glob("*.yaml")})


def available_groups() -> list[str]:
    """Top-level groups and the decoder part groups (decoder/proposal, decoder/verifier, decoder/init)."""
    groups = set()
    for root in config_dirs():
        groups |= {p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*.yaml"))}
        groups |= {f"decoder/{kind}" for kind in PART_KINDS if any((root / "decoder" / kind).glob("*.yaml"))}
    return sorted(groups)


# keys of the previous decoder schema, and where each now lives
MOVED_KEYS = {
    "decoder.vp": "decoder/proposal=vp",
    "decoder.tau": "decoder/proposal=coupled decoder.proposal.tau=...",
    "decoder.lantern": "decoder/verifier=lantern decoder.verifier.<k|delta|zero_on>=...",
    "decoder.gsd": "decoder/verifier=gsd decoder.verifier.<group_size|p_thr|d_thr>=...",
    **{f"decoder.{knob}": f"decoder/proposal=vp decoder.proposal.{knob}=..."
       for knob in ("gamma", "history", "lam", "fusion", "fusion_top_k", "reference")},
}


def normalize_overrides(words: list[str]) -> list[str]:
    """Accept `decoder.verifier=lantern` for `decoder/verifier=lantern` (choosing a part), and name
    the new home of keys from the previous decoder schema."""
    out = []
    for word in words:
        key, eq, value = word.partition("=")
        bare = key.lstrip("+~")
        if eq and bare in {f"decoder.{kind}" for kind in PART_KINDS} and re.fullmatch(r"[\w,.()*\[\] -]+", value):
            word = f"{key[: len(key) - len(bare)]}decoder/{bare.split('.')[1]}={value}"
        else:
            for old, new in MOVED_KEYS.items():
                if bare == old or bare.startswith(old + "."):
                    raise UserError(f"{bare} is no longer a key: decoders are built from parts; use {new} "
                                    "(see `sjdbench list`)")
        out.append(word)
    return out


def _check_choices(overrides: list[str]) -> None:
    """Give a one-line error listing valid choices before Hydra's multi-line one."""
    groups = available_groups()
    for word in overrides:
        match = re.fullmatch(r"\+?([A-Za-z_/]+)=(.*)", word)
        if not match or match.group(1) not in groups:
            continue
        group, choice = match.groups()
        label = group.replace("/", ".")
        if choice == "":
            raise UserError(f"{label}= needs a value; choose one of: {', '.join(group_choices(group))}")
        if "," in choice and not choice.startswith("["):
            raise UserError(f"{label}={choice}: `run` takes one value per key; use `sjdbench sweep` for several")
        if re.fullmatch(r"[\w.-]+", choice) and choice not in group_choices(group):
            raise UserError(f"unknown {label} '{choice}'; choose one of: {', '.join(group_choices(group))}")


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


def _unknown_key_message(key: str) -> str:
    parts = key.split(".")
    if len(parts) >= 3 and parts[0] == "decoder" and parts[1] in PART_KINDS:
        kind, knob = parts[1], parts[2]
        owners = [name for name in group_choices(f"decoder/{kind}") if _part_has_knob(kind, name, knob)]
        hint = f"; {knob} belongs to {kind} {', '.join(owners)} (decoder/{kind}={owners[0]})" if owners else ""
        return f"unknown config key {key}: the chosen {kind} has no knob '{knob}'{hint}"
    return f"unknown config key {key}; see `sjdbench run --show-config` for valid keys"


def _part_has_knob(kind: str, name: str, knob: str) -> bool:
    from sjdbench.decoding.parts import part_yaml

    import yaml

    path = part_yaml(kind, name)
    return bool(path and knob in (yaml.safe_load(path.read_text()) or {}))


def compose_raw(overrides: list[str], config_name: str = "config") -> Any:
    """Compose the YAML tree with Hydra (context-manager form: no global state leaks)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    overrides = list(overrides)
    for word in overrides:
        if "=" not in word.lstrip("~"):
            raise UserError(f"'{word}' is not an override; write key=value, e.g. decoder=sjd or decoder.window=32")
    overrides = normalize_overrides(overrides)
    _check_choices(overrides)
    register_schema()
    extra = config_dirs()[1:]
    if extra:
        overrides.append("hydra.searchpath=[" + ",".join(f"file://{d.resolve()}" for d in extra) + "]")
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            return compose(config_name=config_name, overrides=overrides)
    except HydraException as error:
        text = str(error) + str(error.__cause__ or "")
        if "Key" in text and ("not in struct" in text or "not in '" in text) and "Could not override" in text:
            key = re.search(r"override '([^']+)'", text)
            raise UserError(_unknown_key_message(key.group(1) if key else "that key")) from None
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
    """Checks Hydra cannot make: value ranges and part names (the decoder resolves all its parts)."""
    decoder_spec(config)
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


def decoder_spec(config: RunConfig) -> "DecoderSpec":  # noqa: F821
    """The resolved decoder of a run config (its parts, typed and checked)."""
    from sjdbench.decoding.build import resolve_decoder

    return resolve_decoder(config.decoder)


def build_preset(name: str, adapter: Any, *overrides: str) -> Any:
    """A runnable decoder from a preset plus overrides, e.g. build_preset("sjd", adapter, "decoder.window=32")."""
    spec = decoder_spec(compose_run([f"decoder={name}", *overrides]))
    return spec.build(adapter)


def results_root(config: RunConfig) -> Path:
    """`results_dir`, unless left at the default and SJDBENCH_RESULTS is set."""
    if config.results_dir == "results" and os.environ.get("SJDBENCH_RESULTS"):
        return Path(os.environ["SJDBENCH_RESULTS"])
    return Path(config.results_dir)


def to_yaml(config: RunConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))
