"""Errors meant for the user: the CLI prints their one-line message (with the fix) and exits 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input that the user can fix; the message says what was wrong and how to fix it."""


class NonFiniteLogits(UserError):
    """The model returned NaN or inf logits; nothing was sampled from them.

    Raised by the decoding loop with the segment position; the runner adds the prompt it was
    decoding. A model that overflows (fp16 activations, corrupt weights) must stop the run rather
    than let the sampler turn NaN probabilities into arbitrary tokens.
    """

    def __init__(self, position: int, prompt: str | None = None) -> None:
        self.position = position
        self.prompt = prompt
        where = f"prompt {prompt}, " if prompt else ""
        super().__init__(
            f"{where}segment position {position}: the model returned NaN/inf logits; nothing was sampled from them "
            "(check the weights and the model's dtype, e.g. fp16 overflow)"
        )


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run, with how far it got: every finished sample is already on disk."""

    def __init__(self, done: int, total: int) -> None:
        super().__init__(f"interrupted after {done}/{total} samples")
        self.done, self.total = done, total
