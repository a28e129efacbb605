"""Values that are legal but almost certainly a mistake: refused with the valid range, or clamped with a
`note:` line, one decision per case (docs/RESULTS.md, "Legal but almost certainly wrong"):

- refused before any model loads (`schema.check_knobs`, part of `schema.check_config`, with the
  other knob checks): a knob that is a probability set outside [0, 1] (GSD's p_thr);
- refused right after the model loads, before anything decodes (`fit_to_model`): growth steps no
  history can reach on this model (every iteration commits at least one token, so a position is
  observed at most once per iteration and at most as many times as the image has positions);
- a note after the model loads: growth steps a chain window of this size cannot reach (a position
  stays in a W-slot chain window for at most W iterations);
- clamped with a note after the model loads (`fit_to_model`): a window larger than any forward can
  use on this model's images (the same tokens as at the largest useful window, without allocating
  caches for slots that are never fed; env.json records `window_used`);
- notes before any model loads (`spec_notes`, carried by the ResolvedRun): a data.limit beyond the
  prompt set (all prompts are used), a batch larger than the samples to decode, more threads than
  CPUs (clamped to them when the run starts).

The segment length (positions per image) is known only once the model is built for most models,
hence the two checks after loading; they run before the first decode, so a mistake still costs a
model load, never a decode.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

from sjdbench.errors import UserError
from sjdbench.machine import cpus_available

if TYPE_CHECKING:
    from sjdbench.config.schema import RunConfig
    from sjdbench.decoding.build import ResolvedDecoder


def useful_window(spec: ResolvedDecoder, n_positions: int) -> int | None:
    """The most slots one forward of this decoder can use on images of `n_positions` positions (a
    larger window decodes the same tokens); None for a topology of one's own (not known here)."""
    topology = spec.topology
    if topology.name in ("chain", "rows"):  # never more slots than positions left
        return n_positions
    if topology.name == "tree":  # the full K-ary tree's branches, then the first-child path to the end
        from sjdbench.decoding.topologies.tree import TreeConfig, tree_size

        config = cast(TreeConfig, topology.config)  # the registered tree's knobs
        width, depth = config.width, config.depth
        return tree_size([width] * max(depth - 1, 0)) + n_positions
    return None


def observations_needed(spec: ResolvedDecoder) -> int:
    """Observations of a position that the growth mask needs: N + 1 for N strict increases, else N."""
    return spec.growth_steps + 1 if spec.growth_reading == "increases" else spec.growth_steps


def fit_to_model(resolved: ResolvedDecoder, model_name: str, decoder: Any, adapter: Any) -> tuple[Any, list[str]]:
    """The built decoder (of the resolved spec) fitted to the loaded model, and a note per change;
    UserError (one line, with the range) for growth steps the model's images cannot reach. Runs before
    anything decodes."""
    if resolved.is_ar:
        return decoder, []
    n_positions = int(adapter.layout.n_positions)
    needed = observations_needed(resolved)
    if needed > n_positions:
        most = n_positions - (needed - resolved.growth_steps)
        raise UserError(
            f"decoder.growth_steps={resolved.growth_steps} can never be reached on {model_name}: an "
            f"image has {n_positions} positions, so a position is observed at most {n_positions} times (once per "
            f"iteration, and every iteration commits a token), and growth needs {needed} observations "
            f"({resolved.growth_reading}); use decoder.growth_steps=1..{max(most, 1)}"
        )
    notes = []
    if resolved.topology.name == "chain" and needed > resolved.window:
        notes.append(
            f"at decoder.window={resolved.window} a position stays in the window for at most {resolved.window} "
            f"iterations, so growth over decoder.growth_steps={resolved.growth_steps} ({resolved.growth_reading}: "
            f"{needed} observations) never fires: growth statistics stay 0 and VP never fuses"
        )
    useful = useful_window(resolved, n_positions)
    if useful is not None and resolved.window > useful:
        decoder = dataclasses.replace(decoder, window=useful)
        notes.append(
            f"decoder.window={resolved.window} is more than a forward can use on {model_name}'s images "
            f"({n_positions} positions): it decodes the same tokens as decoder.window={useful}, which this run uses "
            f"(env.json records window_used={useful}); use decoder.window=1..{useful}"
        )
    return decoder, notes


def spec_notes(config: RunConfig, spec: ResolvedDecoder, set_size: int, selected: int) -> list[str]:
    """Notes on settings that are legal but do not do what they say (clamped or inert), before any
    model loads. `selected`: prompts in the run's selection."""
    notes = []
    limit = config.data.limit
    if limit is not None and limit > set_size:
        notes.append(f"data.limit={limit} exceeds the {set_size} prompts of data={config.data.name}; all are used")
    samples = selected * config.samples_per_prompt
    if config.batch_size > 1 and samples and config.batch_size > samples:
        notes.append(
            f"batch_size={config.batch_size} but the run decodes at most {samples} sample{'s' if samples > 1 else ''}: "
            f"at most {samples} decode together (the run id keeps batch_size={config.batch_size})"
        )
    cpus = cpus_available()
    if config.threads is not None and config.threads > cpus:
        notes.append(
            f"threads={config.threads} exceeds the {cpus} CPUs this process may use: the run uses {cpus} (threads "
            "that wait for each other slow every matmul; see docs/PERFORMANCE.md, Threads)"
        )
    return notes
