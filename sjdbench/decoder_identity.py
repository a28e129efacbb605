"""What a decoder is, read from its identity: the dict a run id hashes and summary.json stores as
`decoder_spec` (written by sjdbench.decoding.build.ResolvedDecoder.identity).

The decoding layer and the results layer read a decoder through this one module: the kinds of parts
it is made of, whether it is AR (a window of one slot: no drafts) and whether it is greedy. A
resolved decoder answers from its own identity, a stored run from the identity it stored, so a
report and a run never disagree. Whether a decoder is lossless is a claim of its parts, asked of
them where they are built (sjdbench.decoding.build).

Torch-free and free of sjdbench imports: the results layer reads stores without the decoding loop.
"""

from __future__ import annotations

from typing import Any, Mapping

PART_KINDS = ("proposal", "verifier", "init", "topology")  # a decoder = one part of each kind
DEFAULT_TOPOLOGY = "chain"  # SJD's window; identities leave it out, so chain decoders keep their run ids
AR_WINDOW = 1  # one slot per forward: no drafts, the loop is autoregressive decoding
GREEDY_VERIFIER = "greedy"  # the verifier that takes the argmax (Jacobi decoding)


def is_ar(identity: Mapping[str, Any] | None) -> bool:
    """AR: a window of one slot (its identity is only the window and whether it is greedy)."""
    return identity is not None and identity.get("window") == AR_WINDOW


def is_greedy(identity: Mapping[str, Any] | None) -> bool:
    """Greedy: AR that takes the argmax, or a windowed decoder with the greedy verifier."""
    if not identity:
        return False
    if is_ar(identity):
        return bool(identity.get("greedy"))
    return (identity.get("verifier") or {}).get("name") == GREEDY_VERIFIER


DRAFTER_PROPOSAL = "drafter"  # the proposal that drafts from a trained drafter (EAGLE-style)
DRAFTER_TOPOLOGIES = ("chain", "drafter_tree")  # the shapes a drafter drafts: a chain, or its own tree
NEEDS_NOTHING, NEEDS_DRAFTER = "nothing", "a trained drafter"


def needs_drafter(identity: Mapping[str, Any] | None) -> bool:
    """A windowed decoder whose proposal (or a proposal inside it) is the trained drafter's."""
    if not identity or is_ar(identity):
        return False

    def uses(part: Mapping[str, Any]) -> bool:
        return part.get("name") == DRAFTER_PROPOSAL or any(isinstance(v, Mapping) and uses(v) for v in part.values())

    return uses(identity.get("proposal") or {})


def needs(identity: Mapping[str, Any] | None) -> str:
    """What a decoder needs besides the model: nothing (the training-free family) or a trained drafter."""
    return NEEDS_DRAFTER if needs_drafter(identity) else NEEDS_NOTHING
