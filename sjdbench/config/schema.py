"""Typed run configuration composed with Hydra's compose API from the YAML groups in `conf/`.

`compose_run(["model=toy", "decoder=sjd_vp", "decoder.window=32"])` returns a validated `RunConfig`.
Checked here, each in one line with the fix: the words themselves (a key given twice, a key that is
no ASCII name, Hydra's own `hydra.*` settings, a sweep's words given to `run`, unreadable syntax);
then the YAML merged into these dataclass schemas (unknown keys, unknown group choices listing the
valid ones, values of the wrong type: "decoder.window must be an integer, got 'abc'"); then the
meaningful range of every key, in one walk (`check_config`: root keys, data, sampling, the decoder's
settings and every knob of every part, whose ranges live beside the knobs in the part's dataclass).
A decoder's parts are their own config groups (`decoder/verifier=lantern`, knobs as
`decoder.verifier.delta=0.2`). What needs files or a device (prompts, weights, the results folder)
is checked by `sjdbench.config.resolve.resolve_run`, which turns a config into the resolved
`ResolvedRun` a run carries; what needs the model, once it is built (`config.ranges.fit_to_model`,
`model_notes`). Run identity lives in identity.py.

Nothing here imports torch at module level: listing config groups stays cheap.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional, cast

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sjdbench.decoder_identity import DRAFTER_PROPOSAL, DRAFTER_TOPOLOGIES, PART_KINDS, needs_drafter
from sjdbench.decoding.settings import DecodeSettings
from sjdbench.errors import UserError, check_at_least, type_error_text
from sjdbench.models.options import TOP_LEVEL, fold_top_level
from sjdbench.paths import conf_dir, config_dirs
from sjdbench.results.root import check_results_dir
from sjdbench.runkey import SAMPLING_KEYS

if TYPE_CHECKING:
    from sjdbench.decoding.build import ResolvedDecoder
    from sjdbench.decoding.registry import ResolvedPart


@dataclass
class ModelConfig:
    """`options` are the model's options (sjdbench/models/options.py: the shared ones, extended by each
    model's own). The keys below are the shared options every real model takes, also spelled at the
    top level (`model.weights=random`); each one that is set (not null) is passed as the option of the
    same name. Their list is `models.options.TOP_LEVEL` (a test holds these fields to it)."""

    name: str = "debug"
    # the model's registry entry, from its YAML (sjdbench.models.registry); null: the YAML's
    _target_: Optional[str] = None
    options: Dict[str, Any] = field(default_factory=dict)
    path: Optional[str] = None  # local weights directory (null: the hub id's cached snapshot)
    weights: Optional[str] = None  # pretrained | random (the architecture with random weights, no download)
    dtype: Optional[str] = None  # auto (bf16 on CUDA, fp32 on CPU) | bf16 | fp16 | fp32 | fp64 (toy, debug)
    resolution: Optional[int] = None  # image side in pixels (Lumina 512/768/1024, LlamaGen 256/512, ...)
    size: Optional[str] = None  # architecture variant (Janus 1B/7B; tiny: a shrunken random model for CPU)
    compile: Optional[bool] = None  # torch.compile the window forward (warm-up decodes absorb compilation)

    def __post_init__(self) -> None:
        try:
            self.options = fold_top_level(self.options, {key: getattr(self, key) for key in TOP_LEVEL})
        except ValueError as error:
            raise UserError(str(error)) from None


@dataclass
class DecoderConfig:
    """A decoder preset (conf/decoder/<name>.yaml) names one part of each kind; each part's knobs
    live under its key (decoder.verifier.delta) and are checked against the part's own dataclass."""

    name: str = "sjd"  # the preset; labels compare against it, run ids never include it
    window: int = DecodeSettings.window  # the decoder-wide settings: their defaults and meaning in DecodeSettings
    proposal: Dict[str, Any] = field(default_factory=dict)
    verifier: Dict[str, Any] = field(default_factory=dict)
    init: Dict[str, Any] = field(default_factory=dict)
    topology: Dict[str, Any] = field(default_factory=dict)  # the window's shape; empty = chain
    growth_steps: int = DecodeSettings.growth_steps
    growth_reading: str = DecodeSettings.growth_reading
    trace_positions: int = DecodeSettings.trace_positions


