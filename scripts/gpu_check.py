"""The GPU check: what the project states about GPUs, measured in one time-boxed run on one device.

    python scripts/gpu_check.py                       # on a CUDA machine: writes docs/gpu/<date>-<device>.md + .json
    python scripts/gpu_check.py --dry-run             # the same code on the CPU, tiny configs, into a temp dir
    python scripts/gpu_check.py --sections models --models janus emu3 --budget 300

Five sections, in order, each inside its own share of one total budget (`--budget`, default 460 s):

1. models: for each real architecture at full size with random weights (`weights=random`, bf16), the
   cost of one decoding step with the prompt prefilled and half the image decoded: an AR step (a
   one-slot window and its commit) and a W-slot window (W = 16, 32, 64) and its commit, each as a ratio
   to the AR step; eager and compiled; peak memory at B = 1 and B = 8. The half-decoded cache: its
   first N/2 segment entries hold random keys and values and are marked decoded (the window sits at
   positions N/2 ..), so attention reads what it reads in the middle of an image; a step's cost does
   not depend on the values. Times: CUDA events around each step after an untimed warm-up, median of
   repeats; the warm-up (for compiled steps: the compilation) is recorded on its own.
2. toy: the toy model's throughput (images per second through the real decoding loop) against the
   batch size, for AR and SJD.
3. step: the toy compiled, whole decodes with the chain's fixed-shape step against the general loop
   (paired, tokens compared) for sjd, sjd_vp and ar at B = 1 and 8: whether `loop.CHAIN_STEP`'s
   default, the step for compiled decodes on CUDA, pays on this GPU.
4. batched: float64 batched decoding equals unbatched decoding on the debug model (B = 3 in lockstep
   against three B = 1 decodes), per preset, with the first differing position where it does not.
5. chi2: the exactness suite's chi-square test (tabulated enumerable model, exact AR probabilities)
   with decoding on the device, for a few lossless presets.

Every section runs inside try/except and stops starting new work when its share is spent (what it
skipped and why is recorded); a section that overruns its share by more than a grace period is
interrupted. The JSON and the markdown are rewritten after every measurement, so a run killed from
outside keeps everything finished before. Progress lines carry the elapsed seconds.

`--dry-run` runs the same code on the CPU with tiny architectures (`size=tiny`), small batches, few
repeats and samples, and torch.compile with dynamo's eager backend (graphs are captured, no kernels
generated), so `make test` checks the script end to end (tests/test_gpu_check.py).
"""

from __future__ import annotations

import time

STARTED = time.monotonic()  # before the heavy imports: the budget counts the whole process

import argparse  # noqa: E402
import contextlib  # noqa: E402
import datetime  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shlex  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Iterator  # noqa: E402

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing

# The model options that compile a model's decoding step: the one place the check reads the switch,
# so the compiled rows follow it wherever it goes.
COMPILE_OPTIONS: dict[str, Any] = {"compile": True}

REAL_MODELS = ("lumina", "llamagen", "janus", "emu3", "anole")  # each measured if its conf/model/<name>.yaml exists
SECTIONS = ("models", "toy", "step", "batched", "chi2")
TITLES = {
    "models": "Per-step cost of the real architectures (random weights)",
    "toy": "Toy model: throughput against batch size",
    "step": "Toy model compiled: the chain's fixed-shape step against the general loop",
    "batched": "float64: batched decoding = unbatched decoding (debug model)",
    "chi2": "Chi-square exactness test on the device",
}
# shares of the total budget; the rest is start-up and writing. A section may also use what the
# sections before it left unspent (deadlines are cumulative).
SHARES = {"models": 0.58, "toy": 0.12, "step": 0.08, "batched": 0.06, "chi2": 0.12}
GRACE_S = 20.0  # a section running this far past its deadline is interrupted
PROMPT = "a photo of a red cube on a wooden table, soft light"
BATCH_PROMPTS = ("a red circle", "two blue squares on a striped background", "x")  # different lengths
P_LEVEL = 1e-3  # the exactness suite's level (tests/test_exactness.py): a lossless decoder's p exceeds it


@dataclass(frozen=True)
class Plan:
    """How much each section measures: the full check on a GPU, or the dry run's tiny version."""

    dry_run: bool
    device: str
    dtype: str  # the real models' precision
    windows: tuple[int, ...]  # W of the window steps (the AR step is always measured)
    batches: tuple[int, ...]  # B of the step costs and peak memory
    compiled_batches: tuple[int, ...]  # B of the compiled step costs, in order of priority
    repeats: int  # timed repeats per step (median)
    compile_guess_s: float  # what a first compilation is assumed to take before one is measured
    toy_batches: tuple[int, ...]
    toy_passes: int  # batch cycles timed per point: passes x B prompts, B at a time
    step_presets: tuple[str, ...]  # compiled, with the chain step and with the general loop
    step_batches: tuple[int, ...]
    batched_presets: tuple[str, ...]
    chi2_presets: tuple[str, ...]
    chi2_samples: int  # per preset (fewer when the share runs out; the test reports the count)
    chi2_chunk: int
    chi2_batch: int

    def model_options(self, model: str, resolution_step: int) -> dict[str, Any]:
        """A real model's options: full size with random weights (the dry run: the tiny architecture
        at a 4 x 4 code grid)."""
        options: dict[str, Any] = {"weights": "random", "dtype": self.dtype}
        if self.dry_run:
            options.update(size="tiny", resolution=4 * resolution_step)
        return options


