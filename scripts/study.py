"""The full toy study, in one command: `make study`.

Every decoder preset at W = 16 on the 256 held-out toy captions, AR at seeds 0 and 1 (the second is
the noise floor of every quality difference), 32 samples decoded in lockstep; then `sjdbench eval`
(toy CLIP-Score, toy FD, object accuracy, each difference to AR with a paired bootstrap CI) and
`sjdbench report`, on this study's runs (a store may hold runs of other batch sizes). The
runs are taken from one queue by two worker processes (one torch thread each: the machine's two
cores), and scored the same way: the decoders split between the workers (each measures the AR
samples its comparisons need, or reads them once the other has), then one pass over every run
for AR's own scores, which finds the rest measured and prints the table. The script prints its
wall time and the CPU time its decoding workers spent at the end. Last,
the quality table (one row per decoder, every score with its difference to AR and, for the toy
CLIP-Score, the equivalence to AR) is written as the docs fragment docs/generated/study.md.

    python scripts/study.py [--results results/study] [--limit 256] [--batch 32] [--workers 2] [--no-docs]

Finished runs are reused (the store resumes), so an interrupted study continues where it stopped.
The latencies of a study are not its point (its decodes share the machine two by two): step
compression and quality are exact properties of the samples; throughput comes from
benchmarks/bench_batch.py on a quiet machine. So its runs decode no untimed warm-up batch
(`warmup=0`), which at B = 32 would add an eighth to each run's work; the runs' ids do not depend on it.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FRAGMENT = REPO / "docs" / "generated" / "study.md"
sys.path.insert(0, str(REPO))  # run from a source checkout without installing

from sjdbench.config.identity import decoder_presets, preset_decoder  # noqa: E402
from sjdbench.decoder_identity import needs_drafter  # noqa: E402


def command(*words: str) -> list[str]:
    return [sys.executable, "-m", "sjdbench", *words]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=REPO / "results" / "study")
    parser.add_argument("--limit", type=int, default=256, help="held-out toy captions")
    parser.add_argument("--batch", type=int, default=32, help="samples decoded in lockstep")
    parser.add_argument("--workers", type=int, default=2, help="decoding processes (one CPU thread each)")
    parser.add_argument("--markdown", type=Path, default=FRAGMENT, help="the docs fragment the quality table goes to")
    parser.add_argument("--no-docs", action="store_true", help="write no docs fragment")
    args = parser.parse_args()
    start = time.perf_counter()
    workers = max(1, args.workers)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    common = [
        "model=toy",
        "data=toy",
        f"data.limit={args.limit}",
        f"batch_size={args.batch}",
        f"results_dir={args.results}",
        "threads=1",
        "save_images=true",
        "warmup=0",  # latencies are not the study's point: no untimed batch before each run
    ]

    # one queue of runs, taken by the workers as they come free, the longest first: the presets with a
    # trained drafter (its forwards at every tree level cost several times a Jacobi decode on the
    # toy), then the rest, AR last; so no long decode starts while the other worker is about to idle
    presets = decoder_presets()  # every preset of the `decoder` config group
    presets = sorted(presets, key=lambda p: not needs_drafter(preset_decoder(p).identity()))  # stable
    names = [*presets, "ar", "ar"]
    jobs = [command("run", *common, f"decoder={p}", "decoder.window=16", "seed=0", "--quiet") for p in presets]
    jobs += [command("run", *common, "decoder=ar", f"seed={seed}", "--quiet") for seed in (0, 1)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        codes = list(pool.map(lambda job: subprocess.run(job, cwd=REPO, env=env).returncode, jobs))
    if any(codes):
        failed = [p for p, code in zip(names, codes) if code]
        sys.exit(f"decoding failed for {', '.join(failed)}; re-run `make study` to resume")
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    decoding_cpu = cpu.ru_utime + cpu.ru_stime
    decoded = time.perf_counter() - start
    print(
        f"study: decoding done in {decoded / 60:.1f} min wall, {decoding_cpu / 60:.1f} min of CPU in the "
        f"workers (load average at the end {os.getloadavg()[0]:.1f})",
        flush=True,
    )

    # this study's runs: a store may also hold earlier studies' runs at another batch size
    chosen = ["model=toy", "data=toy", f"batch_size={args.batch}", f"results_dir={args.results}"]
    halves = [presets[i::workers] for i in range(workers)]
    scoring = [command("eval", *chosen, "decoder=" + ",".join(half)) for half in halves if half]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        quiet = {"cwd": REPO, "env": env, "stdout": subprocess.DEVNULL}  # their tables: the last pass prints one
        codes = list(pool.map(lambda job: subprocess.run(job, **quiet).returncode, scoring))
    if any(codes):
        sys.exit("scoring failed (its error is above); re-run `make study` to resume: what was measured is kept")
    subprocess.run(command("eval", *chosen), cwd=REPO, check=True)  # AR's own scores; prints the table
    scored = time.perf_counter() - start
    subprocess.run(command("report", *chosen, "--out", str(args.results / "report")), cwd=REPO, check=True)
    total = time.perf_counter() - start
    print(
        f"study: {len(presets)} decoders + AR at seeds 0 and 1 over {args.limit} captions, B = {args.batch}: "
        f"decoding {decoded / 60:.1f} min, scoring {(scored - decoded) / 60:.1f} min, report "
        f"{(total - scored) / 60:.1f} min; total {total / 60:.1f} min (wall)",
        flush=True,
    )
    if not args.no_docs:
        from sjdbench.report.generated import script_command, write_fragment

        body = study_table(args.results, batch=args.batch) + (
            f"\n\nWall time at B = {args.batch}: decoding {decoded / 60:.1f} min ({decoding_cpu / 60:.1f} min of "
            f"CPU in {args.workers} workers), scoring {(scored - decoded) / 60:.1f} min, "
            f"report {(total - scored) / 60:.1f} min (printed by the script)."
        )
        print(f"table -> {write_fragment(args.markdown, body, script_command())}", flush=True)


# evaluator -> (column title, decimals); others by their own name with 3 decimals
SHORT = {"toy_clip": ("toy CLIP", 1), "toy_fd": ("toy FD", 3), "toy_objects": ("objects", 3)}


def study_table(results: Path, group: tuple[str, str] = ("toy", "toy"), batch: int | None = None) -> str:
    """The study's quality table from its store: one row per run (AR at each seed, then each
    decoder), step compression, and per evaluator the value and the paired difference to AR at the
    first seed [95 % CI] (bold where the interval excludes 0), with the equivalence column the
    report adds for a metric with a margin. AR's second seed reads against the first: that row is
    the noise floor."""
    import json

    from sjdbench.report.tables import quality_tables
    from sjdbench.results.runs import load_scores, runs_frame
    from sjdbench.results.store import USABLE

    runs = runs_frame(results)
    runs = runs[runs["status"].isin(USABLE)]
    if batch is not None:  # one study's runs (batch_size is a fact of every run's id)
        runs = runs[runs["batch_size"] == batch]
    runs = runs.reset_index(drop=True)
    tables = quality_tables(runs, load_scores(runs), group)
    by_id = runs.set_index("run_id")
    listed = list(dict.fromkeys(run_id for t in tables for run_id in t.frame["run_id"]))
    ars = sorted((r for r in listed if by_id.loc[r, "is_ar"]), key=lambda r: (by_id.loc[r, "seed"], r))
    order = ars + [r for r in listed if r not in ars]  # AR by seed, then the decoders as the report orders them
    first_ar = ars[0] if ars else None
    header = ["decoder", "lossless", "step x"]
    rows = {
        run_id: [_decoder_name(by_id.loc[run_id]), "", f"{by_id.loc[run_id, 'step_compression']:.2f}"]
        for run_id in order
    }
    for table in tables:
        frame = table.frame.set_index("run_id")
        evaluator = str(frame["evaluator"].iloc[0])
        title, digits = SHORT.get(evaluator, (evaluator, 3))
        equivalence = [label for label in table.labels if label.startswith("equivalence")]
        header += [title, f"Δ {title} vs AR"] + [f"{e}" for e in equivalence]
        floor_ci = None
        for path in frame.get("file", []):
            floor = (json.loads(Path(path).read_text()).get("noise_floor") or {}) if isinstance(path, str) else {}
            floor_ci = floor_ci or floor.get("ci95")
        for run_id in order:
            if run_id not in frame.index:
                rows[run_id] += ["–", "–"] + ["–"] * len(equivalence)
                continue
            row = frame.loc[run_id]
            rows[run_id][1] = str(row["lossless"])
            delta, lo, hi = row.get("delta"), row.get("delta_lo"), row.get("delta_hi")
            if by_id.loc[run_id, "is_ar"] and run_id != first_ar and first_ar in frame.index:
                delta, lo, hi = row["value"] - frame.loc[first_ar, "value"], *(floor_ci or (None, None))
            rows[run_id] += [f"{row['value']:.{digits}f}", _delta(delta, lo, hi, digits)]
            rows[run_id] += [str(row[e]) for e in equivalence]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows.values()]
    n = sorted({str(v) for t in tables for v in t.frame["n"]})
    seed = by_id.loc[first_ar, "seed"] if first_ar else 0
    notes = [
        f"N = {', '.join(n)} samples per run; Δ: paired difference to AR at seed {seed} [bootstrap 95 % CI over "
        "prompts], bold where the interval excludes 0; AR's other seed against it is the noise floor",
        *(note for t in tables for note in t.notes),
    ]
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {note}" for note in notes)


def _decoder_name(run) -> str:
    return f"{run['decoder']} (seed {run['seed']})" if run["is_ar"] else str(run["decoder"])


def _delta(delta, lo, hi, digits: int) -> str:
    import math

    def present(value) -> bool:
        return value is not None and not (isinstance(value, float) and math.isnan(value))

    if not present(delta):
        return "–"
    text = f"{delta:+.{digits}f}"
    if present(lo) and present(hi):
        text += f" [{lo:+.{digits}f}, {hi:+.{digits}f}]"
        if lo > 0 or hi < 0:
            text = f"**{text}**"
    return text


if __name__ == "__main__":
    main()
