"""EAGLE-style drafters: the network (`network.py`), its KV cache (`cache.py`), the API a drafter
proposal drives (`drafting.py`) and drafter weight files, released or trained here (`files.py`).

`bind(adapter, net)` ties a drafter network to the target whose hidden states it reads: the target
must return hidden states (`adapter.returns_hidden_states`) of the drafter's width, and its LM head
turns the drafter's features into logits.
"""

from __future__ import annotations

from typing import Any

from sjdbench.adapter import require_hidden_states
from sjdbench.models.drafter.cache import DrafterCache
from sjdbench.models.drafter.drafting import Drafter, DrafterStep
from sjdbench.models.drafter.network import DrafterConfig, DrafterNet

__all__ = ["Drafter", "DrafterCache", "DrafterConfig", "DrafterNet", "DrafterStep", "bind"]


def bind(adapter: Any, net: DrafterNet, name: str = "drafter") -> Drafter:
    """A drafter over `adapter`'s hidden states and LM head; ValueError in one line when they do not fit."""
    target = require_hidden_states(adapter)
    cfg = net.cfg
    if target.hidden_size != cfg.hidden_size or int(adapter.vocab_size) != cfg.vocab_size:
        raise ValueError(
            f"drafter {name} reads {cfg.hidden_size}-wide features over {cfg.vocab_size} ids, but model "
            f"'{adapter.name}' has {target.hidden_size} and {adapter.vocab_size}; use a drafter trained for this model"
        )
    # the precision of the target's weights (bf16 on a GPU, fp64 for the fp64 toy), as the released
    # code casts its drafter to the base model's dtype
    net.to(device=adapter.device, dtype=getattr(adapter, "weights_dtype", adapter.dtype))
    return Drafter(net, target.lm_head, name)
