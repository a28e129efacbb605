"""Throughput against batch size, side by side in one process: images per second of AR and each
decoder at B = 1, 4, 8, 16, and each decoder's speedup over AR at the same batch size.

    python benchmarks/bench_batch.py                                  # toy model, a few presets
    python benchmarks/bench_batch.py --decoders sjd --batches 1 8 --prompts 16 --rounds 3

Every (decoder, B) decodes the same prompts with the same per-sample seeds through the runner's
stream (`runner.decode_stream`: the batched loop, B samples in lockstep, a finished sample's slot
taken by the next, the device synchronised around each step), recording the rows a run stores. Rounds
interleave every (decoder, B) so that machine drift hits all of them alike; each round is one stream.
img/s is images over decoding seconds pooled over the rounds' streams, and vs AR is results.pairing's
speedup over AR's rows at the same B (at B = 1 the per-prompt latency ratios, as for any run). The
default decoders are a few presets of the `decoder` config group. Absolute CPU times are noise; the
ratios measured in one run are the result.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source checkout without installing

from sjdbench.config import compose_run, decoder_spec  # noqa: E402
from sjdbench.data.prompts import load_prompts  # noqa: E402
from sjdbench.machine import apply_threads, cpu_model, cpus_available, load_1m  # noqa: E402
from sjdbench.models.registry import build_adapter, resolve_device  # noqa: E402
from sjdbench.report.generated import describe_machine, script_command, tee_stdout, text_block, write_fragment  # noqa: E402
from sjdbench.results.pairing import images_per_s, speedup  # noqa: E402
from sjdbench.run.runner import decode_stream, resolve_sampling  # noqa: E402

DEFAULT = ["sjd", "sjd_pp", "lantern", "sjd_pac", "pjd"]  # a few presets: every one at every B takes long


def stream_rows(adapter, prompts, decoder, sampling, batch: int, device: str, stream_id: str) -> list[dict]:
    """Every prompt once, `batch` at a time, as the rows the runner stores: per sample its stream's
    images and decoding seconds so far, and at B = 1 its own latency; plus its NFE."""
    rows, before = [], 0.0
    keys = [(prompt, 0) for prompt in prompts]
    for decoded in decode_stream(adapter, keys, decoder, sampling, 0, device, batch):
        prompt, sample = decoded.key
        rows.append(
            {
                "prompt_id": prompt.prompt_id,
                "sample": sample,
                "latency_s": decoded.decode_s - before if batch == 1 else None,
                "stream.id": stream_id,
                "stream.batch_size": batch,
                "stream.images": decoded.images,
                "stream.decode_s": decoded.decode_s,
                "nfe": decoded.result.stats.nfe,
            }
        )
        before = decoded.decode_s
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model config name (default: the root default, the toy)")
    parser.add_argument("--decoders", nargs="+", default=DEFAULT, help="decoder presets (AR is always measured)")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4, 8, 16], help="batch sizes B")
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (one stream each, pooled)")
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
            stream_rows(adapter, prompts[: max(batch, 1)], decoder, sampling, batch, device, "warm-up")
    rows: dict[tuple[str, int], list[dict]] = {(d, b): [] for d in decoders for b in args.batches}
    for round_ in range(args.rounds):
        for batch in args.batches:
            for name, decoder in decoders.items():
                rows[(name, batch)] += stream_rows(
                    adapter, prompts, decoder, sampling, batch, device, f"round {round_}"
                )
    frames = {key: pd.DataFrame(found) for key, found in rows.items()}

    n = len(prompts)
    print(
        f"# model={adapter.name} prompts={n} W={args.window} device={device} threads={threads} cpu={cpu_model()} "
        f"cpus={cpus_available()} load_1m={load_start}->{load_1m()} rounds={args.rounds}"
    )
    print(
        "# img/s: images per decoding second over the rounds' streams; vs AR: results.pairing's speedup over AR "
        "at the same B (B = 1: per-prompt latency ratios)"
    )
    print(f"{'decoder':<12}{'B':>4}{'NFE':>8}{'img/s':>9}{'vs B=1':>8}{'vs AR':>8}")
    for name in decoders:
        for batch in args.batches:
            frame = frames[(name, batch)]
            ips, ips_1 = images_per_s(frame) or float("nan"), images_per_s(frames[(name, args.batches[0])])
            ratio = speedup(frames[("ar", batch)], frame).value or float("nan")
            vs_first = ips / ips_1 if ips_1 else float("nan")
            print(f"{name:<12}{batch:>4}{frame['nfe'].mean():>8.1f}{ips:>9.2f}{vs_first:>8.2f}{ratio:>8.2f}")
    if printed is not None:
        write_fragment(args.markdown, text_block(printed.getvalue()), script_command(), describe_machine(device))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
