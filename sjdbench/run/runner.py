"""Run one configuration (or several, timed side by side): load the model once, decode every
(prompt, sample) not yet stored, and write rows, images and the summary. Re-running the same
command resumes; a complete run is reported, not redone.

Everything that can be wrong with the input is checked by `sjdbench.config.resolve.resolve_run` before
any model loads (prompt file, device, weight files, sampling ranges, results folder, store schema),
so a typo costs a second, not a model load; the runner works from the `ResolvedRun` it returns. Each
sample is timed by `timed_decode` (device-synchronised, with the machine's state); `make bench`
times through the same function.

Batches (`batch_size=B`): the samples still to decode flow through the batched loop B at a time in
lockstep (a finished sample's slot takes the next one). A sample's latency then means nothing on its
own; each row records its `stream` instead: the stream's id, batch size, the images it had finished
and the decoding seconds it had spent when this one finished (device-synchronised, PNG writing
excluded), so a run's throughput is images over decoding seconds, summed over its streams. With
B = 1 every sample is its own stream and `latency_s` is its decode time, as before.

Timing modes, recorded in every row as `timing = {mode, session}`:
- `single`: one run decodes its prompts on its own (`sjdbench run`);
- `paired`: several runs of one model and prompt selection (a decoder and its AR baseline) decode
  prompt by prompt, interleaved, in one process (`sjdbench sweep --timing paired`), so rows with
  the same session, prompt and sample were timed in the same machine state and their latency
  ratio is trustworthy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any, Optional

import torch

from sjdbench.adapter import Sampling
from sjdbench.config.ranges import fit_to_model
from sjdbench.config.resolve import ResolvedRun, resolve_run
from sjdbench.config.schema import RunConfig, check_sampling, model_notes, to_yaml
from sjdbench.data.prompts import Prompt
from sjdbench.decoding.build import resolved_settings
from sjdbench.decoding.loop import Decoder, DecodeResult, Request, jacobi_decode, jacobi_decode_batch
from sjdbench.errors import Interrupted, NonFiniteLogits, UserError
from sjdbench.machine import apply_threads, environment, load_1m, snapshot
from sjdbench.results.files import read_yaml
from sjdbench.results.store import SCHEMA, RunLocked, RunStore, StoreError, save_png
from sjdbench.results.summary import summarize
from sjdbench.run.reporting import Reporter

log = logging.getLogger(__name__)

TIMING_MODES = ("single", "paired")


@dataclass
class RunOutcome:
    run_id: str
    run_dir: str
    # "done" (already stored: nothing decoded) | "finished" (the selection is done) | "partial" | "failed" |
    # "skipped" (another process was writing it)
    status: str
    summary: dict
    new_samples: int
    error: Optional[str] = None  # why it failed (paired runs that go on without it)


def sample_seed(run_seed: int, prompt_id: int, sample: int) -> int:
    """One generator per (run seed, prompt, sample): runs are reproducible and pairable."""
    digest = hashlib.sha256(f"{run_seed}:{prompt_id}:{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def resolve_sampling(default: Sampling, overrides) -> Sampling:
    changes = {k: v for k, v in asdict(overrides).items() if v is not None}
    return replace(default, **changes)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@dataclass
class TimedDecode:
    result: DecodeResult
    latency_s: float  # wall time of the decode, the device synchronised before and after
    machine: dict  # machine.snapshot(): load, CPUs, threads, busy, CPU/GPU model


def timed_decode(
    adapter: Any, prompt_text: str, decoder: Decoder, sampling: Sampling, seed: int, device: str
) -> TimedDecode:
    """The one timed decode: `run`, `sweep` and `make bench` all measure latency through it."""
    generator = torch.Generator(device).manual_seed(seed)
    load_before = load_1m()
    synchronize(device)
    start = time.perf_counter()
    result = jacobi_decode(adapter, prompt_text, decoder, sampling, generator)
    synchronize(device)
    latency = time.perf_counter() - start
    return TimedDecode(result, latency, snapshot(device, load_before))


@dataclass
class Decoded:
    """One sample out of a stream: its result, and the stream's state when it finished."""

    key: tuple[Prompt, int]
    result: DecodeResult
    seed: int
    images: int  # images the stream had finished, this one included
    decode_s: float  # decoding seconds the stream had spent (device-synchronised)
    machine: dict
    peak_bytes: int | None  # CUDA: the most memory the stream had allocated


