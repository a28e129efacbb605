"""Aggregate per-sample rows into the run summary: what summary.json holds (`SUMMARY_FIELDS`).

What a run is comes from the runner (`RUN_FIELDS`); what its rows measured is pooled here by the
rules of the statistics table (sjdbench/statistics_table.py: one entry per statistic, with how its
samples pool). Latency fields come with how far to trust them: `busy_samples` counts rows timed
while the machine was oversubscribed (see machine.py), `latency_trusted` is true only when no row
was and every row recorded its machine state, and `timing_modes` counts rows per timing mode.
"""

from __future__ import annotations

from typing import Any

from sjdbench.statistics_table import Samples, summary_fields, summary_statistics

# summary.json: what the run is (written by the runner, run.runner.summary_of) ...
RUN_FIELDS = (
    "run_id",
    "model",
    "decoder",  # the label: preset plus the knobs that differ from it
    "decoder_preset",
    "decoder_family",
    "decoder_spec",
    "decoder_lossless",
    "window",
    "growth_steps",
    "schema",
    "data",
    "seed",
    "device",
    "n_wanted",
    "complete",
    "selection_n",
    "finished",
)
# ... and what its rows measured (`summarize`), one key per statistic of the table
STAT_FIELDS = summary_fields()
SUMMARY_FIELDS = RUN_FIELDS + STAT_FIELDS  # every key of a summary.json of a run that holds samples


def summarize(rows: list[dict]) -> dict[str, Any]:
    """Each statistic of the table pooled over the rows (ratios of summed counters, means and
    medians of latency, throughput over streams, ...). KeyError for rows that lack a field a
    statistic reads (rows of an older sjdbench)."""
    if not rows:
        return {"n_samples": 0}
    samples = Samples(rows)
    return {s.name: s.pool.over(samples) for s in summary_statistics()}
