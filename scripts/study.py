"""The full toy study, in one command: `make study`.

Every decoder preset at W = 16 on the 256 held-out toy captions, AR at seeds 0 and 1 (the second is
the noise floor of every quality difference), batched; then `sjdbench eval` (toy CLIP-Score, toy
FD, object accuracy, each difference to AR with a paired bootstrap CI) and `sjdbench report`. The
runs are split over two worker processes (one torch thread each: the machine's two cores), so the
whole study fits in about half an hour on 2 cores; it prints its own wall time at the end.

    python scripts/study.py [--results results/study] [--limit 256] [--batch 8] [--workers 2]

Finished runs are reused (the store resumes), so an interrupted study continues where it stopped.
The latencies of a study are not its point (its decodes share the machine two by two): step
compression and quality are exact properties of the samples; throughput comes from
benchmarks/bench_batch.py on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a source checkout without installing

from sjdbench.config.identity import decoder_presets  # noqa: E402


def command(*words: str) -> list[str]:
    return [sys.executable, "-m", "sjdbench", *words]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=REPO / "results" / "study")
    parser.add_argument("--limit", type=int, default=256, help="held-out toy captions")
    parser.add_argument("--batch", type=int, default=8, help="samples decoded in lockstep")
    parser.add_argument("--workers", type=int, default=2, help="decoding processes (one CPU thread each)")
    args = parser.parse_args()
    start = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    common = [
        "model=toy",
        "data=toy",
        f"data.limit={args.limit}",
        f"batch_size={args.batch}",
        f"results_dir={args.results}",
        "threads=1",
        "save_images=true",
    ]

    # the two AR runs first, one per worker, then the decoders shared out among the workers
    jobs: list[list[list[str]]] = [[] for _ in range(args.workers)]
    for seed in (0, 1):
        jobs[seed % args.workers].append(command("run", *common, "decoder=ar", f"seed={seed}", "--quiet"))
    presets = decoder_presets()  # every preset of the `decoder` config group
    for i, preset in enumerate(presets):
        words = ["run", *common, f"decoder={preset}", "decoder.window=16", "seed=0", "--quiet"]
        jobs[i % args.workers].append(command(*words))
    workers = [
        subprocess.Popen(["bash", "-c", " && ".join(" ".join(map(_quote, job)) for job in todo)], cwd=REPO, env=env)
        for todo in jobs
        if todo
    ]
    codes = [worker.wait() for worker in workers]
    if any(codes):
        sys.exit(f"a decoding worker failed (exit codes {codes}); re-run `make study` to resume")
    decoded = time.perf_counter() - start
    print(f"study: decoding done in {decoded / 60:.1f} min", flush=True)

    results = f"results_dir={args.results}"
    subprocess.run(command("eval", "model=toy", "data=toy", results), cwd=REPO, env=env, check=True)
    scored = time.perf_counter() - start
    subprocess.run(
        command("report", "model=toy", "data=toy", results, "--out", str(args.results / "report")),
        cwd=REPO,
        env=env,
        check=True,
    )
    total = time.perf_counter() - start
    print(
        f"study: {len(presets)} decoders + AR at seeds 0 and 1 over {args.limit} captions, B = {args.batch}: "
        f"decoding {decoded / 60:.1f} min, scoring {(scored - decoded) / 60:.1f} min, report "
        f"{(total - scored) / 60:.1f} min; total {total / 60:.1f} min (wall)",
        flush=True,
    )


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


if __name__ == "__main__":
    main()
