"""`sjdbench phrases mine`: a model's visual-phrase table from its AR runs in a store (the table the
`phrases` verifier reads; registered as the `phrases` group in sjdbench.cli.commands)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sjdbench.cli.console import fail, say
from sjdbench.errors import UserError


def mine(
    words: Optional[list[str]] = typer.Argument(
        None, help="model=NAME (default toy) and results_dir=DIR (default results)", metavar="KEY=VALUE..."
    ),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        help="the table file (default: the model's, in the cache; the toy's shipped one only with --overwrite)",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="allow --out (or the default) to replace a table"),
    min_count: int = typer.Option(5, "--min-count", help="a pair seen fewer times is not a phrase"),
    min_pmi: float = typer.Option(1.0, "--min-pmi", help="the pair's pointwise mutual information, at least"),
    max_pairs: int = typer.Option(4096, "--max-pairs", help="keep the most frequent this many"),
) -> None:
    """Mine the visual phrases of a model from its own AR samples: token pairs at consecutive
    positions that co-occur more often than their tokens' frequencies predict."""
    from sjdbench.decoding.verifiers.phrases import default_table
    from sjdbench.run.phrases import mine as mine_table
    from sjdbench.run.phrases import write_table

    settings = {"model": "toy", "results_dir": "results"}
    for word in words or []:
        key, sep, value = word.partition("=")
        if not sep or key not in settings:
            fail(f"'{word}' is not a setting of phrases mine; give model=NAME and results_dir=DIR")
        settings[key] = value
    for option, count in (("--min-count", min_count), ("--max-pairs", max_pairs)):
        if count < 1:
            fail(f"{option} must be at least 1, got {count}")
    model, results = settings["model"], Path(settings["results_dir"])
    path = out or default_table(model)
    if path.exists() and not overwrite:
        fail(f"{path} exists; give another --out, or --overwrite to replace it")
    try:
        table = mine_table(results, model, min_count, min_pmi, max_pairs)
        write_table(table, path)
    except UserError as error:
        fail(str(error))
    say(
        f"{len(table['pairs'])} phrases of {model} from {table['samples']} AR samples "
        f"({len(table['runs'])} runs) -> {path}"
    )
