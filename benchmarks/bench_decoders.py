"""Side-by-side decoder benchmark: step compression, paired latency speedup vs AR, and where the time
goes (model forwards vs decoding machinery), in one process.

    python benchmarks/bench_decoders.py                          # toy model, every preset, W = 16, 32, 64
    python benchmarks/bench_decoders.py --decoders sjd sjd_vp --windows 32 --prompts 4
    python benchmarks/bench_decoders.py --model debug --prompts 2 --windows 4 --overhead-prompts 1
    python benchmarks/bench_decoders.py --decoders sjd --windows 16 --compile   # the compiled decode

Latency: AR and every (decoder, W) decode the same prompt with the same seed one after another,
prompt by prompt, through `runner.timed_decode` (the function `sjdbench run` times with), so
machine drift hits all of them alike; the speedup is results.pairing's, as every command prints
it: the geometric mean of per-prompt AR/decoder latency ratios. The presets are the `decoder`
config group's. Absolute CPU times are noise; the ratios measured in one run are the result.

Overhead: a second pass decodes `--overhead-prompts` prompts with the model's forwards and prefill
timed (device-synchronised), a trained drafter's among them (its network, and the target's head
over its features: a model's arithmetic too); everything else (sampling, verification, proposals,
tree building, statistics, cache commits, bookkeeping) is the decoding machinery. Printed per
decoder and W: the share of wall time outside model forwards and the machinery's time per iteration.
`--steps` splits that time by the loop's steps in the same pass (AR's lean step; plan, the forward
step's own work around the model, verify, commit, the drafter's advance, observe, propose; `rest`:
the loop between them): where the machinery goes, per decoder, without a profiler.

Window cost: the time of one W-token window forward over one 1-token (AR) forward, both at the
middle of the image with the cache filled, medians of interleaved repeats.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout without installing

from sjdbench.adapter import WindowInputs
from sjdbench.config import compose_run, decoder_spec  # noqa: E402
from sjdbench.config.identity import decoder_presets  # noqa: E402
from sjdbench.data.prompts import load_prompts  # noqa: E402
from sjdbench.machine import apply_threads, cpu_model, cpus_available, load_1m  # noqa: E402
from sjdbench.models.registry import build_adapter, resolve_device  # noqa: E402
from sjdbench.report.generated import describe_machine, script_command, tee_stdout, text_block, write_fragment  # noqa: E402
from sjdbench.results.pairing import speedup  # noqa: E402
from sjdbench.run.runner import resolve_sampling, sample_seed, synchronize, timed_decode  # noqa: E402


class ForwardTimer:
    """The adapter with its model forwards timed; every other attribute is the adapter's own."""

    def __init__(self, adapter: Any, device: str) -> None:
        self._adapter, self._device = adapter, device
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._adapter, name)

    def _timed(self, method, *args, **kwargs):
        synchronize(self._device)
        start = time.perf_counter()
        out = method(*args, **kwargs)
        synchronize(self._device)
        self.seconds += time.perf_counter() - start
        return out

    def prefill(self, *args, **kwargs):
        return self._timed(self._adapter.prefill, *args, **kwargs)

    def forward(self, *args, **kwargs):
        return self._timed(self._adapter.forward, *args, **kwargs)

    # the same forwards returning hidden states too, which decoders with a trained drafter call
    def prefill_states(self, *args, **kwargs):
        return self._timed(self._adapter.prefill_states, *args, **kwargs)

    def forward_states(self, *args, **kwargs):
        return self._timed(self._adapter.forward_states, *args, **kwargs)


@contextmanager
def drafter_forwards_timed(timer: ForwardTimer) -> Iterator[None]:
    """Within: a trained drafter's forwards add to the timer's seconds as well: its network over
    the prompt (`Drafter.start`) and each extend or level with the target's head over its features
    (`Drafter._run`)."""
    from sjdbench.models.drafter.drafting import Drafter

    untimed = {name: getattr(Drafter, name) for name in ("start", "_run")}

    def timing(method: Any) -> Any:
        return lambda drafter, *args, **kwargs: timer._timed(method, drafter, *args, **kwargs)

    try:
        for name, method in untimed.items():
            setattr(Drafter, name, timing(method))
        yield
    finally:
        for name, method in untimed.items():
            setattr(Drafter, name, method)


# BatchDecode's steps of one iteration, as `--steps` names them (verify_chains: a chain's fixed-shape
# verify; step_ar: a one-slot decoder's whole iteration, AR's lean step)
LOOP_STEPS = {
    "step_ar": "lean",
    "plan": "plan",
    "forward": "forward",
    "verify": "verify",
    "verify_chains": "verify",
    "commit": "commit",
    "advance_drafter": "advance",
    "observe": "observe",
    "propose": "propose",
}


