"""Aggregate per-sample rows into the run summary: what summary.json holds (`SUMMARY_FIELDS`).

Latency fields come with how far to trust them: `busy_samples` counts rows timed while the machine
was oversubscribed (see machine.py), `latency_trusted` is true only when no row was and every row
recorded its machine state, and `timing_modes` counts rows per timing mode (`single`: one run
decoded on its own; `paired`: interleaved prompt by prompt with the runs it is compared with, so
ratios between them come from the same machine state).
"""

from __future__ import annotations

import statistics

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
# ... and what its rows measured (`summarize`)
STAT_FIELDS = (
    "n_samples",
    "n_tokens",
    "nfe_mean",
    "step_compression",
    "acceptance_rate",
    "acceptance_rate_no_fresh",
    "mean_accepted_length",
    "latency_s_mean",
    "latency_s_median",
    "tokens_per_s",
    "batch_size",
    "images_per_s",
    "decode_s",
    "peak_bytes",
    "growth_share",
    "growth_precision",
    "growth_share_at_verify",
    "accept_len_hist",
    "slot_acceptance",
    "busy_samples",
    "latency_trusted",
    "load_1m_max",
    "timing_modes",
)
SUMMARY_FIELDS = RUN_FIELDS + STAT_FIELDS  # every key of a summary.json of a run that holds samples


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _pooled_list(rows: list[dict], key: str) -> list[int]:
    width = max(len(r[key]) for r in rows)
    total = [0] * width
    for r in rows:
        for i, value in enumerate(r[key]):
            total[i] += value
    return total


def summarize(rows: list[dict]) -> dict:
    """Pooled ratios (sums over samples), means and medians of per-sample latency."""
    if not rows:
        return {"n_samples": 0}
    total = lambda key: sum(r[key] for r in rows)  # noqa: E731
    latencies = [r["latency_s"] for r in rows if r.get("latency_s") is not None]  # none inside a batch
    committed = sum(sum(m * c for m, c in enumerate(r["accept_len_hist"])) for r in rows)
    return {
        "n_samples": len(rows),
        "n_tokens": total("n_tokens") / len(rows),
        "nfe_mean": total("nfe") / len(rows),
        "step_compression": total("n_tokens") / total("nfe"),
        "acceptance_rate": _ratio(total("accepted"), total("verified")),
        "acceptance_rate_no_fresh": _ratio(total("accepted_no_fresh"), total("verified_no_fresh")),
        "mean_accepted_length": _ratio(committed, total("iterations")),
        "latency_s_mean": statistics.fmean(latencies) if latencies else None,
        "latency_s_median": statistics.median(latencies) if latencies else None,
        **throughput(rows),
        "growth_share": _ratio(total("growth_grew_accepted"), total("growth_eligible_accepted")),
        "growth_precision": _ratio(total("growth_flagged_accepted"), total("growth_flagged_verified")),
        "growth_share_at_verify": _ratio(total("verify_grew_accepted"), total("verify_eligible_accepted")),
        "accept_len_hist": _pooled_list(rows, "accept_len_hist"),
        "slot_acceptance": [
            _ratio(a, v) for a, v in zip(_pooled_list(rows, "slot_accepted"), _pooled_list(rows, "slot_verified"))
        ],
        **latency_trust(rows),
    }


def throughput(rows: list[dict]) -> dict:
    """Images and tokens per decoding second, over the streams the rows came from (a stream: the
    samples one command decoded together, B at a time; its decoding seconds are those recorded with
    its last row). Rows from before streams were recorded count as streams of one, timed by latency."""
    streams: dict[str, tuple[int, float]] = {}
    sizes, peaks, tokens = set(), [], 0
    for i, r in enumerate(rows):
        stream = r.get("stream") or {"id": f"row{i}", "batch_size": 1, "images": 1, "decode_s": r.get("latency_s")}
        if stream.get("decode_s") is None:
            continue
        tokens += r["n_tokens"]
        sizes.add(int(stream.get("batch_size", 1)))
        if stream.get("peak_bytes") is not None:
            peaks.append(int(stream["peak_bytes"]))
        images, seconds = streams.get(stream["id"], (0, 0.0))
        if stream["images"] >= images:
            streams[stream["id"]] = (int(stream["images"]), float(stream["decode_s"]))
    images = sum(n for n, _ in streams.values())
    seconds = sum(s for _, s in streams.values())
    return {
        "batch_size": sizes.pop() if len(sizes) == 1 else (sorted(sizes) if sizes else None),
        "images_per_s": _ratio(images, seconds),
        "tokens_per_s": _ratio(tokens, seconds),
        "decode_s": seconds,
        "peak_bytes": max(peaks) if peaks else None,
    }


def latency_trust(rows: list[dict]) -> dict:
    """How many latencies were taken on a busy machine, and from which timing modes."""
    machines = [r.get("machine") for r in rows]
    busy = sum(1 for m in machines if m and m.get("busy"))
    unknown = sum(1 for m in machines if not m)
    modes: dict[str, int] = {}
    for r in rows:
        mode = (r.get("timing") or {}).get("mode", "unrecorded")
        modes[mode] = modes.get(mode, 0) + 1
    loads = [m["load_1m"] for m in machines if m and m.get("load_1m") is not None]
    return {
        "busy_samples": busy,
        "latency_trusted": busy == 0 and unknown == 0,
        "load_1m_max": max(loads) if loads else None,
        "timing_modes": modes,
    }
