"""The Python API (`import sjdbench`): the same models, decoders, checks and numbers as the command
line, for notebooks.

    import sjdbench

    model = sjdbench.load_model("toy")                                   # model=toy
    decoder = sjdbench.build_decoder("sjd_vp", window=32, growth_steps=2)  # decoder=sjd_vp decoder.window=32 ...
    out = sjdbench.decode(model, "a red circle at the top left", decoder, seed=0)
    out.image, out.tokens, out.stats.step_compression
    runs = sjdbench.load_runs("results", model="toy", decoder="sjd,sjd_vp")  # speedup, CI and N per run
    paper = sjdbench.load_reference("sjd_pac_readme")                   # a published table, one row per row
    side = sjdbench.compare_reference("sjd_pac_readme", "results")      # our runs beside it (report --reference)

Spelling of overrides: a keyword is the command-line key without its group prefix. `load_model`
takes the `model.*` keys (path, weights, dtype, resolution, size, compile) and the model's builder
options (`model.options.*`) alike; `build_decoder` takes the `decoder.*` keys (window,
growth_steps, growth_reading, trace_positions), a part by its kind (proposal, verifier, init,
topology: `verifier="lantern"` is `decoder/verifier=lantern`), and knobs with a dotted key passed
as a dict (`**{"verifier.delta": 0.2}` is `decoder.verifier.delta=0.2`); `load_runs` takes the
filters of `sjdbench report` (`window=16`, `**{"decoder/verifier": "lantern"}`; a list or a
comma-separated string gives alternatives). Bad input raises `sjdbench.errors.UserError` with the
one-line message the command line prints.
"""

from __future__ import annotations

import os
import re
import weakref
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from sjdbench.decoder_identity import PART_KINDS
from sjdbench.errors import UserError

if TYPE_CHECKING:
    import pandas as pd
    import torch
    from PIL import Image

    from sjdbench.adapter import ImageARAdapter
    from sjdbench.decoding.build import ResolvedDecoder


def _hydra_value(value: Any) -> str:
    """A Python value as an override value of Hydra's grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    text = str(value)
    if re.fullmatch(r"[\w./:+-]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _require(what: str, value: Any, kinds: tuple[type, ...], expected: str) -> None:
    """An argument of the wrong Python type, refused in one line (bool is no int here)."""
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise UserError(f"{what} must be {expected}, got {type(value).__name__} {str(value)[:40]!r}")


def _store(results_dir: Any) -> str | None:
    """The results_dir argument: None (the default store), or a folder as a str or a path."""
    if results_dir is not None:
        _require("results_dir", results_dir, (str, os.PathLike), "a folder (a str or a path)")
    return None if results_dir is None else os.fspath(results_dir)


def _filter_words(filters: dict[str, Any]) -> list[str]:
    """Keyword filters as the words of `sjdbench report` (a list or tuple gives alternatives)."""
    return [
        f"{key}={','.join(map(str, value)) if isinstance(value, (list, tuple)) else value}"
        for key, value in filters.items()
    ]


def _reference_name(name: Any) -> str:
    _require("name", name, (str, os.PathLike), "a published table's name (see `sjdbench list reference`) or a file")
    return os.fspath(name)


def _override(key: str, value: Any) -> str:
    """A keyword as the command line's override word (`++`: set whether or not the YAML has the key)."""
    return f"++{key}={_hydra_value(value)}"