def decode_stream(
    adapter: Any,
    keys: list[tuple[Prompt, int]],
    decoder: Decoder,
    sampling: Sampling,
    run_seed: int,
    device: str,
    batch_size: int,
) -> Iterator[Decoded]:
    """Decode (prompt, sample) keys `batch_size` at a time in lockstep, timing only the decoding: the
    time spent in the consumer (writing images and rows) is not counted. Each sample draws from its
    own generator, seeded from (run seed, prompt, sample) as an unbatched decode would."""
    requests = [
        Request(p.text, torch.Generator(device).manual_seed(sample_seed(run_seed, p.prompt_id, s)), (p, s))
        for p, s in keys
    ]
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    stream = jacobi_decode_batch(adapter, requests, decoder, sampling, batch_size)
    spent, images = 0.0, 0
    while True:
        load_before = load_1m()
        synchronize(device)
        start = time.perf_counter()
        try:
            request, result = next(stream)
        except StopIteration:
            return
        synchronize(device)
        spent += time.perf_counter() - start
        images += 1
        peak = int(torch.cuda.max_memory_allocated(device)) if cuda else None
        prompt, s = request.key
        seed = sample_seed(run_seed, prompt.prompt_id, s)
        yield Decoded(request.key, result, seed, images, spent, snapshot(device, load_before), peak)


def load_adapter(spec: ResolvedRun, reporter: Reporter) -> Any:
    """The run's model, built on its device (the one model load of a run or a group of runs)."""
    reporter.model_loading(spec.model.name, spec.device)
    start = time.perf_counter()
    adapter = spec.model.build(spec.device)
    reporter.model_loaded(spec.model.name, time.perf_counter() - start)
    return adapter


def model_key(spec: ResolvedRun) -> str:
    """Runs that can share one loaded model: the same model, options and device."""
    return json.dumps(
        {
            "name": spec.model.name,
            "target": spec.model.target,
            "options": asdict(spec.model.options),
            "device": spec.device,
        },
        sort_keys=True,
        default=str,
    )


class LoadedModel:
    """The model this process holds, reused by the runs that share it (a sweep's groups of one model);
    one model in memory at a time."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.adapter: Any = None

    def get(self, spec: ResolvedRun, reporter: Reporter) -> Any:
        key = model_key(spec)
        if key != self.key:
            self.key, self.adapter = None, None  # the previous model goes before the next one loads
            self.adapter = load_adapter(spec, reporter)
            self.key = key
        return self.adapter


@dataclass
class Fitted:
    """A run's decoder and sampling fitted to the loaded model, and a note per setting it changed."""

    decoder: Decoder
    sampling: Sampling
    notes: list[str]


def fit_run(spec: ResolvedRun, adapter: Any) -> Fitted:
    """The checks that need the model (config.ranges.fit_to_model, the parts' model notes; sampling
    against its image tokens, for models that know their count only once built). A new run is
    fitted before its lock is taken, so a refused one leaves no folder behind."""
    decoder, notes = fit_to_model(spec.decoder, spec.config.model.name, spec.decoder.build(adapter), adapter)
    notes += model_notes(spec.decoder, adapter.layout)
    sampling = resolve_sampling(adapter.default_sampling, spec.config.sampling)
    check_sampling(asdict(sampling), "sampling.", len(adapter.image_token_ids))
    return Fitted(decoder, sampling, notes)


@dataclass(frozen=True)
class StoreState:
    """What a run's store holds, read once when its lock is taken (after the lock's repairs): the
    samples stored, and whether config.yaml or env.json must be (re)written."""

    done: frozenset[tuple[int, int]]
    needs_metadata: bool

    @classmethod
    def read(cls, store: RunStore) -> StoreState:
        return cls(frozenset(store.done_keys()), store.needs_metadata())