@dataclass
class DataConfig:
    name: str = "smoke"
    path: Optional[str] = None  # one prompt per line, or .tsv/.csv with a prompt column
    column: str = "prompt"
    limit: Optional[int] = None  # first n prompts
    shard: Optional[str] = None  # "i/n": every n-th prompt starting at i
    caption: Optional[str] = None  # coco2017: longest | first | sjd_legacy (one caption per image)
    images: Optional[str] = None  # reference images for FID (coco2017: val2017/, coco2014_30k: val2014/)


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
    batch_size: int = 1  # samples decoded in lockstep, one forward for all (throughput; docs/LOOP.md)
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    results_dir: Optional[str] = None  # the store; null: $SJDBENCH_RESULTS, else ./results (results/root.py)
    save_images: bool = True
    warmup: int = 1  # untimed decodes before the first timed one
    threads: Optional[int] = (
        None  # torch CPU threads; null: 1 on CPU (measured, see machine.py), torch's default on GPU
    )


def group_choices(group: str) -> list[str]:
    """Choices of a config group ("decoder") or of a part group ("decoder/verifier")."""
    folders = [root / group for root in config_dirs() if (root / group).is_dir()]
    if not folders:
        raise UserError(f"unknown config group '{group}'; choose one of: {', '.join(available_groups())}")
    return sorted({p.stem for folder in folders for p in folder.glob("*.yaml")})


