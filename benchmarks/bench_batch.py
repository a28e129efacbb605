"""Throughput against batch size, side by side in one process: images per second of AR and each
decoder at B = 1, 4, 8, 16, and each decoder's speedup over AR at the same batch size.

    python benchmarks/bench_batch.py                                  # toy model, a few presets
    python benchmarks/bench_batch.py --decoders sjd --batches 1 8 --prompts 16 --rounds 3

Every (decoder, B) decodes the same prompts with the same per-sample seeds through the batched loop
(`jacobi_decode_batch`, B samples in lockstep, a finished sample's slot taken by the next), the
device synchronised around the whole stream. Rounds interleave every (decoder, B) so that machine
drift hits all of them alike; the figure per (decoder, B) is the median over rounds. Absolute CPU
times are noise; the ratios measured in one run are the result.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout without installing

from sjdbench.config import compose_run, decoder_spec  # noqa: E402
from sjdbench.data.prompts import load_prompts  # noqa: E402
from sjdbench.decoding.loop import Request, jacobi_decode_batch  # noqa: E402
from sjdbench.machine import apply_threads, cpu_model, cpus_available, load_1m  # noqa: E402
from sjdbench.models.registry import build_adapter, resolve_device  # noqa: E402
from sjdbench.report.generated import describe_machine, script_command, tee_stdout, text_block, write_fragment  # noqa: E402
from sjdbench.run.runner import resolve_sampling, sample_seed, synchronize  # noqa: E402

PRESETS = ["sjd", "sjd_pp", "lantern", "sjd_pac", "pjd"]


def stream_seconds(adapter, prompts, decoder, sampling, batch: int, device: str) -> tuple[float, int]:
    """(decoding seconds, total NFE) of every prompt once, `batch` at a time."""
    requests = [Request(p.text, torch.Generator(device).manual_seed(sample_seed(0, p.prompt_id, 0))) for p in prompts]
    synchronize(device)
    start = time.perf_counter()
    nfe = sum(result.stats.nfe for _, result in jacobi_decode_batch(adapter, requests, decoder, sampling, batch))
    synchronize(device)
    return time.perf_counter() - start, nfe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model config name (default: the root default, the toy)")
    parser.add_argument("--decoders", nargs="+", default=PRESETS, help="decoder presets (AR is always measured)")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4, 8, 16], help="batch sizes B")
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (the median is shown)")
    parser.add_argument("--data", default="toy")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--dtype", default=None, help="model.dtype (e.g. float64)")
    parser.add_argument(
        "--markdown",
        metavar="FILE",
        help="also write the printed table as a docs fragment, e.g. docs/generated/bench_batch.md",
    )
    args = parser.parse_args()
    printed = tee_stdout() if args.markdown else None

    device = resolve_device(args.device)
    threads = apply_threads(args.threads, device)
    base = [f"data={args.data}", f"data.limit={args.prompts}", f"device={device}"]
    if args.model:
        base.append(f"model={args.model}")
    if args.dtype:
        base.append(f"model.dtype={args.dtype}")
    ar_cfg = compose_run([*base, "decoder=ar"])
    adapter = build_adapter(ar_cfg.model.name, dict(ar_cfg.model.options), device)
    sampling = resolve_sampling(adapter.default_sampling, ar_cfg.sampling)
    decoders = {"ar": decoder_spec(ar_cfg).build(adapter)}
    for name in args.decoders:
        config = compose_run([*base, f"decoder={name}", f"decoder.window={args.window}"])
        decoders[name] = decoder_spec(config).build(adapter)
    prompts, _ = load_prompts(ar_cfg.data)
    load_start = load_1m()
    for decoder in decoders.values():  # warm-up, untimed: every batch shape's first allocations
        for batch in args.batches:
            stream_seconds(adapter, prompts[: max(batch, 1)], decoder, sampling, batch, device)
    seconds: dict[tuple[str, int], list[float]] = {(d, b): [] for d in decoders for b in args.batches}
    nfe: dict[tuple[str, int], int] = {}
    for _ in range(args.rounds):
        for batch in args.batches:
            for name, decoder in decoders.items():
                wall, total_nfe = stream_seconds(adapter, prompts, decoder, sampling, batch, device)
                seconds[(name, batch)].append(wall)
                nfe[(name, batch)] = total_nfe

    n = len(prompts)
    print(
        f"# model={adapter.name} prompts={n} W={args.window} device={device} threads={threads} cpu={cpu_model()} "
        f"cpus={cpus_available()} load_1m={load_start}->{load_1m()} rounds={args.rounds}"
    )
    print("# img/s: images per decoding second (median over rounds); vs AR: img/s over AR's img/s at the same B")
    print(f"{'decoder':<12}{'B':>4}{'NFE':>8}{'img/s':>9}{'vs B=1':>8}{'vs AR':>8}")
    for name in decoders:
        for batch in args.batches:
            ips = n / statistics.median(seconds[(name, batch)])
            ips_1 = n / statistics.median(seconds[(name, args.batches[0])])
            ar = n / statistics.median(seconds[("ar", batch)])
            print(f"{name:<12}{batch:>4}{nfe[(name, batch)] / n:>8.1f}{ips:>9.2f}{ips / ips_1:>8.2f}{ips / ar:>8.2f}")
    if printed is not None:
        write_fragment(args.markdown, text_block(printed.getvalue()), script_command(), describe_machine(device))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
