"""The report's figures, one function each, on matplotlib's headless Agg backend.

Each `fig_*` function takes the frames of one model x data set and returns a `Plot` (the figure
plus its caption) or a one-line reason why there is nothing to draw. Every series carries a legend
label (helper lines and bands are unlabelled), so a figure's series can be counted from its legend.
`write_plot` saves PNG and SVG (image grids: PNG only) and closes the figure.
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: no display, no GUI toolkit

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from sjdbench.results.runs import load_draft_traces  # noqa: E402
from sjdbench.results.store import atomic_write_bytes  # noqa: E402

TRACE_DEPTH = 8  # iterations before verification shown in trajectory plots
MIN_TRACES = 5  # fewer drafts than this at an iteration: not drawn (quartiles of 3 points mislead)


@dataclass
class Plot:
    name: str  # file stem
    title: str
    caption: str
    figure: plt.Figure
    formats: tuple[str, ...] = ("png", "svg")


def colours(labels) -> dict[str, tuple]:
    """One colour per decoder label, stable across a report's figures."""
    cmap = plt.get_cmap("tab10" if len(set(labels)) <= 10 else "tab20")
    return {label: cmap(i % cmap.N) for i, label in enumerate(sorted(set(labels)))}


def series_name(run: pd.Series, drop: str) -> str:
    """The run's label without one setting (the plotted axis): 'sjd_vp(N=2,λ=.25)' minus N."""
    label = re.sub(rf"(?<=[(,]){re.escape(drop)}=[^,)]+,?", "", str(run["decoder"]))
    return label.replace(",)", ")").replace("()", "")


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _decoders(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[~runs["is_ar"].astype(bool)]


def _finish(ax, xlabel: str, ylabel: str, legend: bool = True) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    handles = ax.get_legend_handles_labels()[0]
    if legend and len(handles) > 5:  # many series: beside the axes, not over the data
        ax.legend(fontsize=8, frameon=False, loc="center left", bbox_to_anchor=(1.01, 0.5))
    elif legend and handles:
        ax.legend(fontsize=8, frameon=False)


def _against(runs: pd.DataFrame, axis: str, drop: str) -> dict[str, pd.DataFrame]:
    """Series of runs that differ only in `axis` (a spec column): series name -> runs sorted by it;
    only series with at least two values of the axis."""
    decoders = _decoders(runs).dropna(subset=[axis])
    if decoders.empty:
        return {}
    others = [c for c in decoders.columns if c.startswith("spec.") and c != axis]
    text = decoders[others].apply(lambda column: column.map(lambda v: "" if _missing(v) else str(v)))
    keys = text.agg("|".join, axis=1) + "|" + decoders["chain"]
    series = {}
    for _, members in decoders.groupby(keys):
        if members[axis].nunique() < 2:
            continue
        name = series_name(members.iloc[0], drop)
        if axis != "spec.window" and decoders["window"].nunique() > 1:
            name += f" W={members.iloc[0]['window']}"
        series[name] = members.sort_values(axis)
    return series


def _log2_axis(axes, series: dict[str, pd.DataFrame], column: str) -> None:
    """A log2 x axis (windows and batch sizes are powers of two) ticked, in plain numbers, at the
    values of `column` the series were run at."""
    ticks = sorted({int(v) for members in series.values() for v in members[column]})
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks)
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())


def fig_speedup_vs_window(runs: pd.DataFrame, numbers: pd.DataFrame) -> Plot | str:
    """Speedup (with CI) and step compression against W, one line per decoder."""
    series = _against(numbers, "spec.window", "W")
    if not series:
        return "no decoder was run at two or more windows W"
    palette = colours(series)
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name, members in series.items():
        windows = members["window"].astype(int).to_numpy()
        speed = members["speedup"].astype(float).to_numpy()
        lo = members["speedup_lo"].astype(float).fillna(members["speedup"]).to_numpy()
        hi = members["speedup_hi"].astype(float).fillna(members["speedup"]).to_numpy()
        left.errorbar(
            windows, speed, yerr=[speed - lo, hi - speed], marker="o", capsize=3, color=palette[name], label=name
        )
        right.plot(windows, members["step_compression"].astype(float), marker="o", color=palette[name], label=name)
    _log2_axis((left, right), series, "window")
    left.axhline(1.0, color="grey", lw=0.8, ls="--")
    _finish(left, "window W", "latency speedup over AR (95 % CI)")
    _finish(right, "window W", "step compression (AR tokens / NFE)", legend=False)
    figure.tight_layout()
    return Plot(
        "speedup_vs_window",
        "Speedup and step compression vs window",
        "Latency speedup (geometric mean of paired per-prompt ratios, 95 % bootstrap CI) and step "
        "compression against the window W.",
        figure,
    )