class RunWriter:
    """One run open for writing (its lock held by the caller): the decoder built against the
    model, rows appended as samples finish."""

    def __init__(
        self, spec: ResolvedRun, adapter: Any, timing: dict, stored: StoreState, fitted: Fitted | None = None
    ) -> None:
        self.spec = spec
        self.store = spec.store
        self.adapter = adapter
        self.timing = timing
        self.todo = [(p, s) for p, s in spec.wanted if (p.prompt_id, s) not in stored.done]
        self.new = 0
        self.notes: list[str] = []  # settings fitted to the model (config.ranges.fit_to_model)
        if not self.todo and not stored.needs_metadata:
            return
        fitted = fitted or fit_run(spec, adapter)  # a new run was fitted before its lock was taken
        self.decoder, self.sampling, self.notes = fitted.decoder, fitted.sampling, fitted.notes
        resolved = {
            "sampling": asdict(self.sampling),
            "weights": spec.weights,
            "decoder_spec": spec.decoder.identity(),
            "schema": SCHEMA,
            "compiled": bool(getattr(adapter, "compile", False)),  # torch.compile'd forward: paired only like with like
            **resolved_settings(self.decoder),
            **({"window_used": self.decoder.window} if self.decoder.window != spec.decoder.window else {}),
        }
        env = {**environment(spec.device), "prompts_sha": spec.prompts_sha, **resolved}
        self.store.prepare(to_yaml(spec.config), env)

    @property
    def done(self) -> int:
        return len(self.spec.wanted) - len(self.todo) + self.new

    def warmup(self) -> None:
        """Untimed decodes (a batch's worth when batched): first-call allocations and lazy
        initialisation stay out of the timings."""
        batch = min(self.spec.config.batch_size, len(self.todo))  # never more than the run decodes together
        for i in range(self.spec.config.warmup if self.todo else 0):
            requests = [
                Request(prompt.text, torch.Generator(self.spec.device).manual_seed(i))
                for prompt, _ in (self.todo * batch)[:batch]
            ]
            for _ in jacobi_decode_batch(self.adapter, requests, self.decoder, self.sampling, batch):
                pass

    def decode(self, keys: list[tuple[Prompt, int]]) -> Iterator[dict]:
        """Decode these (prompt, sample) keys (the run's batch size at a time) and store each row as
        its sample finishes; yields the rows."""
        config, spec = self.spec.config, self.spec
        stream_id = uuid.uuid4().hex[:12]
        stream = decode_stream(
            self.adapter, keys, self.decoder, self.sampling, config.seed, spec.device, config.batch_size
        )
        while True:
            try:
                decoded = next(stream)
            except StopIteration:
                return
            except NonFiniteLogits as error:
                prompt, sample = next(((p, s) for p, s in keys if p.text == error.prompt), keys[0])
                shown = prompt.text if len(prompt.text) <= 40 else prompt.text[:39] + "…"
                raise NonFiniteLogits(
                    error.position, f"{prompt.prompt_id} ('{shown}') sample {sample} of run {spec.run_id}"
                ) from None
            yield self.store_row(decoded, stream_id)

    def store_row(self, decoded: Decoded, stream_id: str) -> dict:
        config = self.spec.config
        (prompt, sample), result = decoded.key, decoded.result
        image_name = f"{prompt.prompt_id:06d}_{sample}.png"
        if config.save_images:
            save_png(self.store.images / image_name, self.adapter.decode(result.tokens))
        batched = config.batch_size > 1
        row = {
            "prompt_id": prompt.prompt_id,
            "sample": sample,
            "prompt": prompt.text,
            "seed": decoded.seed,
            # inside a batch a sample's own time has no meaning: the stream's throughput does
            "latency_s": None if batched else decoded.decode_s,
            "stream": {
                "id": stream_id,
                "batch_size": config.batch_size,
                "images": decoded.images,
                "decode_s": decoded.decode_s,
                **({"peak_bytes": decoded.peak_bytes} if decoded.peak_bytes is not None else {}),
            },
            "machine": decoded.machine,
            "timing": self.timing,
            **result.stats.to_row(),
            "tokens": result.tokens.tolist(),
            "image": f"images/{image_name}" if config.save_images else None,
        }
        self.store.append(row)
        self.new += 1
        return row

    def finish(self) -> RunOutcome:
        summary = write_summary(self.spec, self.store)
        selection_done = self.done == len(self.spec.wanted)
        status = "done" if self.new == 0 and selection_done else ("finished" if selection_done else "partial")
        return RunOutcome(self.spec.run_id, str(self.store.dir), status, summary, self.new)


