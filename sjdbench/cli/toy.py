"""`sjdbench toy train | train-clip | calibrate | train-drafter`: train the embedded toy model, its toy
CLIP and a drafter (for any model with hidden states), and measure the toy's regime (registered as
the `toy` group in sjdbench.cli.commands)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from sjdbench.cli.console import fail
from sjdbench.errors import UserError

OUT_FIX = "give --out a folder that can be created and written (--out DIR)"

# the options every training command takes, spelled once
OVERWRITE = typer.Option(
    False, "--overwrite", help="allow --out to be the package's toy weights dir (replaces the shipped files it trains)"
)
STEPS = typer.Option(None, "--steps", help="optimizer steps (default: the shipped training's count)")
MINUTES = typer.Option(
    None, "--minutes", help="time budget instead of --steps (steps fixed after timing the first ones)"
)
SEED = typer.Option(0, "--seed")
THREADS = typer.Option(2, "--threads")
DEVICE = typer.Option("auto", "--device", help="auto (cuda when visible), cpu, cuda")


def check_options(out: Optional[Path] = None, **counts: tuple[float | None, float, str]) -> None:
    """The toy commands' options before anything starts (a training takes minutes to fail otherwise):
    each count at least its lowest meaningful value (`--steps -1` would train nothing and export an
    untrained model), and --out a folder that can be created and written."""
    from sjdbench.results.store import check_folder

    for option, (value, low, what) in counts.items():
        if value is not None and value < low:
            fail(f"--{option.replace('_', '-')} must be at least {low:g} ({what}), got {value:g}")
    if out is not None:
        try:
            check_folder(out, "--out", OUT_FIX)
        except UserError as error:
            fail(str(error))


def check_training(out: Optional[Path], steps: Optional[int], minutes: Optional[float], threads: int) -> None:
    """A training's budget and threads (`check_options`)."""
    check_options(
        out,
        steps=(steps, 1, "optimizer steps"),
        minutes=(minutes, 0.1, "the time budget"),
        threads=(threads, 1, "CPU threads"),
    )


def one_budget(steps: Optional[int], minutes: Optional[float]) -> None:
    if steps is not None and minutes is not None:
        fail("give either --steps or --minutes, not both")


def train(
    out: Optional[Path] = typer.Option(
        None, "--out", help="output dir (default: ./toy_weights; then run with model.options.weights_dir=DIR)"
    ),
    overwrite: bool = OVERWRITE,
    steps: Optional[int] = STEPS,
    minutes: Optional[float] = MINUTES,
    seed: int = SEED,
    threads: int = THREADS,
    resume: bool = typer.Option(True, "--resume/--no-resume", help="continue from the checkpoint if one exists"),
    row_end_token: bool = typer.Option(True, "--row-end-token/--no-row-end-token", help="forced <eol> after each row"),
    precision: str = typer.Option(
        "bf16", "--precision", help="bf16 (autocast matmuls; 1.5x faster on CPUs with AMX) or fp32"
    ),
    device: str = DEVICE,
) -> None:
    """Train the toy transformer (tokenizer fit, dataset encoding, training, export): about 40 minutes
    on 2 CPU cores. Never replaces the shipped weights unless --out points at them with --overwrite."""
    from sjdbench.toyworld.train import SHIPPED_STEPS, train_toy

    one_budget(steps, minutes)
    check_training(out, steps, minutes, threads)
    if steps is None and minutes is None:
        steps = SHIPPED_STEPS
    try:
        train_toy(
            out,
            steps=steps,
            seed=seed,
            threads=threads,
            resume=resume,
            minutes=minutes,
            row_end_token=row_end_token,
            precision=precision,
            device=device,
            log=typer.echo,
            overwrite=overwrite,
        )
    except (ValueError, FileNotFoundError, OSError) as exc:
        fail(str(exc))


def train_clip(
    out: Optional[Path] = typer.Option(None, "--out", help="output dir (default: ./toy_weights)"),
    overwrite: bool = OVERWRITE,
    minutes: float = typer.Option(6.0, "--minutes", help="time budget"),
    steps: Optional[int] = typer.Option(None, "--steps", help="fixed step count instead of the time budget"),
    seed: int = SEED,
    threads: int = THREADS,
    device: str = DEVICE,
) -> None:
    """Train the toy CLIP (contrastive, on fresh renders)."""
    from sjdbench.models.toy.model import WEIGHTS_DIR
    from sjdbench.models.weights import write_checksums
    from sjdbench.toyworld.clip import CLIP_FILE, train_toy_clip
    from sjdbench.toyworld.train import DEFAULT_OUT, publish

    out = out or DEFAULT_OUT
    check_training(out, steps, minutes, threads)
    if out.resolve() == WEIGHTS_DIR.resolve() and not overwrite:
        fail(
            f"{out} holds the shipped toy CLIP; train into another folder (--out DIR), "
            "or pass --overwrite to replace it"
        )
    try:
        train_toy_clip(out, minutes=minutes, steps=steps, seed=seed, threads=threads, device=device, log=typer.echo)
        publish(out / CLIP_FILE)
        write_checksums(out, [CLIP_FILE])
    except (ValueError, FileNotFoundError, OSError) as exc:
        fail(str(exc))


