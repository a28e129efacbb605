"""What every evaluator sees and provides.

A `RunView` is a finished run read back from the store: its config, environment, and one `Sample`
per (prompt, sample) of the run's prompt selection, with the prompt's metadata (Parti category,
COCO image id) and the stored image. An evaluator measures one vector per sample (a CLIP cosine, a
feature vector, object-finder counts); those vectors are cached beside the run, so a score,
its bootstrap interval and its comparisons with the AR runs are all computed from them without
touching a model again.

Two levels:
- per-sample metrics (CLIP-Score, object accuracy): a value per image, aggregated over the run;
  paired against the AR run prompt by prompt;
- set metrics (FID, KID, toy FD): a distance between the run's feature set and a reference set;
  compared against the AR run on the same reference, and against the AR-vs-AR noise floor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, cast

import numpy as np

from sjdbench.errors import UserError


class Refused(Exception):
    """This evaluator cannot give a trustworthy score for this run; the message says why and what to do."""


@dataclass(frozen=True)
class Sample:
    prompt_id: int
    sample: int
    text: str
    image: Path | None
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def key(self) -> tuple[int, int]:
        return (self.prompt_id, self.sample)


@dataclass
class RunView:
    run_id: str
    dir: Path
    config: Any  # RunConfig
    env: dict
    summary: dict
    samples: list[Sample]

    @property
    def keys(self) -> np.ndarray:
        """(N, 2) int64 (prompt_id, sample) in row order."""
        return np.asarray([s.key for s in self.samples], dtype=np.int64).reshape(-1, 2)


def load_image(path: Path) -> np.ndarray:
    """(H, W, 3) uint8 RGB."""
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def open_run(run_dir: Path) -> RunView:
    """A run as evaluators see it: every sample it stores, in prompt-set order; UserError (one line)
    when it cannot be scored.

    A run need not cover its whole prompt set: a finished `data.limit` run is scored over the samples
    it holds, and its score is keyed on exactly those (the protocol hashes them), so a run that later
    grows is scored afresh rather than served a stale value."""
    import dataclasses

    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from sjdbench.config.schema import RunConfig
    from sjdbench.data.prompts import load_prompts
    from sjdbench.results.files import read_json, read_yaml
    from sjdbench.results.store import RunStore, holds_final_samples

    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").exists():
        raise UserError(f"{run_dir} is not a run directory (no config.yaml)")
    summary_read, env_read = read_json(run_dir / "summary.json"), read_json(run_dir / "env.json")
    config_read = read_yaml(run_dir / "config.yaml")
    for name, read in (("summary.json", summary_read), ("env.json", env_read), ("config.yaml", config_read)):
        if read.problem:
            raise UserError(f"run {run_dir.name}: {name} {read.problem}; re-run its command to rewrite it")
    summary = summary_read.doc
    if summary is None or not holds_final_samples(summary):
        raise UserError(f"run {run_dir.name} is not finished; re-run its command to finish it")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(RunConfig), config_read.doc)
        config = cast(RunConfig, OmegaConf.to_object(merged))  # a structured RunConfig converts to a RunConfig
    except OmegaConfBaseException as error:
        first = str(error).splitlines()[0]
        raise UserError(
            f"run {run_dir.name}: its config.yaml does not fit this sjdbench's config ({first}); re-run its command "
            "with this sjdbench to rewrite it"
        ) from None
    env = env_read.doc or {}
    prompts, sha = load_prompts(dataclasses.replace(config.data, limit=None, shard=None))  # the whole set
    if env.get("prompts_sha") and env["prompts_sha"] != sha:
        raise UserError(
            f"the prompt set of run {run_dir.name} ({config.data.name}) has changed since it ran "
            f"(sha {sha}, run {env['prompts_sha']}); point data.path at the file it used"
        )
    rows = {(r["prompt_id"], r.get("sample", 0)): r for r in RunStore(run_dir.parent.parent, run_dir.name).rows()}
    samples = []
    for prompt in prompts:
        for s in range(config.samples_per_prompt):
            row = rows.get((prompt.prompt_id, s))
            if row is None:
                continue
            image = run_dir / row["image"] if row.get("image") else None
            samples.append(Sample(prompt.prompt_id, s, row["prompt"], image, prompt.meta))
    if not samples:
        raise UserError(f"run {run_dir.name} holds no samples of its prompt set; run its command first")
    return RunView(run_dir.name, run_dir, config, env, summary, samples)


class Evaluator:
    """Base of every evaluator; subclasses set the class attributes and implement measure()."""

    name: ClassVar[str]
    metric: str  # set on the class, or per instance where it names a setting (CLIP's model)
    lower_is_better: ClassVar[bool] = False
    level: ClassVar[str] = "sample"  # "sample" | "set"
    cache_kind: ClassVar[str]  # per-sample vectors shared by evaluators with the same measurement

    def __init__(self, settings: Any, run: RunView) -> None:
        self.settings = settings
        self.run = run

    def measure_protocol(self) -> dict:
        """Everything that determines the per-sample vectors (backbone, weights hash, preprocessing)."""
        raise NotImplementedError

    def measure(self, samples: list[Sample]) -> np.ndarray:
        """(B, D) float vectors for these samples."""
        raise NotImplementedError

    def protocol_extras(self) -> dict:
        """Settings that change the score but not the per-sample vectors (e.g. CLIP's scale)."""
        return {}

    def check(self, n: int) -> None:
        """Raise Refused when n samples cannot give a trustworthy score."""

    def images(self, samples: list[Sample]) -> list[np.ndarray]:
        unsaved = [s for s in samples if s.image is None]
        if unsaved:
            raise Refused(
                f"{self.name} needs the run's images, and sample {unsaved[0].key} has none "
                "(runs with save_images=false cannot be scored)"
            )
        paths = [s.image for s in samples if s.image is not None]  # every sample's, as none is unsaved
        missing = [path for path in paths if not path.exists()]
        if missing:
            raise Refused(
                f"{self.name} needs the run's images, and {missing[0]} is missing ({len(missing)} of "
                f"{len(samples)} deleted?); decode the run again (move its folder out of the store and re-run "
                "its command) to score it"
            )
        images = []
        for path in paths:
            try:
                images.append(load_image(path))
            except (OSError, ValueError) as error:  # PIL: not an image, truncated
                raise Refused(
                    f"{self.name} cannot read {path} ({type(error).__name__}: damaged?); decode the run "
                    "again (move its folder out of the store and re-run its command) to score it"
                ) from None
        return images


class SampleMetric(Evaluator):
    """A value per image; the run's value aggregates them (a mean unless overridden)."""

    level = "sample"

    def sample_values(self, vectors: np.ndarray) -> np.ndarray:
        return vectors[:, 0]

    def aggregate(self, vectors: np.ndarray) -> float:
        return float(self.sample_values(vectors).mean())

    def extra(self, vectors: np.ndarray) -> dict:
        return {}


@dataclass
class Reference:
    """A set metric's reference features and how they were made."""

    vectors: np.ndarray  # (M, D)
    protocol: dict  # description, including "n" and "sha256" of what it was computed from


class SetMetric(Evaluator):
    """A distance between the run's feature set and a reference set."""

    level = "set"
    feature_dim: int = 0
    min_n_reason: str = ""

    def reference(self) -> Reference:
        raise NotImplementedError

    def distance(self, vectors: np.ndarray, other: np.ndarray) -> tuple[float, dict]:
        """(value, extra) between the run's vectors and another set (the reference or another run)."""
        raise NotImplementedError

    def reference_distance(self, reference: np.ndarray) -> Callable[[np.ndarray], float]:
        """vectors -> distance to the reference; set metrics may precompute the reference's part."""
        return lambda vectors: self.distance(vectors, reference)[0]

    def resampled(
        self, vectors: np.ndarray, reference: np.ndarray, to_reference: Callable[[np.ndarray], float]
    ) -> Callable[[np.ndarray], float]:
        """rows -> the distance of vectors[rows] to the reference: one bootstrap resample of the run.
        A metric that is a mean over the run's samples once the reference is fixed (precision)
        computes each sample's part once here instead of once per resample."""
        return lambda rows: to_reference(vectors[rows])

    def bootstrap_reps(self) -> int | None:
        """Resamples for the paired CI against AR: None takes the scorer's setting for set metrics
        (eval.inception.bootstrap, eval.toy.bootstrap); 0 gives no interval, for a metric whose
        resampled sets are not like the real ones (repeated images shrink recall's k-NN balls)."""
        return None

    def check(self, n: int) -> None:
        if n < 2:  # a covariance needs two samples, whatever eval.force says
            raise Refused(
                f"{self.name} refused: run {self.run.run_id} holds {n} sample; a distance between feature sets "
                "needs at least 2 (a covariance); score a run of 2 or more samples (e.g. data.limit=2)"
            )
        if self.feature_dim and n < self.feature_dim and not self.settings.force:
            raise Refused(
                f"{self.name} refused: N = {n} samples is below the {self.feature_dim} feature dimensions, "
                "so the covariance is rank-deficient and the distance is dominated by its small-N bias; "
                f"score at least {self.feature_dim} samples, or pass eval.force=true"
            )
