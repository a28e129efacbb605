"""Reference outputs of the chain loop, saved once from the loop as it was before topologies were
parts, so the chain topology can be proven token-for-token (and statistic-for-statistic) identical.

    python tests/chain_reference.py        # rewrites tests/data/chain_reference.json (only on purpose)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

REFERENCE = Path(__file__).parent / "data" / "chain_reference.json"
STAT_KEYS = (
    "nfe",
    "iterations",
    "accepted",
    "verified",
    "accepted_no_fresh",
    "verified_no_fresh",
    "accept_len_hist",
    "slot_accepted",
    "slot_verified",
    "growth_eligible_accepted",
    "growth_grew_accepted",
    "growth_flagged_verified",
    "growth_flagged_accepted",
    "verify_eligible_accepted",
    "verify_grew_accepted",
    "trajectories",
)
DEBUG_PRESETS = ["ar", "jacobi", "sjd", "sjd_pp", "mc_sjd", "sjd_vp", "lantern", "lantern_vp", "gsd", "gsd_vp"]
TOY_PRESETS = ["sjd", "sjd_pp", "sjd_vp", "lantern"]
PROMPTS = ["a red circle", "two blue squares on a striped background"]
# the readings these presets had when the reference was saved (the released rules became the defaults later)
READINGS = {
    "lantern": "decoder.verifier.reading=ours_all",
    "lantern_vp": "decoder.verifier.reading=ours_all",
    "gsd": "decoder.verifier.reading=ours",
    "gsd_vp": "decoder.verifier.reading=ours",
}


def cases() -> list[dict]:
    """(model, preset, window, prompt, seed) of every reference decode."""
    out = []
    for preset in DEBUG_PRESETS:
        for window in [1] if preset == "ar" else [5, 16]:
            for i, prompt in enumerate(PROMPTS):
                out.append({"model": "debug", "preset": preset, "window": window, "prompt": prompt, "seed": 11 + i})
    for preset in TOY_PRESETS:
        out.append(
            {"model": "toy", "preset": preset, "window": 16, "prompt": "a red circle at the top left", "seed": 3}
        )
    return out


def adapter_for(model: str):
    if model == "debug":
        from sjdbench.models.debug import build_debug_adapter

        return build_debug_adapter(grid_h=6, grid_w=6, n_codes=32, init_std=0.5)
    from sjdbench.models.toy.model import build_toy_adapter

    return build_toy_adapter()


def decode_case(case: dict, adapters: dict) -> dict:
    from sjdbench.config import build_preset
    from sjdbench.decoding.loop import jacobi_decode

    adapter = adapters.setdefault(case["model"], adapter_for(case["model"]))
    extra = [READINGS[case["preset"]]] if case["preset"] in READINGS else []
    decoder = build_preset(case["preset"], adapter, f"decoder.window={case['window']}", *extra)
    result = jacobi_decode(
        adapter, case["prompt"], decoder, adapter.default_sampling, torch.Generator().manual_seed(case["seed"])
    )
    row = result.stats.to_row()
    return {"tokens": result.tokens.tolist(), **{k: row[k] for k in STAT_KEYS}}


def main() -> None:
    torch.set_num_threads(1)
    adapters: dict = {}
    records = [{**case, "result": decode_case(case, adapters)} for case in cases()]
    REFERENCE.write_text(json.dumps(records))
    print(f"wrote {len(records)} reference decodes to {REFERENCE}")


if __name__ == "__main__":
    main()
