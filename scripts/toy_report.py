"""Regenerate the toy report the README shows, in one command: `make report-toy`.

1. sweeps on the toy model (8 held-out captions; --limit 16 for tighter CIs): every preset at
   W = 16, the window, growth-steps and fusion ablations (the AR baseline is added by the sweeps);
   finished runs are reused, so re-running only fills what is missing;
2. quality scores: `sjdbench eval` on every run when that command exists; otherwise an interim toy
   CLIP-Score per run (100 * max(cos, 0) under the embedded toy CLIP, bootstrap CI over prompts,
   paired difference to AR), marked `interim` in its protocol and deleted once `sjdbench eval` exists;
3. `sjdbench report` with draft traces (4 prompts per decoder) into <results>/report;
4. the README's assets: the main table spliced between its markers, the trajectories and
   quality-vs-speed figures copied to docs/report/, and a headless-Chromium screenshot of
   report.html at docs/report_screenshot.png (skipped with a note when Chromium is missing).

    python scripts/toy_report.py [--results results/toy-report] [--limit 8] [--no-readme]

On a machine shared with other jobs, OMP_NUM_THREADS=1 keeps each decode from oversubscribing the cores.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SWEEPS = ["+sweep=decoders", "+sweep=window", "+sweep=growth_steps", "+sweep=fusion"]
README_BEGIN, README_END = "<!-- toy-report:main:begin -->", "<!-- toy-report:main:end -->"
INTERIM = "scripts/toy_report.py (interim, until `sjdbench eval` exists)"


def sjdbench(*words: str, check: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "sjdbench", *words]
    print("$ sjdbench " + " ".join(words), flush=True)
    return subprocess.run(command, cwd=REPO, check=check)


def has_eval() -> bool:
    probe = subprocess.run([sys.executable, "-m", "sjdbench", "eval", "--help"], cwd=REPO, capture_output=True)
    return probe.returncode == 0


def bootstrap_mean_ci(values: np.ndarray, resamples: int = 10_000, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(axis=1)
    return [float(v) for v in np.quantile(means, [0.025, 0.975])]


def interim_clip_scores(results: Path) -> None:
    """Toy CLIP-Score of every toy run's images, with the paired difference to its AR run."""
    from PIL import Image

    from sjdbench.models.toy.clip import clip_score
    from sjdbench.report.load import load_runs
    from sjdbench.report.pairing import find_baseline
    from sjdbench.store import RunStore, atomic_write_json

    runs = load_runs(results)
    runs = runs[runs["status"].isin(("complete", "partial")) & (runs["model"] == "toy")]
    per_run = {}
    for _, run in runs.iterrows():
        rows = [r for r in RunStore(results, run["run_id"]).rows() if r.get("image")]
        images = np.stack([np.asarray(Image.open(Path(run["run_dir"]) / r["image"]).convert("RGB")) for r in rows])
        per_run[run["run_id"]] = {(r["prompt_id"], r.get("sample", 0)): float(s)
                                  for r, s in zip(rows, clip_score(images, [r["prompt"] for r in rows]))}
    protocol = {"evaluator": "toy_clip", "score": "100*max(cos,0)", "model": "embedded toy CLIP", "scorer": INTERIM,
                "interim": True}
    protocol_hash = hashlib.sha256(json.dumps(protocol, sort_keys=True).encode()).hexdigest()[:12]
    for _, run in runs.iterrows():
        scores = per_run[run["run_id"]]
        values = np.array(list(scores.values()))
        baseline = find_baseline(run, runs)
        paired = None
        if baseline is not None and baseline["run_id"] != run["run_id"]:
            theirs = per_run[baseline["run_id"]]
            keys = sorted(set(scores) & set(theirs))
            deltas = np.array([scores[k] - theirs[k] for k in keys])
            paired = {"ar_run_id": baseline["run_id"], "delta": float(deltas.mean()),
                      "ci95": bootstrap_mean_ci(deltas), "n_pairs": len(keys)}
        atomic_write_json(Path(run["run_dir"]) / "scores" / f"toy_clip-{protocol_hash}.json", {
            "schema": 1, "run_id": run["run_id"], "evaluator": "toy_clip", "metric": "toy CLIP-Score",
            "lower_is_better": False, "value": float(values.mean()), "ci95": bootstrap_mean_ci(values), "n": int(values.size),
            "protocol": protocol, "protocol_hash": protocol_hash,
            "per_sample": [{"prompt_id": p, "sample": s, "value": v} for (p, s), v in sorted(scores.items())],
            "paired_vs_ar": paired, "noise_floor": None, "extra": {}})
    print(f"interim toy CLIP-Scores written for {len(runs)} runs", flush=True)


def drop_interim_scores(results: Path) -> None:
    for path in results.glob("runs/*/scores/*.json"):
        if json.loads(path.read_text()).get("protocol", {}).get("interim"):
            path.unlink()


def splice_readme(main_md: Path) -> None:
    readme = REPO / "README.md"
    text = readme.read_text()
    if README_BEGIN not in text or README_END not in text:
        print(f"README.md has no {README_BEGIN} ... {README_END} markers; table not spliced", flush=True)
        return
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    body = main_md.read_text().replace("### ", "#### ", 1).strip()
    readme.write_text(f"{head}{README_BEGIN}\n{body}\n{README_END}{tail}")


def screenshot(html: Path, png: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        print("no Chromium found (apt-get install chromium); screenshot skipped", flush=True)
        return
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                    f"--screenshot={png}", "--window-size=1400,3000", html.resolve().as_uri()],
                   check=True, capture_output=True, timeout=120)
    print(f"screenshot -> {png}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results/toy-report", help="results directory for the toy runs")
    parser.add_argument("--limit", type=int, default=8, help="toy captions per run")
    parser.add_argument("--no-readme", action="store_true", help="leave README.md and docs/ untouched")
    args = parser.parse_args()
    results = (REPO / args.results).resolve()
    shown = os.path.relpath(results, REPO)  # commands run in the repository: the page shows short paths
    common = ["model=toy", "data=toy", f"data.limit={args.limit}", f"results_dir={shown}"]
    for preset in SWEEPS:
        sjdbench("sweep", preset, *common)
    if has_eval():
        drop_interim_scores(results)
        run_dirs = sorted(str(p) for p in (results / "runs").iterdir() if (p / "summary.json").exists())
        sjdbench("eval", *run_dirs, check=False)
    else:
        interim_clip_scores(results)
    out = results / "report"
    sjdbench("report", "model=toy", "data=toy", f"results_dir={shown}", "--trace-drafts", "4", "--out",
             os.path.relpath(out, REPO))
    if args.no_readme:
        return
    figures = out / "figures" / "toy-toy"
    docs = REPO / "docs" / "report"
    docs.mkdir(parents=True, exist_ok=True)
    for name in ("trajectories.png", "quality_vs_speed.png"):
        if (figures / name).exists():
            shutil.copyfile(figures / name, docs / name)
    splice_readme(out / "main.md")
    screenshot(out / "report.html", REPO / "docs" / "report_screenshot.png")


if __name__ == "__main__":
    main()