def available_groups() -> list[str]:
    """Top-level groups and the decoder part groups (decoder/proposal, decoder/verifier, ...): the
    folders of the config tree that hold YAMLs (the part groups are the registry of parts)."""
    groups = set()
    for root in config_dirs():
        groups |= {p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*.yaml"))}
        if (root / "decoder").is_dir():
            parts = (root / "decoder").iterdir()
            groups |= {f"decoder/{p.name}" for p in parts if p.is_dir() and any(p.glob("*.yaml"))}
    return sorted(groups)


# keys of the previous decoder schema, and where each now lives
MOVED_KEYS = {
    "decoder.vp": "decoder/proposal=vp",
    "decoder.tau": "decoder/proposal=coupled decoder.proposal.tau=...",
    "decoder.lantern": "decoder/verifier=lantern decoder.verifier.<k|delta|zero_on>=...",
    "decoder.gsd": "decoder/verifier=gsd decoder.verifier.<group_size|p_thr|d_thr>=...",
    **{
        f"decoder.{knob}": f"decoder/proposal=vp decoder.proposal.{knob}=..."
        for knob in ("gamma", "history", "lam", "fusion", "fusion_top_k", "reference")
    },
}


def normalize_overrides(words: list[str], repeats: bool = False) -> list[str]:
    """Accept `decoder.verifier=lantern` for `decoder/verifier=lantern` (choosing a part), and name
    the new home of keys from the previous decoder schema. Refused here: a key that is no ASCII name,
    Hydra's own settings (`hydra.*`: sjdbench composes the config itself and reads none of them) and,
    unless `repeats`, a key given twice (`refuse_repeated`). Words people type come through here
    (run, sweep, the Python API); `compose_raw` allows repeats, where sjdbench's own code sets a key
    again on purpose (a sweep job pins the device and the store after the point's words)."""
    kinds = PART_KINDS
    out = []
    for word in words:
        key, eq, value = word.partition("=")
        bare = key.lstrip("+~")
        _check_key(word, bare, eq)
        if eq and bare in {f"decoder.{kind}" for kind in kinds} and re.fullmatch(r"[\w,.()*\[\] -]+", value):
            word = f"{key[: len(key) - len(bare)]}decoder/{bare.split('.')[1]}={value}"
        else:
            for old, new in MOVED_KEYS.items():
                if bare == old or bare.startswith(old + "."):
                    raise UserError(
                        f"{bare} is no longer a key: decoders are built from parts; use {new} (see `sjdbench list`)"
                    )
        out.append(word)
    if not repeats:
        refuse_repeated(out)
    return out


def _check_key(word: str, key: str, eq: str) -> None:
    """One word's key: present, ASCII, and not one of Hydra's own settings."""
    if eq and not key:
        raise UserError(f"'{word}' has no key before '='; write key=value, e.g. seed=3 or decoder.window=32")
    odd = next((i for i, ch in enumerate(key) if not ch.isascii()), None)
    if odd is not None:
        raise UserError(
            f"'{word}': the key {key} holds '{key[odd]}' (character {odd + 1}), which is not ASCII; config keys are "
            "ASCII names such as decoder.window (see `sjdbench run --show-config`)"
        )
    if key == "hydra" or key.startswith(("hydra.", "hydra/")):
        raise UserError(
            f"{word}: sjdbench does not read Hydra's own settings (hydra.*); leave it out (the store is "
            "results_dir=DIR, the config keys are shown by `sjdbench run --show-config`)"
        )


def refuse_repeated(words: list[str]) -> None:
    """A key given twice (`decoder.window=16 decoder.window=32`) is refused naming both words, rather
    than the last one winning without a word. Sweep presets (`+sweep=...`) may be combined."""
    first: dict[str, str] = {}
    for word in words:
        key = word.partition("=")[0].lstrip("+~").replace("/", ".")
        if key == "sweep":
            continue
        if key in first:
            raise UserError(f"{key} is given twice ({first[key]} and {word}); give it once")
        first[key] = word


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
        if "," in choice:
            several = choice.strip("[]")
            raise UserError(
                f"{label}={choice}: one run has one {label.split('.')[-1]}; to run several, sweep over them: "
                f"sjdbench sweep {label}={several}"
            )
        if re.fullmatch(r"[\w.-]+", choice) and choice not in group_choices(group):
            raise UserError(f"unknown {label} '{choice}'; choose one of: {', '.join(group_choices(group))}")


def _check_syntax(overrides: list[str]) -> None:
    """Every override parses and holds one value: a sweep (a,b or range()) belongs to `sweep`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for word in overrides:
        try:
            parsed = parser.parse_overrides([word])[0]
        except HydraException as error:
            key, _, value = word.partition("=")
            if value.startswith("="):
                raise UserError(f"'{word}' has two '='; write {key}={value.lstrip('=')}") from None
            raise UserError(
                f"cannot read override '{word}'{_where_unreadable(word, str(error))}; write key=value, and quote "
                f"values with spaces or special characters: {key}='{value}'"
            ) from None
        if parsed.is_sweep_override():
            raise UserError(f"{word}: `run` takes one value per key; to run several, use sjdbench sweep {word}")


def _where_unreadable(word: str, text: str) -> str:
    """Where Hydra's parser stopped in `word`, as " at character N ('c')" (or its own reason).

    Its lexer marks the spot with a caret under "LexerNoViableAltException: <word>", a line that
    cannot be shown on one line; the other errors say what they expected on their second line."""
    lines = text.splitlines()
    head = "LexerNoViableAltException: "
    if len(lines) > 1 and lines[0].startswith(head) and lines[1].strip() == "^":
        at = len(lines[1]) - len(head) - 1
        if 0 <= at < len(word):
            return f" at character {at + 1} ('{word[at]}')"
    said = [t for t in lines if t.strip() and not t.startswith("Error parsing override") and "hydra.cc" not in t]
    reason = re.sub(r"\s*expecting \{.*", "", said[0]).strip() if said else ""
    return f" ({reason})" if reason else ""


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def register_schema() -> None:
    """The typed schema is the first default of config.yaml, so every key exists at compose time; the
    parts' knob defaults are stored beside it (decoding.registry.register_knob_defaults)."""
    from hydra.core.config_store import ConfigStore

    from sjdbench.decoding.registry import register_knob_defaults

    ConfigStore.instance().store(name="sjdbench_schema", node=RunConfig)
    register_knob_defaults()


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
    from sjdbench.decoding.registry import part_knobs

    return knob in part_knobs(kind, name)


def compose_raw(overrides: list[str], config_name: str = "config") -> Any:
    """Compose the YAML tree with Hydra (context-manager form: no global state leaks)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    overrides = list(overrides)
    for word in overrides:
        if "=" not in word.lstrip("~"):
            raise UserError(f"'{word}' is not an override; write key=value, e.g. decoder=sjd or decoder.window=32")
    overrides = normalize_overrides(overrides, repeats=True)
    _refuse_sweep_words(overrides)
    _check_choices(overrides)
    _check_syntax(overrides)
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
        merging = re.search(r"Error merging override ([^=\s]+)=", text)
        typed = type_error_text(merging.group(1).lstrip("+~"), text) if merging else None
        raise UserError(typed or _two_lines(error)) from None
    except OmegaConfBaseException as error:
        raise UserError(_first_line(error)) from None


def _refuse_sweep_words(words: list[str]) -> None:
    """`+sweep=<preset>` and `sweep.*` configure a grid: they belong to `sjdbench sweep`."""
    for word in words:
        key = word.partition("=")[0].lstrip("+~")
        if key == "sweep" or key.startswith("sweep."):
            raise UserError(
                f"{word} configures a sweep (conf/sweep/); one run takes no grid: run it with `sjdbench sweep {word}`"
            )


def to_run_config(raw: Any) -> RunConfig:
    """Merge a composed tree into the typed schema: unknown keys and bad types fail here (value
    ranges are `check_config`'s)."""
    try:
        plain = OmegaConf.create(OmegaConf.to_container(raw, resolve=True))  # drop Hydra's node types
        merged = OmegaConf.merge(OmegaConf.structured(RunConfig), plain)
        config = cast(RunConfig, OmegaConf.to_object(merged))  # a structured RunConfig converts to one
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None)
        message = _first_line(error)
        typed = type_error_text(key, message) if key else None
        raise UserError(typed or f"invalid config{f' at {key}' if key else ''}: {message}") from None
    return config


def compose_run(overrides: list[str] | tuple[str, ...] = (), typed: bool = False) -> RunConfig:
    """The checked run config of these overrides (`check_config`: ranges, parts and their knobs).
    typed: the words as a person gave them, where a key given twice is a mistake."""
    return compose_checked(overrides, typed)[0]


def compose_checked(
    overrides: list[str] | tuple[str, ...] = (), typed: bool = False
) -> tuple[RunConfig, ResolvedDecoder]:
    """The checked run config of these overrides and the decoder that checking resolved."""
    if typed:
        normalize_overrides(list(overrides))
    config = to_run_config(compose_raw(list(overrides)))
    return config, check_config(config)


def check_sampling(values: dict[str, Any], where: str, image_tokens: int | None = None) -> None:
    """Range checks of sampling knobs (None = unset). `where` prefixes the key in the message:
    "sampling." for overrides, "model.options." for a model's defaults."""
    for key, value in values.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{where}{key} must be a finite number, got {value}")
    temperature, top_p = values.get("temperature"), values.get("top_p")
    cfg_scale, top_k = values.get("cfg_scale"), values.get("top_k")
    check_at_least(f"{where}temperature", temperature, 0, "0 = greedy")
    if top_p is not None and not 0 < top_p <= 1:
        raise UserError(f"{where}top_p must be in (0, 1] (1 = off), got {top_p}")
    check_at_least(f"{where}cfg_scale", cfg_scale, 0, "1 = no guidance")
    check_at_least(f"{where}top_k", top_k, 0, "0 = off")
    if top_k is not None and image_tokens is not None and top_k > image_tokens:
        raise UserError(
            f"{where}top_k={top_k} exceeds the model's {image_tokens} image tokens; "
            f"use 1..{image_tokens}, or 0 for no top-k"
        )


def sampling_overrides(values: dict[str, Any], image_tokens: int | None = None) -> SamplingOverrides:
    """Sampling keywords (`sjdbench.decode(..., top_k=64)`) read as the command line reads its
    `sampling.*` keys: an unknown keyword is refused listing the valid ones, then types and ranges
    are checked with the same lines (`check_sampling`)."""
    valid = [f.name for f in dataclasses.fields(SamplingOverrides)]
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise UserError(f"unknown sampling keyword '{unknown[0]}'; choose among: {', '.join(valid)}")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(SamplingOverrides), dict(values))
        typed = cast(SamplingOverrides, OmegaConf.to_object(merged))
    except OmegaConfBaseException as error:
        key = f"sampling.{getattr(error, 'key', None) or ''}".rstrip(".")
        raise UserError(type_error_text(key, _first_line(error)) or f"{key}: {_first_line(error)}") from None
    check_sampling(dataclasses.asdict(typed), "sampling.", image_tokens)
    return typed


