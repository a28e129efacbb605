"""Side-by-side decoder benchmark: step compression and paired latency speedup vs AR, one process.

    python benchmarks/bench_decoders.py                       # toy model, all presets, W=16
    python benchmarks/bench_decoders.py --model debug --decoders sjd sjd_vp --window 32 --prompts 8

Decoders are interleaved prompt by prompt (AR, then each decoder, same prompt and seed) so that
machine drift hits all of them alike; speedup is the geometric mean of per-prompt AR/decoder latency
ratios. Absolute CPU times are noise; the ratios measured in one run are the result. The machine is
printed with the numbers.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time

import torch

from sjdbench.config import compose_run, decoder_spec
from sjdbench.datasets import load_prompts
from sjdbench.decoding.loop import jacobi_decode
from sjdbench.models.registry import build_adapter
from sjdbench.runner import resolve_sampling, sample_seed, synchronize

PRESETS = ["ar", "jacobi", "sjd", "sjd_pp", "mc_sjd", "sjd_vp", "lantern", "lantern_vp", "gsd", "gsd_vp"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model config name (default: the root default)")
    parser.add_argument("--decoders", nargs="+", default=PRESETS[1:])
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--data", default="smoke")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    base = [f"data={args.data}", f"data.limit={args.prompts}", f"device={args.device}"]
    if args.model:
        base.append(f"model={args.model}")
    ar_cfg = compose_run([*base, "decoder=ar"])
    adapter = build_adapter(ar_cfg.model.name, dict(ar_cfg.model.options), args.device)
    sampling = resolve_sampling(adapter.default_sampling, ar_cfg.sampling)
    configs = {"ar": ar_cfg} | {d: compose_run([*base, f"decoder={d}", f"decoder.window={args.window}"]) for d in args.decoders if d != "ar"}
    parts = {name: decoder_spec(cfg).build(adapter) for name, cfg in configs.items()}
    prompts, _ = load_prompts(ar_cfg.data)

    for name, p in parts.items():  # warm-up, untimed
        jacobi_decode(adapter, prompts[0].text, p, sampling, torch.Generator(args.device).manual_seed(0))
    latency: dict[str, list[float]] = {name: [] for name in parts}
    nfe: dict[str, list[int]] = {name: [] for name in parts}
    tokens = adapter.layout.n_positions
    for prompt in prompts:
        seed = sample_seed(0, prompt.prompt_id, 0)
        for name, p in parts.items():
            generator = torch.Generator(args.device).manual_seed(seed)
            synchronize(args.device)
            start = time.perf_counter()
            result = jacobi_decode(adapter, prompt.text, p, sampling, generator)
            synchronize(args.device)
            latency[name].append(time.perf_counter() - start)
            nfe[name].append(result.stats.nfe)

    print(f"# model={adapter.name} W={args.window} prompts={len(prompts)} tokens/image={tokens} device={args.device} "
          f"threads={torch.get_num_threads()} cpu={platform.processor() or platform.machine()} cores={os.cpu_count()}")
    print(f"{'decoder':<12}{'NFE':>9}{'step x':>9}{'speedup':>9}{'lat ms':>10}")
    for name in parts:
        ratios = [a / b for a, b in zip(latency["ar"], latency[name])]
        speedup = math.exp(statistics.fmean(math.log(r) for r in ratios))
        mean_nfe = statistics.fmean(nfe[name])
        print(f"{name:<12}{mean_nfe:>9.1f}{tokens / mean_nfe:>9.2f}{speedup:>9.2f}{1000 * statistics.fmean(latency[name]):>10.1f}")


if __name__ == "__main__":
    main()
