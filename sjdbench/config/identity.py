"""Run identity and run labels: both follow the decoder that was actually built.

A run id hashes what determines the samples and their recorded statistics: the model and the
fingerprint of its weight files, the resolved decoder (its parts and only the knobs they read), the
sampling overrides, the prompt set's content, the seed, samples per prompt and the device type. Not
the preset's name, not where results go, not which prompts of the set are selected (so runs resume
at the prompt level), and not a knob the decoder does not read. So `decoder=sjd
decoder/verifier=lantern` and `decoder=lantern` share one run, and a knob added to one part re-keys
only the runs of decoders that use that part.

Everything in that list except the decoder is `SampleFacts`: what two runs must share for their
samples to be compared prompt by prompt. The AR run with a run's facts is its baseline, and its id
(`ar_run_id`) is the pairing key (sjdbench.results.pairing), for planned and for stored runs alike.

A run label names the decoder for people: the preset whose parts it uses, plus every knob that
differs from that preset, e.g. `sjd_vp(N=2,λ=.25)`, `sjd_vp(fusion=none)`, `sjd+gsd(G=25)`.
"""

from __future__ import annotations

import functools
from dataclasses import asdict

import yaml

from sjdbench.config.schema import RunConfig, compose_run, config_dirs, decoder_spec, group_choices
from sjdbench.decoder_identity import PART_KINDS
from sjdbench.decoding.build import ResolvedDecoder
from sjdbench.runkey import SampleFacts, hashed_run_id


def facts_of(config: RunConfig, prompts_sha: str, device_type: str, weights: str | None = None) -> SampleFacts:
    """The sample facts of a composed config."""
    return SampleFacts(
        config.model.name,
        dict(config.model.options),
        config.data.name,
        prompts_sha,
        asdict(config.sampling),
        config.seed,
        config.samples_per_prompt,
        device_type,
        weights,
        config.batch_size,
    )


def run_id(facts: SampleFacts, decoder: ResolvedDecoder) -> str:
    """`<model>-<family>-<12 hex>`: the hash of the facts and the decoder's identity."""
    return hashed_run_id(facts, family(decoder), decoder.identity())


def run_id_for(
    config: RunConfig,
    prompts_sha: str,
    device_type: str,
    weights: str | None = None,
    decoder: ResolvedDecoder | None = None,
) -> str:
    """The id of a config's run; `decoder` is its resolved spec when the caller holds it already."""
    return run_id(facts_of(config, prompts_sha, device_type, weights), decoder or decoder_spec(config))


@functools.cache
def preset_decoder(name: str) -> ResolvedDecoder:
    """The decoder a preset builds with no other override."""
    return decoder_spec(compose_run([f"decoder={name}"]))


def decoder_presets() -> list[str]:
    """Every decoder preset but AR's (the `decoder` config group): the decoders benchmarks and
    studies compare with AR; a preset added to the group joins them."""
    return [name for name in group_choices("decoder") if not preset_decoder(name).is_ar]


def _part_names(spec: ResolvedDecoder) -> tuple:
    """The names of the parts and of their nested parts, e.g. ("vp", "resample", "exact", "random")."""

    def names(part) -> tuple:
        return (part.name, *(n for child in part.children.values() for n in names(child)))

    return tuple(n for kind in PART_KINDS for n in names(getattr(spec, kind)))


def _knobs_apart(spec: ResolvedDecoder, preset: ResolvedDecoder) -> int:
    """How many part knobs of the decoder differ from the preset's (parts with the same names), both
    ways: a knob the preset reads and the decoder leaves unused (sjd_adt's adapt beside a fixed-width
    tree) counts too."""
    return sum(
        len(getattr(spec, kind).label_knobs(getattr(preset, kind)))
        + len(getattr(preset, kind).label_knobs(getattr(spec, kind)))
        for kind in PART_KINDS
    )


def family(spec: ResolvedDecoder) -> str:
    """The preset whose parts this decoder uses, the one whose knobs it shares most where several
    do (mc_sjd and scd_gs differ in a knob only; first in sorted order on ties), or "custom".
    Only the presets whose YAML declares the same top-level parts are composed (composing all 25
    took most of a command's start-up, about 3 s)."""
    if spec.is_ar:
        return "ar"
    mine = _part_names(spec)
    top = tuple(getattr(spec, kind).name for kind in PART_KINDS)
    candidates = [name for name in group_choices("decoder") if declared_parts(name) in (None, top)]
    matches = [
        name for name in candidates if not preset_decoder(name).is_ar and _part_names(preset_decoder(name)) == mine
    ]
    if not matches:
        return "custom"
    return min(matches, key=lambda name: _knobs_apart(spec, preset_decoder(name)))


def declared_parts(name: str) -> tuple[str, ...] | None:
    """A preset's top-level part names (one per kind) as its YAML's defaults list declares them
    (`- proposal: vp`); None when that is not plain (another form of entry, a part named in the body,
    files in several config folders that disagree), and the preset must be composed to know."""
    found = set()
    for root in config_dirs():
        path = root / "decoder" / f"{name}.yaml"
        if not path.is_file():
            continue
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            return None
        if not isinstance(doc, dict):
            return None
        declared = {}
        for entry in doc.get("defaults") or []:
            if isinstance(entry, dict) and len(entry) == 1:
                ((key, value),) = entry.items()
                if key in PART_KINDS and isinstance(value, str):
                    declared[key] = value
        named_in_body = any(isinstance(doc.get(kind), dict) and "name" in doc[kind] for kind in PART_KINDS)
        if named_in_body or set(declared) != set(PART_KINDS):
            return None
        found.add(tuple(declared[kind] for kind in PART_KINDS))
    return found.pop() if len(found) == 1 else None


def _temperature(config: RunConfig) -> float | None:
    """The sampling temperature a run was asked for (sampling.temperature, else model.options')."""
    chosen = config.sampling.temperature
    if chosen is None:
        chosen = dict(config.model.options).get("temperature")
    return chosen if isinstance(chosen, (int, float)) else None


def label(config: RunConfig, spec: ResolvedDecoder | None = None) -> str:
    """The decoder's name for tables: its preset plus the knobs that differ from it (spec: the
    config's resolved decoder, when the caller holds it)."""
    spec = spec or decoder_spec(config)
    base_name = family(spec)
    if base_name == "custom":
        base_name = config.decoder.name
    greedy_sampling = _temperature(config) == 0  # argmax draws: the sampling makes the run greedy
    if spec.is_ar:
        return "ar(greedy)" if (spec.greedy and not preset_decoder("ar").greedy) or greedy_sampling else "ar"
    base = preset_decoder(base_name)
    changes, swapped = [], []
    if greedy_sampling and not spec.greedy:
        changes.append("T=0")
    if spec.growth_steps != base.growth_steps:
        changes.append(f"N={spec.growth_steps}")
    if spec.growth_reading != base.growth_reading:
        changes.append(f"reading={spec.growth_reading}")
    for kind in PART_KINDS:
        mine, theirs = getattr(spec, kind), getattr(base, kind)
        if mine.name == theirs.name:
            changes.extend(mine.label_knobs(theirs))
        else:
            knobs = mine.label_knobs()
            swapped.append(f"+{mine.name}" + (f"({','.join(knobs)})" if knobs else ""))
    return base_name + (f"({','.join(changes)})" if changes else "") + "".join(swapped)