def full_plan(device: str) -> Plan:
    return Plan(
        dry_run=False,
        device=device,
        dtype="bf16",
        windows=(16, 32, 64),
        batches=(1, 8),
        compiled_batches=(1, 8),
        repeats=10,
        compile_guess_s=60.0,
        toy_batches=(1, 2, 4, 8, 16, 32, 64),
        toy_passes=2,
        step_presets=("sjd", "sjd_vp", "ar"),
        step_batches=(1, 8),
        batched_presets=("ar", "sjd", "sjd_vp", "sjd_pp", "lantern", "gsd", "sjd_pac", "pjd", "zipar", "mc_sjd"),
        chi2_presets=("sjd", "sjd_vp", "sjd_pac"),
        chi2_samples=8000,  # the fast exactness suite's count
        chi2_chunk=1000,
        chi2_batch=64,
    )


def dry_plan() -> Plan:
    return Plan(
        dry_run=True,
        device="cpu",
        dtype="bf16",
        windows=(4, 8),
        batches=(1, 2),
        compiled_batches=(1,),
        repeats=3,
        compile_guess_s=5.0,
        toy_batches=(1, 2),
        toy_passes=1,
        step_presets=("sjd",),
        step_batches=(1,),
        batched_presets=("sjd", "sjd_vp"),
        chi2_presets=("sjd", "sjd_vp"),
        chi2_samples=200,
        chi2_chunk=100,
        chi2_batch=32,
    )


# -- the record: one JSON and one markdown file, rewritten after every measurement ----------------


class OutOfTime(BaseException):
    """A section ran past its deadline and the grace period (BaseException: library code that
    catches Exception must not swallow it)."""


@dataclass
class Section:
    """One section's share of the budget and what it recorded."""

    name: str
    deadline: float  # monotonic seconds
    record: dict
    check: Check

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def add(self, table: str, row: dict) -> None:
        self.record["tables"].setdefault(table, []).append(row)
        self.check.save()

    def skip(self, what: str, why: str) -> None:
        self.record["skipped"].append({"what": what, "why": why})
        self.check.progress(f"{self.name}: skipped {what}: {why}")
        self.check.save()

    def note(self, text: str) -> None:
        if text not in self.record["notes"]:
            self.record["notes"].append(text)

    def fail(self, what: str, error: BaseException) -> None:
        """A failure of one item (called while handling it): its first line in both files, its traceback
        in the JSON; the section goes on."""
        message = first_line(error)
        self.record["errors"].append({"what": what, "error": message})
        self.record.setdefault("tracebacks", {})[what] = traceback.format_exc(limit=12)
        self.check.progress(f"{self.name}: FAILED {what}: {message}")
        self.check.save()


