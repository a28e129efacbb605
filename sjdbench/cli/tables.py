"""The tables `run` and `sweep` print: each run's headline numbers, with its speedup over its AR
baseline (sjdbench.results.pairing, as `report` and `eval` print it) and the N prompts it pairs.
The columns and the legend are the statistics table's (sjdbench/statistics_table.py, those shown on
the terminal)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from sjdbench.decoder_identity import needs_drafter
from sjdbench.statistics_table import CLI, columned
from sjdbench.statistics_table import legend as statistics_legend

if TYPE_CHECKING:  # the command line imports nothing heavy until a command runs
    from sjdbench.results.pairing import Speedup

SPEED_LEGEND = (
    "; vs AR = AR latency / latency, geometric mean over the N paired prompts [95 % bootstrap CI] "
    "(batched: img/s / AR's img/s at the same B) (~ = not timed side by side with AR)"
)
NEEDS_DRAFTER_MARK = " †"
NEEDS_LEGEND = "; † = needs a trained drafter (the others need nothing besides the model)"
BUSY_MARKED = "latency_s_mean"  # its cells get `!` where some samples were timed on a busy machine


def columns() -> list[tuple[str, str, int]]:
    """(header, summary key, digits) of each column: the decoder and its window, then every statistic
    the statistics table shows on the terminal."""
    shown = [(s.column, s.name, s.digits) for s in columned(CLI)]
    return [("decoder", "decoder", 0), ("W", "window", 0), *shown]


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def speedup_cells(result: Speedup | None, marks: str = "") -> list[str]:
    """[value with CI and marks, N] of a speedup; '-' where there is none."""
    if result is None or result.value is None:
        return ["-", "-"]
    ci = f" [{result.lo:.2f}, {result.hi:.2f}]" if result.lo is not None and result.hi is not None else ""
    return [f"{result.value:.2f}{ci}{marks}", str(result.n)]


def summary_table(
    title: str, summaries: list[dict], speedups: dict[str, Speedup] | None = None, marks: dict[str, str] | None = None
) -> Table:
    """The runs' headline numbers; narrow enough for an 80-column terminal without speedups. Latencies
    taken on a busy machine are marked `!`; `marks` adds per-run marks to the speedup (`~`, `!`)."""
    legend = statistics_legend(CLI) + NEEDS_LEGEND + (SPEED_LEGEND if speedups is not None else "")
    table = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, caption=legend, caption_justify="left"
    )
    shown = columns()
    headers = [h for h, _, _ in shown] + (["vs AR [95% CI]", "N"] if speedups is not None else [])
    for header in headers:
        table.add_column(header, justify="left" if header == "decoder" else "right", no_wrap=True)
    for summary in summaries:
        cells = [_fmt(summary.get(key), digits) for _, key, digits in shown]
        if needs_drafter(summary.get("decoder_spec")):  # the decoder column says what else it needs
            cells[0] += NEEDS_DRAFTER_MARK
        keys = [key for _, key, _ in shown]
        if summary.get("busy_samples") and BUSY_MARKED in keys:
            cells[keys.index(BUSY_MARKED)] += "!"
        if speedups is not None:
            run_id = summary.get("run_id")
            if run_id is None:  # no run id: no speedup of its own
                cells += speedup_cells(None)
            else:
                cells += speedup_cells(speedups.get(run_id), (marks or {}).get(run_id, ""))
        table.add_row(*cells)
    return table


def latency_warnings(summaries: list[dict]) -> list[str]:
    """One line naming the runs whose latencies were taken on a busy machine (none: no line)."""
    flagged = [s for s in summaries if s.get("busy_samples")]
    if not flagged:
        return []
    busy = sum(s["busy_samples"] for s in flagged)
    total = sum(s.get("n_samples") or 0 for s in flagged)
    load = max((s.get("load_1m_max") or 0) for s in flagged)
    names = ", ".join(str(s.get("decoder")) for s in flagged)
    return [
        f"warning: {busy} of {total} samples ({names}) were timed while the machine was busy (load average up to "
        f"{load}, above the cores available); those latencies are not to be trusted: re-time on a quiet machine "
        "(see docs/PERFORMANCE.md)"
    ]
