"""Does the chain's fixed-shape step pay? Whole decodes with it against the general loop, paired in one
process: the same adapter, decoder, prompts and seeds, the two paths interleaved batch by batch, and
the tokens of both compared (they must be equal).

    python benchmarks/bench_chain_step.py                          # the toy compiled, sjd, B = 1 and 4
    python benchmarks/bench_chain_step.py --eager --presets ar sjd sjd_vp
    python benchmarks/bench_chain_step.py --device cuda --batches 1 8

Printed per (preset, B): the median over repeats of (time with the step) / (time with the general
loop); below 1 the step pays. `loop.CHAIN_STEP` chooses the path of ordinary runs from what this
measures (docs/PERFORMANCE.md). The warm-up decodes every batch once per path, so compiled shapes are
compiled before the timed decodes.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import sjdbench.decoding.loop as loop
from sjdbench.config import build_preset
from sjdbench.decoding.loop import Request, jacobi_decode_batch
from sjdbench.models.registry import entry
from sjdbench.run.runner import synchronize

PROMPTS = [
    "a red circle, on a blue striped background",
    "two green squares",
    "a yellow triangle at the top left",
    "a purple star above three small dots",
    "blue and orange stripes",
    "a large white square in the middle",
    "a small black circle at the bottom",
    "green waves over a red background",
]
PATHS = {"step": "always", "general": "never"}  # loop.CHAIN_STEP for each path


def paired_round(adapter, decoder, batch: int, device: str, prompts: list[str] = PROMPTS) -> tuple[float, float, bool]:
    """One decode of the same B prompts and seeds with the step and one with the general loop:
    (seconds with the step, seconds with the general loop, whether their tokens are equal).
    `loop.CHAIN_STEP` is restored afterwards. scripts/gpu_check.py times its `step` section with it."""
    seconds, tokens = {}, {}
    default = loop.CHAIN_STEP
    try:
        for path, policy in PATHS.items():
            loop.CHAIN_STEP = policy  # type: ignore[assignment]
            requests = [
                Request(prompts[i % len(prompts)], torch.Generator(device).manual_seed(i), key=i) for i in range(batch)
            ]
            synchronize(device)
            start = time.perf_counter()
            decoded = jacobi_decode_batch(adapter, requests, decoder, adapter.default_sampling, batch)
            tokens[path] = {r.key: out.tokens for r, out in decoded}
            synchronize(device)
            seconds[path] = time.perf_counter() - start
    finally:
        loop.CHAIN_STEP = default
    same = all(torch.equal(tokens["step"][key], want) for key, want in tokens["general"].items())
    return seconds["step"], seconds["general"], same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="toy")
    parser.add_argument("--presets", nargs="+", default=["sjd"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--repeats", type=int, default=4, help="timed decodes per path, preset and B")
    parser.add_argument("--eager", action="store_true", help="eager decodes (default: model.compile=true)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    adapter = entry(args.model).load(args.device, compile=not args.eager)
    mode = "eager" if args.eager else "compiled"
    print(f"# {args.model}, {mode}, device {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"{'preset':<10}{'B':>4}  step / general (median, then each repeat)")
    for preset in args.presets:
        decoder = build_preset(preset, adapter)
        for batch in args.batches:
            ratios = []
            for repeat in range(args.repeats + 1):  # the first round warms up (and compiles) each path
                step_s, general_s, same = paired_round(adapter, decoder, batch, args.device)
                if not same:
                    raise SystemExit(f"{preset} B={batch}: the two paths decoded different tokens")
                if repeat:
                    ratios.append(step_s / general_s)
            each = " ".join(f"{r:.3f}" for r in ratios)
            print(f"{preset:<10}{batch:>4}  {statistics.median(ratios):.3f}   ({each})", flush=True)


if __name__ == "__main__":
    main()
