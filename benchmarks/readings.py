"""Our readings of the peer decoders vs the released code's: what each difference costs and buys.

    python benchmarks/readings.py --threads 1            # both parts, 40,000 samples per decoder
    python benchmarks/readings.py --samples 8000 --skip-toy --only lantern
    python benchmarks/readings.py --skip-exact --prompts 16 --results results

Part 1, exactness: on models small enough to enumerate every sequence (the exactness suite's model:
4 content cells x 4 codes, 2 forced row ends, CFG 2; and a 16-code variant with 2 content cells,
where GSD's 14-token slice and G = 50 form different groups), each decoder draws `--samples`
sequences at W = 4; printed are the total-variation distance of their empirical distribution from the
exact AR one, the noise floor (the TV an exact sampler shows at this n), the chi-square p-value, the
acceptance rate and the NFE. A lossless decoder sits at the noise floor.

Part 2, the toy model at W = 16 (`--prompts` held-out captions, the shipped sampling): step
compression (AR tokens / NFE) and acceptance of each reading, through the runner, so every row is
the run of `sjdbench run model=toy data=toy data.limit=16 decoder=... <knobs>` and is resumed from
`--results` when it exists.

Every number printed is a count, not a timing, so a busy machine changes only how long it takes
(`--threads 1` keeps the toy part from oversubscribing shared cores).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import torch

from sjdbench.decoding.loop import Decoder, jacobi_decode
from sjdbench.decoding.registry import resolve_part
from sjdbench.exactness import TabulatedAdapter, chi_square, exact_probabilities, expected_tv_noise
from sjdbench.models.debug import build_debug_adapter
from sjdbench.report.generated import printed_markdown, script_command, tee_stdout, write_fragment

PROMPT = "ab"
WINDOW = 4  # enumerable models: the exactness suite's window


@dataclass(frozen=True)
class Variant:
    """One decoder of part 1: parts by name with their knobs, on one enumerable model."""

    label: str
    model: str  # "suite" | "codes16"
    proposal: tuple = ("resample", ())
    verifier: tuple = ("exact", ())


GSD_KNOBS = (("p_thr", 0.15), ("d_thr", 10.0))  # every code pair within d_thr: groups form by rank and p
LANTERN_KNOBS = (("k", 2), ("delta", 0.1))  # k + 1 = 3: the released k + 1 zeroing differs from k

VARIANTS = [
    Variant("sjd", "suite"),
    Variant("mc_sjd (reference=new_p, ours)", "suite", ("coupled", (("reference", "new_p"),))),
    Variant("mc_sjd (reference=old_q, official)", "suite", ("coupled", (("reference", "old_q"),))),
    Variant("lantern (ours_all)", "suite", verifier=("lantern", LANTERN_KNOBS + (("reading", "ours_all"),))),
    Variant("lantern (ours_moved)", "suite", verifier=("lantern", LANTERN_KNOBS + (("reading", "ours_moved"),))),
    Variant(
        "lantern (official_llamagen)",
        "suite",
        verifier=("lantern", LANTERN_KNOBS + (("reading", "official_llamagen"),)),
    ),
    Variant(
        "lantern (official_lumina)", "suite", verifier=("lantern", LANTERN_KNOBS + (("reading", "official_lumina"),))
    ),
    Variant("gsd (ours, G=50)", "suite", verifier=("gsd", GSD_KNOBS + (("reading", "ours"),))),
    Variant("gsd (official)", "suite", verifier=("gsd", GSD_KNOBS + (("reading", "official"),))),
    Variant("sjd", "codes16"),
    Variant("gsd (ours, G=50)", "codes16", verifier=("gsd", GSD_KNOBS + (("reading", "ours"),))),
    Variant("gsd (official)", "codes16", verifier=("gsd", GSD_KNOBS + (("reading", "official"),))),
]


def enumerable_adapter(model: str):
    if model == "suite":  # tests/test_exactness.py's model
        return build_debug_adapter(
            grid_h=2, grid_w=2, n_codes=4, dim=32, n_layers=2, init_std=0.15, cfg_scale=2.0, seed=0
        )
    return build_debug_adapter(grid_h=1, grid_w=2, n_codes=16, dim=32, n_layers=2, init_std=0.3, cfg_scale=2.0, seed=0)


def build_decoder(variant: Variant, adapter) -> Decoder:
    def part(kind: str, chosen: tuple):
        name, knobs = chosen
        return resolve_part(kind, {"name": name, **dict(knobs)}, f"decoder.{kind}").build(adapter)

    return Decoder(
        WINDOW,
        part("proposal", variant.proposal),
        part("verifier", variant.verifier),
        part("init", ("random", ())),
        track_growth=False,
        trace_positions=0,
    )


def _draw(variant: Variant, n: int, seed: int) -> tuple[Counter, Counter]:
    torch.set_num_threads(1)
    adapter = TabulatedAdapter(enumerable_adapter(variant.model), PROMPT)
    decoder = build_decoder(variant, adapter)
    generator = torch.Generator().manual_seed(seed)
    counts, totals = Counter(), Counter()
    for _ in range(n):
        result = jacobi_decode(adapter, PROMPT, decoder, adapter.default_sampling, generator)
        counts[tuple(result.tokens.tolist())] += 1
        row = result.stats.to_row()
        for key in ("nfe", "accepted", "verified"):
            totals[key] += row[key]
    return counts, totals


@dataclass
class Fit:
    tv: float
    noise: float
    chi2: float
    dof: int
    p_value: float
    accept: float
    nfe: float


def measure(variant: Variant, n: int, exact: dict, workers: int) -> Fit:
    """n samples split over `workers` processes (fixed seeds: reruns print the same numbers)."""
    shares = [n // workers + (i < n % workers) for i in range(workers)]
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
        parts = list(pool.map(_draw, [variant] * workers, shares, [1000 + i for i in range(workers)]))
    counts, totals = Counter(), Counter()
    for c, t in parts:
        counts.update(c)
        totals.update(t)
    tv = 0.5 * sum(abs(counts.get(s, 0) / n - p) for s, p in exact.items())
    tv += 0.5 * sum(c / n for s, c in counts.items() if s not in exact)
    chi2, dof, p_value = chi_square(counts, exact)
    return Fit(
        tv, expected_tv_noise(exact, n), chi2, dof, p_value, totals["accepted"] / totals["verified"], totals["nfe"] / n
    )


def exactness_part(n: int, workers: int, only: str | None = None) -> None:
    exact = {}
    for model in ("suite", "codes16"):
        adapter = TabulatedAdapter(enumerable_adapter(model), PROMPT)
        exact[model] = exact_probabilities(adapter, adapter.default_sampling)
    print(f"## Part 1: TV from exact AR, enumerable models, W = {WINDOW}, {n} samples per decoder\n")
    print("| model | decoder | TV from AR | noise floor | chi2 / dof | p | accept | NFE |")
    print("|---|---|---|---|---|---|---|---|")
    for variant in VARIANTS:
        if only and only not in variant.label:
            continue
        fit = measure(variant, n, exact[variant.model], workers)
        model = "4 cells x 4 codes" if variant.model == "suite" else "2 cells x 16 codes"
        print(
            f"| {model} | {variant.label} | {fit.tv:.4f} | {fit.noise:.4f} | {fit.chi2:.0f} / {fit.dof} | "
            f"{fit.p_value:.2g} | {fit.accept:.3f} | {fit.nfe:.3f} |",
            flush=True,
        )
    print()


TOY_RUNS = [
    ("sjd", ()),
    ("gsd", ("decoder.verifier.reading=ours",)),
    ("gsd", ("decoder.verifier.reading=official",)),
    ("lantern", ("decoder.verifier.reading=ours_all",)),
    ("lantern", ("decoder.verifier.reading=ours_moved",)),
    ("lantern", ("decoder.verifier.reading=official_llamagen",)),
    ("lantern", ("decoder.verifier.reading=official_lumina",)),
    ("mc_sjd", ("decoder.proposal.reference=new_p",)),
    ("mc_sjd", ("decoder.proposal.reference=old_q",)),
]


def toy_part(prompts: int, window: int, results: str) -> None:
    from sjdbench.config import compose_run
    from sjdbench.config.identity import label
    from sjdbench.models.registry import build_adapter
    from sjdbench.run.runner import execute

    base = ["model=toy", "data=toy", f"data.limit={prompts}", f"decoder.window={window}", f"results_dir={results}"]
    adapter = None
    print(f"## Part 2: the toy model, W = {window}, {prompts} held-out captions\n")
    print("| decoder | command knobs | step x | accept | run |")
    print("|---|---|---|---|---|")
    for preset, knobs in TOY_RUNS:
        config = compose_run([*base, f"decoder={preset}", *knobs])
        if adapter is None:
            adapter = build_adapter(config.model.name, dict(config.model.options), "cpu")
        summary = execute(config, adapter=adapter).summary
        print(
            f"| {label(config)} | `decoder={preset} {' '.join(knobs)}` | {summary['step_compression']:.2f} | "
            f"{summary['acceptance_rate']:.3f} | {summary['run_id']} |",
            flush=True,
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=40_000, help="sequences per decoder in part 1")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--prompts", type=int, default=16, help="toy captions in part 2")
    parser.add_argument("--window", type=int, default=16, help="window W in part 2")
    parser.add_argument("--results", default="results", help="results directory of part 2's runs")
    parser.add_argument("--only", default=None, help="part 1: only decoders whose label contains this")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (1 on a busy machine)")
    parser.add_argument("--skip-exact", action="store_true")
    parser.add_argument("--skip-toy", action="store_true")
    parser.add_argument(
        "--markdown",
        metavar="FILE",
        help="also write the printed table as a docs fragment, e.g. docs/generated/readings.md",
    )
    args = parser.parse_args()
    printed = tee_stdout() if args.markdown else None
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.skip_exact:
        exactness_part(args.samples, args.workers, args.only)
    if not args.skip_toy:
        toy_part(args.prompts, args.window, args.results)
    if printed is not None:
        write_fragment(args.markdown, printed_markdown(printed.getvalue()), script_command())


if __name__ == "__main__":
    main()
