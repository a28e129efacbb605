"""The `sjdbench` command line (commands.py holds the app and its console script, `main`)."""

from typing import Any


def __getattr__(name: str) -> Any:
    """`from sjdbench.cli import app, main` without importing the commands when the package loads."""
    if name in ("app", "main"):
        from sjdbench.cli import commands

        return getattr(commands, name)
    raise AttributeError(f"module 'sjdbench.cli' has no attribute '{name}'")
