"""Window topologies side by side: step compression, paired latency speedup and total variation from
exact AR for every preset at the equivalent window sizes W = 16, 32, 64.

    python benchmarks/bench_topologies.py                          # toy, 8 prompts, W = 16 32 64, TV at 8000
    python benchmarks/bench_topologies.py --prompts 16 --tv-samples 20000
    python benchmarks/bench_topologies.py --decoders sjd_pac sjd_pac:decoder/init=above --windows 64 128

W is the number of slots one forward holds: a chain's window, a tree's nodes, the slots of all rows
in flight together. A decoder is a preset, optionally with overrides after a colon
(`sjd_pac:decoder.topology.width=4,decoder/init=above`).

Step compression and latency: the toy model at its shipped sampling, held-out toy captions; every
decoder decodes every prompt with the same seed, interleaved prompt by prompt after AR, in one
process (timed by runner.timed_decode, as `sjdbench run` times), so machine drift hits all of them
alike. The speedup is results.pairing's: the geometric mean of per-prompt AR / decoder latency.
Absolute CPU times are noise; the ratios of one run are the result. The decoders are every preset
of the `decoder` config group plus VARIANTS.

TV: the exactness suite's enumerable model (sjdbench.exactness.enumerable_model: 256 sequences);
n samples per decoder against the exact AR probabilities, with the noise floor an exact sampler has at
that n and the chi-square p-value. Its grid is 2 tokens wide, so the rows presets run there with
row_start = 1 (rows overlap by one token); the window covers the whole segment at every W, so one TV
per decoder. Greedy decoders and those with a trained drafter get none ("-"): the tabulated model has
no hidden states for a drafter (their exactness is the drafter suites'); nor does a decoder whose part
needs what the tabulated model lacks (a phrase table), which a `# TV: none for ...` line names.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

import pandas as pd
import torch

from sjdbench.config import compose_run, decoder_spec
from sjdbench.config.identity import decoder_presets
from sjdbench.data.prompts import load_prompts
from sjdbench.decoder_identity import needs_drafter
from sjdbench.decoding.loop import jacobi_decode
from sjdbench.errors import UserError
from sjdbench.models.registry import build_adapter
from sjdbench.report.generated import describe_machine, printed_markdown, script_command, tee_stdout, write_fragment
from sjdbench.results.pairing import speedup
from sjdbench.run.runner import resolve_sampling, sample_seed, timed_decode

# beside every preset of the `decoder` config group: the topologies at another shape
VARIANTS = ["sjd_pac:decoder.topology.width=4", "zipar:decoder.topology.row_start=4"]


def overrides_of(decoder: str) -> tuple[str, list[str]]:
    name, _, extra = decoder.partition(":")
    return name, [f"decoder={name}", *(o for o in extra.split(",") if o)]


def is_rows(decoder: str) -> bool:
    _, words = overrides_of(decoder)
    return decoder_spec(compose_run(words)).topology.name == "rows"


def is_greedy(decoder: str) -> bool:
    """Greedy decoders (Jacobi) equal greedy AR, not sampled AR: no TV to measure."""
    _, words = overrides_of(decoder)
    return decoder_spec(compose_run(words)).greedy


def has_tv(decoder: str) -> bool:
    """Whether the enumerable model can measure its TV: not for greedy decoders, nor for those that
    draft with a trained drafter (the tabulated model has no hidden states to feed one)."""
    _, words = overrides_of(decoder)
    return not is_greedy(decoder) and not needs_drafter(decoder_spec(compose_run(words)).identity())


def name_of(decoder: str) -> str:
    from sjdbench.config.identity import label

    return label(compose_run(overrides_of(decoder)[1]))


def tv_from_ar(decoder: str, n: int, seed: int) -> tuple[str, dict | str]:
    """TV, noise floor, chi-square p and mean NFE of n samples on the enumerable model, or why the
    decoder cannot run there (a part that needs what the tabulated model lacks, e.g. a phrase table)."""
    from sjdbench.exactness import TabulatedAdapter, decoder_fit, enumerable_model

    torch.set_num_threads(1)
    adapter = TabulatedAdapter(enumerable_model(), "ab")
    _, words = overrides_of(decoder)
    if is_rows(decoder):
        words.append("decoder.topology.row_start=1")
    try:
        built = decoder_spec(compose_run([*words, "decoder.window=64"])).build(adapter, track_growth=False)
    except UserError as error:
        return decoder, str(error)
    fit = decoder_fit(adapter, built, adapter.default_sampling, n, seed=seed)
    return decoder, {"tv": fit.tv, "noise": fit.tv_noise, "p": fit.p_value, "nfe": fit.mean_nfe}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decoders", nargs="+", default=None, help="default: every preset, plus VARIANTS")
    parser.add_argument("--windows", nargs="+", type=int, default=[16, 32, 64])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--data", default="toy")
    parser.add_argument("--model", default="toy")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the latency runs")
    parser.add_argument("--tv-samples", type=int, default=8000, help="0: skip the TV column")
    parser.add_argument("--tv-workers", type=int, default=2)
    parser.add_argument(
        "--markdown",
        metavar="FILE",
        help="also write the printed table as a docs fragment, e.g. docs/generated/bench_topologies.md",
    )
    args = parser.parse_args()
    printed = tee_stdout() if args.markdown else None
    args.decoders = args.decoders or [*decoder_presets(), *VARIANTS]
    torch.set_num_threads(args.threads)

    tv: dict[str, dict] = {}
    if args.tv_samples:
        start = time.time()
        measured = [d for d in args.decoders if has_tv(d)]
        with ProcessPoolExecutor(args.tv_workers, mp_context=mp.get_context("fork")) as pool:
            fits = dict(pool.map(tv_from_ar, measured, [args.tv_samples] * len(measured), range(len(measured))))
        tv = {decoder: fit for decoder, fit in fits.items() if isinstance(fit, dict)}
        for decoder, why in fits.items():
            if isinstance(why, str):
                print(f"# TV: none for {decoder}: {why}")
        print(f"# TV: {args.tv_samples} samples per decoder on the enumerable model, {time.time() - start:.0f} s")

    base = [f"model={args.model}", f"data={args.data}", f"data.limit={args.prompts}", f"device={args.device}"]
    ar_cfg = compose_run([*base, "decoder=ar"])
    adapter = build_adapter(ar_cfg.model.name, dict(ar_cfg.model.options), args.device)
    sampling = resolve_sampling(adapter.default_sampling, ar_cfg.sampling)
    runs = {("ar", 1): decoder_spec(ar_cfg).build(adapter, track_growth=False)}
    for decoder in args.decoders:
        _, words = overrides_of(decoder)
        for window in args.windows:
            runs[(decoder, window)] = decoder_spec(compose_run([*base, *words, f"decoder.window={window}"])).build(
                adapter, track_growth=False
            )
    prompts, _ = load_prompts(ar_cfg.data)
    for built in runs.values():  # warm-up, untimed
        jacobi_decode(adapter, prompts[0].text, built, sampling, torch.Generator(args.device).manual_seed(0))
    latency = {key: [] for key in runs}
    nfe = {key: [] for key in runs}
    slots = {key: [] for key in runs}
    for prompt in prompts:
        seed = sample_seed(0, prompt.prompt_id, 0)
        for key, built in runs.items():
            timed = timed_decode(adapter, prompt.text, built, sampling, seed, args.device)  # as `sjdbench run` times
            result = timed.result
            latency[key].append({"prompt_id": prompt.prompt_id, "sample": 0, "latency_s": timed.latency_s})
            nfe[key].append(result.stats.nfe)
            slots[key].append(result.stats.slots_fed / max(result.stats.iterations, 1))

    tokens = adapter.layout.n_positions
    print(
        f"# model={adapter.name} prompts={len(prompts)} tokens/image={tokens} device={args.device} "
        f"threads={torch.get_num_threads()} cpu={platform.processor() or platform.machine()} cores={os.cpu_count()} "
        f"load={os.getloadavg()[0]:.1f}"
    )
    print("| decoder | W | slots/forward | NFE | step x | speedup | TV from AR (noise floor) | p | claim |")
    print("|---|---|---|---|---|---|---|---|---|")
    ar_rows = pd.DataFrame(latency[("ar", 1)])
    for key in runs:
        decoder, window = key
        ratio = speedup(ar_rows, pd.DataFrame(latency[key])).value or float("nan")  # results.pairing's
        mean_nfe = statistics.fmean(nfe[key])
        fit = tv.get(decoder)
        tv_cell = f"{fit['tv']:.4f} ({fit['noise']:.4f})" if fit else "-"
        p_cell = f"{fit['p']:.2g}" if fit else "-"
        claim = "lossless" if decoder_spec(compose_run(overrides_of(decoder)[1])).lossless() else "lossy"
        print(
            f"| {name_of(decoder) if decoder != 'ar' else 'ar'} | {window} | {statistics.fmean(slots[key]):.1f} "
            f"| {mean_nfe:.1f} | {tokens / mean_nfe:.2f} | "
            f"{ratio:.2f} | {tv_cell} | {p_cell} | {claim} |"
        )
    if printed is not None:
        write_fragment(
            args.markdown, printed_markdown(printed.getvalue()), script_command(), describe_machine(args.device)
        )


if __name__ == "__main__":
    main()
