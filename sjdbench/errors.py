"""Errors meant for the user: the CLI prints their one-line message (with the fix) and exits 2."""

from __future__ import annotations

import re
from typing import Iterable


class UserError(Exception):
    """Bad input that the user can fix; the message says what was wrong and how to fix it."""


def check_at_least(name: str, value: float | None, least: float, meaning: str = "") -> None:
    """The one wording of a count or weight below its meaningful range, for every part and root key:
    "batch_size must be >= 1 (samples decoded in lockstep), got 0". None (a knob left null) passes."""
    if value is not None and value < least:
        note = f" ({meaning})" if meaning else ""
        raise UserError(f"{name} must be >= {least}{note}, got {value}")


def check_choice(name: str, value: str, choices: Iterable[str]) -> None:
    """The one wording of a value outside its named choices: "reading 'x' is unknown; choose one of: a, b"."""
    choices = tuple(choices)
    if value not in choices:
        raise UserError(f"{name} '{value}' is unknown; choose one of: {', '.join(choices)}")


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


KIND_WORDS = {  # a type as OmegaConf names it -> how a message says it
    "Integer": "an integer",
    "int": "an integer",
    "Float": "a number",
    "float": "a number",
    "bool": "true or false",
    "Boolean": "true or false",
    "str": "text",
    "String": "text",
}
_CONVERT = re.compile(r"Value '(?P<value>.*)' of type '\w+' could not be converted to (?P<kind>\w+)")
_BOOL = re.compile(r"Value '(?P<value>.*)' is not a valid bool")
_NONE = re.compile(r"Incompatible value '(?P<value>None)' for field of type '(?P<kind>\w+)'")
_TEXT = re.compile(r"Cannot convert '\w+' to string: '(?P<value>.*)'")


def wrong_type(key: str, value: object, kind: str) -> str:
    """The one wording of a value of the wrong type, for the command line and the Python API alike:
    "decoder.window must be an integer, got 'abc'"."""
    shown = "null" if value is None else str(value)
    return f"{key} must be {KIND_WORDS.get(kind, kind)}, got '{shown}'"


def type_error_text(key: str, text: str) -> str | None:
    """`wrong_type`'s line from the text of a typing error of the config library (OmegaConf), which
    names Java-like types ("could not be converted to Integer"); None when the text is not one."""
    if re.search(r"field '[^']*' is not Optional", text):
        return f"{key} cannot be null; give it a value"
    for pattern, kind in ((_CONVERT, None), (_BOOL, "bool"), (_NONE, None), (_TEXT, "str")):
        match = pattern.search(text)
        if match:
            value = match.group("value")
            return wrong_type(key, None if value == "None" else value, kind or match.group("kind"))
    return None