class Check:
    """The run: its budget, its progress lines and its two files."""

    def __init__(self, plan: Plan, budget: float, shares: dict[str, float], out_dir: Path, command: str) -> None:
        self.plan, self.budget, self.shares = plan, budget, shares
        self.started = STARTED  # the budget's clock: the process's start
        env = environment(plan.device)
        stem = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}-{slug(env['device_name'])}"
        self.json_path, self.md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
        self.report: dict = {
            "schema": 1,
            "command": command,
            "dry_run": plan.dry_run,
            "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "finished_utc": None,
            "budget_s": budget,
            "shares": shares,
            "env": env,
            "plan": dict(vars(plan)),
            "sections": {name: new_record(name) for name in SECTIONS},
        }

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def end(self) -> float:
        return self.started + self.budget

    def progress(self, text: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {text}", flush=True)

    def save(self) -> None:
        self.report["elapsed_s"] = round(self.elapsed(), 1)
        atomic_write(self.json_path, json.dumps(self.report, indent=1, default=str) + "\n")
        atomic_write(self.md_path, render_markdown(self.report))

    def run(self, selected: list[str], sections: dict[str, Callable[[Section], None]]) -> None:
        cumulative = 0.0
        for name in SECTIONS:
            cumulative += self.shares[name]
            record = self.report["sections"][name]
            if name not in selected:
                record.update(status="not run", reason="not selected (--sections)")
                continue
            deadline = min(self.started + self.budget * cumulative, self.end)
            section = Section(name, deadline, record, self)
            record["budget_s"] = round(deadline - time.monotonic(), 1)
            if section.left() <= 1.0:
                record.update(status="not run", reason=f"no time left of the {self.budget:.0f} s budget")
                self.progress(f"{name}: not run: no time left")
                self.save()
                continue
            self.progress(f"{name}: {TITLES[name]} (until {deadline - self.started:.0f} s)")
            started = time.monotonic()
            record["status"] = "running"
            self.save()
            try:
                with alarm_at(min(deadline + GRACE_S, self.end + 5.0)):
                    sections[name](section)
                record["status"] = "partial" if record["skipped"] or record["errors"] else "done"
            except OutOfTime:
                record["status"] = "interrupted"
                record["reason"] = f"ran {GRACE_S:.0f} s past its deadline and was stopped"
                self.progress(f"{name}: interrupted past its deadline")
            except Exception as error:  # noqa: BLE001 - one section's failure must not lose the others
                record["status"] = "failed"
                record["reason"] = first_line(error)
                record["traceback"] = traceback.format_exc(limit=8)
                self.progress(f"{name}: FAILED: {first_line(error)}")
            record["elapsed_s"] = round(time.monotonic() - started, 1)
            self.progress(f"{name}: {record['status']} in {record['elapsed_s']} s")
            self.save()
        self.report["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.save()


def new_record(name: str) -> dict:
    return {
        "title": TITLES[name],
        "status": "pending",
        "budget_s": None,
        "elapsed_s": None,
        "notes": [],
        "tables": {},
        "skipped": [],
        "errors": [],
    }


@contextlib.contextmanager
def alarm_at(when: float) -> Iterator[None]:
    """Raise OutOfTime in the main thread at monotonic time `when` (nothing where there is no SIGALRM)."""
    if not hasattr(signal, "setitimer"):
        yield
        return
    signal.signal(signal.SIGALRM, _out_of_time)
    signal.setitimer(signal.ITIMER_REAL, max(when - time.monotonic(), 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _out_of_time(signum: int, frame: object) -> None:
    raise OutOfTime()


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:400]


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


# -- the machine --------------------------------------------------------------------------------


def environment(device: str) -> dict:
    """Software and hardware of the run: what env.json records, plus the CUDA stack."""
    from sjdbench.machine import environment as run_environment

    env = run_environment(device, "mixed")
    env.pop("dtype", None)
    env["device_name"] = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    env["cuda_runtime"] = torch.version.cuda
    env["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    env["driver"] = driver_version() if device.startswith("cuda") else None
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        env["gpu_memory_GiB"] = round(props.total_memory / 2**30, 1)
        env["compute_capability"] = f"{props.major}.{props.minor}"
    for package in ("transformers", "triton", "hydra-core", "omegaconf"):
        env[package] = package_version(package)
    return env


def driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def package_version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def synchronize(device: str) -> None:
    """The runner's, restated so that the models section imports no run configuration (hydra)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def step_times_ms(device: str, step: Callable[[], None], repeats: int) -> list[float]:
    """Milliseconds of each of `repeats` calls of `step`: CUDA events on a GPU (the host's launches and
    the device's work between the two events), perf_counter on a CPU; the device idles in between."""
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            step()
            times.append(1e3 * (time.perf_counter() - began))
    return times


def gib(count: int) -> float:
    return round(count / 2**30, 2)


# -- section 1: per-step cost of the real architectures ------------------------------------------


def real_models(requested: list[str] | None) -> list[str]:
    from sjdbench import plugins

    names = set(plugins.names("model"))
    return [m for m in (requested or REAL_MODELS) if m in names]


def models_section(section: Section, requested: list[str] | None) -> None:
    """Eager steps of every model first (each model a fair part of the eager share), then compiled
    steps model by model. A compilation starts only when the time it is expected to take is left;
    each model's AR step and first window come first, and the other shapes of a model are compiled
    only when the models after it keep the time for theirs."""
    plan = section.check.plan
    models = real_models(requested)
    for name in requested or REAL_MODELS:
        if name not in models:
            section.note(f"{name}: not measured, no conf/model/{name}.yaml in this checkout")
    section.note(
        "step = one window forward and the commit of one slot, B samples (the CFG pair of each: 2B rows), "
        "prompt prefilled, the window at segment positions N/2.. with the first N/2 entries decoded "
        "(random keys and values); ms: median of the repeats after a warm-up of two steps; "
        "x AR: the step's cost in AR steps of the same mode and B; warm-up: the two untimed steps "
        "(compiled: the compilation); peak: torch.cuda.max_memory_allocated over the B's steps"
    )
    section.note(f"compiled: model options {COMPILE_OPTIONS} (the switch as this checkout defines it)")
    if plan.dry_run:
        section.note("dry run: tiny architectures; compiled rows use dynamo's eager backend (no kernels generated)")
    configure_dynamo()
    eager_shapes = [(batch, window) for batch in plan.batches for window in (1, *plan.windows)]
    eager_end = time.monotonic() + 0.35 * section.left()
    builds: dict[str, float | None] = {}
    for i, model in counting_down(models):
        box_end = time.monotonic() + (eager_end - time.monotonic()) / i

        def eager_may(batch: int, window: int, end: float = box_end) -> str | None:
            return None if end - time.monotonic() > 1.0 else "no time left for this model in the eager share"

        builds[model] = measure_model(section, model, False, eager_shapes, eager_may)
    compiled_shapes = [(batch, window) for batch in plan.compiled_batches for window in (1, *plan.windows)]
    essential = set(compiled_shapes[:2])  # the AR step and the first window at the first B: the ratio
    compile_s: dict[str, float] = {}
    for i, model in enumerate(models):
        later = models[i + 1 :]

        def expected(name: str) -> float:
            return compile_s.get(name, max(compile_s.values(), default=plan.compile_guess_s))

        def compiled_may(batch: int, window: int, model: str = model, later: list[str] = later) -> str | None:
            need = expected(model) + 2.0
            if (batch, window) not in essential:  # the models after this one keep the time for their ratio
                need += sum((builds.get(m) or 10.0) + 2 * expected(m) for m in later)
            left = section.left()
            return (
                None
                if left > need
                else f"{left:.0f} s left, needs ~{need:.0f} s (a compilation ~{expected(model):.0f} s)"
            )

        if builds.get(model) is None:
            section.skip(f"{model} compiled", "the eager pass could not build it or encode a prompt (see Failed)")
            continue
        if section.left() < (builds.get(model) or 10.0) + expected(model) + 2.0:
            section.skip(
                f"{model} compiled", f"{section.left():.0f} s left, a compilation takes ~{expected(model):.0f} s"
            )
            continue
        measure_model(section, model, True, compiled_shapes, compiled_may, compile_s)


def counting_down(items: list[str]) -> Iterator[tuple[int, str]]:
    """(how many items are left, this one included, item)."""
    for index, item in enumerate(items):
        yield len(items) - index, item


def configure_dynamo() -> None:
    """Every (B, W) shape of every model is its own compiled graph: lift dynamo's recompilation limit
    (default 8 per function) so that no compiled step silently falls back to eager."""
    import torch._dynamo

    for key in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, key):
            setattr(torch._dynamo.config, key, 256)


def reset_compiled() -> None:
    import torch._dynamo

    torch._dynamo.reset()


def graph_breaks() -> int | None:
    try:
        from torch._dynamo.utils import counters

        return int(sum(counters["graph_break"].values()))
    except Exception:  # noqa: BLE001 - a diagnostic only
        return None


def measure_model(
    section: Section,
    model: str,
    compiled: bool,
    shapes: list[tuple[int, int]],
    may_start: Callable[[int, int], str | None],
    compile_s: dict[str, float] | None = None,
) -> float | None:
    """One model in one mode: build it, then each (B, W) step that `may_start` allows (it returns
    the reason to skip one, or None); the peak memory of each B. Returns the build's seconds, or
    None when the model could not be built or could not encode a prompt (a missing package, say)."""
    from sjdbench.models.registry import entry

    check, plan = section.check, section.check.plan
    mode = "compiled" if compiled else "eager"
    spec = entry(model)
    options = plan.model_options(model, getattr(spec.options, "resolution_step", 16))
    if compiled:
        options.update(COMPILE_OPTIONS)
    free_device(plan.device)
    resident = torch.cuda.memory_allocated() if plan.device.startswith("cuda") else None
    began = time.monotonic()
    breaks_before = graph_breaks()
    try:
        adapter = spec.load(plan.device, **options)
        adapter.encode_prompt(PROMPT)
    except Exception as error:  # noqa: BLE001
        section.fail(f"build {model} {mode}", error)
        adapter = None
    if adapter is None:
        free_device(plan.device)
        return None
    synchronize(plan.device)
    build_s = time.monotonic() - began
    build = {
        "model": model,
        "mode": mode,
        "size": options.get("size", default_size(spec)),
        "build_s": round(build_s, 1),
    }
    build["segment_N"] = adapter.layout.n_positions
    if resident is not None:  # memory held before the build: left over from an earlier model if not ~0
        build["resident_before_GiB"] = gib(resident)
        build["weights_GiB"] = gib(torch.cuda.memory_allocated() - resident)
    check.progress(f"models: {model} {mode} built in {build_s:.1f} s (N = {build['segment_N']})")
    ar_ms: dict[int, float] = {}
    measured: set[int] = set()
    broken = None  # a compilation that failed: the model's other shapes would fail alike, slowly
    try:
        for index, (batch, window) in enumerate(shapes):
            what = f"{model} {mode} B={batch} W={window}"
            if index == 0 or shapes[index - 1][0] != batch:
                start_peak(plan.device)
            why = f"the compilation of {broken} failed" if broken else may_start(batch, window)
            if why is None and window > adapter.layout.n_positions:
                why = f"the segment has only {adapter.layout.n_positions} positions"
            if why is not None:
                section.skip(what, why)
            else:
                row = measure_shape(section, adapter, what, batch, window)
                if row is None and compiled:
                    broken = broken or f"B={batch} W={window}"
                if row is not None:
                    measured.add(batch)
                    if compile_s is not None:
                        compile_s[model] = row["warmup_s"]
                    ar_ms[batch] = row["ms"] if window == 1 else ar_ms.get(batch, 0.0)
                    row["x_AR"] = round(row["ms"] / ar_ms[batch], 3) if ar_ms.get(batch) else None
                    section.add("steps", {"model": model, "mode": mode, "B": batch, "W": window, **row})
                    ratio = f" = {row['x_AR']:.2f} AR steps" if row["x_AR"] is not None and window > 1 else ""
                    check.progress(f"models: {what}: {row['ms']:.2f} ms{ratio} (warm-up {row['warmup_s']:.1f} s)")
            last_of_batch = index == len(shapes) - 1 or shapes[index + 1][0] != batch
            if last_of_batch and batch in measured and plan.device.startswith("cuda"):
                peak = gib(torch.cuda.max_memory_allocated())
                section.add("memory", {"model": model, "mode": mode, "B": batch, "peak_GiB": peak})
    finally:
        if compiled:
            after = graph_breaks()
            build["graph_breaks"] = None if after is None or breaks_before is None else after - breaks_before
        section.add("builds", build)
        del adapter
        if compiled:  # compiled code may hold the model's tensors: drop it before the next model
            reset_compiled()
        free_device(plan.device)
    return build_s


def start_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def measure_shape(section: Section, adapter: Any, what: str, batch: int, window: int) -> dict | None:
    """One step's timing, or None with the failure recorded (out of memory frees what it can)."""
    try:
        return time_step(adapter, batch, window, section.check.plan)
    except Exception as error:  # noqa: BLE001 - one shape's failure, the others go on
        section.fail(what, error)
        if isinstance(error, torch.cuda.OutOfMemoryError):
            free_device(section.check.plan.device)
        return None


def default_size(spec: Any) -> str:
    for f in getattr(spec.options, "__dataclass_fields__", {}).values():
        if f.name == "size":
            return str(f.default)
    return "-"


def free_device(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


@torch.inference_mode()
def time_step(adapter: Any, batch: int, window: int, plan: Plan) -> dict:
    """Median ms of one step (window forward + commit of one slot) at B samples, half the image decoded."""
    from sjdbench.adapter import WindowInputs

    device = plan.device
    prompt = adapter.encode_prompt(PROMPT)
    N = adapter.layout.n_positions
    cache = adapter.new_cache(batch, prompt.length, window)
    adapter.prefill(cache, list(range(batch)), [prompt] * batch)
    start = max(min(N // 2, N - window), 0)
    decoded = mark_decoded(cache, start)
    generator = torch.Generator().manual_seed(window)
    picks = torch.randint(0, adapter.image_token_ids.numel(), (batch, window), generator=generator)
    tokens = adapter.image_token_ids[picks.to(adapter.image_token_ids.device)]  # (B, W)
    positions = (start + torch.arange(window, device=adapter.device))[None].expand(batch, -1).contiguous()  # (B, W)
    slots = torch.zeros(batch, 1, dtype=torch.long, device=adapter.device)  # (B, 1)
    horizon = start + window

    def step() -> None:
        adapter.forward(cache, WindowInputs(tokens, positions, None, horizon))
        adapter.commit(cache, slots)

    synchronize(device)
    began = time.perf_counter()
    step()
    step()
    synchronize(device)
    warmup = time.perf_counter() - began
    times = step_times_ms(device, step, plan.repeats)
    return {
        "ms": round(statistics.median(times), 4),
        "min_ms": round(min(times), 4),
        "warmup_s": round(warmup, 2),
        "decoded": decoded,
        "repeats": plan.repeats,
    }


def mark_decoded(cache: Any, count: int) -> int | str:
    """Make the first `count` segment positions of every sample decoded: random keys and values in
    their entries, visible to every later slot (the state a decode leaves half-way through the image).
    Only the shared static cache (models/cache.py) is known here; any other: the prompt alone."""
    from sjdbench.models.cache import WindowCache

    if not isinstance(cache, WindowCache):
        return "prompt only"
    first = cache.window + cache.prompt_len
    for tensor in (*cache.keys, *cache.values):
        tensor[:, :, first : first + count].normal_()
    cache.key_valid[:, cache.prompt_len : cache.prompt_len + count] = True
    return count


# -- section 2: the toy's throughput against the batch size ---------------------------------------


def toy_section(section: Section) -> None:
    from sjdbench.config import build_preset, compose_run
    from sjdbench.data.prompts import load_prompts
    from sjdbench.decoding.loop import Request, jacobi_decode_batch
    from sjdbench.models.registry import build_adapter
    from sjdbench.run.runner import resolve_sampling, sample_seed

    check, plan = section.check, section.check.plan
    device = plan.device
    config = compose_run(["decoder=ar", "data=toy", f"device={device}"])
    adapter = build_adapter(config.model.name, dict(config.model.options), device)
    sampling = resolve_sampling(adapter.default_sampling, config.sampling)
    decoders = {"ar": build_preset("ar", adapter), "sjd": build_preset("sjd", adapter)}
    prompts, _ = load_prompts(config.data)
    section.note(
        f"model toy, decoders ar and sjd (W = {decoders['sjd'].window}), eager; one untimed decode per decoder "
        f"first; per (decoder, B): {plan.toy_passes} x B held-out captions decoded B at a time (a finished "
        "sample's row taken by the next), the device synchronised around the stream; img/s: images per "
        "decoding second; vs AR: over AR's img/s at the same B"
    )

    def stream(decoder: Any, batch: int, count: int) -> tuple[float, float]:
        chosen = [prompts[i % len(prompts)] for i in range(count)]
        requests = [
            Request(p.text, torch.Generator(device).manual_seed(sample_seed(0, p.prompt_id, 0))) for p in chosen
        ]
        synchronize(device)
        began = time.perf_counter()
        nfe = sum(r.stats.nfe for _, r in jacobi_decode_batch(adapter, requests, decoder, sampling, batch))
        synchronize(device)
        return time.perf_counter() - began, nfe / count

    for decoder in decoders.values():  # untimed: the first kernels, handles and allocations
        stream(decoder, 1, 1)
    last: dict[str, float] = {}
    ar_ips: dict[int, float] = {}
    for batch in plan.toy_batches:
        for name, decoder in decoders.items():
            what = f"{name} B={batch}"
            expected = 2 * last.get(name, 0.0)  # twice the samples in as many batch cycles: at most 2x the last B
            if section.left() < expected + 1.0:
                section.skip(what, f"{section.left():.0f} s left, expected ~{expected:.0f} s")
                continue
            try:
                seconds, nfe = stream(decoder, batch, plan.toy_passes * batch)
            except Exception as error:  # noqa: BLE001
                section.fail(what, error)
                continue
            last[name] = seconds
            count = plan.toy_passes * batch
            ips = count / seconds
            if name == "ar":
                ar_ips[batch] = ips
            row = {"decoder": name, "B": batch, "images": count, "NFE": round(nfe, 1), "seconds": round(seconds, 3)}
            row["img_per_s"] = round(ips, 3)
            row["vs_AR"] = round(ips / ar_ips[batch], 3) if batch in ar_ips else None
            section.add("throughput", row)
            check.progress(f"toy: {what}: {ips:.2f} img/s (NFE {nfe:.1f})")


# -- section 3: the chain's fixed-shape step against the general loop, compiled ----------------------


def step_section(section: Section) -> None:
    """Whether `loop.CHAIN_STEP`'s default (the step for compiled decodes on CUDA) pays here: whole
    compiled decodes of the toy with the step and with the general loop, paired (same prompts and
    seeds, the tokens compared), after an untimed round that compiles both."""
    from benchmarks.bench_chain_step import paired_round
    from sjdbench.config import build_preset
    from sjdbench.models.registry import entry

    check, plan = section.check, section.check.plan
    device = plan.device
    adapter = entry("toy").load(device, compile=True)
    section.note(
        "model toy, model.compile=true; per (preset, B): B prompts decoded B at a time with "
        "loop.CHAIN_STEP='always' (the step) and 'never' (the general loop), one untimed round first "
        "(it compiles), then one timed round (benchmarks/bench_chain_step.py's paired_round); "
        "step / general below 1: the step pays"
    )
    for preset in plan.step_presets:
        decoder = build_preset(preset, adapter)
        for batch in plan.step_batches:
            what = f"{preset} B={batch}"
            if section.left() < 5.0:
                section.skip(what, f"{section.left():.0f} s left")
                continue
            try:
                paired_round(adapter, decoder, batch, device)  # untimed: compiles both paths
                step_s, general_s, same = paired_round(adapter, decoder, batch, device)
            except Exception as error:  # noqa: BLE001
                section.fail(what, error)
                continue
            row = {"preset": preset, "B": batch, "step_s": round(step_s, 3), "general_s": round(general_s, 3)}
            row.update(step_over_general=round(step_s / general_s, 3), same_tokens=same)
            section.add("fixed_step", row)
            check.progress(f"step: {what}: step / general {step_s / general_s:.3f}, same tokens {same}")


# -- section 4: float64 batched = unbatched --------------------------------------------------------


def batched_section(section: Section) -> None:
    from sjdbench.config import build_preset
    from sjdbench.decoding.loop import Request, jacobi_decode, jacobi_decode_batch
    from sjdbench.models.debug import build_debug_adapter

    check, plan = section.check, section.check.plan
    device = plan.device
    adapter = build_debug_adapter(device, grid_h=5, grid_w=5, n_codes=32, init_std=0.5, dtype="float64")
    sampling = adapter.default_sampling
    section.note(
        f"debug model (5 x 5 codes of 32, float64, on {device}); prompts {list(BATCH_PROMPTS)}, sample i seeded "
        "100 + i; B = 3 in lockstep against each sample decoded alone (B = 1); equal: tokens and statistics"
    )

    def requests() -> list[Request]:
        return [
            Request(text, torch.Generator(device).manual_seed(100 + i), key=i) for i, text in enumerate(BATCH_PROMPTS)
        ]

    spent = 0.0
    for preset in plan.batched_presets:
        if section.left() < 2 * spent + 1.0:
            section.skip(preset, f"{section.left():.0f} s left, the last preset took {spent:.0f} s")
            continue
        began = time.monotonic()
        try:
            decoder = build_preset(preset, adapter)
            alone = [jacobi_decode(adapter, r.prompt, decoder, sampling, r.generator) for r in requests()]
            together = {r.key: res for r, res in jacobi_decode_batch(adapter, requests(), decoder, sampling, 3)}
        except Exception as error:  # noqa: BLE001
            section.fail(preset, error)
            continue
        spent = time.monotonic() - began
        first = first_difference([a.tokens for a in alone], [together[i].tokens for i in range(len(alone))])
        stats_equal = all(together[i].stats.to_row() == a.stats.to_row() for i, a in enumerate(alone))
        row = {
            "preset": preset,
            "tokens_equal": first is None,
            "stats_equal": stats_equal,
            "first_difference": "-" if first is None else f"sample {first[0]}, position {first[1]}",
            "NFE": [a.stats.nfe for a in alone],
            "seconds": round(spent, 2),
        }
        section.add("presets", row)
        verdict = "equal" if first is None and stats_equal else f"NOT EQUAL ({row['first_difference']})"
        check.progress(f"batched: {preset}: {verdict}")


def first_difference(alone: list[torch.Tensor], together: list[torch.Tensor]) -> tuple[int, int] | None:
    """(sample, first segment position) where the batched tokens differ from the sample's own, or None."""
    for sample, (a, b) in enumerate(zip(alone, together)):
        if a.shape != b.shape:
            return sample, min(a.numel(), b.numel())
        differs = torch.nonzero(a.cpu() != b.cpu())
        if differs.numel():
            return sample, int(differs[0, 0])
    return None


# -- section 5: the chi-square test on the device ---------------------------------------------------


# decoder overrides that make each preset act on the enumerable model's 6 positions (as the exactness
# suite's decoders do: VP's growth needs one increase, fusion over every code)
CHI2_OVERRIDES = {
    "sjd": ("decoder.window=4",),
    "sjd_vp": ("decoder.window=4", "decoder.growth_steps=1", "decoder.proposal.fusion_top_k=0"),
    "sjd_pac": ("decoder.window=8",),
}


def chi2_section(section: Section) -> None:
    from sjdbench.config import build_preset
    from sjdbench.exactness import (
        TabulatedAdapter,
        chi_square,
        enumerable_model,
        exact_probabilities,
        expected_tv_noise,
        sample_sequences,
    )

    check, plan = section.check, section.check.plan
    adapter = TabulatedAdapter(enumerable_model(plan.device), "ab")
    sampling = adapter.default_sampling
    exact = exact_probabilities(adapter, sampling)
    section.note(
        f"the exactness suite's enumerable model (debug LLaMA, 2 x 2 codes of 4, CFG 2; {len(exact)} sequences), "
        f"prefixes tabulated on {plan.device}, decoding on {plan.device} with {plan.chi2_batch} samples in lockstep; "
        f"Pearson test against exact AR (cells pooled to expect >= 5); pass: p > {P_LEVEL:g}"
    )
    chunk_s = 0.0
    for left_to_test, preset in counting_down(list(plan.chi2_presets)):
        until = time.monotonic() + section.left() / left_to_test  # each preset a fair part of what is left
        try:
            decoder = build_preset(preset, adapter, *CHI2_OVERRIDES.get(preset, ()))
        except Exception as error:  # noqa: BLE001
            section.fail(preset, error)
            continue
        counts: Counter = Counter()
        nfe, drawn, chunk = 0, 0, 0
        began = time.monotonic()
        while drawn < plan.chi2_samples:
            if until - time.monotonic() < chunk_s + 1.0:
                section.skip(f"{preset} after {drawn} samples", f"its part of the share is spent after {drawn}")
                break
            size = min(plan.chi2_chunk, plan.chi2_samples - drawn)
            chunk_began = time.monotonic()
            try:
                more, more_nfe = sample_sequences(adapter, decoder, sampling, size, 1 + chunk, plan.chi2_batch)
            except Exception as error:  # noqa: BLE001
                section.fail(f"{preset} chunk {chunk}", error)
                break
            chunk_s = time.monotonic() - chunk_began
            counts.update(more)
            nfe, drawn, chunk = nfe + more_nfe, drawn + size, chunk + 1
        if drawn == 0:
            continue
        stat, dof, p_value = chi_square(counts, exact)
        tv = 0.5 * sum(abs(counts.get(s, 0) / drawn - p) for s, p in exact.items())
        tv += 0.5 * sum(c / drawn for s, c in counts.items() if s not in exact)
        row = {
            "preset": preset,
            "overrides": " ".join(CHI2_OVERRIDES.get(preset, ())) or "-",
            "samples": drawn,
            "chi2": round(stat, 2),
            "dof": dof,
            "p_value": float(f"{p_value:.4g}"),
            "pass": bool(p_value > P_LEVEL),
            "TV": round(tv, 4),
            "TV_noise": round(expected_tv_noise(exact, drawn), 4),
            "mean_NFE": round(nfe / drawn, 3),
            "seconds": round(time.monotonic() - began, 1),
        }
        section.add("tests", row)
        check.progress(f"chi2: {preset}: n={drawn} chi2={stat:.1f} dof={dof} p={p_value:.3g}")


# -- the markdown -------------------------------------------------------------------------------


def render_markdown(report: dict) -> str:
    env = report["env"]
    lines = [
        f"# GPU check: {env.get('device_name')}" + (" (dry run)" if report["dry_run"] else ""),
        "",
        f"Written by `scripts/gpu_check.py` (docs/gpu/README.md says what it measures). Started "
        f"{report['started_utc']}, {'finished ' + report['finished_utc'] if report['finished_utc'] else 'not finished'}"
        f" after {report.get('elapsed_s', 0)} s of a {report['budget_s']:.0f} s budget.",
        "",
        "```",
        report["command"],
        "```",
        "",
        "| | |",
        "|---|---|",
    ]
    keys = ("device_name", "gpu_memory_GiB", "compute_capability", "driver", "cuda_runtime", "cudnn", "torch")
    keys += ("triton", "transformers", "hydra-core", "python", "cpu", "cpu_count", "torch_threads", "git_commit")
    keys += ("platform",)
    lines += [f"| {key} | {env.get(key)} |" for key in keys]
    for record in report["sections"].values():
        lines += ["", f"## {record['title']}", ""]
        status = f"status: **{record['status']}**"
        if record.get("budget_s") is not None:
            status += f", {record.get('elapsed_s')} s of a {record['budget_s']} s share"
        if record.get("reason"):
            status += f"; {record['reason']}"
        lines += [status, ""]
        lines += [f"- {note}" for note in record["notes"]]
        tables = dict(record["tables"])
        if "steps" in tables:  # the models' steps read best as one row per (model, mode, B)
            steps, memory = tables.pop("steps"), tables.pop("memory", [])
            lines += ["", "**ms per step (x: in AR steps); warm-up s per W; peak GiB**", ""]
            lines += markdown_table(step_summary(steps, memory))
        for table, rows in tables.items():
            lines += ["", f"**{table}**", "", *markdown_table(rows)]
        if record["skipped"]:
            lines += ["", "Skipped:", ""] + [f"- {s['what']}: {s['why']}" for s in record["skipped"]]
        if record["errors"]:
            lines += ["", "Failed (tracebacks in the JSON):", ""]
            lines += [f"- {e['what']}: {e['error']}" for e in record["errors"]]
        if record.get("traceback"):
            lines += ["", "```", record["traceback"].rstrip(), "```"]
    return "\n".join(lines) + "\n"


def step_summary(steps: list[dict], memory: list[dict]) -> list[dict]:
    """One row per (model, mode, B): each W's ms and its cost in AR steps, the warm-ups, the peak."""
    windows = sorted({row["W"] for row in steps})
    peaks = {(m["model"], m["mode"], m["B"]): m["peak_GiB"] for m in memory}
    summary: dict[tuple, dict] = {}
    for row in steps:
        key = (row["model"], row["mode"], row["B"])
        if key not in summary:
            summary[key] = {"model": key[0], "mode": key[1], "B": key[2]}
            summary[key].update({("AR" if w == 1 else f"W={w}"): None for w in windows})
            summary[key].update({"warm-up s": [], "peak GiB": peaks.get(key)})
        out = summary[key]
        ratio = "" if row["W"] == 1 or row.get("x_AR") is None else f" (x{row['x_AR']:.2f})"
        out["AR" if row["W"] == 1 else f"W={row['W']}"] = f"{cell(float(row['ms']))}{ratio}"
        out["warm-up s"].append(f"{row['warmup_s']:.1f}")
    for out in summary.values():
        out["warm-up s"] = " / ".join(out["warm-up s"])
    return list(summary.values())


def markdown_table(rows: list[dict]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        out.append("| " + " | ".join(cell(row.get(key)) for key in columns) + " |")
    return out


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        size = abs(value)
        if size >= 100:
            return f"{value:.0f}"
        if size >= 10:
            return f"{value:.1f}"
        if size >= 1:
            return f"{value:.2f}"
        return f"{value:.3g}"
    if isinstance(value, list):
        return ", ".join(cell(v) for v in value)
    return str(value)


# -- the command ----------------------------------------------------------------------------------


def parse_shares(values: list[str]) -> dict[str, float]:
    shares = dict(SHARES)
    for value in values:
        name, _, fraction = value.partition("=")
        if name not in SHARES:
            raise ValueError(f"--share {value}: unknown section; choose one of: {', '.join(SECTIONS)}")
        try:
            shares[name] = float(fraction)
        except ValueError:
            raise ValueError(f"--share {value}: give a fraction of the budget, e.g. {name}=0.2") from None
    if sum(shares.values()) > 1.0 + 1e-9:
        raise ValueError(f"the shares add up to {sum(shares.values()):.2f}; they must not exceed 1")
    return shares


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="the CPU, tiny configs, a temp dir")
    parser.add_argument("--budget", type=float, default=None, help="total seconds (default 460; dry run 90)")
    parser.add_argument("--share", action="append", default=[], metavar="SECTION=FRACTION", help="a section's share")
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    parser.add_argument("--models", nargs="+", default=None, choices=REAL_MODELS, help="real models (default: all)")
    parser.add_argument("--device", default="cuda", help="a CUDA device (the dry run uses the CPU)")
    parser.add_argument("--out", type=Path, default=None, help="folder (default docs/gpu; dry run: a temp dir)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        shares = parse_shares(args.share)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.dry_run:
        plan = dry_plan()
        budget = args.budget or 90.0
        out = args.out or Path(tempfile.mkdtemp(prefix="gpu_check_"))
        real_compile = torch.compile
        torch.compile = functools.partial(real_compile, backend="eager")  # type: ignore[assignment]
        torch.set_num_threads(1)
    else:
        if not torch.cuda.is_available():
            print("error: no CUDA device is visible; run on a GPU machine, or pass --dry-run", file=sys.stderr)
            return 2
        plan = full_plan(args.device)
        if ":" in args.device:
            torch.cuda.set_device(args.device)
        budget = args.budget or 460.0
        out = args.out or ROOT / "docs" / "gpu"
    command = "python scripts/gpu_check.py" + ("" if not sys.argv[1:] else " " + shlex.join(sys.argv[1:]))
    torch.manual_seed(0)
    check = Check(plan, budget, shares, out, command)
    check.progress(f"gpu check on {check.report['env']['device_name']}, budget {budget:.0f} s -> {check.md_path}")
    check.save()
    sections: dict[str, Callable[[Section], None]] = {
        "models": functools.partial(models_section, requested=args.models),
        "toy": toy_section,
        "step": step_section,
        "batched": batched_section,
        "chi2": chi2_section,
    }
    try:
        check.run(args.sections, sections)
    except KeyboardInterrupt:
        check.progress("interrupted: what finished is in the files")
        check.save()
        return 130
    check.progress(f"written {check.md_path} and {check.json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
