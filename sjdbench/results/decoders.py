"""What a run's decoder *is*, read back from its stored `decoder_spec` (the resolved parts and the
knobs they read): flat settings for ablation pivots, short names for those settings, and whether
the decoder is lossless.

Settings and names work on the stored dict alone, so a report never needs the config tree of the
sjdbench that wrote the run; whether it is AR or greedy is read by sjdbench.decoder_identity, as the
decoding layer reads it. Losslessness is stored with each run (`decoder_lossless`); only for runs
written before that field existed is it asked of today's parts (`is_lossless`).
"""

from __future__ import annotations

from typing import Any

from sjdbench.decoder_identity import DEFAULT_TOPOLOGY, PART_KINDS, is_ar, is_greedy, needs

__all__ = ["flatten_spec", "is_ar", "is_greedy", "is_lossless", "needs", "part_chain", "setting_name"]

# short column names for settings; a part's own knob symbols are looked up first (PartConfig.symbols)
SETTING_NAMES = {
    "window": "W",
    "growth.steps": "N",
    "growth.reading": "growth reading",
    "init.name": "init",
}


def flatten_spec(spec: dict[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """{"window": 16, "proposal": {"name": "vp", "lam": 1.0, "inner": {"name": "resample"}}} ->
    {"window": 16, "proposal.name": "vp", "proposal.lam": 1.0, "proposal.inner.name": "resample"}."""
    flat: dict[str, Any] = {}
    for key, value in (spec or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_spec(value, name + "."))
        else:
            flat[name] = value
    return flat


def is_lossless(spec: dict[str, Any] | None) -> bool:
    """The fallback for runs that do not record `decoder_lossless` (the parts' own claim, stored by
    the runner since it existed): the stored decoder resolved with today's registry, asked as a run
    asks it (`ResolvedDecoder.lossless`). A part or knob this sjdbench does not know, or a stored part
    that differs from what today's part would record (an older reading of it), counts as lossy:
    losslessness is a claim that needs a proof."""
    from sjdbench.decoding.build import decoder_of_identity

    decoder = decoder_of_identity(spec) if spec else None
    return decoder is not None and decoder.lossless()


def part_chain(spec: dict[str, Any] | None) -> str:
    """The parts that make a decoder a different algorithm (not a knob setting of one): the proposal
    with its nested parts, the verifier and any topology other than the chain, e.g.
    "vp(resample)+exact" or "coupled+exact+tree". Inits and knobs vary inside one algorithm, so they
    are ablation axes."""
    if not spec:
        return "?"
    if is_ar(spec):
        return "ar"

    def names(part: dict[str, Any]) -> str:
        inner = [names(v) for v in part.values() if isinstance(v, dict)]
        return str(part.get("name", "?")) + (f"({','.join(inner)})" if inner else "")

    topology = (spec.get("topology") or {}).get("name")
    shape = f"+{topology}" if topology and topology != DEFAULT_TOPOLOGY else ""
    return f"{names(spec.get('proposal') or {})}+{names(spec.get('verifier') or {})}{shape}"


def setting_name(key: str) -> str:
    """Column name of a flat setting: W, N, λ, δ, G, init, ...; nested parts keep their path."""
    if key in SETTING_NAMES:
        return SETTING_NAMES[key]
    parts = key.split(".")
    if len(parts) >= 2 and parts[0] in PART_KINDS:
        knob = parts[-1]
        symbol = _symbols().get(knob, knob)
        middle = parts[1:-1]
        return ".".join([*middle, symbol]) if middle else symbol
    return key


def _symbols() -> dict[str, str]:
    """Every part's knob symbols (PartConfig.symbols), e.g. lam -> λ; empty if the parts cannot load."""
    global _SYMBOLS
    if _SYMBOLS is None:
        _SYMBOLS = {}
        from sjdbench.decoding.registry import default_part, part_choices
        from sjdbench.errors import UserError

        for kind in PART_KINDS:
            for name in part_choices(kind):
                try:
                    _SYMBOLS.update(default_part(kind, name).config.symbols)
                except UserError:  # a user's part that fails to import must not stop a report
                    continue
    return _SYMBOLS


_SYMBOLS: dict[str, str] | None = None