def load_model(name: str, device: str = "auto", **options: Any) -> ImageARAdapter:
    """A model adapter, checked and built as `sjdbench run model=<name> ...` builds it.

    options: the model's YAML defaults overridden by these (`load_model("toy", top_k=64)`,
    `load_model("janus", path="ckpt/janus-pro-7b", size="1B")`). device: auto, cpu, cuda, cuda:N, mps.
    """
    from sjdbench.config.resolve import check_model
    from sjdbench.config.schema import compose_run
    from sjdbench.models.options import TOP_LEVEL
    from sjdbench.models.registry import resolve_device

    _require("name", name, (str,), "a model name such as 'toy' (see `sjdbench list model`)")
    _require("device", device, (str,), "a device name: auto, cpu, cuda, cuda:N or mps")
    words = [f"model={name}"]
    for key, value in options.items():
        words.append(_override(f"model.{key}" if key in TOP_LEVEL else f"model.options.{key}", value))
    config = compose_run(words, typed=True)  # the command line's checks: types, ranges (model.options.top_k=-5)
    model, _ = check_model(config)  # and the model's own: its options, weight files, sampling vs its image tokens
    return model.build(resolve_device(device))


def build_decoder(preset: str = "sjd", **overrides: Any) -> ResolvedDecoder:
    """A decoder preset with overrides, resolved and checked (its parts, typed knobs and ranges) as
    `sjdbench run decoder=<preset> ...` resolves it; `decode` builds it against a model.

        build_decoder("sjd", window=32, verifier="lantern", **{"verifier.delta": 0.2})
    """
    from sjdbench.config.schema import compose_checked

    _require("preset", preset, (str,), "a decoder preset such as 'sjd' (see `sjdbench list decoder`)")
    words = [f"decoder={preset}"]
    for key, value in overrides.items():
        key = key.removeprefix("decoder.")
        if key in PART_KINDS and isinstance(value, str):
            words.append(f"decoder/{key}={value}")
        else:
            words.append(f"decoder.{key}={_hydra_value(value)}")
    return compose_checked(words, typed=True)[1]


@dataclass(frozen=True)
class Decoded:
    """One decoded image: its segment tokens (N,), the image, and the decode's statistics (the
    fields of a samples.jsonl row: nfe, step_compression, acceptance_rate, mean_accepted_length,
    growth_share, ...), and the wall time of the decode."""

    tokens: torch.Tensor  # (N,) long, on the CPU
    image: Image.Image  # RGB; np.asarray(image) is the (H, W, 3) uint8 array
    stats: SimpleNamespace
    latency_s: float


_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {decoder key: built decoder}


def _built(model: Any, decoder: ResolvedDecoder) -> Any:
    """The decoder built against this model, once per (model, decoder): LANTERN's neighbour table and
    GSD's threshold are computed when a decoder is built."""
    import json

    key = (json.dumps(decoder.identity(), sort_keys=True, default=str), decoder.trace_positions)
    try:
        cache = _BUILT.setdefault(model, {})
    except TypeError:  # a model object that cannot be weakly referenced: build every time
        return decoder.build(model)
    if key not in cache:
        cache[key] = decoder.build(model)
    return cache[key]


def decode(
    model: ImageARAdapter, prompt: str, decoder: ResolvedDecoder | str = "sjd", seed: int = 0, **sampling: Any
) -> Decoded:
    """Decode one image of `prompt` with `decoder` (a `build_decoder` spec or a preset name).

    seed: the sample's generator seed; a stored sample is reproduced from its row's `seed` (with the
    same model, decoder and sampling). sampling: cfg_scale, temperature, top_k, top_p overriding the
    model's defaults, as `sampling.*` does.
    """
    from PIL import Image

    from sjdbench.config.schema import sampling_overrides
    from sjdbench.data.prompts import check_prompt
    from sjdbench.decoding.build import ResolvedDecoder
    from sjdbench.errors import wrong_type
    from sjdbench.run.runner import resolve_sampling, timed_decode

    if not all(hasattr(model, name) for name in ("default_sampling", "image_token_ids", "encode_prompt", "decode")):
        raise UserError(f"model must be a model of sjdbench.load_model(...), got {type(model).__name__}")
    check_prompt(prompt)
    if not isinstance(decoder, (str, ResolvedDecoder)):
        raise UserError(
            "decoder must be a preset name such as 'sjd' or a decoder of sjdbench.build_decoder(...), got "
            f"{type(decoder).__name__}"
        )
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise UserError(wrong_type("seed", seed, "int"))  # the line of `seed=abc` on the command line
    if not 0 <= seed < 2**64:
        raise UserError(f"seed must be in 0..2**64-1 (a generator seed, as a sample row's `seed`), got {seed}")
    spec = build_decoder(decoder) if isinstance(decoder, str) else decoder
    chosen = resolve_sampling(model.default_sampling, sampling_overrides(sampling, len(model.image_token_ids)))
    timed = timed_decode(model, prompt, _built(model, spec), chosen, seed, str(model.device))
    tokens = timed.result.tokens
    image = Image.fromarray(model.decode(tokens)).convert("RGB")
    return Decoded(tokens, image, SimpleNamespace(**timed.result.stats.to_row()), timed.latency_s)


