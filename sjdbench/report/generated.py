"""Measured tables as Markdown fragments for the documentation, written by the scripts that measure
them (`--markdown FILE`; the pages under docs/ include the fragments from docs/generated/).

A table that changes with each version is never typed into a page: re-running its script refreshes
the fragment, and the fragment says what made it (the command), where (the machine), when, and with
which code, so a reader can tell a stale number from a current one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TextIO

MARKER = "<!-- generated: re-run the command below to refresh this file; edits by hand are lost -->"


def describe_machine(device: str = "cpu") -> str:
    """e.g. "AMD EPYC 9R14, 2 CPUs, Linux x86_64, torch 2.5.1" (+ the GPU on a CUDA device)."""
    from sjdbench.machine import cpu_model, cpus_available, gpu_model

    parts = [cpu_model(), f"{cpus_available()} CPUs", f"{platform.system()} {platform.machine()}"]
    if device.startswith("cuda"):
        parts.insert(0, str(gpu_model(device)))
    try:
        parts.append(f"torch {version('torch')}")
    except PackageNotFoundError:  # torch not installed: the table needed none
        pass
    return ", ".join(parts)


def describe_code() -> str:
    """e.g. "sjdbench 0.1.0, commit 164426837f" (no commit outside a git checkout)."""
    from sjdbench.machine import git_commit

    try:
        release = version("sjdbench")
    except PackageNotFoundError:  # a source checkout that was never installed
        release = "(not installed)"
    commit = git_commit()
    return f"sjdbench {release}" + (f", commit {commit[:10]}" if commit else "")


def fragment(body: str, command: str, machine: str, when: str, code: str) -> str:
    """The fragment's text: the marker, one line of provenance, then the body."""
    return f"{MARKER}\n\nMeasured with `{command}` on {machine}, {when} ({code}).\n\n{body.strip()}\n"


def text_block(text: str) -> str:
    """Printed output as a Markdown code block (monospaced columns stay aligned)."""
    return "```text\n" + text.strip("\n") + "\n```"


def write_fragment(
    path: str | Path,
    body: str,
    command: str,
    machine: str | None = None,
    when: str | None = None,
    code: str | None = None,
) -> Path:
    """Write a fragment atomically (a reader never sees half a table); the machine, date and code
    default to this machine, today and this checkout."""
    from sjdbench.results.store import atomic_write_text

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = fragment(
        body,
        command,
        machine or describe_machine(),
        when or dt.date.today().isoformat(),
        code or describe_code(),
    )
    atomic_write_text(path, text)
    return path


def script_command(argv: list[str] | None = None) -> str:
    """How this script was run, as a reader would re-run it from the repository root:
    `python <script> <args>` (the script's path relative to the working directory when inside it)."""
    argv = list(sys.argv if argv is None else argv)
    if argv:
        script = Path(argv[0])
        with contextlib.suppress(ValueError):
            script = script.resolve().relative_to(Path.cwd().resolve())
        argv[0] = script.as_posix()
    return " ".join(["python", *argv])


def printed_markdown(text: str) -> str:
    """A script's printed Markdown (tables, `##` headings) with its `# ` comment lines as bullet
    points, each run of lines of one kind set apart by a blank line."""
    out: list[str] = []
    kind: str | None = None
    for line in text.strip("\n").splitlines():
        this: str | None
        if line.startswith("# "):
            line, this = "- " + line[2:], "note"
        else:
            this = "table" if line.startswith("|") else "text" if line.strip() else kind
        if out and this != kind and out[-1].strip():
            out.append("")
        out.append(line)
        kind = this
    return "\n".join(out)


class _Tee(io.TextIOBase):
    """stdout that also keeps what was written."""

    def __init__(self, target: TextIO) -> None:
        self.target, self.kept = target, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.target.write(text)

    def flush(self) -> None:
        self.target.flush()


def tee_stdout() -> io.StringIO:
    """From now on everything printed still goes to stdout and is also kept in the returned buffer
    (for a script's `--markdown FILE`: the table it prints is the table it writes)."""
    tee = _Tee(sys.stdout)
    sys.stdout = tee
    return tee.kept
