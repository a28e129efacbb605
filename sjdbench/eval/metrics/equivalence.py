"""Equivalence to AR within a stated margin: two one-sided tests (TOST) on paired per-prompt
differences.

A paired interval of the difference to AR that includes 0 says only that no difference was found;
with few prompts every interval includes 0. Equivalence reverses the burden of proof: a decoder is
*equivalent to AR within ±m* at level α when both one-sided nulls, "the mean difference is at most
-m" and "at least +m", are rejected at α, which is the same as the (1 - 2α) interval of the mean
difference lying inside (-m, +m) (Schuirmann 1987). At α = 0.05 that is the 90 % interval. Too few
prompts, or too much noise, give a wide interval and the answer "not shown": the test never
claims equality the data cannot carry.

The statistic is the paired t interval over prompts, not the percentile bootstrap the table's 95 %
intervals use. Why: the unit is the prompt (samples of one prompt are averaged first, as the
bootstrap resamples whole prompts), per-prompt differences of a bounded score over hundreds of
prompts are close to normal in their mean, and the t interval is TOST's textbook form whose level
holds at small N. The percentile bootstrap is too narrow at small N (it ignores that the spread is
estimated: on normal data its nominal 90 % interval covered the mean 77 % of the time with 5
prompts and 86 % with 16, in a simulation of 2,000 draws each), exactly where a false "equivalent"
would do harm, and it needs resampling where a closed form exists.

The margin is in the score's own units and belongs to the metric, not to the decoder. The defaults
are one CLIP point: 1.0 on the 100 * max(cos, 0) scale (toy CLIP-Score, CLIP-Score as SJD and GSD
report it) and 0.01 on the raw-cosine scale (LANTERN, LlamaGen). Metrics without a margin say
nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from sjdbench.errors import UserError

ALPHA = 0.05  # each one-sided test; the interval inside the margin is the (1 - 2 ALPHA) one
ONE_CLIP_POINT = 1.0  # on the 100 * max(cos, 0) scale; 0.01 on the raw cosine


@dataclass(frozen=True)
class Equivalence:
    """The outcome of TOST at margin ±`margin`: the mean paired difference over `n` prompts, its
    standard error and its (1 - 2 alpha) t interval [lo, hi]; equivalent when that interval lies
    inside (-margin, +margin)."""

    margin: float
    mean: float | None
    se: float | None
    n: int  # prompts paired
    alpha: float = ALPHA

    @property
    def _half_width(self) -> float | None:
        if self.se is None or self.n < 2:
            return None
        from scipy.stats import t as student

        return float(student.ppf(1 - self.alpha, self.n - 1)) * self.se

    @property
    def lo(self) -> float | None:
        half = self._half_width
        return None if half is None or self.mean is None else self.mean - half

    @property
    def hi(self) -> float | None:
        half = self._half_width
        return None if half is None or self.mean is None else self.mean + half

    @property
    def equivalent(self) -> bool:
        lo, hi = self.lo, self.hi
        return lo is not None and hi is not None and -self.margin < lo and hi < self.margin

    @property
    def p_value(self) -> float | None:
        """The larger of the two one-sided p-values (equivalent iff it is below alpha)."""
        if self.mean is None or self.se is None or self.n < 2:
            return None
        if self.se == 0:
            return 0.0 if abs(self.mean) < self.margin else 1.0
        from scipy.stats import t as student

        dof = self.n - 1
        below = float(student.sf((self.mean + self.margin) / self.se, dof))  # H0: mean <= -margin
        above = float(student.cdf((self.mean - self.margin) / self.se, dof))  # H0: mean >= +margin
        return max(below, above)

    def text(self) -> str:
        """ "equivalent to AR within ±1" or "not shown"."""
        return f"equivalent to AR within ±{margin_text(self.margin)}" if self.equivalent else "not shown"


def margin_text(margin: float) -> str:
    return f"{margin:g}"


def tost(differences: Iterable[float], margin: float, alpha: float = ALPHA) -> Equivalence:
    """TOST on per-prompt paired differences (decoder minus AR, one value per prompt)."""
    values = np.asarray(list(differences), dtype=np.float64)
    values = values[np.isfinite(values)]
    n = int(values.size)
    if n < 2:  # no spread can be estimated from one prompt: nothing is shown
        return Equivalence(margin, float(values.mean()) if n else None, None, n, alpha)
    return Equivalence(margin, float(values.mean()), float(values.std(ddof=1)) / math.sqrt(n), n, alpha)


def prompt_differences(run: Iterable[Mapping[str, Any]], ar: Iterable[Mapping[str, Any]]) -> np.ndarray:
    """Per prompt, the mean over its samples of (run value - AR value) on the (prompt, sample) keys
    both hold: a score file's `per_sample` entries of the run and of its AR baseline, paired."""
    theirs = {(int(r["prompt_id"]), int(r["sample"])): float(r["value"]) for r in ar}
    by_prompt: dict[int, list[float]] = {}
    for row in run:
        key = (int(row["prompt_id"]), int(row["sample"]))
        if key in theirs:
            by_prompt.setdefault(key[0], []).append(float(row["value"]) - theirs[key])
    return np.asarray([float(np.mean(v)) for _, v in sorted(by_prompt.items())], dtype=np.float64)