@contextmanager
def loop_steps_timed(timer: ForwardTimer, seconds: dict[str, float]) -> Iterator[None]:
    """Within: each loop step's wall time outside the model's forwards (the timer's seconds that
    elapsed inside it are taken off: the forward step holds the target's forward, and a drafter's
    run in plan and advance) adds to `seconds[step]`."""
    from sjdbench.decoding.loop import BatchDecode

    untimed = {name: getattr(BatchDecode, name) for name in LOOP_STEPS}

    def timing(name: str, method: Any) -> Any:
        def timed(decode: Any, *args: Any, **kwargs: Any) -> Any:
            model, start = timer.seconds, time.perf_counter()
            try:
                return method(decode, *args, **kwargs)
            finally:
                step = LOOP_STEPS[name]
                seconds[step] = seconds.get(step, 0.0) + time.perf_counter() - start - (timer.seconds - model)

        return timed

    try:
        for name, method in untimed.items():
            setattr(BatchDecode, name, timing(name, method))
        yield
    finally:
        for name, method in untimed.items():
            setattr(BatchDecode, name, method)


def window_cost(adapter: Any, prompt_text: str, widths: list[int], device: str, repeats: int = 30) -> dict[int, float]:
    """{W: time of a W-token window forward / time of a 1-token forward}, at mid-image."""
    prompt = adapter.encode_prompt(prompt_text)
    cache = adapter.new_cache(1, prompt.length, max(widths))
    adapter.prefill(cache, [0], [prompt])
    middle = adapter.layout.n_positions // 2
    token = int(adapter.image_token_ids[0])
    inputs = {
        w: (torch.full((1, w), token, device=device), torch.arange(middle, middle + w, device=device)[None])
        for w in [1, *widths]
    }
    times: dict[int, list[float]] = {w: [] for w in inputs}
    for w, (tokens, positions) in inputs.items():  # warm-up
        adapter.forward(cache, WindowInputs(tokens, positions, None, middle + w))
    for _ in range(repeats):
        for w, (tokens, positions) in inputs.items():
            synchronize(device)
            start = time.perf_counter()
            adapter.forward(cache, WindowInputs(tokens, positions, None, middle + w))
            synchronize(device)
            times[w].append(time.perf_counter() - start)
    one = statistics.median(times[1])
    return {w: statistics.median(times[w]) / one for w in widths}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model config name (default: the root default, the toy)")
    parser.add_argument(
        "--decoders", nargs="+", default=None, help="decoder presets (default: every preset; AR is always the baseline)"
    )
    parser.add_argument("--windows", nargs="+", type=int, default=[16, 32, 64], help="window sizes W")
    parser.add_argument("--prompts", type=int, default=8, help="prompts for the paired latencies")
    parser.add_argument("--overhead-prompts", type=int, default=2, help="prompts for the overhead pass (0: skip)")
    parser.add_argument("--data", default="smoke")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: the runs' default)")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="model.compile=true: the forward and the chain's fixed-shape step compiled (the warm-up compiles)",
    )
    parser.add_argument(
        "--steps",
        action="store_true",
        help="also split the machinery's time per iteration by loop step (in the overhead pass)",
    )
    parser.add_argument(
        "--markdown",
        metavar="FILE",
        help="also write the printed table as a docs fragment, e.g. docs/generated/bench_decoders.md",
    )
    args = parser.parse_args()
    printed = tee_stdout() if args.markdown else None

    device = resolve_device(args.device)
    threads = apply_threads(args.threads, device)
    base = [f"data={args.data}", f"data.limit={args.prompts}", f"device={device}"]
    if args.model:
        base.append(f"model={args.model}")
    if args.compile:
        base.append("model.compile=true")
    ar_cfg = compose_run([*base, "decoder=ar"])
    adapter = build_adapter(ar_cfg.model.name, dict(ar_cfg.model.options), device)
    sampling = resolve_sampling(adapter.default_sampling, ar_cfg.sampling)
    chosen = args.decoders or decoder_presets()
    names = [("ar", 1)] + [(d, w) for d in chosen if d != "ar" for w in args.windows]
    decoders = {("ar", 1): decoder_spec(ar_cfg).build(adapter)}
    for name, width in names[1:]:
        decoders[(name, width)] = decoder_spec(
            compose_run([*base, f"decoder={name}", f"decoder.window={width}"])
        ).build(adapter)
    prompts, _ = load_prompts(ar_cfg.data)
    load_start = load_1m()

    for decoder in decoders.values():  # warm-up, untimed
        timed_decode(adapter, prompts[0].text, decoder, sampling, 0, device)
    latency: dict[tuple, list[dict]] = {key: [] for key in decoders}  # sample rows, as the store holds them
    nfe: dict[tuple, list[int]] = {key: [] for key in decoders}
    busy = 0
    for prompt in prompts:
        seed = sample_seed(0, prompt.prompt_id, 0)
        for key, decoder in decoders.items():
            timed = timed_decode(adapter, prompt.text, decoder, sampling, seed, device)
            latency[key].append({"prompt_id": prompt.prompt_id, "sample": 0, "latency_s": timed.latency_s})
            nfe[key].append(timed.result.stats.nfe)
            busy += bool(timed.machine["busy"])

    outside: dict[tuple, tuple[float, float]] = {}
    steps: dict[tuple, dict[str, float]] = {}  # (decoder, W) -> step -> ms per iteration
    if args.overhead_prompts:
        timer = ForwardTimer(adapter, device)
        with drafter_forwards_timed(timer):
            for key, decoder in decoders.items():
                timer.seconds, wall, iterations, seconds = 0.0, 0.0, 0, {}
                with loop_steps_timed(timer, seconds) if args.steps else nullcontext():
                    for prompt in prompts[: args.overhead_prompts]:
                        seed = sample_seed(0, prompt.prompt_id, 0)
                        timed = timed_decode(timer, prompt.text, decoder, sampling, seed, device)
                        wall += timed.latency_s
                        iterations += timed.result.stats.iterations
                outside[key] = (1 - timer.seconds / wall, 1000 * (wall - timer.seconds) / iterations)
                if args.steps:
                    steps[key] = {step: 1000 * s / iterations for step, s in seconds.items()}
                    steps[key]["rest"] = outside[key][1] - sum(steps[key].values())
    costs = window_cost(adapter, prompts[0].text, args.windows, device)

    tokens = adapter.layout.n_positions
    print(
        f"# model={adapter.name} compiled={args.compile} prompts={len(prompts)} tokens/image={tokens} device={device} "
        f"threads={threads} "
        f"cpu={cpu_model()} cpus={cpus_available()} load_1m={load_start}->{load_1m()} busy_decodes={busy}"
    )
    print(
        "# speedup: geometric mean over prompts of AR/decoder latency (results.pairing), interleaved prompt by prompt; "
        "outside: share of wall time outside model forwards (a trained drafter's included); "
        "ms/it: that time per iteration"
    )
    print(f"{'decoder':<12}{'W':>4}{'NFE':>8}{'step x':>8}{'speedup':>9}{'lat ms':>9}{'outside':>9}{'ms/it':>8}")
    ar_rows = pd.DataFrame(latency[("ar", 1)])
    for key in decoders:
        name, width = key
        rows = pd.DataFrame(latency[key])
        ratio = speedup(ar_rows, rows).value
        mean_nfe = statistics.fmean(nfe[key])
        share, per_iteration = outside.get(key, (float("nan"), float("nan")))
        print(
            f"{name:<12}{width:>4}{mean_nfe:>8.1f}{tokens / mean_nfe:>8.2f}{ratio or float('nan'):>9.2f}"
            f"{1000 * rows['latency_s'].mean():>9.1f}{share:>9.1%}{per_iteration:>8.2f}"
        )
    if steps:
        names = [*dict.fromkeys(LOOP_STEPS.values()), "rest"]
        print(
            "# the machinery's ms/it by loop step (overhead pass): each step's wall time less the model's "
            "forwards inside it; rest: the loop between the steps"
        )
        print(f"{'decoder':<12}{'W':>4}" + "".join(f"{name:>9}" for name in names))
        for (name, width), split in steps.items():
            print(f"{name:<12}{width:>4}" + "".join(f"{split.get(step, 0.0):>9.3f}" for step in names))
    print(
        "# window forward cost in AR steps (one W-token window forward / one 1-token forward, mid-image): "
        + ", ".join(f"W={w}: {c:.2f}" for w, c in costs.items())
    )
    sys.stdout.flush()
    if busy:
        print(
            f"# warning: {busy} decodes ran while the machine was busy (load above {cpus_available()} cores); "
            "ratios are still paired, absolute times are not to be trusted",
            file=sys.stderr,
        )
    if printed is not None:
        write_fragment(args.markdown, text_block(printed.getvalue()), script_command(), describe_machine(device))


if __name__ == "__main__":
    main()
