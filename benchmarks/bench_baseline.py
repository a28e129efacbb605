"""Is the AR baseline as lean as an AR loop can be? The loop's AR against a bare AR loop, paired.

    python benchmarks/bench_baseline.py                      # toy model, 8 smoke prompts, 2 rounds
    python benchmarks/bench_baseline.py --compile            # both with the compiled window forward
    python benchmarks/bench_baseline.py --model debug --prompts 2 --rounds 1

Every speedup sjdbench reports divides AR's latency by a decoder's, and AR is the one loop with a
window of one slot: it plans a window, verifies no drafts, commits, and records its statistics like
any decoder. Bookkeeping the baseline does not need would make every speedup look better than it
is. The bare loop is the least an AR decode must do on the same adapter: the prefill, then per
position the one-slot window forward, the logits' processing, one draw and the cache commit;
nothing planned, verified or recorded. It draws its uniforms from the same generator in the same
order, so both decode the same tokens (checked for every prompt and round).

Prompt by prompt, each round decodes with the loop (`runner.timed_decode`, what `sjdbench run`
times), with the loop made to run its six general steps for AR (`loop.AR_STEP = "general"`, as
it did before its lean step) and with the bare loop, rotating which goes first. Printed: the median
latency per image of each, the geometric mean over prompts and rounds of each / bare (above 1: it
costs more than the bare loop), and each one's time per step outside the model's forwards.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout without installing

from bench_decoders import ForwardTimer  # noqa: E402  (beside this script: the forwards timed the same way)

from sjdbench.adapter import Sampling, WindowInputs  # noqa: E402
from sjdbench.config import compose_run, decoder_spec  # noqa: E402
from sjdbench.data.prompts import load_prompts  # noqa: E402
from sjdbench.decoding import loop  # noqa: E402
from sjdbench.decoding.loop import loop_constants  # noqa: E402
from sjdbench.decoding.processing import process_logits, sample  # noqa: E402
from sjdbench.decoding.randomness import Draws  # noqa: E402
from sjdbench.machine import apply_threads, cpu_model, cpus_available, load_1m  # noqa: E402
from sjdbench.models.registry import build_adapter, resolve_device  # noqa: E402
from sjdbench.run.runner import resolve_sampling, sample_seed, synchronize, timed_decode  # noqa: E402


def bare_ar(adapter: Any, prompt_text: str, sampling: Sampling, seed: int, device: str) -> tuple[torch.Tensor, float]:
    """The least an AR decode does: (tokens (N,), seconds). The same uniforms as the loop's AR: one
    per position, from the sample's generator, the first after the prefill."""
    generator = torch.Generator(device).manual_seed(seed)
    synchronize(device)
    start = time.perf_counter()
    masks, N = loop_constants(adapter).masks, adapter.layout.n_positions
    prompt = adapter.encode_prompt(prompt_text)
    cache = adapter.new_cache(1, prompt.length, 1)
    logits = adapter.prefill(cache, [0], [prompt])  # (1, 2, V)
    tokens = torch.empty(N, dtype=torch.long, device=device)
    p = process_logits(logits[:, :, None], masks.window(0, 1), sampling)[:, 0]  # (1, V)
    tokens[0] = sample(p, Draws([generator], [1], device))[0]
    keep = torch.zeros(1, 1, dtype=torch.long, device=device)  # the window's one slot
    for n in range(1, N):
        position = torch.tensor([[n - 1]], device=device)
        logits = adapter.forward(cache, WindowInputs(tokens[n - 1 : n][None], position, None, n))  # (1, 2, 1, V)
        p = process_logits(logits, masks.window(n, n + 1)[None], sampling)[:, 0]  # (1, V)
        tokens[n] = sample(p, Draws([generator], [1], device))[0]
        adapter.commit(cache, keep)
    synchronize(device)
    return tokens.cpu(), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model config name (default: the root default, the toy)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2, help="decodes of every prompt with each loop")
    parser.add_argument("--data", default="smoke")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: the runs' default)")
    parser.add_argument("--compile", action="store_true", help="model.compile=true for both (the warm-up compiles)")
    args = parser.parse_args()

    device = resolve_device(args.device)
    threads = apply_threads(args.threads, device)
    words = [f"data={args.data}", f"data.limit={args.prompts}", f"device={device}", "decoder=ar"]
    words += [f"model={args.model}"] if args.model else []
    words += ["model.compile=true"] if args.compile else []
    config = compose_run(words)
    adapter = build_adapter(config.model.name, dict(config.model.options), device)
    sampling = resolve_sampling(adapter.default_sampling, config.sampling)
    ar = decoder_spec(config).build(adapter)
    prompts, _ = load_prompts(config.data)
    load_start = load_1m()

    def decode(which: str, model: Any, prompt_text: str, seed: int) -> tuple[torch.Tensor, float]:
        if which == "bare":
            return bare_ar(model, prompt_text, sampling, seed, device)
        loop.AR_STEP = "lean" if which == "loop" else "general"
        try:
            timed = timed_decode(model, prompt_text, ar, sampling, seed, device)
        finally:
            loop.AR_STEP = "lean"
        return timed.result.tokens.cpu(), timed.latency_s

    kinds = ("loop", "general", "bare")
    for which in kinds:  # warm-up (the compilation, if any)
        decode(which, adapter, prompts[0].text, 0)
    seconds: dict[str, list[float]] = {which: [] for which in kinds}
    for round_ in range(args.rounds):
        for i, prompt in enumerate(prompts):
            seed = sample_seed(0, prompt.prompt_id, round_)
            shift = (i + round_) % len(kinds)
            tokens = {}
            for which in kinds[shift:] + kinds[:shift]:
                tokens[which], elapsed = decode(which, adapter, prompt.text, seed)
                seconds[which].append(elapsed)
            if not all(torch.equal(tokens[which], tokens["bare"]) for which in kinds):
                sys.exit(f"the loops decoded different tokens for prompt {prompt.prompt_id}: a bug in this script")

    # time outside the model's forwards, per step, over one decode of each prompt
    clock, outside = ForwardTimer(adapter, device), {}
    steps = adapter.layout.n_positions - 1
    for which in kinds:
        clock.seconds, wall = 0.0, 0.0
        for prompt in prompts:
            wall += decode(which, clock, prompt.text, sample_seed(0, prompt.prompt_id, 0))[1]
        outside[which] = 1000 * (wall - clock.seconds) / (steps * len(prompts))

    print(
        f"# model={adapter.name} compiled={args.compile} prompts={len(prompts)} rounds={args.rounds} "
        f"tokens/image={adapter.layout.n_positions} device={device} threads={threads} cpu={cpu_model()} "
        f"cpus={cpus_available()} load_1m={load_start}->{load_1m()}"
    )
    print(
        "# the same tokens in every decode; loop: sjdbench's AR; general: the loop's six steps for AR; "
        "x bare: geometric mean over prompts and rounds of latency / the bare loop's"
    )
    print(f"{'AR loop':<10}{'ms/image':>10}{'x bare':>9}{'outside ms/step':>17}")
    for which in kinds:
        ratio = math.exp(statistics.fmean(math.log(a / b) for a, b in zip(seconds[which], seconds["bare"])))
        print(f"{which:<10}{1000 * statistics.median(seconds[which]):>10.1f}{ratio:>9.3f}{outside[which]:>17.3f}")


if __name__ == "__main__":
    main()