def fig_throughput_vs_batch(numbers: pd.DataFrame) -> Plot | str:
    """Images per decoding second against the batch size for AR and each decoder, and each decoder's
    speedup over AR at the same batch size."""
    if "batch_size" not in numbers or "images_per_s" not in numbers:
        return "no run records its throughput"
    rows = numbers[numbers["batch_size"].map(lambda b: isinstance(b, (int, float)) and not _missing(b))]
    rows = rows[rows["images_per_s"].notna()]
    series = {}
    for (name, window), members in rows.groupby(["decoder", "window"]):
        if members["batch_size"].nunique() >= 2:
            label = str(name) if name == "ar" or rows["window"].nunique() <= 2 else f"{name} W={window}"
            series[label] = members.sort_values("batch_size")
    if not series:
        return "no decoder was run at two or more batch sizes (sjdbench sweep +sweep=batch)"
    palette = colours(series)
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name, members in series.items():
        sizes = members["batch_size"].astype(int).to_numpy()
        style = dict(marker="o", color=palette[name], label=name, ls="--" if name == "ar" else "-")
        left.plot(sizes, members["images_per_s"].astype(float), **style)
        if name != "ar":
            right.plot(sizes, members["speedup"].astype(float), **style)
    _log2_axis((left, right), series, "batch_size")
    left.set_yscale("log")
    right.axhline(1.0, color="grey", lw=0.8, ls="--")
    _finish(left, "batch size B", "images per decoding second")
    _finish(right, "batch size B", "speedup over AR at the same B", legend=False)
    figure.tight_layout()
    return Plot(
        "throughput_vs_batch",
        "Throughput vs batch size",
        "Images per decoding second (a stream's images over its device-synchronised decoding time) against "
        "the batch size, and each decoder's throughput over AR's at the same batch size. Inside a batch a "
        "sample's own latency means nothing; only throughput is compared.",
        figure,
    )


def fig_nfe_vs_growth_steps(runs: pd.DataFrame, numbers: pd.DataFrame) -> Plot | str:
    series = _against(numbers, "spec.growth.steps", "N")
    if not series:
        return "no decoder was run at two or more growth steps N"
    palette = colours(series)
    figure, ax = plt.subplots(figsize=(6, 4))
    for name, members in series.items():
        ax.plot(
            members["spec.growth.steps"].astype(int),
            members["nfe_mean"].astype(float),
            marker="o",
            color=palette[name],
            label=name,
        )
    ax.set_xticks(sorted({int(n) for m in series.values() for n in m["spec.growth.steps"]}))
    _finish(ax, "consecutive-growth steps N", "NFE per image (mean)")
    figure.tight_layout()
    return Plot(
        "nfe_vs_growth_steps",
        "NFE vs growth steps N",
        "Mean NFE per image against the consecutive-growth steps N (the mask VP fuses and the statistics use).",
        figure,
    )


def _recording(main: pd.DataFrame, column: str, recorded: Callable[[list | np.ndarray], bool]) -> pd.DataFrame:
    """The decoder runs whose `column` holds a list (one entry per position or length) that `recorded`
    accepts; runs written before the column existed hold none."""
    decoders = _decoders(main)
    return decoders[decoders[column].map(lambda v: isinstance(v, (list, np.ndarray)) and recorded(v))]


def _curve_per_run(decoders: pd.DataFrame, curve: Callable[[pd.Series], tuple[np.ndarray, np.ndarray]], **style):
    """(figure, axes) with one line per decoder run, its points from `curve(run)` as (x, y)."""
    palette = colours(decoders["decoder"])
    figure, ax = plt.subplots(figsize=(7, 4))
    for _, run in decoders.iterrows():
        x, y = curve(run)
        ax.plot(x, y, color=palette[run["decoder"]], label=run["decoder"], **style)
    return figure, ax