def load_runs(results_dir: str | None = None, **filters: Any) -> pd.DataFrame:
    """The runs of a store, one row per run: its summary fields (the statistics recomputed from the
    sample rows present, `n_samples` counting them), `status` (complete, finished, incomplete,
    legacy; a selected run that is damaged or written by a newer sjdbench raises UserError naming
    it and the fix), decoder spec (spec.*), env.json (env.*), and its speedup over its AR
    baseline as `sjdbench report` prints it: `speedup`, `speedup_lo`, `speedup_hi` (95 % bootstrap
    CI), `speedup_n` (prompts paired) and `ar_run_id`. The AR baselines of the selected runs are
    included. results_dir: the store (default: $SJDBENCH_RESULTS, else ./results)."""
    from sjdbench.results.runs import paired_runs, runs_frame
    from sjdbench.results.select import parse_selection, select_runs
    from sjdbench.results.store import USABLE

    selection = parse_selection(_filter_words(filters), _store(results_dir))
    store = runs_frame(selection.root, rows=True)
    selected = select_runs(store, selection)
    usable = selected[selected["status"].isin(USABLE)]
    pairings = paired_runs(usable, store[store["status"].isin(USABLE)]) if not usable.empty else None
    if pairings is None:
        return selected.assign(ar_run_id=None, speedup=None, speedup_lo=None, speedup_hi=None, speedup_n=0)
    merged = selected.merge(pairings, on="run_id", how="left")
    return merged.assign(speedup_n=merged["speedup_n"].fillna(0).astype(int))


def load_reference(name: str) -> pd.DataFrame:
    """A published table (`sjdbench list reference` names them; or the path of a reference YAML file),
    one row per published row: method, its sjdbench `preset` (None where sjdbench has none), model,
    data, training_free and lossless as the source says, each figure (`step_compression`,
    `latency_speedup`, `nfe`, `fid`, `clip`; a span the source states in words as <metric>_min and
    <metric>_max), the settings the source states (None where it does not; decoder knobs as
    knob.<key>), and `source`, `source_url`, `where`, `checked`."""
    from sjdbench.reference.load import load_reference as load
    from sjdbench.reference.load import published_frame

    return published_frame(load(_reference_name(name)))


def compare_reference(name: str, results_dir: str | None = None, **filters: Any) -> pd.DataFrame:
    """Our runs beside the published table `name`, as `sjdbench report --reference NAME` puts them:
    one row per (run, metric) with `ours` (its CI in ours_lo/ours_hi, N in ours_n), `published` (or
    published_min/published_max for a span), `ratio` = ours / published (ratio_vs_min/ratio_vs_max
    for a span), `differs` (every stated setting that differs, e.g. "W: 16 vs 64") and `not_stated`.
    filters: those of `load_runs`."""
    from sjdbench.reference.load import load_reference as load
    from sjdbench.report.build import collect
    from sjdbench.report.reference import compare
    from sjdbench.results.select import parse_selection

    published = load(_reference_name(name))
    store = collect(parse_selection(_filter_words(filters), _store(results_dir)))
    return compare(published, store.runs, store.pairings, store.scores).frame
