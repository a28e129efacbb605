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

import dataclasses
import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from sjdbench.config.schema import SAMPLING_KEYS, RunConfig, compose_run, decoder_spec, group_choices
from sjdbench.decoding.build import DecoderSpec
from sjdbench.decoding.parts import KINDS
from sjdbench.decoding.registry import resolve_part


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class SampleFacts:
    """Everything besides the decoder that determines a run's samples (so AR's samples entirely).

    weights: the fingerprint of the model's weight files, so a retrained model never resumes (and
    mixes into) the results of the previous one; None for models without files (debug). sampling:
    the overrides (None = the model's default), as the run id has always hashed them.
    """

    model: str
    options: Mapping[str, Any] = field(hash=False)
    data: str
    prompts_sha: str
    sampling: Mapping[str, Any] = field(hash=False)
    seed: int
    samples_per_prompt: int
    device: str  # the device type: cpu, cuda, mps
    weights: str | None = None
    batch_size: int = 1  # samples decoded in lockstep: its latencies and throughput are its own

    @classmethod
    def of(cls, config: RunConfig, prompts_sha: str, device_type: str, weights: str | None = None) -> SampleFacts:
        return cls(
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

    @classmethod
    def stored(
        cls, config: Mapping[str, Any], env: Mapping[str, Any], summary: Mapping[str, Any]
    ) -> SampleFacts | None:
        """The facts of a stored run, from its config.yaml, env.json and summary.json as written (no
        config is re-composed, so stores of other versions read); None when the files lack them."""
        model = config.get("model") or {}
        name = model.get("name") or summary.get("model")
        sha = env.get("prompts_sha")
        if not name or not sha:
            return None
        sampling = config.get("sampling") or {}
        return cls(
            str(name),
            dict(model.get("options") or {}),
            str((config.get("data") or {}).get("name") or summary.get("data")),
            str(sha),
            {key: sampling.get(key) for key in SAMPLING_KEYS},
            int(config.get("seed", summary.get("seed", 0))),
            int(config.get("samples_per_prompt", 1)),
            str(env.get("device") or summary.get("device") or "cpu").split(":")[0],
            env.get("weights"),
            int(config.get("batch_size") or 1),
        )

    def fields(self) -> dict[str, Any]:
        """The hashed fields of a run id, without its decoder."""
        fields: dict[str, Any] = {
            # the builder's arguments: options, with the top-level model keys that are set folded in
            "model": {"name": self.model, "options": dict(self.options)},
            "data": {"name": self.data, "prompts_sha": self.prompts_sha},
            "sampling": {key: self.sampling.get(key) for key in SAMPLING_KEYS},
            "seed": self.seed,
            "samples_per_prompt": self.samples_per_prompt,
            "device": self.device,
        }
        if self.weights is not None:
            fields["weights"] = self.weights
        if self.batch_size != 1:  # runs decoded one at a time keep the ids they always had
            fields["batch_size"] = self.batch_size
        return fields


def run_id(facts: SampleFacts, decoder: DecoderSpec) -> str:
    """`<model>-<family>-<12 hex>`: the hash of the facts and the decoder's identity."""
    fields = {**facts.fields(), "decoder": decoder.identity()}
    digest = hashlib.sha256(canonical_json(fields).encode()).hexdigest()
    return f"{facts.model}-{family(decoder)}-{digest[:12]}"


def semantic_fields(
    config: RunConfig,
    prompts_sha: str,
    device_type: str,
    weights: str | None = None,
    decoder: DecoderSpec | None = None,
) -> dict:
    """What determines a run's rows (decoder: the config's, resolved, unless given)."""
    facts = SampleFacts.of(config, prompts_sha, device_type, weights)
    return {**facts.fields(), "decoder": (decoder or decoder_spec(config)).identity()}


def run_id_for(
    config: RunConfig,
    prompts_sha: str,
    device_type: str,
    weights: str | None = None,
    decoder: DecoderSpec | None = None,
) -> str:
    """The id of a config's run; `decoder` is its resolved spec when the caller holds it already."""
    return run_id(SampleFacts.of(config, prompts_sha, device_type, weights), decoder or decoder_spec(config))


@functools.cache
def ar_spec(greedy: bool = False) -> DecoderSpec:
    """The AR decoder (W = 1) a baseline is run with: the `ar` preset, with argmax for greedy AR."""
    spec = preset_spec("ar")
    if greedy != spec.greedy:
        name = "greedy" if greedy else "exact"
        spec = dataclasses.replace(spec, verifier=resolve_part("verifier", name, "decoder.verifier"))
    return spec


def ar_run_id(facts: SampleFacts, seed_offset: int = 0, greedy: bool = False) -> str:
    """The id of the AR run with these facts (at seed + seed_offset): the run `sjdbench run
    decoder=ar` with the same settings gets, and the baseline a sweep adds."""
    return run_id(dataclasses.replace(facts, seed=facts.seed + seed_offset), ar_spec(greedy))


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


def _temperature(config: RunConfig) -> float | None:
    """The sampling temperature a run was asked for (sampling.temperature, else model.options')."""
    chosen = config.sampling.temperature
    if chosen is None:
        chosen = dict(config.model.options).get("temperature")
    return chosen if isinstance(chosen, (int, float)) else None


def label(config: RunConfig, spec: DecoderSpec | None = None) -> str:
    """The decoder's name for tables: its preset plus the knobs that differ from it (spec: the
    config's resolved decoder, when the caller holds it)."""
    spec = spec or decoder_spec(config)
    base_name = family(spec)
    if base_name == "custom":
        base_name = config.decoder.name
    greedy_sampling = _temperature(config) == 0  # argmax draws: the sampling makes the run greedy
    if spec.is_ar:
        return "ar(greedy)" if (spec.greedy and not preset_spec("ar").greedy) or greedy_sampling else "ar"
    base = preset_spec(base_name)
    changes, swapped = [], []
    if greedy_sampling and not spec.greedy:
        changes.append("T=0")
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
