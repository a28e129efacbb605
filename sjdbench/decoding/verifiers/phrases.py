"""`phrases` — phrase-level verification in the spirit of SJD-PV (arXiv 2603.06666). Lossy. Our
reading of the paper's description; no code is released.

A *visual phrase* is a pair of image tokens (a, b) that the model often writes side by side: b right
after a in raster order, within a grid row. A phrase table is mined offline from the model's own AR
samples (`sjdbench phrases mine`, sjdbench/run/phrases.py). During verification a draft b whose
parent draft a forms a phrase with it is accepted when either test passes:

    alone:   u q(b) < p(b)                              (exact speculative sampling)
    jointly: u (q(a) + q(b)) < p(a) + p(b), p(b) > 0     (the phrase's summed likelihood ratio)

so a token the model finds slightly less likely than the draft distribution did rides on a confident
phrase partner (never one the model cannot write: p(b) > 0, so a forced or filtered-out token is
never accepted this way). A rejected draft emits from the exact residual norm([p - q]_+). No
per-token bound follows from the rule, so the suite measures its distance from AR instead.

Which table: `phrases` = a table file; by default the one shipped for the model (the toy's) or the
one `sjdbench phrases mine` wrote into the cache for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

import torch

from sjdbench.decoding.parts import ParentDrafts, PartConfig, Verifier
from sjdbench.decoding.processing import residual
from sjdbench.errors import UserError

TABLE_SUFFIX = "_phrases.json"


@dataclass
class PhrasesConfig(PartConfig):
    phrases: Optional[str] = None  # a phrase table file; None: the one shipped or mined for the model


def default_table(model: str) -> Path:
    """Where a model's phrase table is looked for: beside the toy's weights, else the cache."""
    if model == "toy":
        from sjdbench.models.toy.model import WEIGHTS_DIR

        return Path(WEIGHTS_DIR) / f"toy{TABLE_SUFFIX}"
    from sjdbench.paths import cache_dir

    return cache_dir() / model / f"{model}{TABLE_SUFFIX}"


def load_table(path: Path, model: str) -> dict[str, Any]:
    """A phrase table, or one line saying how to make it."""
    if not path.exists():
        raise UserError(
            f"no phrase table for model '{model}' at {path}; mine one from its AR runs: "
            f"sjdbench phrases mine model={model} results_dir=<a store with AR runs of it>"
        )
    try:
        table = json.loads(path.read_text())
        pairs = [(int(a), int(b)) for a, b, *_ in table["pairs"]]
    except (ValueError, KeyError, TypeError) as error:
        raise UserError(f"{path} is not a phrase table ({error}); mine it again with sjdbench phrases mine") from None
    if table.get("model") not in (None, model):
        raise UserError(f"{path} was mined for model '{table.get('model')}', not '{model}'; mine one for it")
    return {**table, "pairs": pairs}


class PhraseVerifier(Verifier[PhrasesConfig]):
    """Lossy (every part's default): a joint pass accepts drafts the exact test rejects."""

    Config = PhrasesConfig
    reads_parent: ClassVar[bool] = True

    def __init__(self, config: PhrasesConfig | None = None, pairs: list[tuple[int, int]] | None = None) -> None:
        super().__init__(config)
        self.pairs = pairs or []
        self._keys: dict[str, torch.Tensor] = {}

    @classmethod
    def build(cls, config: PhrasesConfig, model: Any = None, **children: Any) -> PhraseVerifier:
        if model is None:
            return cls(config)
        name = str(model.name)
        path = Path(config.phrases).expanduser() if config.phrases else default_table(name)
        return cls(config, load_table(path, name)["pairs"])

    def keys(self, device: torch.device) -> torch.Tensor:
        """The phrases as sorted int64 keys a * 2^32 + b, on `device` (made once per device)."""
        if str(device) not in self._keys:
            keys = sorted(a * 2**32 + b for a, b in self.pairs)
            self._keys[str(device)] = torch.tensor(keys, dtype=torch.long, device=device)
        return self._keys[str(device)]

    def accept(
        self,
        p: torch.Tensor,
        q: torch.Tensor,
        drafts: torch.Tensor,
        u: torch.Tensor,
        parent: ParentDrafts | None = None,
    ) -> torch.Tensor:
        p_d = p.gather(-1, drafts[:, None]).squeeze(-1)
        q_d = q.gather(-1, drafts[:, None]).squeeze(-1)
        u = u.to(p.dtype)
        alone = u * q_d < p_d
        if parent is None or not self.pairs:
            return alone
        phrase = parent.drafted & torch.isin(parent.tokens * 2**32 + drafts, self.keys(p.device))
        joint = (u * (q_d + parent.q.to(p.dtype)) < p_d + parent.p.to(p.dtype)) & (p_d > 0)
        return alone | (phrase & joint)

    def replacement(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        return residual(p, q)
