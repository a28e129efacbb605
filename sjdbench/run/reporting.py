"""What a run tells its caller while it works, as callbacks with silent defaults. Its own module,
free of torch, so that the command line's progress can subclass it without loading the model stack."""

from __future__ import annotations

from typing import Optional


class Reporter:
    """What a run tells its caller while it works (the CLI prints it; the default says nothing)."""

    def begin(self, label: str) -> None:
        """A new run (or paired group of runs) starts reporting under this name."""

    def model_loading(self, name: str, device: str) -> None:
        pass

    def model_loaded(self, name: str, seconds: float) -> None:
        pass

    def sample_done(self, done: int, total: int, row: Optional[dict]) -> None:
        pass

    def note(self, text: str) -> None:
        """A line to show: a repair made to a damaged run, a setting fitted to the model."""

    def close(self) -> None:
        """The work is over (a reporter that prints on its own, e.g. a heartbeat, stops here)."""