def summary_of(spec: ResolvedRun, rows: list[dict], preset: str | None = None) -> dict:
    """The run's summary over every row present; complete only when the whole prompt set is done
    (its fields are listed in sjdbench.results.summary.SUMMARY_FIELDS). preset: the decoder preset
    the run's config.yaml names, when it names one (default: this command's)."""
    config = spec.config
    in_set = [r for r in rows if r["prompt_id"] < spec.set_size and r.get("sample", 0) < config.samples_per_prompt]
    wanted = spec.wanted_keys
    return {
        **summarize(in_set),
        "run_id": spec.run_id,
        "model": config.model.name,
        "decoder": spec.label,  # the preset plus every knob that differs from it
        "decoder_preset": preset or config.decoder.name,
        "decoder_family": spec.family,
        "decoder_spec": spec.decoder.identity(),
        "decoder_lossless": spec.decoder.lossless(),
        "window": spec.decoder.window,
        "growth_steps": spec.decoder.growth_steps,
        "schema": SCHEMA,
        "data": config.data.name,
        "seed": config.seed,
        "device": spec.device,
        "n_wanted": spec.n_set,  # samples in the whole prompt set
        "complete": len(in_set) == spec.n_set,
        # the selection of the command that wrote this summary (data.limit, data.shard): `finished`
        # when every sample it asked for is stored, so a `data.limit=16` run can be scored and
        # reported over its 16 prompts while an interrupted one cannot
        "selection_n": len(wanted),
        "finished": wanted <= {(r["prompt_id"], r.get("sample", 0)) for r in in_set},
    }


def write_summary(spec: ResolvedRun, store: RunStore) -> dict:
    """Two commands that build one decoder share its run (`decoder=lantern` and `decoder=sjd
    decoder/verifier=lantern`; the run id leaves the preset's name out). A command that finds the
    run complete rewrites no config.yaml, so its summary keeps the preset config.yaml names: else the
    two files would disagree and readers would call the run damaged."""
    return store.write_summary(lambda rows: summary_of(spec, rows, recorded_preset(store)))


def recorded_preset(store: RunStore) -> str | None:
    """The decoder preset the run's config.yaml names (None: no readable config.yaml)."""
    decoder = (read_yaml(store.dir / "config.yaml").doc or {}).get("decoder")
    name = decoder.get("name") if isinstance(decoder, dict) else None
    return name if isinstance(name, str) else None


def new_timing(mode: str) -> dict:
    return {"mode": mode, "session": uuid.uuid4().hex[:12]}


def execute_runs(
    specs: list[ResolvedRun],
    adapter: Any = None,
    reporter: Optional[Reporter] = None,
    timing_mode: str = "single",
    limit_new: Optional[int] = None,
    keep_going: bool = False,
    loaded: Optional[LoadedModel] = None,
) -> list[RunOutcome]:
    """Run (or resume) runs of one model: their missing samples decoded prompt by prompt, each
    prompt by every run in turn (paired timing), under each run's write lock.

    `adapter`: the model, already loaded; `loaded` lets sweeps reuse the model a previous group
    loaded (it is loaded only when some run needs it); `limit_new` stops after that many new samples
    (for tests of interruption); `keep_going`: a run whose decode fails is reported as failed and the
    others go on. Ctrl-C raises `Interrupted(done, total)`; every finished row is stored. Each run's
    store is read once, under its lock. A run whose folder does not exist yet is fitted to the model
    before its lock is taken (the lock makes the folder): a run refused by a check that needs the
    model (config.ranges.fit_to_model) leaves nothing behind.
    """
    reporter = reporter or Reporter()
    timing = new_timing(timing_mode)
    writers: list[RunWriter] = []
    everyone = specs
    aside: dict[str, RunOutcome] = {}  # run_id -> the outcome of a run skipped or refused on its own
    with contextlib.ExitStack() as locks:
        try:
            new_runs = [spec for spec in specs if not spec.store.dir.exists()]  # all to decode, nothing to read
            if new_runs:
                apply_threads(specs[0].config.threads, specs[0].device)
                adapter = adapter if adapter is not None else (loaded or LoadedModel()).get(specs[0], reporter)
            fitted = _fit(new_runs, adapter, keep_going, aside)
            specs = _lock(locks, [spec for spec in specs if spec.run_id not in aside], keep_going, aside, reporter)
            stored = {spec.run_id: StoreState.read(spec.store) for spec in specs}
            if any(spec.wanted_keys - stored[spec.run_id].done or stored[spec.run_id].needs_metadata for spec in specs):
                apply_threads(specs[0].config.threads, specs[0].device)
                if adapter is None:
                    adapter = (loaded or LoadedModel()).get(specs[0], reporter)
            writers = _writers(specs, stored, fitted, adapter, timing, keep_going, aside, reporter)
            specs = [w.spec for w in writers]
            if not writers:
                return [aside[spec.run_id] for spec in everyone]
            total = sum(len(w.spec.wanted) for w in writers)
            reporter.sample_done(sum(w.done for w in writers), total, None)
            for writer in writers:
                writer.warmup()
            todo = [list(w.todo) for w in writers]
            failed: dict[int, str] = {}
            new = 0
            if specs[0].config.batch_size == 1:  # prompt by prompt, each run in turn (paired timing)
                order = sorted({key for w in writers for key in w.todo}, key=lambda k: (k[0].prompt_id, k[1]))
                groups = [(i, [key]) for key in order for i, w in enumerate(writers) if key in set(todo[i])]
            else:  # one stream per run: the batch needs the run's samples together
                groups = [(i, todo[i]) for i in range(len(writers)) if todo[i]]
            for i, keys in groups:
                writer = writers[i]
                if i in failed or (limit_new is not None and new >= limit_new):
                    continue
                if limit_new is not None:
                    keys = keys[: limit_new - new]
                try:
                    for row in writer.decode(keys):
                        new += 1
                        reporter.sample_done(sum(w.done for w in writers), total, row)
                except Exception as error:  # noqa: BLE001 - with keep_going the other runs go on
                    if not keep_going or isinstance(error, StoreError):
                        raise
                    failed[i] = f"{type(error).__name__}: {error}"
                    log.warning("run %s failed: %s", writer.spec.run_id, failed[i])
        except BaseException as error:
            for writer in writers:  # summaries of what is there, so the store reads true
                with contextlib.suppress(Exception):
                    writer.finish()
            if isinstance(error, KeyboardInterrupt):
                finished = sum(len(spec.wanted_keys & spec.store.done_keys()) for spec in specs)
                raise Interrupted(finished, sum(len(spec.wanted) for spec in specs)) from None
            raise
        outcomes = [writer.finish() for writer in writers]
        for i, message in failed.items():
            outcomes[i] = replace(outcomes[i], status="failed", error=message)
        by_id = {o.run_id: o for o in outcomes} | aside
        return [by_id[spec.run_id] for spec in everyone]


