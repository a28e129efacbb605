"""From a composed config to the `ResolvedRun` a run carries: every check that needs no model, made
in one pass before anything loads, and everything a run derives from its config resolved once.

    config = compose_run(["decoder=sjd_vp", "data=toy"])   # the YAML tree, typed and range-checked
    spec = resolve_run(config)                              # prompts, device, weights, store: checked
    spec.decoder, spec.run_id, spec.label, spec.prompts, spec.model, spec.store

The pass, in order: the config's own ranges and the decoder's parts (`check_config`, which resolves
the decoder the spec then carries), the prompt set, the device, the model's options and weight
files (the registry's checks), sampling against the model's image tokens, the results folder and
the store's schema (the store's checks). A typo costs a second, not a model load; nothing is written.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

from sjdbench.config.identity import facts_of, family, label, run_id
from sjdbench.config.ranges import spec_notes
from sjdbench.config.schema import RunConfig, check_config, check_sampling, model_sampling_options
from sjdbench.data.prompts import Prompt, load_prompt_set
from sjdbench.decoding.build import ResolvedDecoder
from sjdbench.errors import UserError
from sjdbench.models.registry import ResolvedModel, remote_device, resolve_device, resolve_model
from sjdbench.results.root import results_root
from sjdbench.results.store import RunStore, check_results_root
from sjdbench.runkey import SampleFacts


@dataclass(frozen=True)
class ResolvedRun:
    """A run as known before any model loads: its inputs checked, its decoder resolved."""

    config: RunConfig  # as composed: what config.yaml records
    decoder: ResolvedDecoder  # resolved once; run ids, labels, summaries and the built decoder read it
    run_id: str
    label: str  # the preset plus the knobs that differ from it, e.g. sjd_vp(N=2)
    family: str  # the preset whose parts the decoder uses (ar, sjd, ..., custom)
    prompts: tuple[Prompt, ...]  # the selection: data.limit, then data.shard
    set_size: int  # prompts in the whole set
    prompts_sha: str  # of the whole set
    device: str  # resolved: cpu, cuda, cuda:1, mps (as the jobs will see it for remote runs)
    model: ResolvedModel  # its options parsed and checked once; the runner builds it
    weights: str | None  # fingerprint of the weight files (None: a model without files)
    root: Path  # the results store
    notes: tuple[str, ...] = ()  # settings that are legal but clamped or inert (config.ranges.spec_notes)

    @property
    def facts(self) -> SampleFacts:
        """What besides the decoder determines the samples (the AR pairing key's input)."""
        return facts_of(self.config, self.prompts_sha, self.device.split(":")[0], self.weights)

    @property
    def wanted(self) -> list[tuple[Prompt, int]]:
        return [(p, s) for p in self.prompts for s in range(self.config.samples_per_prompt)]

    @property
    def wanted_keys(self) -> set[tuple[int, int]]:
        return {(p.prompt_id, s) for p, s in self.wanted}

    @property
    def n_set(self) -> int:
        """Samples in the whole prompt set: the run is complete when all are stored."""
        return self.set_size * self.config.samples_per_prompt

    @cached_property
    def store(self) -> RunStore:
        """The run's one store object, shared by every step of a command (checks, lock, writes)."""
        return RunStore(self.root, self.run_id, self.config.data.shard)


def check_model(config: RunConfig) -> tuple[ResolvedModel, str | None]:
    """The model's checks before it loads (the registry's): its options, its weight files (missing,
    truncated, corrupt, of the wrong shapes), and sampling against its image tokens. Returns the
    resolved model and its weights' fingerprint. `sjdbench run` and `sjdbench.load_model` both
    check a model here."""
    model = resolve_model(config.model.name, dict(config.model.options), config.model._target_)
    weights = model.fingerprint()
    model.verify()
    image_tokens = model.image_tokens()
    check_sampling(asdict(config.sampling), "sampling.", image_tokens)
    check_sampling(model_sampling_options(config), "model.options.", image_tokens)
    return model, weights


def resolve_run(config: RunConfig, remote_gpus: int | None = None) -> ResolvedRun:
    """Every check that needs no model, in one pass, and the run's resolved spec. Writes nothing.

    remote_gpus: the run will execute on another machine (a Slurm job) with that many GPUs, so the
    device is resolved as it will be there, not on this machine."""
    decoder = check_config(config)
    prompt_set = load_prompt_set(config.data)
    if not prompt_set.selected:
        raise UserError(
            f"data.shard={config.data.shard} selects no prompt: the selection holds "
            f"{min(config.data.limit or prompt_set.size, prompt_set.size)} prompts; use a shard count n of at most that"
        )
    device = resolve_device(config.device) if remote_gpus is None else remote_device(config.device, remote_gpus)
    model, weights = check_model(config)
    root = results_root(config.results_dir)
    check_results_root(root)
    facts = facts_of(config, prompt_set.sha, device.split(":")[0], weights)
    spec = ResolvedRun(
        config,
        decoder,
        run_id(facts, decoder),
        label(config, decoder),
        family(decoder),
        tuple(prompt_set.selected),
        prompt_set.size,
        prompt_set.sha,
        device,
        model,
        weights,
        root,
        tuple(spec_notes(config, decoder, prompt_set.size, len(prompt_set.selected))),
    )
    spec.store.check_schema()
    return spec
