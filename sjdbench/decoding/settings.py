"""The decoder-wide settings: what a decoder is besides its parts, written once.

`DecodeSettings` holds them with their defaults and range checks; the run config's decoder section
(sjdbench.config.schema.DecoderConfig) takes its defaults from here, a resolved decoder is one
(sjdbench.decoding.build), the loop and the probability history read the growth mask's observation
count from here, and the config's range checks ask it (sjdbench.config.ranges).

Torch-free: the config layer imports it while composing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sjdbench.errors import UserError, check_at_least

GROWTH_READINGS = ("increases", "observations")


@dataclass(frozen=True)
class DecodeSettings:
    """The window and the growth mask's reading, for every part of a decoder."""

    window: int = 16  # W: slots per forward; 1 = autoregressive
    growth_steps: int = 3  # N of the consecutive-growth mask (VP reads it; the statistics record it)
    growth_reading: str = "increases"  # increases: N strict increases | observations: N observations
    trace_positions: int = 8  # positions whose probability trajectories are recorded (not part of the run id)

    def __post_init__(self) -> None:
        check_at_least("decoder.window", self.window, 1)
        check_at_least("decoder.growth_steps", self.growth_steps, 1)
        if self.growth_reading not in GROWTH_READINGS:
            raise UserError(
                f"unknown decoder.growth_reading '{self.growth_reading}'; choose one of: {', '.join(GROWTH_READINGS)}"
            )
        check_at_least("decoder.trace_positions", self.trace_positions, 0)

    @property
    def growth_observations(self) -> int:
        """Observations of a position the growth mask needs: N + 1 for N strict increases, N for the
        other reading (N - 1 increases)."""
        return self.growth_steps + 1 if self.growth_reading == "increases" else self.growth_steps

    def setting_values(self) -> dict[str, Any]:
        """The settings by name (of a resolved decoder too, which is one: its parts left out)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(DecodeSettings)}