def claimed(is_ar: bool, lossless: bool, greedy: bool, baseline_greedy: bool) -> bool:
    """Whether a run claims equality with its AR baseline, so that equivalence is asked of it: a
    lossless decoder (not AR itself); a greedy one only against a greedy AR run, since its claim is
    equality with greedy AR, not with the sampled AR it may be paired with."""
    return not is_ar and lossless and (not greedy or baseline_greedy)


def equivalence(run: list[Mapping[str, Any]] | None, ar: list[Mapping[str, Any]] | None, margin: float) -> Equivalence:
    """TOST of two score files' `per_sample` lists (the run's, its AR baseline's), paired by
    (prompt, sample); nothing to pair (a set metric, a file without per-sample values) is not shown."""
    if not isinstance(run, list) or not isinstance(ar, list):
        return tost([], margin)
    return tost(prompt_differences(run, ar), margin)


# -- margins ---------------------------------------------------------------------------------------


def is_mean_of_samples(evaluator: str) -> bool:
    """Whether an evaluator's score is the mean of its per-sample values, so that the mean paired
    difference TOST tests is the difference the table shows (toy_objects pools objects over the run,
    set metrics have no per-sample values)."""
    from sjdbench.eval.evaluators import evaluator_class, evaluator_names
    from sjdbench.eval.evaluators.base import SampleMetric

    if evaluator not in evaluator_names():
        return False
    cls = evaluator_class(evaluator)
    return cls.level == "sample" and getattr(cls, "aggregate", None) is SampleMetric.aggregate


def default_margin(evaluator: str, metric: str) -> float | None:
    """One CLIP point on the metric's own scale; None for metrics without a default margin."""
    if evaluator == "toy_clip":
        return ONE_CLIP_POINT
    if evaluator == "clip_score":
        from sjdbench.eval.evaluators.clip_score import SCALES

        if SCALES["100max0"] in metric:
            return ONE_CLIP_POINT
        if SCALES["cosine"] in metric:
            return ONE_CLIP_POINT / 100
    return None


def margin_for(evaluator: str, metric: str, margins: Mapping[str, float | None] | None) -> float | None:
    """The margin a metric is tested at: the one given for its evaluator (None: not tested), else
    its default."""
    if margins is not None and evaluator in margins:
        return margins[evaluator]
    return default_margin(evaluator, metric)


def parse_margins(words: Iterable[str], option: str = "--equivalence-margin") -> dict[str, float | None]:
    """`clip_score=0.5`, `toy_clip=2`, `toy_clip=none` (no test) -> {evaluator: margin}; bad input is
    one line saying which word and what is accepted."""
    from sjdbench.eval.evaluators import evaluator_names

    valid = [name for name in evaluator_names() if is_mean_of_samples(name)]
    out: dict[str, float | None] = {}
    for word in words:
        name, sep, text = word.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UserError(f"{option} {word}: give EVALUATOR=MARGIN, e.g. {option} toy_clip=1.0")
        if name not in valid:
            raise UserError(
                f"{option} {word}: '{name}' has no equivalence test (its score is not a mean of per-sample "
                f"values); choose one of: {', '.join(valid)}"
            )
        if name in out:
            raise UserError(f"{option} {word}: {name} is given twice; give each evaluator one margin")
        if text.strip().lower() in ("none", "off"):
            out[name] = None
            continue
        try:
            margin = float(text)
        except ValueError:
            margin = float("nan")
        if not math.isfinite(margin) or margin <= 0:
            raise UserError(
                f"{option} {word}: the margin must be a positive number in the score's units "
                f"(e.g. {name}=1.0), or none to leave {name} untested"
            )
        out[name] = margin
    return out