def model_sampling_options(config: RunConfig) -> dict[str, Any]:
    """Sampling defaults set through model.options (e.g. the toy's model.options.top_k)."""
    return {k: v for k, v in dict(config.model.options).items() if k in SAMPLING_KEYS and isinstance(v, (int, float))}


def check_config(config: RunConfig) -> ResolvedDecoder:
    """The one walk over the meaningful range of every key of a run config, before any model loads:
    the root keys, data selection, sampling (overrides and the model's defaults), the decoder's
    settings and every knob of every part (`check_decoder`). What needs a file or a device is
    `resolve.resolve_run`'s (the prompt file, the device, weights, the results folder), what needs
    the model `ranges.fit_to_model`'s. Returns the decoder it resolved, so a caller that goes on to
    run it need not resolve it again."""
    decoder = decoder_spec(config)
    check_decoder(decoder)
    check_at_least("samples_per_prompt", config.samples_per_prompt, 1)
    check_at_least("batch_size", config.batch_size, 1, "samples decoded in lockstep")
    check_at_least("warmup", config.warmup, 0, "untimed decodes before the first timed one")
    check_at_least("threads", config.threads, 1, "or null for the measured default")
    check_results_dir(config.results_dir)
    check_sampling(dataclasses.asdict(config.sampling), "sampling.")
    check_sampling(model_sampling_options(config), "model.options.")
    data = config.data
    check_at_least("data.limit", data.limit, 1, "or null for all prompts")
    if data.shard is not None and not re.fullmatch(r"\d+/\d+", data.shard):
        raise UserError(f"data.shard must look like i/n (e.g. 0/4), got '{data.shard}'")
    if data.shard is not None:
        i, n = map(int, data.shard.split("/"))
        if not 0 <= i < n:
            raise UserError(f"data.shard {data.shard}: need 0 <= i < n")
    if not data.column.strip():
        raise UserError("data.column= is empty; name the prompt column of a .tsv/.csv file, or leave it out")
    return decoder