def _acceptance_by_position(run: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(window positions 1.., acceptance there); a position no draft reached is a gap (NaN)."""
    rates = np.array([np.nan if v is None else v for v in run["slot_acceptance"]], dtype=float)
    return np.arange(1, rates.size + 1), rates


def _accepted_length_shares(run: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(tokens committed in one iteration, share of iterations), lengths from 1 that occurred: on a
    log axis empty bins are left out, not drawn at -inf."""
    counts = np.asarray(run["accept_len_hist"], dtype=float)
    lengths = np.arange(counts.size)
    keep = (lengths >= 1) & (counts > 0)
    return lengths[keep], (counts / counts.sum())[keep]


def fig_acceptance_by_position(main: pd.DataFrame) -> Plot | str:
    decoders = _recording(main, "slot_acceptance", lambda rates: len(rates) > 0)
    if decoders.empty:
        return "no decoder run records acceptance per window position"
    figure, ax = _curve_per_run(decoders, _acceptance_by_position, marker=".")
    ax.set_ylim(0, 1.02)
    _finish(ax, "draft position in the window (1 = first draft)", "acceptance rate")
    figure.tight_layout()
    return Plot(
        "acceptance_by_position",
        "Acceptance by window position",
        "Share of verified drafts accepted at each position of the window (pooled over samples).",
        figure,
    )


def fig_accepted_length_hist(main: pd.DataFrame) -> Plot | str:
    decoders = _recording(main, "accept_len_hist", lambda counts: sum(counts) > 0)
    if decoders.empty:
        return "no decoder run records accepted lengths"
    figure, ax = _curve_per_run(decoders, _accepted_length_shares, marker="o", ms=3, lw=1)
    ax.set_yscale("log")
    _finish(ax, "tokens committed in one iteration", "share of iterations")
    figure.tight_layout()
    return Plot(
        "accepted_length_hist",
        "Accepted lengths",
        "Distribution of tokens committed per Jacobi iteration (accepted drafts plus the emitted token).",
        figure,
    )


def _bands(trajectories: list[list[float]], depth: int = TRACE_DEPTH) -> pd.DataFrame:
    """Median and quartiles of p(token) k iterations before verification (k = 0 .. depth-1)."""
    rows = []
    for k in range(depth):
        values = [t[-1 - k] for t in trajectories if len(t) > k]
        if len(values) >= MIN_TRACES:
            q25, q50, q75 = np.quantile(values, [0.25, 0.5, 0.75])
            rows.append({"offset": -k, "q25": q25, "median": q50, "q75": q75, "n": len(values)})
    return pd.DataFrame(rows, columns=["offset", "q25", "median", "q75", "n"])


def trajectory_sets(run: pd.Series) -> tuple[dict[str, list[list[float]]], str, int]:
    """({"accepted": [...], "rejected": [...]}, "drafts", replays that missed the stored tokens) from
    the run's draft traces (drafts seen in at least two iterations), or ({"committed": [...]},
    "committed", 0) from the sample rows' trajectories when it has none."""
    if run.get("has_draft_traces"):
        sets: dict[str, list[list[float]]] = {"accepted": [], "rejected": []}
        missed = 0
        for row in load_draft_traces(run["run_dir"]):
            missed += not row.get("matches_stored", False)
            for draft in row.get("drafts", []):
                if len(draft["probs"]) >= 2:
                    sets["accepted" if draft["accepted"] else "rejected"].append(draft["probs"])
        return sets, "drafts", missed
    committed = [t["probs"] for t in run.get("trajectories_rows", []) if len(t.get("probs", [])) >= 2]
    return {"committed": committed}, "committed", 0


def fig_trajectories(main: pd.DataFrame, samples: pd.DataFrame, max_panels: int = 9) -> Plot | str:
    """Probability of a draft's token at its position over the iterations before it was verified:
    accepted vs rejected drafts (median and quartile band), one panel per decoder."""
    decoders = _decoders(main)
    decoders = decoders[~decoders["greedy"].astype(bool)]  # greedy: one-hot probabilities, nothing to see
    if decoders.empty:
        return "no sampled decoder in this table"
    traced = decoders[decoders["has_draft_traces"].astype(bool)]
    chosen = traced if not traced.empty else decoders
    panels, missed = [], 0
    for _, run in chosen.iterrows():
        if traced.empty and "trajectories" in samples:
            rows = samples.loc[samples["run_id"] == run["run_id"], "trajectories"]
            run = run.copy()
            run["trajectories_rows"] = [t for value in rows if isinstance(value, list) for t in value]
        sets, kind, run_missed = trajectory_sets(run)
        missed += run_missed
        bands = {name: _bands(values) for name, values in sets.items()}
        if any(not b.empty for b in bands.values()):
            panels.append((run["decoder"], bands, {k: len(v) for k, v in sets.items()}, kind))
    if not panels:
        return "no recorded probability trajectories long enough to plot"
    panels = panels[:max_panels]
    kind = panels[0][3]
    cols = min(3, len(panels))
    rows = int(np.ceil(len(panels) / cols))
    figure, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False, sharey=True)
    style = {"accepted": "tab:green", "rejected": "tab:red", "committed": "tab:blue"}
    for ax, (label, bands, counts, _) in zip(axes.flat, panels):
        for name, band in bands.items():
            if band.empty:
                continue
            ax.fill_between(band["offset"], band["q25"], band["q75"], color=style[name], alpha=0.2, lw=0)
            ax.plot(band["offset"], band["median"], marker="o", color=style[name], label=name)
        ax.set_title(f"{label}  ({', '.join(f'{n} {k}' for k, n in counts.items())})", fontsize=9)
        ax.set_ylim(0, 1)
        _finish(
            ax,
            "iterations before verification" if kind == "drafts" else "iterations before commit",
            "p(token) at its position",
            legend=False,
        )
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()  # one legend for all panels, above them
    figure.legend(
        handles,
        [f"{name}: median, quartile band" for name in labels],
        loc="upper center",
        ncol=len(labels),
        frameon=False,
        fontsize=9,
    )
    figure.tight_layout(rect=(0, 0, 1, 0.96 if rows > 1 else 0.9))
    if kind == "drafts":
        caption = (
            "Probability of each verified draft's token at its position over the iterations before its "
            "verification (0 = the verifying iteration), accepted vs rejected drafts seen in at least two "
            "iterations: median and quartile band."
        )
        if missed:
            caption += (
                f" {missed} replayed sample(s) did not reproduce the stored tokens (another device or "
                "nondeterministic kernels): their drafts are of a fresh sample of the same decoder."
            )
    else:
        caption = (
            "Probability of each committed token at its position over the iterations before its commit "
            "(median and quartile band). Accepted-vs-rejected draft trajectories need draft traces: "
            "`sjdbench report --trace-drafts K`."
        )
    return Plot("trajectories", "Probability trajectories", caption, figure)


