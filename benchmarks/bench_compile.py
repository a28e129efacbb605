"""What `model.compile=true` costs and gains per decoded image, eager and compiled side by side in one
process: the warm-up's time (it holds the compilation) and the shapes it compiled, then the median
time per image of decodes interleaved between the two modes, and each decoder's speedup over AR in
each mode.

    python benchmarks/bench_compile.py                                  # the toy, ar and sjd, one thread
    python benchmarks/bench_compile.py --presets ar sjd sjd_pac --repeats 12
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python benchmarks/bench_compile.py   # a cold compilation

Inductor keeps what it compiled on disk, so a second run's warm-up reads it back instead of compiling:
point TORCHINDUCTOR_CACHE_DIR at an empty folder to time a cold compilation.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch._dynamo.utils import counters

from sjdbench.config import build_preset
from sjdbench.decoding.loop import Request, jacobi_decode_batch
from sjdbench.models.registry import entry

PROMPTS = ["a red circle, on a blue striped background", "two green squares", "a yellow triangle at the top left"]


def decode(adapter, preset: str, seed: int) -> float:
    decoder = build_preset(preset, adapter)
    requests = [Request(PROMPTS[seed % len(PROMPTS)], torch.Generator().manual_seed(seed), key=seed)]
    start = time.perf_counter()
    for _ in jacobi_decode_batch(adapter, requests, decoder, adapter.default_sampling, 1):
        pass
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="toy")
    parser.add_argument("--presets", nargs="+", default=["ar", "sjd"])
    parser.add_argument("--repeats", type=int, default=6, help="timed decodes per preset and mode")
    args = parser.parse_args()
    adapters = {mode: entry(args.model).load("cpu", compile=mode == "compiled") for mode in ("eager", "compiled")}
    print(f"# {args.model}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    per_image: dict[tuple[str, str], float] = {}
    for preset in args.presets:
        for mode, adapter in adapters.items():
            graphs, start = counters["stats"]["unique_graphs"], time.perf_counter()
            for seed in range(len(PROMPTS)):  # every prompt once: the warm-up meets every shape a decode needs
                decode(adapter, preset, seed)
            warmup, shapes = time.perf_counter() - start, counters["stats"]["unique_graphs"] - graphs
            print(f"{preset:>8} {mode:>8}: warm-up {warmup:.1f} s ({len(PROMPTS)} decodes), {shapes} shapes compiled")
        times: dict[str, list[float]] = {mode: [] for mode in adapters}
        graphs = counters["stats"]["unique_graphs"]
        for seed in range(args.repeats):  # interleaved, so drift hits both modes alike
            for mode, adapter in adapters.items():
                times[mode].append(decode(adapter, preset, seed))
        late = counters["stats"]["unique_graphs"] - graphs  # shapes the warm-up did not meet
        for mode in adapters:
            per_image[preset, mode] = statistics.median(times[mode])
        eager, compiled = per_image[preset, "eager"], per_image[preset, "compiled"]
        paired = statistics.median(c / e for c, e in zip(times["compiled"], times["eager"]))  # same seed
        print(
            f"{preset:>8}: {1e3 * eager:.0f} ms/image eager, {1e3 * compiled:.0f} compiled; compiled / eager "
            f"{paired:.3f} (median over {args.repeats} seeds), {late} shapes compiled while timed"
        )
    if "ar" in args.presets:
        for preset in (p for p in args.presets if p != "ar"):
            speedups = (f"{mode} {per_image['ar', mode] / per_image[preset, mode]:.2f}x" for mode in adapters)
            print(f"{preset:>8} over ar: " + ", ".join(speedups))


if __name__ == "__main__":
    main()
