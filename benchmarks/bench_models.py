"""What one decoding step costs on each real model: the prefill, one AR step (a 1-slot window and its
commit) and a W-slot window forward, as ratios to the AR step, plus parameters and peak memory.

    python benchmarks/bench_models.py --device cuda                      # full architectures, random weights
    python benchmarks/bench_models.py --device cuda --compile            # the torch.compile'd window forward
    python benchmarks/bench_models.py --models janus --size tiny         # CPU smoke run of the script
    python benchmarks/bench_models.py --models toy --device cpu [--compile]   # the toy, eager or compiled
    python benchmarks/bench_models.py --models toy --device cpu --compare --position 136   # both, side by side

Weights are random (`weights=random`): no download, and the cost of a forward does not depend on the
values (the toy loads its shipped weights). `warmup_s` is the untimed warm-up, which holds the
compilation with `--compile`. `window / AR` is the number of AR steps one W-slot Jacobi iteration
costs; a decoder's real speedup is its step compression divided by that ratio (minus the loop's own
overhead). Timings are medians of interleaved repeats after an untimed warm-up; the device is
synchronised around each.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from sjdbench.adapter import WindowInputs
from sjdbench.models.registry import entry

FULL_SIZE = {"lumina": "7B", "llamagen": "XL", "janus": "7B", "emu3": "8B"}
MODELS = ["toy", *FULL_SIZE]


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, fn) -> float:
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def count_parameters(adapter) -> int:
    """Every weight the adapter holds (LM, VQ decoder, text encoder), each counted once."""
    modules = [v for v in vars(adapter).values() if isinstance(v, torch.nn.Module)]
    if hasattr(adapter, "captions"):
        modules.append(adapter.captions.encoder)
    unique = {id(p): p for module in modules for p in module.parameters()}
    return sum(p.numel() for p in unique.values())


def load(model: str, args, compile: bool):
    options: dict = {"compile": compile}
    if model in FULL_SIZE:
        options.update(weights="random", size=args.size or FULL_SIZE[model])
    if args.resolution:
        options["resolution"] = args.resolution
    return entry(model).load(args.device, **options), options


def steps(adapter, args):
    """(prefill seconds, AR step, W-slot window step) on a fresh one-sample cache; both steps sit at
    segment position `args.position` (the keys a forward attends to grow with it)."""
    prompt = adapter.encode_prompt("a photo of a red cube on a wooden table, soft light")
    W, p = args.window, args.position
    if not 0 <= p <= adapter.layout.n_positions - W:
        raise SystemExit(f"--position {p}: choose one from 0 to {adapter.layout.n_positions - W} (segment - window)")
    generator = torch.Generator().manual_seed(0)
    tokens = adapter.image_token_ids[torch.randint(0, adapter.image_token_ids.numel(), (W,), generator=generator)]
    positions = torch.arange(p, p + W, device=adapter.device)[None]
    cache = adapter.new_cache(1, prompt.length, W)
    prefill = timed(args.device, lambda: adapter.prefill(cache, [0], [prompt]))

    def ar_step():
        adapter.forward(cache, WindowInputs(tokens[None, :1], positions[:, :1], None, p + 1))
        adapter.commit(cache, torch.zeros(1, 1, dtype=torch.long, device=adapter.device))

    def window_step():
        adapter.forward(cache, WindowInputs(tokens[None], positions, None, p + W))
        adapter.commit(cache, torch.zeros(1, 1, dtype=torch.long, device=adapter.device))

    return prompt, prefill, ar_step, window_step


def measure(model: str, args) -> list[dict]:
    """One row per mode (eager, compiled, or both side by side: their repeats interleaved in one
    process, so drift and a busy machine hit both alike)."""
    modes = [False, True] if args.compare else [args.compile]
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    runs = []
    for compile in modes:
        adapter, options = load(model, args, compile)
        prompt, prefill, ar_step, window_step = steps(adapter, args)
        start = time.perf_counter()
        for _ in range(2):  # warm-up (and compilation)
            ar_step(), window_step()
        synchronize(args.device)
        runs.append((compile, adapter, options, prompt, prefill, time.perf_counter() - start, ar_step, window_step))
    times: dict[bool, tuple[list[float], list[float]]] = {compile: ([], []) for compile in modes}
    for _ in range(args.repeats):  # interleaved, so drift hits every step and mode alike
        for compile, *_, ar_step, window_step in runs:
            times[compile][0].append(timed(args.device, ar_step))
            times[compile][1].append(timed(args.device, window_step))
    rows: list[dict] = []
    for compile, adapter, options, prompt, prefill, warmup, _, _ in runs:
        ar, window = times[compile]
        row = {
            "model": model,
            "mode": "compiled" if compile else "eager",
            "size": options.get("size", "-"),
            "params_M": count_parameters(adapter) / 1e6,
            "prompt": prompt.length,
            "segment": adapter.layout.n_positions,
            "position": args.position,
            "prefill_ms": 1e3 * prefill,
            "warmup_s": warmup,
            "ar_step_ms": 1e3 * statistics.median(ar),
            "window_ms": 1e3 * statistics.median(window),
        }
        row["window/AR"] = row["window_ms"] / row["ar_step_ms"]
        if rows:  # side by side: the compiled step as a multiple of the eager one
            row["ar_vs_eager"] = row["ar_step_ms"] / rows[0]["ar_step_ms"]
            row["window_vs_eager"] = row["window_ms"] / rows[0]["window_ms"]
        rows.append(row)
    if args.device.startswith("cuda"):
        rows[-1]["peak_GiB"] = torch.cuda.max_memory_allocated() / 2**30
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(FULL_SIZE), choices=MODELS)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", default=None, help="architecture size for every model (default: the released one)")
    parser.add_argument("--resolution", type=int, default=None)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--compare", action="store_true", help="eager and compiled side by side, interleaved")
    parser.add_argument("--position", type=int, default=0, help="segment position both steps start at")
    args = parser.parse_args()
    torch.manual_seed(0)
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    print(
        f"# device {args.device} ({device_name}), torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"W={args.window}, compile={'both' if args.compare else args.compile}, position={args.position}"
    )
    for model in args.models:
        for row in measure(model, args):
            fields = (f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
            print("  ".join(fields), flush=True)
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
