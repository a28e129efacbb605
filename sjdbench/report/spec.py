"""What a run's decoder *is*, read back from its stored `decoder_spec` (the resolved parts and the
knobs they read): flat settings for ablation pivots, short names for those settings, and whether
the decoder is lossless.

Everything here works on the stored dict alone, so a report never needs the config tree of the
sjdbench that wrote the run.
"""
from __future__ import annotations

from typing import Any

KINDS = ("proposal", "verifier", "init", "topology")

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


def is_ar(spec: dict[str, Any] | None) -> bool:
    return bool(spec) and spec.get("window") == 1


def is_greedy(spec: dict[str, Any] | None) -> bool:
    if not spec:
        return False
    if is_ar(spec):
        return bool(spec.get("greedy"))
    return (spec.get("verifier") or {}).get("name") == "greedy"


def _lossless_proposal(part: dict[str, Any]) -> bool:
    """resample; coupled without tau (maximal coupling); vp whose reference is the fused draw
    distribution (or whose fusion is off, so q = p) around a lossless inner proposal."""
    name = part.get("name")
    knobs = {k: v for k, v in part.items() if k != "name"}
    if name == "resample":
        return not knobs
    if name == "coupled":
        return set(knobs) <= {"tau", "reference"} and knobs.get("tau") is None and knobs.get("reference", "new_p") == "new_p"
    if name == "vp":
        inner = knobs.pop("inner", {"name": "resample"})
        free = {"gamma", "history", "lam", "fusion", "fusion_top_k"}  # any value keeps q = the draw distribution
        reference_ok = knobs.get("reference", "fused") == "fused"
        return reference_ok and set(knobs) <= free | {"reference"} and _lossless_proposal(inner)
    return False


def _lossless_topology(part: dict[str, Any] | None) -> bool:
    """No topology recorded: the chain. A tree is exact when it takes the first accepted sibling."""
    if not part:
        return True
    name = part.get("name")
    if name == "chain":
        return True
    return name == "tree" and part.get("select") == "first"


def is_lossless(spec: dict[str, Any] | None) -> bool:
    """The fallback for runs that do not record `decoder_lossless` (the parts' own claim, stored by
    the runner): a decoder is lossless when each of its parts is: verifier exact (modified rejection
    sampling) or greedy (equals greedy AR), a lossless proposal (above), any init (init drafts carry
    the distribution they were drawn from as reference), a chain or a first-sibling tree. AR is
    lossless. Anything else, including a part or a knob this function does not know, counts as
    lossy: losslessness is a claim that needs a proof."""
    if not spec:
        return False
    if is_ar(spec):
        return True
    verifier = spec.get("verifier") or {}
    verifier_ok = verifier.get("name") in ("exact", "greedy") and set(verifier) == {"name"}
    unknown_kinds = set(spec) - {"window", "growth", *KINDS}
    return (verifier_ok and _lossless_proposal(spec.get("proposal") or {}) and _lossless_topology(spec.get("topology"))
            and not unknown_kinds)


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
    shape = f"+{topology}" if topology and topology != "chain" else ""
    return f"{names(spec.get('proposal') or {})}+{names(spec.get('verifier') or {})}{shape}"


def setting_name(key: str) -> str:
    """Column name of a flat setting: W, N, λ, δ, G, init, ...; nested parts keep their path."""
    if key in SETTING_NAMES:
        return SETTING_NAMES[key]
    parts = key.split(".")
    if len(parts) >= 2 and parts[0] in KINDS:
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
        from sjdbench.decoding.parts import default_spec, part_choices
        from sjdbench.errors import UserError

        for kind in KINDS:
            for name in part_choices(kind):
                try:
                    _SYMBOLS.update(default_spec(kind, name).config.symbols)
                except UserError:  # a user's part that fails to import must not stop a report
                    continue
    return _SYMBOLS


_SYMBOLS: dict[str, str] | None = None