def _lock(locks, specs: list[ResolvedRun], keep_going: bool, aside: dict, reporter: Reporter) -> list[ResolvedRun]:
    """Take each run's write lock. A run another process is writing is refused (RunLocked); with
    `keep_going` (a sweep) it is skipped with its line and the others go on: one run's lock never
    fails another run. The repairs each lock's holder made (store.RunStore.writer) are reported."""
    locked = []
    for spec in specs:
        try:
            store = locks.enter_context(spec.store.writer())
        except RunLocked as error:
            if not keep_going:
                raise
            aside[spec.run_id] = RunOutcome(spec.run_id, str(spec.store.dir), "skipped", {}, 0, str(error))
            reporter.note(f"skipped: {error}")
            continue
        for text in store.repairs:
            reporter.note(text)
        locked.append(spec)
    return locked


def _fit(specs: list[ResolvedRun], adapter: Any, keep_going: bool, aside: dict) -> dict[str, Fitted]:
    """Each run fitted to the loaded model (`fit_run`); with `keep_going`, a run whose settings do
    not fit (config.ranges.fit_to_model) fails on its own, with its line, and the others go on."""
    fitted = {}
    for spec in specs:
        try:
            fitted[spec.run_id] = fit_run(spec, adapter)
        except UserError as error:
            if not keep_going:
                raise
            aside[spec.run_id] = RunOutcome(spec.run_id, str(spec.store.dir), "failed", {}, 0, str(error))
    return fitted


def _writers(
    specs: list[ResolvedRun],
    stored: dict[str, StoreState],
    fitted: dict[str, Fitted],
    adapter: Any,
    timing: dict,
    keep_going: bool,
    aside: dict,
    reporter: Reporter,
) -> list[RunWriter]:
    """A writer per run (fitted to the model now, unless it was before its lock); with `keep_going`,
    a run whose settings do not fit the loaded model fails on its own, with its line, and the
    others go on."""
    writers = []
    for spec in specs:
        try:
            writer = RunWriter(spec, adapter, timing, stored[spec.run_id], fitted.get(spec.run_id))
        except UserError as error:
            if not keep_going or isinstance(error, StoreError):
                raise
            aside[spec.run_id] = RunOutcome(spec.run_id, str(spec.store.dir), "failed", {}, 0, str(error))
            continue
        for text in writer.notes:
            reporter.note(text)
        writers.append(writer)
    return writers


def execute(
    config: RunConfig, progress: Optional[Reporter] = None, adapter: Any = None, limit_new: Optional[int] = None
) -> RunOutcome:
    """Run (or resume) one configuration on its own (timing mode `single`)."""
    return execute_runs([resolve_run(config)], adapter, progress, "single", limit_new)[0]
