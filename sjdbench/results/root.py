"""The results root: which store a command reads and writes. One precedence everywhere (run, sweep,
eval, report, migrate and the Python API): `results_dir=DIR` when given, else $SJDBENCH_RESULTS,
else `./results`. `results_dir=` is the one word for it; `eval` and `migrate` also take the same
thing as `--results-dir DIR`."""

from __future__ import annotations

import os
from pathlib import Path

from sjdbench.errors import UserError

ENV = "SJDBENCH_RESULTS"
DEFAULT = "results"
WORD = "results_dir"


def check_results_dir(results_dir: str | os.PathLike | None) -> None:
    """`results_dir=` (empty: typically an unset shell variable, `results_dir=$OUT`) names no store:
    refused rather than read as "the default", which would send a run to another store."""
    if results_dir is not None and not str(results_dir).strip():
        raise UserError(
            f"{WORD}= is empty (an unset shell variable?); name the store ({WORD}=DIR), or leave {WORD} out "
            f"for ${ENV}, else ./{DEFAULT}"
        )


def results_root(results_dir: str | os.PathLike | None = None) -> Path:
    """The store: `results_dir` when given, else $SJDBENCH_RESULTS, else ./results. An empty
    `results_dir` is refused (`check_results_dir`); an empty $SJDBENCH_RESULTS counts as unset."""
    check_results_dir(results_dir)
    if results_dir is not None:
        return Path(results_dir).expanduser()
    return Path(os.environ.get(ENV) or DEFAULT).expanduser()


def split_results_dir(words: list[str], option: str | os.PathLike | None = None) -> tuple[list[str], str | None]:
    """(the other words, the results_dir they name): `results_dir=DIR` taken out of command words,
    reconciled with a `--results-dir` option; naming two different stores is refused."""
    check_results_dir(option)
    named = [str(option)] if option is not None else []
    rest = []
    for word in words:
        key, eq, value = word.partition("=")
        if eq and key.lstrip("+") == WORD:
            check_results_dir(value)
            named.append(value)
        else:
            rest.append(word)
    distinct = list(dict.fromkeys(str(Path(n).expanduser().resolve()) for n in named))
    if len(distinct) > 1:
        raise UserError(f"two results folders given ({' and '.join(named)}); name one store with {WORD}=DIR")
    return rest, (named[-1] if named else None)
