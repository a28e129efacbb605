"""Why a Jacobi window costs several AR steps on a CPU and about one on a GPU: the cost of one linear
layer against the number of rows fed through it, as a ratio to the 2 rows of an AR step with CFG.

    python benchmarks/bench_rows.py                       # CPU, the toy's width and a 7B model's
    python benchmarks/bench_rows.py --device cuda         # the same on a GPU

An AR step with classifier-free guidance feeds 2 rows (conditional and unconditional) through every
weight matrix; a W-slot window feeds 2W. A layer whose weights must be read from memory for every
forward costs about the same for 2 and for 2W rows as long as reading the weights takes longer than
the arithmetic (a GPU's regime: it does hundreds of multiply-adds per byte it reads); once the
arithmetic dominates, the cost grows with the rows (a CPU's regime: it does a few). The printed
ratio at 2W rows is what one window forward costs in AR steps, before attention and fixed costs.
Medians of interleaved repeats after a warm-up; the device is synchronised around each.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

# (label, d_model, d_out): the toy's feed-forward up-projection, and a 7B model's (Lumina-mGPT,
# Janus-Pro 7B, Emu3: d_model 4096, SwiGLU hidden 11008)
LAYERS = [("toy 192 x 768", 192, 768), ("7B 4096 x 11008", 4096, 11008)]


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def seconds(device: str, x: torch.Tensor, weight: torch.Tensor, repeats: int) -> float:
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        x @ weight
    synchronize(device)
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, help="default: float32 on CPU, bfloat16 on CUDA")
    parser.add_argument("--rows", nargs="+", type=int, default=[2, 8, 32, 64, 128, 256])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--markdown",
        metavar="FILE",
        help="also write the printed table as a docs fragment, e.g. docs/generated/bench_rows.md",
    )
    args = parser.parse_args()
    printed = None
    if args.markdown:  # the script needs only torch otherwise
        from sjdbench.report.generated import tee_stdout

        printed = tee_stdout()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32"))
    print(f"# device={args.device} dtype={dtype} threads={torch.get_num_threads()}")
    print("# cost of a (rows, d) x (d, n) matmul / its cost at 2 rows (an AR step with CFG); 2W rows: a W-slot window")
    print(f"{'layer':<18}" + "".join(f"{f'rows={r}':>10}" for r in args.rows) + f"{'ms @2':>9}")
    for label, d_in, d_out in LAYERS:
        weight = torch.randn(d_in, d_out, device=args.device, dtype=dtype)
        inputs = {r: torch.randn(r, d_in, device=args.device, dtype=dtype) for r in args.rows}
        repeats = max(3, int(2e8 / (d_in * d_out)))  # about 0.2 GFLOP-equivalents of weight reads per timing
        for r in args.rows:  # warm-up
            seconds(args.device, inputs[r], weight, 2)
        times: dict[int, list[float]] = {r: [] for r in args.rows}
        for _ in range(args.rounds):
            for r in args.rows:
                times[r].append(seconds(args.device, inputs[r], weight, repeats))
        median = {r: statistics.median(times[r]) for r in args.rows}
        base = median[args.rows[0]]
        ratios = "".join(f"{median[r] / base:>10.2f}" for r in args.rows)
        print(f"{label:<18}{ratios}{base * 1e3:>9.3f}")
    if printed is not None:
        from sjdbench.report.generated import describe_machine, script_command, text_block, write_fragment

        write_fragment(args.markdown, text_block(printed.getvalue()), script_command(), describe_machine(args.device))


if __name__ == "__main__":
    main()
