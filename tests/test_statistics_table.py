"""The statistics table is the one place a decoding statistic is described: the recorder's counters,
a samples.jsonl row, the summary, the terminal's columns and legend and the report's columns are all
made from it."""

from __future__ import annotations

import torch
from rich.console import Console

from sjdbench import statistics_table
from sjdbench.cli.tables import columns, summary_table
from sjdbench.config import build_preset
from sjdbench.decoding.loop import jacobi_decode
from sjdbench.models.debug import build_debug_adapter
from sjdbench.report.tables import speed_metrics
from sjdbench.results.summary import STAT_FIELDS, summarize
from sjdbench.statistics_table import CLI, HISTOGRAM_INDEX, REPORT, STATISTICS, Count, Statistic, Total


def decoded_rows(n: int = 2) -> list[dict]:
    adapter = build_debug_adapter(grid_h=4, grid_w=4, n_codes=16, init_std=0.5)
    decoder = build_preset("sjd", adapter, "decoder.window=6")
    rows = []
    for seed in range(n):
        result = jacobi_decode(
            adapter, "a red circle", decoder, adapter.default_sampling, torch.Generator().manual_seed(seed)
        )
        rows.append({**result.stats.to_row(), "latency_s": 0.5 + seed})
    return rows


def printed(table) -> str:
    console = Console(width=250, record=True)
    console.print(table)
    return console.export_text()


def test_a_new_statistic_is_one_entry_and_the_code_that_counts_it(monkeypatch):
    """`drafter_forwards`, a per-sample counter summed over the run and shown as "draft fw": one entry
    (its counter declared in it) makes the recorder keep it, rows hold it, the summary pools it, and
    `run` prints it with its legend."""
    counter = Count("drafter_forwards", "forwards of a drafter model")
    entry = Statistic(
        "drafter_forwards",
        Total(counter),
        "drafter forwards over the run",
        header="drafter forwards",
        short="draft fw",
        digits=0,
        shown=(CLI,),
    )
    monkeypatch.setattr(statistics_table, "STATISTICS", (*STATISTICS, entry))

    rows = decoded_rows()
    assert all(row["drafter_forwards"] == 0 for row in rows)  # kept for every sample; nothing counts it here
    rows = [{**row, "drafter_forwards": 3 + i} for i, row in enumerate(rows)]  # what the counting code would add
    summary = summarize(rows)
    assert summary["drafter_forwards"] == 7
    assert "drafter_forwards" in statistics_table.summary_fields()
    assert ("draft fw", "drafter_forwards", 0) in columns()
    table = summary_table("runs", [{**summary, "decoder": "sjd", "window": 6}])
    column = next(c for c in table.columns if c.header == "draft fw")
    assert list(column.cells) == ["7"]
    assert "draft fw = drafter forwards over the run" in " ".join(printed(table).split())


def test_a_samples_own_statistics_are_the_pooled_rule_over_that_sample():
    """A per-sample statistic in a row is its summary rule applied to that row alone."""
    rows = decoded_rows(1)
    alone = summarize(rows)
    for statistic in STATISTICS:
        if statistic.per_sample and statistic.summary:
            assert rows[0][statistic.name] == alone[statistic.name], statistic.name


def test_the_summary_pools_ratios_of_sums():
    rows = decoded_rows()
    summary = summarize(rows)
    assert set(summary) == set(STAT_FIELDS)
    assert summary["acceptance_rate"] == sum(r["accepted"] for r in rows) / sum(r["verified"] for r in rows)
    assert summary["step_compression"] == sum(r["n_tokens"] for r in rows) / sum(r["nfe"] for r in rows)
    assert summary["latency_s_mean"] == 1.0 and summary["latency_s_median"] == 1.0


def test_every_entry_is_complete_and_every_column_has_a_header():
    names = [s.name for s in STATISTICS]
    assert len(names) == len(set(names))
    for statistic in STATISTICS:
        assert statistic.description and statistic.better in (None, "max", "min"), statistic.name
        assert set(statistic.shown) <= {CLI, REPORT}
        if REPORT in statistic.shown:
            assert statistic.header, statistic.name
    for histogram in statistics_table.histograms():
        assert histogram.by in HISTOGRAM_INDEX, histogram.name
    keys = [m.key for m in speed_metrics()]
    assert keys[:3] == ["latency_s_mean", "speedup", "speedup_n"]  # the speedup beside the latency it divides
    assert [s.name for s in statistics_table.columned(REPORT)] == [k for k in keys if k not in ("speedup", "speedup_n")]
