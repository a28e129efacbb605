"""From a decoder config to a `ResolvedDecoder` (its settings and resolved parts: what run ids hash and
labels name) and from a resolved decoder to a runnable `Decoder` (parts built against a model).

Resolution happens at config time, before any model loads, so every unknown part, unknown knob and
out-of-range value fails with one line; building needs the adapter only for what a part reads from
the model (LANTERN's codebook, GSD's embeddings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, cast

from sjdbench.decoder_identity import AR_WINDOW, DEFAULT_TOPOLOGY, GREEDY_VERIFIER, PART_KINDS, is_ar, is_greedy
from sjdbench.decoding.loop import Decoder
from sjdbench.decoding.parts import Verifier
from sjdbench.decoding.registry import ResolvedPart, default_part, resolve_part
from sjdbench.decoding.settings import DecodeSettings
from sjdbench.errors import UserError
from sjdbench.runkey import ar_identity

AR_PARTS = {
    "proposal": "resample",
    "verifier": "exact",
    "init": "random",
    "topology": DEFAULT_TOPOLOGY,
}  # what W = 1 needs (greedy: argmax AR)


@dataclass(frozen=True, kw_only=True)
class ResolvedDecoder(DecodeSettings):
    """A decoder before any model loads: its settings and one resolved part of each kind."""

    proposal: ResolvedPart
    verifier: ResolvedPart
    init: ResolvedPart
    topology: ResolvedPart  # resolve_decoder always sets it (chain when the config names none)

    @classmethod
    def of(cls, settings: DecodeSettings, parts: Mapping[str, ResolvedPart]) -> ResolvedDecoder:
        """These settings with these parts (one of each kind)."""
        return cls(**settings.setting_values(), **cast("dict[str, Any]", parts))

    @property
    def is_ar(self) -> bool:
        return is_ar(self.identity())

    @property
    def greedy(self) -> bool:
        return is_greedy(self.identity())

    def parts(self) -> dict[str, ResolvedPart]:
        return {kind: getattr(self, kind) for kind in PART_KINDS}

    def lossless(self) -> bool:
        """Whether the decoder keeps AR's distribution: AR itself, or every part says it does with
        the knobs it was given (greedy decoders keep greedy AR's). Recorded with each run, so a
        report never has to re-derive it from an older sjdbench's parts."""
        return self.is_ar or all(part.lossless() for part in self.parts().values())

    def identity(self) -> dict[str, Any]:
        """What changes the samples and the recorded statistics, and nothing else.

        AR (W = 1) has no drafts: only whether its verifier takes the argmax matters. A windowed
        decoder is its parts with the knobs they read, plus the growth mask's N and reading (VP reads
        the mask; the statistics of every windowed decoder record it). The chain topology (SJD's
        window, the only one before topologies were parts) is left out, so the runs of chain decoders
        keep their ids.
        """
        windowed = {
            "window": self.window,
            **{
                kind: part.identity()
                for kind, part in self.parts().items()
                if not (kind == "topology" and part.name == DEFAULT_TOPOLOGY)
            },
            "growth": {"steps": self.growth_steps, "reading": self.growth_reading},
        }
        if is_ar(windowed):
            return ar_identity(bool(cast(type[Verifier], self.verifier.cls).greedy))
        return windowed

    def unused_settings(self) -> list[str]:
        """One line per setting that differs from its default but does nothing in this decoder."""
        notes = []
        if self.is_ar:
            for kind, part in self.parts().items():
                if part.name not in (AR_PARTS[kind], GREEDY_VERIFIER):
                    notes.append(
                        f"decoder.{kind} '{part.name}' does nothing at window=1 (AR); it is not part of the run id"
                    )
            return notes
        for kind, part in self.parts().items():
            defaults = default_part(kind, part.name).config
            for knob in sorted(part.config.unused()):
                if getattr(part.config, knob) != getattr(defaults, knob):
                    notes.append(
                        f"decoder.{kind}.{knob} does nothing with these settings of {kind} '{part.name}'; "
                        "it is not part of the run id"
                    )
        return notes

    def build(self, adapter: Any, track_growth: bool = True, trace_drafts: bool = False) -> Decoder:
        return Decoder(
            proposal=self.proposal.build(adapter),
            verifier=self.verifier.build(adapter),
            init=self.init.build(adapter),
            topology=self.topology.build(adapter),
            track_growth=track_growth,
            trace_drafts=trace_drafts,
            **self.setting_values(),
        )


def resolve_decoder(config: Any) -> ResolvedDecoder:
    """The resolved decoder of a `DecoderConfig` (or any object with its fields): its settings check
    themselves as they are made (`DecodeSettings`), its parts are resolved and typed (UserError for an
    unknown part or knob); the parts' ranges are checked by sjdbench.config.schema.check_decoder."""
    settings = DecodeSettings(config.window, config.growth_steps, config.growth_reading, config.trace_positions)
    raw = {kind: getattr(config, kind, None) for kind in PART_KINDS}
    if not raw["topology"]:
        raw["topology"] = DEFAULT_TOPOLOGY
    parts = {kind: resolve_part(kind, raw[kind], f"decoder.{kind}") for kind in PART_KINDS}
    return ResolvedDecoder.of(settings, parts)


def decoder_of_identity(identity: Mapping[str, Any]) -> ResolvedDecoder | None:
    """The decoder a stored identity names (summary.json's `decoder_spec`), resolved with today's
    parts; None when they cannot read it, or would record it differently (an older reading of a
    part): nothing can then be claimed of it."""
    if is_ar(identity):
        verifier = GREEDY_VERIFIER if is_greedy(identity) else AR_PARTS["verifier"]
        names = {**AR_PARTS, "verifier": verifier}
        parts = {kind: resolve_part(kind, names[kind], f"decoder.{kind}") for kind in PART_KINDS}
        return ResolvedDecoder.of(DecodeSettings(AR_WINDOW), parts)
    if set(identity) - {"window", "growth", *PART_KINDS}:
        return None
    growth = identity.get("growth") or {}
    try:
        parts = {
            kind: resolve_part(
                kind, identity.get(kind) or (DEFAULT_TOPOLOGY if kind == "topology" else None), f"decoder.{kind}"
            )
            for kind in PART_KINDS
        }
        settings = DecodeSettings(
            identity["window"],
            growth.get("steps", DecodeSettings.growth_steps),
            growth.get("reading", DecodeSettings.growth_reading),
        )
        decoder = ResolvedDecoder.of(settings, parts)
    except (UserError, KeyError, TypeError):
        return None
    if any(kind in identity and part.identity() != identity[kind] for kind, part in parts.items()):
        return None
    return decoder


def resolved_settings(decoder: Decoder) -> dict:
    """Settings parts decided when built (e.g. GSD's model-specific threshold), for env.json."""
    out: dict = {}
    for part in (decoder.proposal, decoder.verifier, decoder.init, decoder.topology):
        out.update(part.resolved())
    return out
