"""The decoding statistics, each described once: what a decode counts for every sample, and what a
run reports.

Two tables. The *fields* of a sample (`FIELDS`): the counters the recorder keeps while the sample
decodes (`Count`: one integer; `Histogram`: integers indexed by, e.g., a draft's depth below its
root) and the facts written beside them (`Fact`: the segment's length, the runner's latency); a
samples.jsonl row holds each under its name. The *statistics* of a run (`STATISTICS`): each a
summary.json key, saying how the run's samples pool into it (`Ratio` of two summed counters,
`Mean`, `Median`, `PooledHistogram`, ...), its column header, unit, digits and direction, where it
is shown, and a one-line description (the command line's legend and the docs are made from these).
A statistic marked `per_sample` is also written into every samples.jsonl row, pooled over that one
sample.

Everything else is made from these tables: the recorder's counters and a row's fields
(sjdbench.decoding.recorder), the summary (sjdbench.results.summary), the columns and legend that
`run` and `sweep` print (sjdbench.cli.tables) and the report's decoding columns
(sjdbench.report.tables). Adding a statistic is one `Statistic` entry (its counters, when they are
new, are declared in it) plus the code that counts them.

Torch-free and free of sjdbench imports: the decoding loop, the results layer and the command line
read it alike. Pooling raises KeyError for a row without a field it reads (rows of an older
sjdbench): the results layer then keeps the summary written with them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Union

# -- the fields of a sample: counters the recorder keeps, facts written beside them ----------------


@dataclass(frozen=True)
class Fact:
    """A value of a sample that is not counted while it decodes (the segment's length, its latency)."""

    name: str  # the samples.jsonl field
    description: str


@dataclass(frozen=True)
class Count:
    """An integer the recorder counts for each sample."""

    name: str
    description: str


@dataclass(frozen=True)
class Histogram:
    """Integers the recorder counts for each sample, indexed by `by` (one of `HISTOGRAM_INDEX`)."""

    name: str
    description: str
    by: str
    trim: bool = False  # a row keeps it up to its last non-zero entry (its length says nothing)


# what indexes a histogram: its width is the recorder's to set from the decode (window, layout)
HISTOGRAM_INDEX = {
    "decided": "tokens an iteration decided (0 .. tokens per image)",
    "depth": "a draft's depth below its root, minus one (a chain's window slot)",
    "sibling": "a draft's index among its parent's children (trees)",
    "grid_row": "the grid row of a draft's position",
    "rows_in_flight": "rows that predicted in one forward (the rows topology; 1 otherwise)",
}

Field = Union[Fact, Count, Histogram]

N_TOKENS = Fact("n_tokens", "generated positions, forced ones included (= AR's NFE)")
N_CONTENT = Fact("n_content", "image tokens: the positions the model samples")
LATENCY = Fact(
    "latency_s", "seconds to decode the sample; none inside a batch, where a sample's own time means nothing"
)

NFE = Count("nfe", "model forwards, the prefill included")
DRAFTER_FORWARDS = Count("drafter_forwards", "drafter forwards (a drafter proposal's; not the model's, not in nfe)")
ITERATIONS = Count("iterations", "Jacobi iterations: forwards after the prefill")
ACCEPTED = Count("accepted", "drafts accepted at content positions")
VERIFIED = Count("verified", "drafts the verifier decided on at content positions")
ACCEPTED_NO_FRESH = Count("accepted_no_fresh", "accepted drafts that the init or a uniform sibling did not draw")
VERIFIED_NO_FRESH = Count("verified_no_fresh", "verified drafts that the init or a uniform sibling did not draw")
SLOTS_FED = Count("slots_fed", "window slots fed over all forwards, roots included")
GROWTH_ELIGIBLE_ACCEPTED = Count(
    "growth_eligible_accepted", "accepted drafts whose position had enough observations for growth when proposed"
)
GROWTH_GREW_ACCEPTED = Count(
    "growth_grew_accepted", "... of which the token's probability rose over the last N iterations"
)
GROWTH_FLAGGED_VERIFIED = Count("growth_flagged_verified", "verified drafts whose token had grown when proposed")
GROWTH_FLAGGED_ACCEPTED = Count("growth_flagged_accepted", "... of which were accepted")
VERIFY_ELIGIBLE_ACCEPTED = Count(
    "verify_eligible_accepted", "accepted drafts with enough observations, counting the verifying iteration's"
)
VERIFY_GREW_ACCEPTED = Count("verify_grew_accepted", "... of which grew up to and including that iteration")

ACCEPT_LEN_HIST = Histogram("accept_len_hist", "[m] = iterations that decided m tokens", "decided", trim=True)
SLOT_ACCEPTED = Histogram("slot_accepted", "[j] = accepted drafts at depth j + 1", "depth")
SLOT_VERIFIED = Histogram("slot_verified", "[j] = verified drafts at depth j + 1", "depth")
SIBLING_ACCEPTED = Histogram("sibling_accepted", "[k] = accepted drafts that were sibling k", "sibling")
SIBLING_VERIFIED = Histogram("sibling_verified", "[k] = verified drafts that were sibling k", "sibling")
ROW_ACCEPTED = Histogram("row_accepted", "[r] = accepted drafts in grid row r", "grid_row")
ROW_VERIFIED = Histogram("row_verified", "[r] = verified drafts in grid row r", "grid_row")
ROWS_IN_FLIGHT = Histogram(
    "rows_in_flight", "[k] = iterations whose window held k rows in flight", "rows_in_flight", trim=True
)

# counters that no statistic pools: kept per sample for the per-sibling and per-row figures
RECORDED = (SIBLING_ACCEPTED, SIBLING_VERIFIED, ROW_ACCEPTED, ROW_VERIFIED, ROWS_IN_FLIGHT)


# -- how a run's samples pool into one number -------------------------------------------------------


class Samples:
    """A run's samples.jsonl rows as the pooling rules read them; the passes over the rows' stream
    and machine records are made once for all the statistics that read them."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows

    def total(self, name: str) -> Any:
        return sum(r[name] for r in self.rows)

    def present(self, name: str) -> list[Any]:
        """The values of the rows that hold one (a latency is None inside a batch)."""
        return [r[name] for r in self.rows if r.get(name) is not None]

    def pooled(self, name: str) -> list[int]:
        """A histogram summed entry by entry over the rows (as wide as the widest)."""
        width = max(len(r[name]) for r in self.rows)
        total = [0] * width
        for r in self.rows:
            for i, value in enumerate(r[name]):
                total[i] += value
        return total

    @cached_property
    def streams(self) -> dict[str, Any]:
        """Images and tokens per decoding second, over the streams the rows came from (a stream: the
        samples one command decoded together, B at a time; its decoding seconds are those recorded
        with its last row). Rows from before streams were recorded count as streams of one, timed by
        their latency."""
        streams: dict[str, tuple[int, float]] = {}
        sizes, peaks, tokens = set(), [], 0
        for i, r in enumerate(self.rows):
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

    @cached_property
    def machines(self) -> dict[str, Any]:
        """How many latencies were taken on a busy machine, and from which timing modes (`single`:
        one run decoded on its own; `paired`: interleaved prompt by prompt with the runs it is
        compared with)."""
        machines = [r.get("machine") for r in self.rows]
        busy = sum(1 for m in machines if m and m.get("busy"))
        unknown = sum(1 for m in machines if not m)
        modes: dict[str, int] = {}
        for r in self.rows:
            mode = (r.get("timing") or {}).get("mode", "unrecorded")
            modes[mode] = modes.get(mode, 0) + 1
        loads = [m["load_1m"] for m in machines if m and m.get("load_1m") is not None]
        return {
            "busy_samples": busy,
            "latency_trusted": busy == 0 and unknown == 0,
            "load_1m_max": max(loads) if loads else None,
            "timing_modes": modes,
        }


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


class _OfOneField:
    """A pooling rule that reads one per-sample field, `of`."""

    of: Field

    @property
    def reads(self) -> tuple[Field, ...]:
        return (self.of,)


@dataclass(frozen=True)
class Moment(_OfOneField):
    """Σ_m m × histogram[m] of a sample (of the `decided` histogram: the tokens all its iterations decided)."""

    of: Histogram

    def of_row(self, row: dict) -> int:
        return sum(m * c for m, c in enumerate(row[self.of.name]))


Term = Union[Fact, Count, Moment]


def _term(term: Term, row: dict) -> Any:
    return term.of_row(row) if isinstance(term, Moment) else row[term.name]


def _reads(term: Term) -> tuple[Field, ...]:
    return term.reads if isinstance(term, Moment) else (term,)


@dataclass(frozen=True)
class SampleCount:
    """The number of samples."""

    reads: tuple[Field, ...] = ()

    def over(self, samples: Samples) -> int:
        return len(samples.rows)


@dataclass(frozen=True)
class Total(_OfOneField):
    """A counter summed over the samples."""

    of: Count

    def over(self, samples: Samples) -> int:
        return int(samples.total(self.of.name))


@dataclass(frozen=True)
class Ratio:
    """Σ numerator / Σ denominator over the samples (None where the denominator sums to 0); for one
    sample, the same ratio of its own values. Pooled this way a run's acceptance rate is every
    accepted draft over every verified one, not a mean of per-sample rates."""

    numerator: Term
    denominator: Term

    @property
    def reads(self) -> tuple[Field, ...]:
        return _reads(self.numerator) + _reads(self.denominator)

    def over(self, samples: Samples) -> float | None:
        rows = samples.rows
        return _ratio(sum(_term(self.numerator, r) for r in rows), sum(_term(self.denominator, r) for r in rows))

    def of_row(self, row: dict) -> float | None:
        return _ratio(_term(self.numerator, row), _term(self.denominator, row))


@dataclass(frozen=True)
class Mean(_OfOneField):
    """The mean over the samples; with `present_only`, over the samples that hold a value (None when
    none does)."""

    of: Fact | Count
    present_only: bool = False
    absent: int | None = None  # the value of a row without the field (a counter an older sjdbench never had)

    def over(self, samples: Samples) -> float | None:
        if self.absent is not None:
            return sum(r.get(self.of.name, self.absent) for r in samples.rows) / len(samples.rows)
        if not self.present_only:
            return samples.total(self.of.name) / len(samples.rows)
        values = samples.present(self.of.name)
        return statistics.fmean(values) if values else None


@dataclass(frozen=True)
class Median(_OfOneField):
    """The median over the samples that hold a value (None when none does)."""

    of: Fact

    def over(self, samples: Samples) -> float | None:
        values = samples.present(self.of.name)
        return statistics.median(values) if values else None


@dataclass(frozen=True)
class PooledHistogram(_OfOneField):
    """A histogram summed entry by entry over the samples."""

    of: Histogram

    def over(self, samples: Samples) -> list[int]:
        return samples.pooled(self.of.name)


@dataclass(frozen=True)
class HistogramRatio:
    """Entry by entry, Σ numerator[i] / Σ denominator[i] over the samples (None where it sums to 0)."""

    numerator: Histogram
    denominator: Histogram

    @property
    def reads(self) -> tuple[Field, ...]:
        return (self.numerator, self.denominator)

    def over(self, samples: Samples) -> list[float | None]:
        pairs = zip(samples.pooled(self.numerator.name), samples.pooled(self.denominator.name))
        return [_ratio(a, v) for a, v in pairs]


@dataclass(frozen=True)
class OverStreams:
    """One figure of the run's throughput over its streams (`Samples.streams`)."""

    key: str
    reads: tuple[Field, ...] = (N_TOKENS, LATENCY)

    def over(self, samples: Samples) -> Any:
        return samples.streams[self.key]


@dataclass(frozen=True)
class OverMachines:
    """One figure of how far the run's latencies can be trusted (`Samples.machines`)."""

    key: str
    reads: tuple[Field, ...] = ()

    def over(self, samples: Samples) -> Any:
        return samples.machines[self.key]


Pool = Union[SampleCount, Total, Ratio, Mean, Median, PooledHistogram, HistogramRatio, OverStreams, OverMachines]


# -- the statistics of a run ------------------------------------------------------------------------

DECODING = "decoding"  # what the loop counted: the same on any machine
TIMING = "timing"  # what the clock measured
CLI = "cli"  # a column of the tables `run` and `sweep` print
REPORT = "report"  # a column of the report's speed tables


@dataclass(frozen=True)
class Statistic:
    """One statistic of a run: a summary.json key, and how it is shown."""

    name: str  # the summary.json key (and the samples.jsonl field, when per_sample)
    pool: Pool  # how the run's samples pool into it
    description: str  # one line: the command line's legend, the docs
    header: str = ""  # the report's column header
    short: str = ""  # the terminal's column header (run, sweep); empty: the header
    unit: str = ""  # what one unit of the number is ("" for ratios and counts)
    digits: int = 2  # decimals shown
    better: str | None = None  # "max" | "min": the best value a table marks; None: no direction
    group: str = DECODING  # DECODING | TIMING: the report shows timing first, the terminal last
    shown: tuple[str, ...] = ()  # where it is a column: CLI, REPORT
    per_sample: bool = False  # also a samples.jsonl field: the same pooling over one sample
    summary: bool = True  # a summary.json key

    @property
    def column(self) -> str:
        """The terminal's header."""
        return self.short or self.header or self.name

    @property
    def reads(self) -> tuple[Field, ...]:
        """The per-sample fields it is pooled from."""
        return self.pool.reads


STATISTICS: tuple[Statistic, ...] = (
    Statistic("n_samples", SampleCount(), "samples decoded", header="samples", short="n", digits=0, shown=(CLI,)),
    Statistic("n_tokens", Mean(N_TOKENS), "positions per image, forced ones included", header="tokens", unit="tokens"),
    Statistic(
        "nfe_mean",
        Mean(NFE),
        "model forwards per image, the prefill included",
        header="NFE",
        unit="forwards",
        digits=1,
        better="min",
        shown=(CLI, REPORT),
    ),
    Statistic(
        "drafter_forwards_mean",
        Mean(DRAFTER_FORWARDS, absent=0),  # rows written before drafters existed had none
        "drafter forwards per image (a trained drafter's, apart from NFE; 0 without one)",
        header="drafter forwards",
        short="draft F",
        unit="forwards",
        digits=1,
        shown=(CLI, REPORT),
    ),
    Statistic(
        "step_compression",
        Ratio(N_TOKENS, NFE),
        "AR tokens / NFE",
        header="step compression",
        short="step x",
        better="max",
        shown=(CLI, REPORT),
        per_sample=True,
    ),
    Statistic(
        "acceptance_rate",
        Ratio(ACCEPTED, VERIFIED),
        "accepted / verified drafts",
        header="acceptance",
        short="accept",
        better="max",
        shown=(CLI, REPORT),
        per_sample=True,
    ),
    Statistic(
        "acceptance_rate_no_fresh",
        Ratio(ACCEPTED_NO_FRESH, VERIFIED_NO_FRESH),
        "accepted / verified drafts without fresh init drafts",
        header="acceptance without fresh drafts",
        short="acc.old",
        better="max",
        shown=(CLI,),
        per_sample=True,
    ),
    Statistic(
        "mean_accepted_length",
        Ratio(Moment(ACCEPT_LEN_HIST), ITERATIONS),
        "tokens per iteration",
        header="accepted length",
        short="len",
        unit="tokens",
        better="max",
        shown=(CLI, REPORT),
        per_sample=True,
    ),
    Statistic(
        "growth_share",
        Ratio(GROWTH_GREW_ACCEPTED, GROWTH_ELIGIBLE_ACCEPTED),
        "accepted drafts that rose N iterations running",
        header="growth share",
        short="growth",
        shown=(CLI, REPORT),
        per_sample=True,
    ),
    Statistic(
        "growth_precision",
        Ratio(GROWTH_FLAGGED_ACCEPTED, GROWTH_FLAGGED_VERIFIED),
        "verified drafts that had grown when proposed and were accepted / those verified",
        header="growth precision",
        shown=(REPORT,),
        per_sample=True,
    ),
    Statistic(
        "growth_share_at_verify",
        Ratio(VERIFY_GREW_ACCEPTED, VERIFY_ELIGIBLE_ACCEPTED),
        "the growth share, with growth measured up to the verifying iteration's distribution",
        header="growth share at verification",
        per_sample=True,
    ),
    Statistic(
        "slots_per_forward",
        Ratio(SLOTS_FED, ITERATIONS),
        "window slots per forward, roots included",
        header="slots per forward",
        unit="slots",
        per_sample=True,
        summary=False,
    ),
    Statistic(
        "accept_len_hist",
        PooledHistogram(ACCEPT_LEN_HIST),
        "[m] = iterations that decided m tokens",
        header="tokens per iteration",
        digits=0,
    ),
    Statistic(
        "slot_acceptance",
        HistogramRatio(SLOT_ACCEPTED, SLOT_VERIFIED),
        "[j] = acceptance of the drafts at depth j + 1 (a chain's slot j + 1)",
        header="acceptance by depth",
    ),
    Statistic(
        "latency_s_mean",
        Mean(LATENCY, present_only=True),
        "latency per image (! = some timed on a busy machine; '-' in a batch, where a sample's own time means nothing)",
        header="latency (s)",
        short="sec",
        unit="s",
        digits=3,
        better="min",
        group=TIMING,
        shown=(CLI, REPORT),
    ),
    Statistic(
        "latency_s_median",
        Median(LATENCY),
        "median latency per image",
        header="median latency (s)",
        unit="s",
        digits=3,
        better="min",
        group=TIMING,
    ),
    Statistic(
        "tokens_per_s",
        OverStreams("tokens_per_s"),
        "tokens per decoding second",
        header="tokens/s",
        unit="tokens/s",
        better="max",
        group=TIMING,
    ),
    Statistic(
        "batch_size",
        OverStreams("batch_size"),
        "batch size",
        header="batch size",
        short="B",
        digits=0,
        group=TIMING,
        shown=(CLI,),
    ),
    Statistic(
        "images_per_s",
        OverStreams("images_per_s"),
        "images per decoding second",
        header="images/s",
        short="img/s",
        unit="images/s",
        better="max",
        group=TIMING,
        shown=(CLI, REPORT),
    ),
    Statistic(
        "decode_s",
        OverStreams("decode_s"),
        "decoding seconds over all streams",
        header="decoding (s)",
        unit="s",
        group=TIMING,
    ),
    Statistic(
        "peak_bytes",
        OverStreams("peak_bytes"),
        "peak accelerator memory of a stream",
        header="peak memory",
        unit="bytes",
        digits=0,
        group=TIMING,
    ),
    Statistic(
        "busy_samples",
        OverMachines("busy_samples"),
        "samples timed while the machine was oversubscribed",
        header="busy samples",
        digits=0,
        group=TIMING,
    ),
    Statistic(
        "latency_trusted",
        OverMachines("latency_trusted"),
        "no sample was timed on a busy machine, and every one recorded its machine state",
        header="latency trusted",
        group=TIMING,
    ),
    Statistic(
        "load_1m_max",
        OverMachines("load_1m_max"),
        "the highest one-minute load average a sample was timed at",
        header="load (1 min)",
        group=TIMING,
    ),
    Statistic(
        "timing_modes",
        OverMachines("timing_modes"),
        "samples per timing mode (single: one run on its own; paired: interleaved with the runs it is compared with)",
        header="timing modes",
        group=TIMING,
    ),
)


def statistics_of(group: str | None = None, shown: str | None = None) -> list[Statistic]:
    """The statistics (of one group, shown in one place), in table order; read at call time."""
    return [s for s in STATISTICS if (group is None or s.group == group) and (shown is None or shown in s.shown)]


def summary_statistics() -> list[Statistic]:
    """The statistics summary.json holds, in table order; read at call time."""
    return [s for s in STATISTICS if s.summary]


def summary_fields() -> tuple[str, ...]:
    """The summary.json keys of a run's statistics, in table order."""
    return tuple(s.name for s in summary_statistics())


def sample_fields() -> tuple[Field, ...]:
    """Every per-sample field: those the statistics read, then the recorded ones, each once."""
    seen: dict[str, Field] = {}
    for field in (*(f for s in STATISTICS for f in s.reads), *RECORDED):
        seen.setdefault(field.name, field)
    return tuple(seen.values())


def counters() -> tuple[Count, ...]:
    """The integers the recorder counts for every sample."""
    return tuple(f for f in sample_fields() if isinstance(f, Count))


def histograms() -> tuple[Histogram, ...]:
    """The histograms the recorder counts for every sample."""
    return tuple(f for f in sample_fields() if isinstance(f, Histogram))


def sample_row(values: dict[str, Any]) -> dict[str, Any]:
    """A samples.jsonl row's statistics from one sample's facts and counters (by name): the counters
    (histograms trimmed where their length says nothing), then each per-sample statistic."""
    row = dict(values)
    for histogram in histograms():
        if histogram.trim:
            row[histogram.name] = _trim(row[histogram.name])
    for s in STATISTICS:
        if s.per_sample:
            assert isinstance(s.pool, Ratio)  # the per-sample statistics are ratios of a sample's counters
            row[s.name] = s.pool.of_row(row)
    return row


def _trim(counts: list[int]) -> list[int]:
    """Up to the last non-zero entry (at least one entry)."""
    last = max((i for i, c in enumerate(counts) if c), default=0)
    return list(counts[: last + 1])


def legend(shown: str = CLI) -> str:
    """'header = description' for every column shown there, in column order."""
    return "; ".join(f"{s.column} = {s.description}" for s in columned(shown))


def columned(shown: str) -> list[Statistic]:
    """The statistics shown there, in the order of its columns: the terminal puts what the loop
    counted before what the clock measured, the report the other way round."""
    first, then = (DECODING, TIMING) if shown == CLI else (TIMING, DECODING)
    return statistics_of(first, shown) + statistics_of(then, shown)