def calibrate(
    weights: Optional[Path] = typer.Option(None, "--weights", help="weights dir (default: the shipped weights)"),
    n: int = typer.Option(16, "--n", help="held-out captions"),
    n_objects: int = typer.Option(
        64, "--n-objects", help="AR samples for the object finder (are the captioned shapes drawn?)"
    ),
    top_k: Optional[int] = typer.Option(None, "--top-k"),
    cfg_scale: Optional[float] = typer.Option(None, "--cfg"),
    png: Optional[Path] = typer.Option(None, "--png", help="write a captioned grid of AR samples"),
    out: Optional[Path] = typer.Option(None, "--out", help="write the numbers as JSON"),
    knobs: bool = typer.Option(
        False, "--knobs", help="instead: SJD W=16 and drawn objects under each sampling knob of docs/TOY.md"
    ),
    results_dir: Optional[Path] = typer.Option(
        None,
        "--results-dir",
        help="where the runner stores the calibration's runs (default: $SJDBENCH_CACHE/toy-calibration; resumable)",
    ),
) -> None:
    """Measure SJD step compression, context sensitivity, toy CLIP-Score and drawn objects on held-out captions."""
    import json

    from sjdbench.run.toy_calibration import calibrate as run
    from sjdbench.run.toy_calibration import knob_sweep

    check_options(
        n=(n, 1, "held-out captions"),
        n_objects=(n_objects, 0, "AR samples for the object finder"),
        top_k=(top_k, 0, "0 = off"),
        cfg=(cfg_scale, 0, "1 = no guidance"),
    )
    if out is not None:
        check_options(out.parent)
    sampling: dict[str, Any] = {k: v for k, v in {"top_k": top_k, "cfg_scale": cfg_scale}.items() if v is not None}
    res: dict | list[dict]
    try:
        if knobs:
            res = knob_sweep(weights, n=n, results_dir=results_dir)
        else:
            res = run(
                weights, n=n, png=str(png) if png else None, n_objects=n_objects, results_dir=results_dir, **sampling
            )
    except (ValueError, FileNotFoundError, OSError, UserError) as exc:
        fail(str(exc))
    text = json.dumps(res, indent=2)
    typer.echo(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


def train_drafter(
    overrides: Optional[list[str]] = typer.Argument(
        None,
        help="the target: model=NAME and its model.* overrides (default model=toy), as `sjdbench run` takes them",
        show_default=False,
        metavar="KEY=VALUE...",
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", help="output dir (default: ./<model>_drafter; the shipped toy drafter only with --overwrite)"
    ),
    overwrite: bool = OVERWRITE,
    steps: Optional[int] = STEPS,
    minutes: Optional[float] = MINUTES,
    samples: Optional[int] = typer.Option(None, "--samples", help="self-distilled training samples"),
    prompts_file: Optional[Path] = typer.Option(
        None, "--prompts", help="captions to sample, one per line (default: toy-world captions)"
    ),
    seed: int = SEED,
    threads: int = THREADS,
    resume: bool = typer.Option(True, "--resume/--no-resume", help="continue from the data and checkpoint if present"),
    device: str = DEVICE,
) -> None:
    """Train an EAGLE-style drafter on the model's own samples (self-distilled data, then training):
    the toy's in about 20 minutes on 2 CPU cores. Any model that returns its hidden states works
    (model=debug, model=anole ...; a real model wants a GPU). Never replaces the shipped weights
    unless --out points at them with --overwrite."""
    from sjdbench.run.drafter_training import train_for_model

    one_budget(steps, minutes)
    check_training(out, steps, minutes, threads)
    check_options(samples=(samples, 1, "self-distilled training samples"))
    try:
        train_for_model(
            overrides or [],
            out=out,
            overwrite=overwrite,
            steps=steps,
            minutes=minutes,
            samples=samples,
            prompts_file=prompts_file,
            seed=seed,
            threads=threads,
            resume=resume,
            device=device,
            log=typer.echo,
        )
    except (ValueError, FileNotFoundError, OSError, UserError) as exc:
        fail(str(exc))
