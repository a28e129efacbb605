"""The toy model's calibration, measured and written as the tables docs/TOY.md shows.

1. `sjdbench toy calibrate --png docs/toy_samples.png --out docs/toy_calibration.json`: SJD step
   compression at W = 16 and 32, context sensitivity, toy CLIP-Score and the object finder on
   held-out captions (a few minutes on 2 cores);
2. `sjdbench toy calibrate --knobs --out docs/toy_knobs.json`: SJD at W = 16 and drawn objects under
   each sampling knob;
3. the three tables (measurements, sampling knobs, object finder) rendered from those JSON files
   as docs fragments in docs/generated/, each with the command, the machine and the date.

    python scripts/toy_calibration.py              # measure, then write the tables
    python scripts/toy_calibration.py --tables-only --machine "2-core x86 CPU" --date 2026-11-30
                                                   # re-render from the JSON files, saying where and
                                                   # when they were measured (they do not record it)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from sjdbench.report.generated import write_fragment

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
MEASURE = "sjdbench toy calibrate --png docs/toy_samples.png --out docs/toy_calibration.json"
KNOBS = "sjdbench toy calibrate --knobs --out docs/toy_knobs.json"


def measurements_table(cal: dict) -> str:
    """The regime measurements of one `calibrate` run (its JSON) as a Markdown table."""
    w16, w32, ar = cal["sjd_w16"], cal["sjd_w32"], cal["ar"]
    fd = cal["toy_fd"]
    n_fd = cal.get("objects", {}).get("n_images", "?")
    shape_ar, shape_r = cal["shape_accuracy_ar"], cal["shape_accuracy_renders"]
    colour_ar, colour_r = cal["colour_accuracy_ar"], cal["colour_accuracy_renders"]
    rows = [
        ("adapter load time (`build_toy_adapter()`)", f"{cal['load_seconds']:.3f} s"),
        (
            "SJD step compression, W = 16",
            f"**{w16['step_compression_mean']:.2f}×** (std {w16['step_compression_std']:.2f} over {w16['n']} "
            f"captions), acceptance rate {w16['acceptance_rate_mean']:.2f}",
        ),
        (
            "SJD step compression, W = 32",
            f"**{w32['step_compression_mean']:.2f}×** (std {w32['step_compression_std']:.2f}), acceptance rate "
            f"{w32['acceptance_rate_mean']:.2f}",
        ),
        ("AR", f"{ar['step_compression_mean']:.2f}× ({ar['seconds'] / ar['n']:.2f} s per image)"),
        (
            "context sensitivity: mean TV between p(·\\|true prefix) and p(·\\|previous row taken from another "
            "image), rows 1–15 of 6 encoded held-out renders, processed (CFG + top-k) distributions",
            f"{cal['context_tv']:.2f}",
        ),
        (f"toy CLIP-Score of the {ar['n']} AR samples with their captions", f"{cal['clip_score_ar_matched']:.1f}"),
        ("… with shuffled captions (rolled by one)", f"{cal['clip_score_ar_shuffled']:.1f}"),
        ("… of the renders of the same captions (ceiling)", f"{cal['clip_score_renders_matched']:.1f}"),
        (
            f"toy CLIP shape-swap accuracy, {ar['n']} AR samples ({shape_ar['n']} objects) / their renders",
            f"{shape_ar['accuracy']:.2f} / {shape_r['accuracy']:.2f} (chance {shape_ar['chance']:.2f})",
        ),
        (
            "toy CLIP colour-swap accuracy, same",
            f"{colour_ar['accuracy']:.2f} / {colour_r['accuracy']:.2f} (chance {colour_ar['chance']:.2f})",
        ),
        (
            f"toy Fréchet distance (toy CLIP features, L2-normalised, 64-d) to {fd['n_reference']} reference "
            f"renders: AR samples / round trips / renders of the same {n_fd} captions (floor at this set size)",
            f"{fd['ar']:.3f} / {fd['roundtrip']:.3f} / {fd['renders']:.3f}",
        ),
    ]
    return _table(["measurement", "value"], rows)


def _setting(setting, sampling: dict) -> str:
    if setting == "shipped":
        return f"**shipped** (CFG {sampling['cfg_scale']:g}, top-k {sampling['top_k']}, T {sampling['temperature']:g})"
    names = {"top_k": "top-k", "cfg_scale": "CFG", "temperature": "temperature", "top_p": "top-p"}
    parts = []
    for key, value in setting.items():
        shown = "off" if key == "top_k" and value == 0 else f"{value:g}" if isinstance(value, float) else str(value)
        parts.append(f"{names.get(key, key)} {shown}")
    return ", ".join(parts)


def knobs_table(knobs: list[dict], sampling: dict) -> str:
    """The sampling-knob sweep (`calibrate --knobs`) as a Markdown table."""
    rows = [
        (
            _setting(entry["setting"], sampling),
            f"{entry['step_compression_mean']:.2f}×",
            f"{entry['acceptance_rate_mean']:.2f}",
            f"{entry['objects']['shape']:.2f}",
            f"{entry['objects']['cell']:.2f}",
        )
        for entry in knobs
    ]
    return _table(["setting", "step compression", "acceptance", "objects: shape right", "objects: cell right"], rows)


def objects_table(cal: dict) -> str:
    """The object finder on renders, their tokenizer round trips and AR samples."""
    objects = cal["objects"]
    absolute = objects["ar"]["objects_with_absolute_position"]
    header = [
        "images",
        "colour present",
        "shape right (chance 0.17)",
        "shape and size right",
        f"cell right (absolute positions, {absolute} objects; chance ≈ 0.11)",
    ]
    names = {
        "renders": "renders (ceiling: occlusion, borders)",
        "roundtrip": "tokenizer round trips of the renders",
        "ar": "**AR samples, shipped sampling**",
    }
    rows = []
    for key, name in names.items():
        rates = [f"{objects[key][k]:.2f}" for k in ("present", "shape", "shape_and_size", "cell")]
        rows.append((name, *(f"**{r}**" if key == "ar" else r for r in rates)))
    return _table(header, rows)


def _table(header: list[str], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def write_tables(
    calibration: Path, knobs: Path, out: Path, machine: str | None = None, when: str | None = None
) -> list[Path]:
    """The three fragments from the two JSON files (machine and date: this one, today, unless given)."""
    code = "rendered from its JSON by `python scripts/toy_calibration.py --tables-only`" if machine or when else None
    cal = json.loads(calibration.read_text())
    sweep = json.loads(knobs.read_text())
    return [
        write_fragment(out / "toy_calibration.md", measurements_table(cal), MEASURE, machine, when, code),
        write_fragment(out / "toy_knobs.md", knobs_table(sweep, cal["sampling"]), KNOBS, machine, when, code),
        write_fragment(out / "toy_objects.md", objects_table(cal), MEASURE, machine, when, code),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables-only", action="store_true", help="render the tables from the JSON files only")
    parser.add_argument("--out", type=Path, default=DOCS / "generated", help="folder of the fragments")
    parser.add_argument("--machine", help="with --tables-only: the machine the JSON files were measured on")
    parser.add_argument("--date", help="with --tables-only: the date they were measured")
    args = parser.parse_args()
    if args.tables_only and not (args.machine and args.date):
        parser.error("--tables-only renders measurements made earlier: say where and when with --machine and --date")
    if not args.tables_only:
        for command in (MEASURE, KNOBS):
            print(f"$ {command}", flush=True)
            words = command.split()[1:]
            subprocess.run([sys.executable, "-m", "sjdbench", *words], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    for path in write_tables(DOCS / "toy_calibration.json", DOCS / "toy_knobs.json", args.out, args.machine, args.date):
        print(f"table -> {path}", flush=True)


if __name__ == "__main__":
    main()
