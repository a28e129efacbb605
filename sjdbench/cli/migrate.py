"""`sjdbench migrate`: re-key runs written by an older sjdbench under today's run ids."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from sjdbench.cli.console import fail, note, say
from sjdbench.errors import UserError


def migrate(
    words: Optional[List[str]] = typer.Argument(
        None, help="results_dir=DIR: the store (default: $SJDBENCH_RESULTS, else results).", show_default=False
    ),
    results_dir: Optional[str] = typer.Option(None, "--results-dir", help="The store, as results_dir=DIR."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would move; change nothing."),
) -> None:
    """Re-key runs written by an older sjdbench under today's run ids (nothing is lost or mixed)."""
    from sjdbench.config.migrate import migrate_store
    from sjdbench.results.root import WORD, results_root, split_results_dir

    try:
        rest, named = split_results_dir(list(words or []), results_dir)
        if rest:
            raise UserError(f"'{rest[0]}': migrate takes only {WORD}=DIR (and --dry-run)")
        root = results_root(named)
        moves = migrate_store(root, dry_run=dry_run)
    except UserError as error:
        fail(str(error))
    for move in moves:
        say(f"{move.old_id} -> {move.new_id or '-'}: {move.status}")
    say(f"{len(moves)} run(s) from an older sjdbench in {root}")


def note_legacy_runs(root: Path) -> None:
    """One line when the store holds runs keyed by an older sjdbench (they are not resumed)."""
    from sjdbench.config.migrate import legacy_runs

    count = len(legacy_runs(root))
    if count:
        note(
            f"{root} holds {count} run(s) from an older sjdbench, keyed differently and not "
            f"resumed; `sjdbench migrate results_dir={root}` re-keys them"
        )
