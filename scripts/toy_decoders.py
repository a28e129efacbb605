"""Every preset on the toy model at two windows, as the table docs/TOY.md shows: step compression and
acceptance at each W, and consecutive growth (share of accepted drafts, precision) at the first.

    python scripts/toy_decoders.py [--results results/toy-decoders] [--limit 16] [--windows 16 32] [--no-docs]

One sweep (`sjdbench sweep +sweep=decoders decoder.window=16,32 model=toy data=toy data.limit=16`;
finished runs are reused), then the table from the store through the Python API (`sjdbench.load_runs`),
written as the docs fragment docs/generated/toy_decoders.md with the command, machine and date.
Step compression, acceptance and growth are properties of the samples: they repeat to the last digit
on any machine (same seeds, same tokens).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

from sjdbench.report.generated import script_command, write_fragment

REPO = Path(__file__).resolve().parent.parent
FRAGMENT = REPO / "docs" / "generated" / "toy_decoders.md"


def decoders_table(runs: pd.DataFrame, windows: list[int]) -> str:
    """One row per decoder (sampled AR excluded: it is the reference), its step compression and
    acceptance per window, growth share and precision at the first window; '–' for a window the
    store lacks, greedy decoders marked (their growth is 0 by construction: argmax drafts)."""
    decoders = runs[~runs["is_ar"].astype(bool)]
    first = windows[0]
    header = ["decoder"]
    header += [f"step x W={w}" for w in windows] + [f"accept W={w}" for w in windows]
    header += [f"growth W={first}", f"precision W={first}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    labels = list(dict.fromkeys(decoders.sort_values("run_id")["decoder"]))
    for name in labels:
        own = decoders[decoders["decoder"] == name]
        at = {int(w): row for w, row in own.set_index("window").iterrows()}
        greedy = bool(own["greedy"].astype(bool).any())
        cells = [f"{name} (greedy)" if greedy else str(name)]
        cells += [_number(at.get(w), "step_compression") for w in windows]
        cells += [_number(at.get(w), "acceptance_rate") for w in windows]
        cells += [_number(at.get(first), "growth_share"), "-" if greedy else _number(at.get(first), "growth_precision")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _number(row, column: str) -> str:
    if row is None or column not in row or pd.isna(row[column]):
        return "–"
    return f"{float(row[column]):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=REPO / "results" / "toy-decoders")
    parser.add_argument("--limit", type=int, default=16, help="held-out toy captions")
    parser.add_argument("--windows", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--markdown", type=Path, default=FRAGMENT, help="the docs fragment the table goes to")
    parser.add_argument("--no-docs", action="store_true", help="print the table only")
    args = parser.parse_args()
    words = [
        "sweep",
        "+sweep=decoders",
        f"decoder.window={','.join(map(str, args.windows))}",
        "model=toy",
        "data=toy",
        f"data.limit={args.limit}",
        f"results_dir={args.results}",
    ]
    subprocess.run([sys.executable, "-m", "sjdbench", *words], cwd=REPO, check=True)

    import sjdbench

    runs = sjdbench.load_runs(str(args.results), model="toy", data="toy", window=[1, *args.windows])
    table = decoders_table(runs[runs["n_samples"] == args.limit], args.windows)
    print(table, flush=True)
    if not args.no_docs:
        print(f"table -> {write_fragment(args.markdown, table, script_command())}", flush=True)


if __name__ == "__main__":
    main()
