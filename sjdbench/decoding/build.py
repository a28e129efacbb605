"""From a decoder config to a `ResolvedDecoder` (resolved parts: what run ids hash and labels name) and
from a spec to a runnable `Decoder` (parts built against a model).

Resolution happens at config time, before any model loads, so every unknown part, unknown knob and
out-of-range value fails with one line; building needs the adapter only for what a part reads from
the model (LANTERN's codebook, GSD's embeddings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sjdbench.decoding.loop import Decoder
from sjdbench.decoding.parts import KINDS, Verifier
from sjdbench.decoding.registry import ResolvedPart, default_part, resolve_part

GROWTH_READINGS = ("increases", "observations")
AR_PARTS = {
    "proposal": "resample",
    "verifier": "exact",
    "init": "random",
    "topology": "chain",
}  # what W = 1 needs (greedy: argmax AR)
DEFAULT_TOPOLOGY = "chain"  # a decoder config that names no topology has SJD's one-row window


@dataclass(frozen=True)
class ResolvedDecoder:
    window: int
    proposal: ResolvedPart
    verifier: ResolvedPart
    init: ResolvedPart
    topology: ResolvedPart  # resolve_decoder always sets it (chain when the config names none)
    growth_steps: int = 3
    growth_reading: str = "increases"
    trace_positions: int = 8

    @property
    def is_ar(self) -> bool:
        return self.window == 1

    @property
    def greedy(self) -> bool:
        return bool(cast(type[Verifier], self.verifier.cls).greedy)

    def parts(self) -> dict[str, ResolvedPart]:
        return {kind: getattr(self, kind) for kind in KINDS}

    def lossless(self) -> bool:
        """Whether the decoder keeps AR's distribution: AR itself, or every part says it does with
        the knobs it was given (greedy decoders keep greedy AR's). Recorded with each run, so a
        report never has to re-derive it from an older sjdbench's parts."""
        return self.is_ar or all(part.lossless() for part in self.parts().values())

    def identity(self) -> dict[str, Any]:
        """What changes the samples and the recorded statistics, and nothing else.

        AR (W = 1) has no drafts: only whether it is greedy matters. A windowed decoder is its parts
        with the knobs they read, plus the growth mask's N and reading (VP reads the mask; the
        statistics of every windowed decoder record it). The chain topology (SJD's window, the only
        one before topologies were parts) is left out, so the runs of chain decoders keep their ids.
        """
        if self.is_ar:
            return {"window": 1, "greedy": self.greedy}
        parts = {
            kind: part.identity()
            for kind, part in self.parts().items()
            if not (kind == "topology" and part.name == DEFAULT_TOPOLOGY)
        }
        return {
            "window": self.window,
            **parts,
            "growth": {"steps": self.growth_steps, "reading": self.growth_reading},
        }

    def unused_settings(self) -> list[str]:
        """One line per setting that differs from its default but does nothing in this decoder."""
        notes = []
        if self.is_ar:
            for kind, part in self.parts().items():
                if part.name not in (AR_PARTS[kind], "greedy"):
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
            window=self.window,
            proposal=self.proposal.build(adapter),
            verifier=self.verifier.build(adapter),
            init=self.init.build(adapter),
            topology=self.topology.build(adapter),
            growth_steps=self.growth_steps,
            strict_increases=self.growth_reading == "increases",
            trace_positions=self.trace_positions,
            track_growth=track_growth,
            trace_drafts=trace_drafts,
        )


def resolve_decoder(config: Any) -> ResolvedDecoder:
    """The spec of a `DecoderConfig` (or any object with its fields): its parts resolved and typed
    (UserError for an unknown part or knob); the ranges of its settings and knobs are checked by
    sjdbench.config.schema.check_decoder."""
    raw = {kind: getattr(config, kind, None) for kind in KINDS}
    if not raw["topology"]:
        raw["topology"] = DEFAULT_TOPOLOGY
    parts = {kind: resolve_part(kind, raw[kind], f"decoder.{kind}") for kind in KINDS}
    return ResolvedDecoder(
        config.window,
        growth_steps=config.growth_steps,
        growth_reading=config.growth_reading,
        trace_positions=config.trace_positions,
        **parts,
    )


def resolved_settings(decoder: Decoder) -> dict:
    """Settings parts decided when built (e.g. GSD's model-specific threshold), for env.json."""
    out: dict = {}
    for part in (decoder.proposal, decoder.verifier, decoder.init, decoder.topology):
        out.update(part.resolved())
    return out
