"""`sjdbench eval` (score finished runs), `sjdbench data fetch` (public prompt files), and the
`sweep --eval` hook that scores each run of a sweep as it finishes."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sjdbench.errors import UserError
from sjdbench.results.store import holds_final_samples

console = Console()
err_console = Console(stderr=True, soft_wrap=True)
data_app = typer.Typer(
    help="Public prompt sets: download with a pinned checksum.", no_args_is_help=True, add_completion=False
)


def _fail(message: str) -> None:
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(2)


def _note(message: str) -> None:
    err_console.print(f"note: {message}", highlight=False, markup=False)


def is_eval_word(word: str) -> bool:
    """eval=<preset>, eval.<key>=..., eval/<group>=...: evaluation settings, not run overrides."""
    key = word.partition("=")[0].lstrip("+~")
    return key == "eval" or key.startswith(("eval.", "eval/"))


def reject_eval_words(words: list[str]) -> None:
    """`run` decodes only: evaluation settings belong to `eval` or `sweep --eval`."""
    found = [w for w in words if is_eval_word(w)]
    if found:
        raise UserError(
            f"{found[0]}: `sjdbench run` does not score; score its run with `sjdbench eval <run_id> "
            f"{found[0]}` (or sweep with --eval)"
        )


def results_root(results_dir: Optional[str]) -> Path:
    return Path(results_dir or os.environ.get("SJDBENCH_RESULTS") or "results")


# ---------------------------------------------------------------- which runs: ids, folders, filters


def _runs_in(folder: Path) -> list[Path]:
    return (
        sorted(p for p in (folder / "runs").iterdir() if (p / "config.yaml").exists())
        if (folder / "runs").is_dir()
        else []
    )


def select_runs(targets: list[str], root: Path) -> tuple[list[Path], list[str]]:
    """(run folders, notes). Targets: run ids or id globs under root, run folders, sweep folders,
    results roots, and key=value filters on summary fields (model=toy decoder_preset=sjd seed=0)."""
    import yaml

    chosen: list[Path] = []
    explicit: set[Path] = set()
    filters = {}
    for target in targets:
        key, eq, value = target.partition("=")
        if eq:
            filters[key] = value
            continue
        path = Path(target).expanduser()
        if (path / "config.yaml").exists():
            chosen.append(path)
            explicit.add(path)
        elif (path / "sweep.yaml").exists():
            runs = yaml.safe_load((path / "sweep.yaml").read_text()).get("runs", [])
            chosen += [path.parent.parent / "runs" / r["run_id"] for r in runs]
        elif (path / "runs").is_dir():
            chosen += _runs_in(path)
        elif (root / "runs" / target / "config.yaml").exists():
            chosen.append(root / "runs" / target)
            explicit.add(root / "runs" / target)
        else:
            matches = [p for p in _runs_in(root) if fnmatch.fnmatch(p.name, target)]
            if not matches:
                raise UserError(
                    f"'{target}' is neither a run id in {root / 'runs'}, a run, sweep or results folder, "
                    "nor a pattern matching a run id (e.g. 'toy-sjd-*')"
                )
            chosen += matches
    if filters and not [t for t in targets if "=" not in t]:
        chosen = _runs_in(root)
    notes, kept = [], []
    for run in dict.fromkeys(chosen):
        summary = _summary(run)
        if not holds_final_samples(summary):
            if run in explicit:
                raise UserError(f"run {run.name} is not finished; re-run its command to finish it")
            notes.append(f"{run.name} skipped: not finished")
            continue
        if all(str(summary.get(k)) == v for k, v in filters.items()):
            kept.append(run)
    if filters and not kept:
        fields = "model, data, decoder, decoder_preset, decoder_family, seed, window"
        notes.append(
            f"no finished run matches {' '.join(f'{k}={v}' for k, v in filters.items())} (summary fields: {fields})"
        )
    return kept, notes


def _summary(run: Path) -> dict:
    try:
        return json.loads((run / "summary.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


# ---------------------------------------------------------------- tables


def _g(value, digits: int = 3) -> str:
    """A number in `digits` significant digits ("-" for none)."""
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


def _fd_vs_floor(doc: dict) -> str:
    other, floor = doc.get("extra", {}).get("vs_ar_other_seed"), doc.get("noise_floor")
    if other is None:
        return "-"
    return f"{other:.3g}" + (f" ({floor['value']:.3g})" if floor else "")


def _fixed(value, decimals: int) -> str:
    return "-" if value is None else f"{value:.{decimals}f}"


def _signed(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:+.{digits}g}"


def _interval(ci, digits: int = 3) -> str:
    return f"[{ci[0]:.{digits}g}, {ci[1]:.{digits}g}]" if ci else ""


def outcome_table(outcomes) -> Table:
    from rich import box

    caption = (
        "value [bootstrap 95 % CI over prompts]; Δ vs AR: paired difference with the AR run; floor: the same "
        "comparison between two AR runs that differ only in their seeds (set metrics: their distance)"
    )
    table = Table(
        title="scores",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
        caption=Text(caption),
        caption_justify="left",
    )
    for header in ("decoder", "evaluator", "N", "value [CI]", "Δ vs AR [CI]", "floor"):
        table.add_column(
            header,
            justify="left" if header in ("decoder", "evaluator") else "right",
            no_wrap=header not in ("value [CI]", "Δ vs AR [CI]"),
        )
    for outcome in outcomes:
        doc = outcome.doc
        if doc is None:
            continue
        paired, floor = doc.get("paired_vs_ar"), doc.get("noise_floor")
        delta = f"{_signed(paired['delta'])} {_interval(paired.get('ci95'))}" if paired else "-"
        name = str(doc.get("decoder") or doc["run_id"]) + (f" s{doc['seed']}" if doc.get("seed") else "")
        table.add_row(
            *map(
                Text,
                (
                    name,
                    doc["evaluator"],
                    str(doc["n"]),
                    f"{_g(doc['value'])} {_interval(doc.get('ci95'))}",
                    delta,
                    _g(floor["value"]) if floor else "-",
                ),
            )
        )
    return table


def latest_score(run: Path, evaluator: str) -> dict | None:
    """The most recently written score of this evaluator for a run (any protocol)."""
    from sjdbench.eval.evaluators.scorefile import read_score

    folder = run / "scores"
    files = sorted(folder.glob(f"{evaluator}-*.json"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
    return read_score(files[-1]) if files else None


def quality_table(runs: list[Path]) -> Table | None:
    """decoder | step compression | toy CLIP (Δ vs AR, CI) | toy FD (vs noise floor) | object accuracy,
    for runs scored by the toy evaluators."""
    from rich import box

    rows = []
    for run in runs:
        scores = {name: latest_score(run, name) for name in ("toy_clip", "toy_fd", "toy_objects")}
        if any(scores.values()):
            rows.append((_summary(run), scores))
    if not rows:
        return None
    caption = (
        "CLIP: toy CLIP-Score, Δ = paired difference with AR [bootstrap 95 % CI over prompts]; FD: toy FD "
        "against renders of the same captions; FD AR': FD between this run and the seed+1 AR run, beside "
        "the noise floor (FD between the two AR runs); obj: captioned shapes drawn in the captioned "
        "colour, Δ vs AR"
    )
    sizes = sorted({str(summary.get("n_samples")) for summary, _ in rows})
    table = Table(
        title=f"quality beside speed (N = {', '.join(sizes)} per run)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
        caption=Text(caption),
        caption_justify="left",
    )
    for header in ("decoder", "step x", "CLIP", "Δ CLIP [CI]", "FD", "FD AR' (floor)", "obj", "Δ obj"):
        table.add_column(header, justify="left" if header == "decoder" else "right", no_wrap=True)

    def order(row):
        return (row[0].get("decoder_family") != "ar", row[0].get("seed", 0), str(row[0].get("decoder")))

    for summary, scores in sorted(rows, key=order):
        clip, fd, objects = (scores[k] or {} for k in ("toy_clip", "toy_fd", "toy_objects"))
        clip_pair, obj_pair = clip.get("paired_vs_ar"), objects.get("paired_vs_ar")
        name = str(summary.get("decoder")) + (f" s{summary['seed']}" if summary.get("seed") else "")
        clip_ci = clip_pair.get("ci95") if clip_pair else None
        table.add_row(
            *map(
                Text,
                (
                    name,
                    f"{summary.get('step_compression', 0):.2f}",
                    _fixed(clip.get("value"), 1),
                    (f"{clip_pair['delta']:+.1f}" + (f" [{clip_ci[0]:.1f},{clip_ci[1]:.1f}]" if clip_ci else ""))
                    if clip_pair
                    else "-",
                    _g(fd.get("value")),
                    _fd_vs_floor(fd),
                    _fixed(objects.get("value"), 2),
                    f"{obj_pair['delta']:+.2f}" if obj_pair else "-",
                ),
            )
        )
    return table


# ---------------------------------------------------------------- sjdbench eval


def eval_command(
    targets: Optional[List[str]] = typer.Argument(
        None,
        help="Run ids (or globs like 'toy-sjd-*'), run/sweep/results "
        "folders, summary filters (model=toy seed=0), and eval=<preset> / "
        "eval.<key>=<value> settings.",
        show_default=False,
    ),
    results_dir: Optional[str] = typer.Option(
        None, "--results-dir", help="Results root (default: results or $SJDBENCH_RESULTS)."
    ),
    show_config: bool = typer.Option(False, "--show-config", help="Print the composed eval config and exit."),
) -> None:
    """Score finished runs: toy CLIP/FD/objects (model=toy), CLIP-Score, FID, KID; resumable."""
    from omegaconf import OmegaConf

    from sjdbench.eval.evaluators.hashing import env_flag_offline
    from sjdbench.eval.evaluators.settings import compose_eval
    from sjdbench.eval.score import score

    env_flag_offline()  # before anything imports huggingface_hub
    words = targets or []
    try:
        config = compose_eval([w for w in words if is_eval_word(w)])
        if show_config:
            console.print(OmegaConf.to_yaml(OmegaConf.structured(config)), highlight=False, markup=False)
            return
        runs = [w for w in words if not is_eval_word(w)]
        if not runs:
            raise UserError(
                "name the runs to score: run ids, run/sweep/results folders, or filters like model=toy "
                "(e.g. `sjdbench eval results model=toy`)"
            )
        root = results_root(results_dir)
        selected, notes = select_runs(runs, root)
        for note in notes:
            _note(note)
        outcomes = score(selected, config, on_outcome=_report)
    except UserError as error:
        _fail(str(error))
        return
    console.print(outcome_table(outcomes))
    table = quality_table(selected)
    if table is not None:
        console.print(table)


def _report(outcome) -> None:
    if outcome.status == "refused":
        _note(f"{outcome.run_id}: {outcome.message}")
    elif outcome.doc and outcome.doc.get("pending") and outcome.status != "present":
        _note(f"{outcome.run_id} {outcome.evaluator}: waiting for {'; '.join(outcome.doc['pending'])}")


# ---------------------------------------------------------------- sjdbench data fetch


@data_app.command("fetch")
def fetch_command(name: str = typer.Argument(..., help="parti | coco2014_30k")) -> None:
    """Download a public prompt file into the cache, verifying its pinned sha256."""
    from sjdbench.data.coco import COCO2014_30K
    from sjdbench.data.fetch import fetch
    from sjdbench.data.parti import PARTI

    remotes = {"parti": PARTI, "coco2014_30k": COCO2014_30K}
    try:
        if name not in remotes:
            extra = "; coco2017 reads your captions_val2017.json (data.path=)" if name == "coco2017" else ""
            raise UserError(f"unknown prompt file '{name}'; choose one of: {', '.join(remotes)}{extra}")
        path = fetch(remotes[name])
    except UserError as error:
        _fail(str(error))
        return
    console.print(f"{remotes[name].filename} ({remotes[name].source}) -> {path} (sha256 verified)", highlight=False)


# ---------------------------------------------------------------- sjdbench sweep --eval


class SweepScorer:
    """Scores each run of a sweep as it finishes, then fills in the comparisons (AR, noise floor)
    once every run is done. Adds the AR run at seed + eval.floor_seed_offset that the floor needs."""

    def __init__(self, sweep, eval_words: list[str]) -> None:
        from sjdbench.eval.evaluators.hashing import env_flag_offline
        from sjdbench.eval.evaluators.settings import compose_eval

        env_flag_offline()
        self.config = compose_eval(eval_words)
        self.plan = with_noise_floor_runs(sweep, self.config.floor_seed_offset)
        self.floor_runs = {p.run_id for p in self.plan.points} - {p.run_id for p in sweep.points}
        self.outcomes = []

    def _root(self) -> Path:
        return self.plan.directory.parent.parent

    def on_result(self, result) -> None:
        if result.status in ("failed", "partial"):
            return
        self._score([self._root() / "runs" / result.run_id])

    def _score(self, run_dirs: list[Path]) -> list:
        from sjdbench.eval.score import score

        try:
            outcomes = score(run_dirs, self.config, on_outcome=lambda o: o.status == "refused" and _report(o))
        except Exception as error:  # noqa: BLE001 - scoring never stops a sweep; the runs are safe
            _note(f"scoring {', '.join(d.name for d in run_dirs)} failed: {type(error).__name__}: {error}")
            return []
        self.outcomes += outcomes
        return outcomes

    def finish(self) -> None:
        runs = [self._root() / "runs" / p.run_id for p in self.plan.points]
        done = [r for r in runs if holds_final_samples(_summary(r))]
        outcomes = self._score(done)
        for outcome in outcomes:  # the added seed+1 AR runs have no floor of their own: expected
            if outcome.doc and outcome.doc.get("pending") and outcome.run_id not in self.floor_runs:
                _note(f"{outcome.run_id} {outcome.evaluator}: still waiting for {'; '.join(outcome.doc['pending'])}")
        table = quality_table(done)
        if table is not None:
            console.print(table)
        elif outcomes:
            console.print(outcome_table(outcomes))


def with_noise_floor_runs(sweep, seed_offset: int):
    """The sweep plus, for each AR run in it, the AR run at seed + seed_offset (same everything else)."""
    from sjdbench.config.schema import compose_run, decoder_spec
    from sjdbench.run.runner import plan as plan_run
    from sjdbench.run.sweep import GridPoint, sweep_identity

    points = list(sweep.points)
    seen = {(p.run_id, p.config.data.shard) for p in points}
    for point in sweep.points:
        if not decoder_spec(point.config).is_ar:
            continue
        overrides = [w for w in point.overrides if w.partition("=")[0].lstrip("+") != "seed"]
        overrides.append(f"seed={point.config.seed + seed_offset}")
        config = compose_run(overrides)
        run_id = plan_run(config)[0]
        if (run_id, config.data.shard) not in seen:
            seen.add((run_id, config.data.shard))
            points.append(GridPoint(overrides, config, run_id, baseline=True, remote_gpus=point.remote_gpus))
    sweep_id, directory = sweep_identity(points)
    return dataclasses.replace(sweep, sweep_id=sweep_id, points=points, directory=directory)
