"""Errors meant for the user: the CLI prints their one-line message (with the fix) and exits 2."""


class UserError(Exception):
    """Bad input that the user can fix; the message says what was wrong and how to fix it."""
