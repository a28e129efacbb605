"""Run identity and run labels: both follow the decoder that was actually built.

A run id hashes what determines the samples and their recorded statistics: the model and the
fingerprint of its weight files, the resolved decoder (its parts and only the knobs they read), the
sampling overrides, the prompt set's content, the seed, samples per prompt and the device type. Not
the preset's name, not where results go, not which prompts of the set are selected (so runs resume
at the prompt level), and not a knob the decoder does not read. So `decoder=sjd
decoder/verifier=lantern` and `decoder=lantern` share one run, and a knob added to one part re-keys
only the runs of decoders that use that part.

A run label names the decoder for people: the preset whose parts it uses, plus every knob that
differs from that preset, e.g. `sjd_vp(N=2,λ=.25)`, `sjd_vp(fusion=none)`, `sjd+gsd(G=25)`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict
from typing import Any

from sjdbench.config.schema import RunConfig, compose_run, decoder_spec, group_choices
from sjdbench.decoding.build import DecoderSpec
from sjdbench.decoding.parts import KINDS

SCHEMA = 2  # of run ids, env.json and summary.json; 1 = ids hashed the whole decoder config


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def semantic_fields(config: RunConfig, prompts_sha: str, device_type: str, weights: str | None = None) -> dict:
    """What determines a run's rows. weights: the fingerprint of the model's weight files, so a
    retrained model never resumes (and mixes into) the results of the previous one; None for
    models without files (debug)."""
    fields = {
        # the builder's arguments: options, with the top-level model keys that are set folded in
        "model": {"name": config.model.name, "options": dict(config.model.options)},
        "decoder": decoder_spec(config).identity(),
        "data": {"name": config.data.name, "prompts_sha": prompts_sha},
        "sampling": asdict(config.sampling),
        "seed": config.seed,
        "samples_per_prompt": config.samples_per_prompt,
        "device": device_type,
    }
    if weights is not None:
        fields["weights"] = weights
    return fields


def run_id_for(config: RunConfig, prompts_sha: str, device_type: str, weights: str | None = None) -> str:
    digest = hashlib.sha256(
        canonical_json(semantic_fields(config, prompts_sha, device_type, weights)).encode()
    ).hexdigest()
    return f"{config.model.name}-{family(decoder_spec(config))}-{digest[:12]}"


@functools.cache
def preset_spec(name: str) -> DecoderSpec:
    """The decoder a preset builds with no other override."""
    return decoder_spec(compose_run([f"decoder={name}"]))


def _part_names(spec: DecoderSpec) -> tuple:
    """The names of the parts and of their nested parts, e.g. ("vp", "resample", "exact", "random")."""

    def names(part) -> tuple:
        return (part.name, *(n for child in part.children.values() for n in names(child)))

    return tuple(n for kind in KINDS for n in names(getattr(spec, kind)))


def family(spec: DecoderSpec) -> str:
    """The preset whose parts this decoder uses (the first in sorted order), or "custom"."""
    if spec.is_ar:
        return "ar"
    mine = _part_names(spec)
    for name in group_choices("decoder"):
        preset = preset_spec(name)
        if not preset.is_ar and _part_names(preset) == mine:
            return name
    return "custom"


def label(config: RunConfig) -> str:
    """The decoder's name for tables: its preset plus the knobs that differ from it."""
    spec = decoder_spec(config)
    base_name = family(spec)
    if base_name == "custom":
        base_name = config.decoder.name
    if spec.is_ar:
        return "ar(greedy)" if spec.greedy and not preset_spec("ar").greedy else "ar"
    base = preset_spec(base_name)
    changes, swapped = [], []
    if spec.growth_steps != base.growth_steps:
        changes.append(f"N={spec.growth_steps}")
    if spec.growth_reading != base.growth_reading:
        changes.append(f"reading={spec.growth_reading}")
    for kind in KINDS:
        mine, theirs = getattr(spec, kind), getattr(base, kind)
        if mine.name == theirs.name:
            changes.extend(mine.label_knobs(theirs))
        else:
            knobs = mine.label_knobs()
            swapped.append(f"+{mine.name}" + (f"({','.join(knobs)})" if knobs else ""))
    return base_name + (f"({','.join(changes)})" if changes else "") + "".join(swapped)