def fig_growth(main: pd.DataFrame) -> Plot | str:
    decoders = _decoders(main).dropna(subset=["growth_share"], how="all")
    decoders = decoders[~decoders["greedy"].astype(bool)]
    if decoders.empty:
        return "no sampled decoder records growth statistics"
    figure, ax = plt.subplots(figsize=(max(6, 0.7 * len(decoders) + 2), 4))
    x = np.arange(len(decoders))
    ax.bar(x - 0.2, decoders["growth_share"].astype(float), width=0.4, label="growth share (accepted drafts that rose)")
    ax.bar(
        x + 0.2,
        decoders["growth_precision"].astype(float),
        width=0.4,
        label="growth precision (rising drafts accepted)",
    )
    ax.set_xticks(x, decoders["decoder"], rotation=30, ha="right")
    ax.set_ylim(0, 1)
    _finish(ax, "", "share")
    figure.tight_layout()
    return Plot(
        "growth",
        "Consecutive growth",
        "Growth share: accepted drafts (with N+1 observations) whose probability rose over the last N "
        "iterations; growth precision: share of rising drafts that were accepted.",
        figure,
    )


def fig_quality_vs_speed(numbers: pd.DataFrame, metrics: list) -> Plot | str:
    """One panel per quality metric: value (CI) against speedup (CI); AR as a star at 1x, lossless
    decoders as filled circles, lossy ones as open triangles."""
    if not metrics:
        return "no run of this table has quality scores (`sjdbench eval` writes them)"
    figure, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 4.2), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        scored = numbers.dropna(subset=[metric.key])
        for kind, members in (
            ("AR", scored[scored["is_ar"].astype(bool)]),
            ("lossless", scored[~scored["is_ar"].astype(bool) & scored["lossless"].astype(bool)]),
            ("lossy", scored[~scored["is_ar"].astype(bool) & ~scored["lossless"].astype(bool)]),
        ):
            members = members.dropna(subset=["speedup"])
            if members.empty:
                continue
            x = members["speedup"].astype(float).to_numpy()
            y = members[metric.key].astype(float).to_numpy()
            xerr = _err(members, "speedup", x)
            yerr = _err(members, metric.key, y)
            marker = {"AR": "*", "lossless": "o", "lossy": "^"}[kind]
            face = {"AR": "black", "lossless": "tab:blue", "lossy": "none"}[kind]
            edge = {"AR": "black", "lossless": "tab:blue", "lossy": "tab:orange"}[kind]
            ax.errorbar(
                x,
                y,
                xerr=xerr,
                yerr=yerr,
                fmt=marker,
                ms=11 if kind == "AR" else 7,
                mfc=face,
                mec=edge,
                ecolor=edge,
                capsize=2,
                lw=0.8,
                label=kind,
            )
            if kind == "AR":  # reference lines through AR: read each decoder against them
                ax.axhline(y[0], color="black", lw=0.7, ls=":")
                ax.axvline(1.0, color="black", lw=0.7, ls=":")
                continue
            for xi, yi, label in zip(x, y, members["decoder"]):
                ax.annotate(label, (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=7)
        _finish(ax, "latency speedup over AR (95 % CI)", f"{metric.header} {metric.arrow} (95 % CI)")
    figure.tight_layout()
    return Plot(
        "quality_vs_speed",
        "Quality vs speed",
        "Image quality against latency speedup; bars are 95 % CIs. Star and dotted lines: AR; filled "
        "circles: lossless decoders; open triangles: lossy decoders.",
        figure,
    )


def _err(frame: pd.DataFrame, key: str, centre: np.ndarray) -> np.ndarray | None:
    if f"{key}_lo" not in frame:
        return None
    lo = frame[f"{key}_lo"].astype(float).to_numpy()
    hi = frame[f"{key}_hi"].astype(float).to_numpy()
    lo = np.where(np.isnan(lo), centre, lo)
    hi = np.where(np.isnan(hi), centre, hi)
    return np.vstack([np.clip(centre - lo, 0, None), np.clip(hi - centre, 0, None)])


def fig_image_grid(main: pd.DataFrame, samples: pd.DataFrame, n_prompts: int = 6) -> Plot | str:
    """The same prompts (columns) across decoders (rows, AR first), sample 0 of each."""

    if "image" not in samples:
        return "no stored images"
    rows = samples[samples["run_id"].isin(main["run_id"]) & samples["image"].notna() & (samples["sample"] == 0)]
    runs = [r for _, r in main.iterrows() if r["run_id"] in set(rows["run_id"])]
    if not runs:
        return "no stored images"
    common = set.intersection(*(set(rows.loc[rows["run_id"] == r["run_id"], "prompt_id"]) for r in runs))
    prompts = sorted(common)[:n_prompts]
    if not prompts:
        return "the runs share no prompt with a stored image"
    figure, axes = plt.subplots(
        len(runs), len(prompts), figsize=(1.6 * len(prompts) + 1.2, 1.6 * len(runs) + 0.9), squeeze=False
    )
    marked = 0  # images the rows name that are missing or unreadable: drawn as marked cells, never blank
    for i, run in enumerate(runs):
        mine = rows[rows["run_id"] == run["run_id"]].set_index("prompt_id")
        for j, prompt_id in enumerate(prompts):
            ax = axes[i, j]
            picture, why = _image(Path(run["run_dir"]) / mine.loc[prompt_id, "image"])
            if picture is not None:
                ax.imshow(picture)
            else:
                marked += 1
                ax.text(0.5, 0.5, why, ha="center", va="center", fontsize=7, color="tab:red", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title("\n".join(textwrap.wrap(str(mine.loc[prompt_id, "prompt"]), 26)[:4]), fontsize=6)
            if j == 0:
                ax.set_ylabel(run["decoder"], fontsize=8)
    figure.tight_layout()
    return Plot(
        "image_grid",
        "Samples",
        "The same prompts and seeds across decoders (rows), sample 0."
        + (f" {marked} image(s) the sample rows name are missing or unreadable (marked)." if marked else ""),
        figure,
        formats=("png",),
    )


def _image(path: Path) -> tuple[np.ndarray | None, str]:
    """(H, W, 3) pixels of a stored image, or None and why not ("missing", "unreadable")."""
    from PIL import Image

    if not path.is_file():
        return None, "image\nmissing"
    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB")), ""
    except (OSError, ValueError):  # not an image, truncated
        return None, "image\nunreadable"


def write_plot(plot: Plot, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for extension in plot.formats:
        path = directory / f"{plot.name}.{extension}"
        buffer = io.BytesIO()
        plot.figure.savefig(buffer, format=extension, dpi=150 if extension == "png" else None, bbox_inches="tight")
        atomic_write_bytes(path, buffer.getvalue())
        paths.append(path)
    plt.close(plot.figure)
    return paths
