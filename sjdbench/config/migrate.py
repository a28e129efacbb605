"""Re-key runs written by an older sjdbench (schema 1) under today's run ids, losing nothing.

Schema-1 run ids hashed the whole flat decoder config, so a knob no decoder read still split runs.
The decoders themselves did not change (the same seeds give the same tokens), so a schema-1 run's
rows are valid rows of the schema-2 run with the same resolved decoder: migration converts the
run's config.yaml to the parts layout, computes today's id from it and the facts recorded in
env.json (prompt-set hash, device, weights fingerprint), and renames the directory. A run whose new
id already exists is left alone and reported: two stores are never mixed.

    sjdbench migrate                 # the default results directory
    sjdbench migrate --dry-run       # what would move
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sjdbench.config.identity import family, label, run_id_for
from sjdbench.config.schema import (
    DataConfig,
    DecoderConfig,
    ModelConfig,
    RunConfig,
    SamplingOverrides,
    check_config,
    to_yaml,
)
from sjdbench.decoding.verifiers.lantern import LEGACY_ZERO_ON
from sjdbench.errors import UserError
from sjdbench.results.files import read_json
from sjdbench.results.store import (
    SCHEMA,
    StoreError,
    atomic_write_json,
    atomic_write_text,
    check_marker,
    describe_os_error,
)

log = logging.getLogger(__name__)


@dataclass
class Migration:
    old_id: str
    new_id: str | None
    status: str  # moved | would move | exists (left alone) | unreadable


def is_legacy(run_dir: Path) -> bool:
    """A run written before run ids followed the built decoder: its env.json has no schema (a
    damaged env.json is no run to migrate; readers name it)."""
    doc = read_json(run_dir / "env.json").doc
    return doc is not None and "schema" not in doc


def check_store(root: Path) -> None:
    """migrate works on an existing results folder: one line naming the mistake otherwise."""
    root = Path(root)
    if not root.exists():
        raise UserError(
            f"results_dir {root} does not exist; nothing to migrate (name the folder that holds runs/: "
            "results_dir=DIR or --results-dir DIR)"
        )
    if not root.is_dir():
        raise UserError(f"results_dir {root} is a file, not a results folder; name the folder that holds runs/")
    if not (root / "runs").is_dir() and not (root / "store.json").exists() and any(root.iterdir()):
        raise UserError(
            f"{root} is not a results folder (files, but no runs/ and no store.json); name the folder that holds runs/"
        )
    check_marker(root)


def legacy_runs(root: Path) -> list[Path]:
    runs = Path(root) / "runs"
    return sorted(d for d in runs.iterdir() if d.is_dir() and is_legacy(d)) if runs.is_dir() else []


def decoder_from_legacy(old: dict[str, Any]) -> DecoderConfig:
    """The parts layout of a schema-1 flat decoder config (same decoder, same samples)."""
    proposal: dict[str, Any] = {"name": old.get("proposal", "resample")}
    if proposal["name"] == "coupled" and old.get("tau") is not None:
        proposal["tau"] = old["tau"]
    if old.get("vp"):
        vp_knobs = ("gamma", "history", "lam", "fusion", "fusion_top_k", "reference")
        proposal = {
            "name": "vp",
            "inner": proposal if len(proposal) > 1 else proposal["name"],
            **{k: old[k] for k in vp_knobs if k in old},
        }
    verifier: dict[str, Any] = {"name": old.get("verifier", "exact")}
    if verifier["name"] in ("lantern", "gsd"):
        verifier.update(old.get(verifier["name"]) or {})
    # schema-1 sjdbench had only our readings of the peer rules (today's defaults are the released ones)
    if verifier["name"] == "gsd":
        verifier["reading"] = "ours"
    if verifier["name"] == "lantern":
        verifier["reading"] = LEGACY_ZERO_ON[verifier.pop("zero_on", None) or "all"]
    return DecoderConfig(
        name=old.get("name", "sjd"),
        window=int(old.get("window", 16)),
        proposal=proposal,
        verifier=verifier,
        init={"name": old.get("init", "random")},
        growth_steps=int(old.get("growth_steps", 3)),
        growth_reading=old.get("growth_reading", "increases"),
        trace_positions=int(old.get("trace_positions", 8)),
    )


def config_from_legacy(doc: dict[str, Any]) -> RunConfig:
    """A schema-1 config.yaml as today's RunConfig (checked by the caller, with `check_config`)."""
    known = {
        k: doc[k] for k in ("seed", "samples_per_prompt", "device", "results_dir", "save_images", "warmup") if k in doc
    }
    return RunConfig(
        model=ModelConfig(**doc.get("model", {})),
        decoder=decoder_from_legacy(doc.get("decoder", {})),
        data=DataConfig(**doc.get("data", {})),
        sampling=SamplingOverrides(**doc.get("sampling", {})),
        **known,
    )


def migrate_run(run_dir: Path, dry_run: bool = False) -> Migration:
    try:
        env = json.loads((run_dir / "env.json").read_text())
        doc = yaml.safe_load((run_dir / "config.yaml").read_text())
        if not isinstance(doc, dict):
            raise ValueError("config.yaml is not a mapping")
        config = config_from_legacy(doc)
        spec = check_config(config)
        device_type = str(env.get("device", "cpu")).split(":")[0]
        new_id = run_id_for(config, env["prompts_sha"], device_type, env.get("weights"), spec)
    except (OSError, KeyError, TypeError, ValueError, UserError, yaml.YAMLError) as error:
        log.warning("%s: cannot be migrated (%s)", run_dir.name, error)
        return Migration(run_dir.name, None, "unreadable")
    target = run_dir.parent / new_id
    if target.exists() and target != run_dir:
        return Migration(run_dir.name, new_id, "exists (left alone)")
    if dry_run:
        return Migration(run_dir.name, new_id, "would move")
    try:
        run_dir.rename(target)  # first: a run interrupted after this is found again under its new name
    except OSError as error:
        raise StoreError(describe_os_error(error, target)) from None
    atomic_write_text(target / "config.yaml", to_yaml(config))
    summary_path = target / "summary.json"
    summary = read_json(summary_path).doc  # a damaged summary is rebuilt by the next run of it
    if summary is not None:
        summary.update(
            run_id=new_id,
            decoder=label(config, spec),
            decoder_preset=config.decoder.name,
            decoder_family=family(spec),
            decoder_spec=spec.identity(),
            schema=SCHEMA,
        )
        atomic_write_json(summary_path, summary)
    # env.json last: its schema marks the run as migrated
    atomic_write_json(
        target / "env.json",
        {
            **env,
            "schema": SCHEMA,
            "decoder_spec": spec.identity(),
            "migrated_from": env.get("migrated_from", run_dir.name),
        },
    )
    return Migration(run_dir.name, new_id, "moved")


def migrate_store(root: Path, dry_run: bool = False) -> list[Migration]:
    check_store(root)
    return [migrate_run(run_dir, dry_run) for run_dir in legacy_runs(root)]
