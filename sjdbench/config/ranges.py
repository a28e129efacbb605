"""Values that are legal but almost certainly a mistake: refused with the valid range, or clamped with a
`note:` line, one decision per case (docs/RESULTS.md, "Legal but almost certainly wrong"):

- refused before any model loads (`schema.check_config`, the one walk over every key; each part's
  ranges sit beside its knobs, in its config's `check`): e.g. a knob that is a probability set
  outside [0, 1] (GSD's p_thr), GSD's group_size 0;
- refused right after the model loads, before anything decodes (`fit_to_model`): growth steps no
  history can reach on this model (every iteration commits at least one token, so a position is
  observed at most once per iteration and at most as many times as the image has positions);
- a note after the model loads: growth steps a window of this size cannot reach (the topology says
  how long a position stays in its window: `Topology.longest_stay`);
- a note after the model loads (`schema.model_notes`, the parts' own): a rows topology whose
  row_start is not below the grid's width (no two rows would decode together);
- clamped with a note after the model loads (`fit_to_model`): a window larger than any forward can
  use on this model's images (the topology says how many slots that is: `Topology.useful_window`;
  the same tokens as at the largest useful window, without allocating caches for slots that are
  never fed; env.json records `window_used`);
- notes before any model loads (`spec_notes`, carried by the ResolvedRun): a data.limit beyond the
  prompt set (all prompts are used), a batch larger than the samples to decode, more threads than
  CPUs (clamped to them when the run starts).

The segment length (positions per image) is known only once the model is built for most models,
hence the two checks after loading; they run before the first decode, so a mistake still costs a
model load, never a decode.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from sjdbench.errors import UserError
from sjdbench.machine import cpus_available

if TYPE_CHECKING:
    from sjdbench.config.schema import RunConfig
    from sjdbench.decoding.build import ResolvedDecoder
    from sjdbench.decoding.loop import Decoder


def fit_to_model(
    resolved: ResolvedDecoder, model_name: str, decoder: Decoder, adapter: Any
) -> tuple[Decoder, list[str]]:
    """The built decoder (of the resolved one) fitted to the loaded model, and a note per change;
    UserError (one line, with the range) for growth steps the model's images cannot reach. Runs before
    anything decodes."""
    if resolved.is_ar:
        return decoder, []
    n_positions = int(adapter.layout.n_positions)
    needed = resolved.growth_observations
    if needed > n_positions:
        most = n_positions - (needed - resolved.growth_steps)
        raise UserError(
            f"decoder.growth_steps={resolved.growth_steps} can never be reached on {model_name}: an "
            f"image has {n_positions} positions, so a position is observed at most {n_positions} times (once per "
            f"iteration, and every iteration commits a token), and growth needs {needed} observations "
            f"({resolved.growth_reading}); use decoder.growth_steps=1..{max(most, 1)}"
        )
    notes = []
    stay = decoder.topology.longest_stay(resolved.window)
    if stay is not None and needed > stay:
        notes.append(
            f"at decoder.window={resolved.window} a position stays in the window for at most {stay} "
            f"iterations, so growth over decoder.growth_steps={resolved.growth_steps} ({resolved.growth_reading}: "
            f"{needed} observations) never fires: growth statistics stay 0 and VP never fuses"
        )
    try:
        useful = decoder.topology.useful_window(adapter.layout)
    except NotImplementedError:
        raise UserError(
            f"decoder.topology '{resolved.topology.name}' does not say how many slots a forward can use "
            "(Topology.useful_window): a topology of one's own must answer it"
        ) from None
    if resolved.window > useful:
        decoder = dataclasses.replace(decoder, window=useful)
        notes.append(
            f"decoder.window={resolved.window} is more than a forward can use on {model_name}'s images "
            f"({n_positions} positions): it decodes the same tokens as decoder.window={useful}, which this run uses "
            f"(env.json records window_used={useful}); use decoder.window=1..{useful}"
        )
    return decoder, notes


def spec_notes(config: RunConfig, decoder: ResolvedDecoder, set_size: int, selected: int) -> list[str]:
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