def check_decoder(decoder: ResolvedDecoder) -> None:
    """Every knob of every part and nested part: NaN or inf in a float knob (a NaN slips through
    every `x < 0` test), then the part's own ranges (`PartConfig.check`, written beside the knobs),
    each refused in one line that names the key. (The decoder-wide settings, window, growth_steps,
    growth_reading and trace_positions, check themselves as they are made: `DecodeSettings`.)"""

    def visit(part: ResolvedPart, where: str) -> None:
        for knob, value in part.knobs().items():
            if isinstance(value, float) and not math.isfinite(value):
                raise UserError(f"{where}.{knob} must be a finite number, got {value}")
        try:
            part.config.check()
        except UserError as error:  # a part's check names the knob ("delta must be >= 0"): add where it lives
            raise UserError(f"{where}.{error}") from None
        for key, child in part.children.items():
            visit(child, f"{where}.{key}")

    for kind, part in decoder.parts().items():
        visit(part, f"decoder.{kind}")
    check_drafter_shape(decoder)


def check_drafter_shape(decoder: ResolvedDecoder) -> None:
    """A drafter drafts a chain or grows its own tree, and only a drafter grows a drafter tree: other
    pairings are refused before any model loads."""
    if decoder.is_ar:
        return
    topology = decoder.topology.name
    if needs_drafter(decoder.identity()):
        if topology not in DRAFTER_TOPOLOGIES:
            raise UserError(
                f"the drafter proposal drafts a chain or its own tree, not a '{topology}' topology; use "
                f"decoder.topology={' or '.join(DRAFTER_TOPOLOGIES)}"
            )
    elif topology == "drafter_tree":
        raise UserError(
            f"decoder.topology=drafter_tree is grown by a trained drafter; use decoder/proposal={DRAFTER_PROPOSAL} "
            "(or decoder=eagle, eagle2, lantern_eagle, lantern_pp)"
        )


def model_notes(decoder: ResolvedDecoder, layout: Any) -> list[str]:
    """The walk of `check_decoder` once the model is built: a line per knob that is legal but does
    nothing on this model's images (`PartConfig.model_notes`, e.g. a rows topology whose row_start
    is not below the grid's width)."""

    def visit(part: ResolvedPart, where: str) -> list[str]:
        notes = part.config.model_notes(layout, where)
        return notes + [n for key, child in part.children.items() for n in visit(child, f"{where}.{key}")]

    if decoder.is_ar:
        return []
    return [note for kind, part in decoder.parts().items() for note in visit(part, f"decoder.{kind}")]


def decoder_spec(config: RunConfig) -> ResolvedDecoder:
    """The resolved decoder of a run config (its parts, typed and checked). A run resolves it once,
    in `resolve_run`, and carries it in its `ResolvedRun`."""
    from sjdbench.decoding.build import resolve_decoder

    return resolve_decoder(config.decoder)


def build_preset(name: str, adapter: Any, *overrides: str) -> Any:
    """A runnable decoder from a preset plus overrides, e.g. build_preset("sjd", adapter, "decoder.window=32")."""
    spec = decoder_spec(compose_run([f"decoder={name}", *overrides]))
    return spec.build(adapter)


def to_yaml(config: RunConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))
