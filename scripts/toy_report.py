"""Regenerate the toy report the documentation shows, in one command: `make report-toy`.

1. sweeps on the toy model (8 held-out captions; --limit 16 for tighter CIs): every preset at
   W = 16, the window, growth-steps, fusion and topology ablations (the AR baseline is added by the
   sweeps);
   finished runs are reused, so re-running only fills what is missing;
2. quality scores: `sjdbench eval` on every run (the toy's offline evaluators: toy CLIP-Score,
   Fréchet distance in toy-CLIP space, object accuracy; already-scored runs are not recomputed);
3. `sjdbench report` with draft traces (4 prompts per decoder) into <results>/report;
4. the documentation's assets: the main table as the fragment docs/generated/toy_report.md (with
   the command, the machine and the date), the trajectories and quality-vs-speed figures copied to
   docs/report/, and a headless-Chromium screenshot of report.html at docs/report_screenshot.png
   (skipped with a note when Chromium is missing).

    python scripts/toy_report.py [--results results/toy-report] [--limit 8] [--no-docs]

On a machine shared with other jobs, OMP_NUM_THREADS=1 keeps each decode from oversubscribing the cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sjdbench.report.generated import script_command, write_fragment

REPO = Path(__file__).resolve().parent.parent
SWEEPS = ["+sweep=decoders", "+sweep=window", "+sweep=growth_steps", "+sweep=fusion", "+sweep=topologies"]
FRAGMENT = REPO / "docs" / "generated" / "toy_report.md"


def sjdbench(*words: str, check: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "sjdbench", *words]
    print("$ sjdbench " + " ".join(words), flush=True)
    return subprocess.run(command, cwd=REPO, check=check)


def main_table_fragment(main_md: Path, fragment: Path, command: str) -> Path:
    """The report's main table (its title one level down, under the page's own heading) as a docs
    fragment; the table's bullets already name the model, data, hardware and commit."""
    body = main_md.read_text().replace("### ", "#### ", 1).strip()
    return write_fragment(fragment, body, command)


def screenshot(html: Path, png: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        print("no Chromium found (apt-get install chromium); screenshot skipped", flush=True)
        return
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            f"--screenshot={png}",
            "--window-size=1400,3000",
            html.resolve().as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    print(f"screenshot -> {png}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results/toy-report", help="results directory for the toy runs")
    parser.add_argument("--limit", type=int, default=8, help="toy captions per run")
    parser.add_argument("--no-docs", action="store_true", help="leave docs/ untouched")
    args = parser.parse_args()
    results = (REPO / args.results).resolve()
    shown = os.path.relpath(results, REPO)  # commands run in the repository: the page shows short paths
    common = ["model=toy", "data=toy", f"data.limit={args.limit}", f"results_dir={shown}"]
    for preset in SWEEPS:
        sjdbench("sweep", preset, *common)
    run_dirs = sorted(str(p) for p in (results / "runs").iterdir() if (p / "summary.json").exists())
    sjdbench("eval", *run_dirs, check=False)
    out = results / "report"
    sjdbench(
        "report",
        "model=toy",
        "data=toy",
        f"results_dir={shown}",
        "--trace-drafts",
        "4",
        "--out",
        os.path.relpath(out, REPO),
    )
    if args.no_docs:
        return
    figures = out / "figures" / "toy-toy"
    docs = REPO / "docs" / "report"
    docs.mkdir(parents=True, exist_ok=True)
    for name in ("trajectories.png", "quality_vs_speed.png"):
        if (figures / name).exists():
            shutil.copyfile(figures / name, docs / name)
    print(f"table -> {main_table_fragment(out / 'main.md', FRAGMENT, script_command())}", flush=True)
    screenshot(out / "report.html", REPO / "docs" / "report_screenshot.png")


if __name__ == "__main__":
    main()
