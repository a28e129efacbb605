"""Results store: `results/runs/<run_id>/{config.yaml, env.json, samples*.jsonl, images/, summary.json}`.

Nothing is ever lost or glued together:
- each sample row is appended with O_APPEND writes and fsync; a torn last line left by a kill is
  truncated (it was never a finished sample) before the next writer appends, and ignored on read;
- images and JSON files are written to a temp file and renamed;
- one process at a time writes a run's sample file: a second `run` of the same run id (same
  shard) is refused with one line while the first holds the lock (`fcntl.flock`, released by the
  kernel when the holder dies, so a killed run never leaves a stale lock);
- `summary.json` is recomputed from every row present, under its own lock, so concurrent shards
  never overwrite a newer summary with an older one;
- a store written by a newer sjdbench (`schema` in store.json, env.json or summary.json) is
  refused rather than half-understood;
- write failures (disk full, read-only, a file where a folder should be) become one-line errors
  that say what to do; the rows already written stay valid.

Shards append to their own `samples.<i>of<n>.jsonl`; readers merge all sample files by
(prompt_id, sample), first write wins.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import platform
from pathlib import Path
from typing import Callable, Iterator, TypeGuard

import numpy as np

from sjdbench.errors import UserError
from sjdbench.results.files import FOLDER_NOT_FILE, describe_bad_lines, parse_lines, read_json, read_rows
from sjdbench.results.root import WORD

log = logging.getLogger(__name__)

MARKER = "store.json"  # at the results root: {"schema": n}, the newest schema that wrote here
SCHEMA = 2  # of the store, run ids, env.json and summary.json; 1 = ids hashed the whole decoder config


class StoreError(UserError):
    """A write to the results store failed; the message names the file and the fix."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message  # what failed, without the fix (callers with another fix reuse it)


class RunLocked(UserError):
    """Another process holds a run's write lock (a concurrent `run` or sweep of the same run)."""


def describe_os_error(error: OSError, path: Path) -> str:
    """One line: what failed, where, and what to do about it."""
    code = error.errno
    reason = error.strerror or type(error).__name__
    if code in (errno.ENOSPC, errno.EDQUOT):
        fix = (
            "free some space (or set results_dir elsewhere), then re-run the same command to resume; "
            "finished samples are saved"
        )
    elif code == errno.EFBIG:
        fix = (
            "raise the file size limit (ulimit -f), then re-run the same command to resume; finished samples are saved"
        )
    elif code in (errno.EROFS, errno.EACCES, errno.EPERM):
        fix = "choose a writable results_dir (results_dir=DIR or $SJDBENCH_RESULTS)"
    elif code in (errno.ENOTDIR, errno.EEXIST):
        fix = "a file is in the way of a results folder; choose another results_dir"
    else:
        fix = "check the results_dir, then re-run the same command to resume"
    return f"cannot write {path}: {reason}; {fix}"


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    try:
        yield
    except OSError as error:
        reason = f"cannot write {path}: {error.strerror or type(error).__name__}"
        raise StoreError(describe_os_error(error, path), reason) from None


def _write_all(fd: int, data: bytes) -> None:
    """os.write may write less than asked (signals, nearly full disks): loop until done."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _write_synced(path: Path, flags: int, data: bytes) -> None:
    """Open `path` for writing with `flags`, write all of `data` and fsync it before closing."""
    fd = os.open(path, os.O_WRONLY | flags, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with _writing(path):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_synced(tmp, os.O_CREAT | os.O_TRUNC, data)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def append_jsonl(path: Path, row: dict) -> None:
    """One row = one line, written with O_APPEND and fsync'd before the call returns."""
    line = (json.dumps(row, separators=(",", ":")) + "\n").encode("utf-8")
    with _writing(path):
        _write_synced(path, os.O_APPEND | os.O_CREAT, line)


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a JSON-lines file (each an object with a prompt_id): a torn last line (an
    interrupted or ongoing write) is skipped silently; other lines that are not rows are skipped with
    a log line (the store's readers report them as damage: results.files)."""
    read = read_rows(path)
    if read.bad:
        log.warning("%s: %s; skipped", path, describe_bad_lines(Path(path).name, read.bad))
    return read.rows


def truncate_torn_tail(path: Path) -> int:
    """Cut a last line that has no newline (a write killed half-way); returns the bytes removed (the
    run's writer says so in its `repairs`).

    Such a line never held a finished sample (a row counts once its newline is on disk), so
    removing it loses nothing, and the next append starts on a line of its own.
    """
    if not path.exists():
        return 0
    with _writing(path), open(path, "r+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return 0
        keep, chunk = 0, 1 << 16
        end = size
        while end > 0:  # scan backwards for the last newline
            start = max(0, end - chunk)
            handle.seek(start)
            block = handle.read(end - start)
            cut = block.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                break
            end = start
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    return size - keep


def save_png(path: Path, image: np.ndarray) -> None:
    """PNG only: JPEG artefacts shift FID."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    atomic_write_bytes(path, buffer.getvalue())


def _newer_schema(path: Path) -> int | None:
    """The schema recorded in a JSON file if it is newer than ours, else None (damage is not newer)."""
    doc = read_json(path).doc
    schema = doc.get("schema") if doc else None
    return schema if isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA else None


def newer_text(what: str, schema: int) -> str:
    return (
        f"{what} was written by a newer sjdbench (schema {schema}; this one reads up to {SCHEMA}); "
        "upgrade sjdbench (pip install -U sjdbench) or choose another results_dir"
    )


def refuse_newer(path: Path, what: str) -> None:
    schema = _newer_schema(path)
    if schema is not None:
        raise UserError(newer_text(what, schema))


def _writable(folder: Path) -> bool:
    """access(2) also reports read-only file systems, for root too."""
    return os.access(folder, os.W_OK | os.X_OK)


def check_folder(folder: Path, what: str, fix: str) -> None:
    """Before anything is written: `folder` is, or can be created as, a writable folder; one line
    naming `what` (e.g. "results_dir") and `fix` otherwise. Nothing is created here."""
    folder = Path(folder)
    probe = folder
    while not probe.exists() and not probe.is_symlink():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        where = "is a file" if probe == folder else f"is under {probe}, which is a file"
        raise UserError(f"{what} {folder} {where}, not a folder; {fix}")
    if not probe.exists():
        raise UserError(f"{what} {folder} is under {probe}, which is a broken link; {fix}")
    if not _writable(probe):
        raise UserError(f"{what} {folder} is not writable ({probe} is read-only for this user); {fix}")


def check_results_root(root: Path) -> None:
    """Before any model loads: the results root can be created and written, and was not written
    by a newer sjdbench. Nothing is created here."""
    root = Path(root)
    check_folder(root, "results_dir", "choose a writable results_dir (results_dir=DIR or $SJDBENCH_RESULTS)")
    check_marker(root)


def check_marker(root: Path) -> None:
    """The store's schema marker: refused when written by a newer sjdbench or damaged (it holds only
    the schema, so deleting it is the fix; the next run writes it again). A results path that is no
    folder is named as such first (its "store.json" is no file to delete)."""
    check_is_folder(root)
    marker = Path(root) / MARKER
    read = read_json(marker, {"schema": (int,)})
    if read.problem:
        raise UserError(
            f"results_dir {root}: {MARKER} {read.problem}; it records only the store's schema: delete {marker} "
            "(the next `sjdbench run` writes it again)"
        )
    refuse_newer(marker, f"results_dir {root}")


def check_is_folder(root: Path) -> None:
    """A results path that exists must be a folder: a file or a device (`/dev/null`) is named as such."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        kind = "a file" if root.is_file() else "not a folder (a device or another special file)"
        raise UserError(f"results_dir {root} is {kind}; name the store, the folder that holds runs/ ({WORD}=DIR)")


READ_BY_READERS = ("summary.json", "env.json", "config.yaml", "scores")  # besides samples*.jsonl


def check_readable(root: Path, files: bool = True) -> None:
    """Before a command reads a store: its folders (the root, runs/ and each run's), and with
    `files` the files of its runs that readers open (report, eval and the Python API ask for those;
    run and sweep, which read the store only to pair what they wrote, only for the folders, which
    they could not even list), may be read by this user. Unreadable is not damage (re-running would
    not help), so the first one is named with the fix for permissions."""
    root = Path(root)
    check_is_folder(root)

    def readable(path: Path) -> bool:
        if os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
            return True
        raise UserError(
            f"cannot read {path}: permission denied for this user; ask its owner for read access (e.g. "
            f"chmod -R a+rX {root}), or read a copy of the store ({WORD}=DIR)"
        )

    runs = root / "runs"
    if not root.exists() or not readable(root) or not runs.exists() or not readable(runs):
        return
    for run_dir in sorted(runs.iterdir()):
        if run_dir.is_dir() and readable(run_dir) and files:
            for path in [*(run_dir / n for n in READ_BY_READERS), *run_dir.glob("samples*.jsonl")]:
                if path.exists():
                    readable(path)


def mark_root(root: Path) -> None:
    """Record (once) which schema writes this store; newer readers keep it, older ones refuse."""
    marker = Path(root) / MARKER
    if not marker.exists():
        atomic_write_json(marker, {"schema": SCHEMA})


@contextlib.contextmanager
def _flock(path: Path, blocking: bool) -> Iterator[bool]:
    """An exclusive advisory lock on `path`; yields False (without the lock) when another process
    holds it and blocking is False."""
    import fcntl

    with _writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {platform.node()}".encode())
        yield True
    finally:
        os.close(fd)  # closing the descriptor releases the lock


USABLE = ("complete", "finished")  # the statuses of runs that are scored, reported and paired


def holds_final_samples(summary: dict | None) -> TypeGuard[dict]:
    """Whether a run can be scored and reported: its whole prompt set is stored (`complete`), or every
    sample the command that last wrote it asked for (`finished`: a `data.limit` run). An interrupted
    run is neither until its command is re-run."""
    return (
        summary is not None
        and bool(summary.get("n_samples"))
        and bool(summary.get("complete") or summary.get("finished"))
    )


def run_status(summary: dict | None, env: dict | None) -> str:
    """complete: the whole prompt set is stored; finished: every sample the last command asked for
    (`data.limit`, `data.shard`) is stored, used over the prompts it holds; incomplete: interrupted
    or not yet run; legacy: written by an older sjdbench (`sjdbench migrate` re-keys it)."""
    if env and "schema" not in env:
        return "legacy"
    if not holds_final_samples(summary):
        return "incomplete"
    if summary.get("complete") and summary.get("n_samples", 0) >= summary.get("n_wanted", 0):
        return "complete"
    return "finished" if summary.get("finished") else "incomplete"


class RunStore:
    def __init__(self, root: Path, run_id: str, shard: str | None = None) -> None:
        self.repairs: list[str] = []  # what `writer` found damaged and set right, one line each
        self.root = Path(root)
        self.run_id = run_id
        self.dir = self.root / "runs" / run_id
        self.images = self.dir / "images"
        suffix = "" if not shard else "." + shard.replace("/", "of")
        self.samples_path = self.dir / f"samples{suffix}.jsonl"

    @property
    def summary_path(self) -> Path:
        return self.dir / "summary.json"

    @property
    def lock_path(self) -> Path:
        return self.dir / f".{self.samples_path.name}.lock"

    def check_schema(self) -> None:
        """Refuse a run directory written by a newer sjdbench, or one where a folder stands in the way
        of a file the run writes (or a file in the way of its images folder): the run could not
        write it, and no command of ours deletes what it did not make."""
        for name in ("env.json", "summary.json"):
            refuse_newer(self.dir / name, f"run {self.run_id}")
        for path in (self.dir / "config.yaml", self.dir / "env.json", self.summary_path, self.samples_path):
            if path.is_dir():
                raise StoreError(f"run {self.run_id}: {path.name} {FOLDER_NOT_FILE}: {path}")
        if self.images.exists() and not self.images.is_dir():
            raise StoreError(
                f"run {self.run_id}: images is a file, not a folder (move it out of the way; the next run makes the "
                f"folder): {self.images}"
            )

    @contextlib.contextmanager
    def writer(self) -> Iterator[RunStore]:
        """Hold the run's write lock; refuse with one line (RunLocked) if another process holds it.
        On entry a torn last line (from a killed writer) is truncated, so appends never glue onto it,
        and lines that are no sample row are set aside (`repairs` says so): a run is the fix the
        readers name for a damaged run."""
        self.check_schema()
        with _flock(self.lock_path, blocking=False) as acquired:
            if not acquired:
                raise RunLocked(self.locked_text())
            torn = truncate_torn_tail(self.samples_path)
            self.repairs = [
                f"run {self.run_id}: removed the torn last line of {self.samples_path.name} ({torn} bytes) that an "
                "interrupted write left (never a finished sample)"
            ] * bool(torn)
            self.repairs += self._set_aside_bad_lines()
            self.repairs += [
                f"run {self.run_id}: {name} {problem}; it is rewritten from this run's config"
                for name, problem in self.metadata_problems().items()
                if problem != "is missing" or self.samples_path.exists()
            ]
            summary = read_json(self.summary_path)
            if summary.problem:
                self.repairs.append(f"run {self.run_id}: summary.json {summary.problem}; rebuilt from its sample rows")
            yield self

    def locked_text(self) -> str:
        holder = ""
        with contextlib.suppress(OSError):
            holder = self.lock_path.read_text().strip()
        return (
            f"run {self.run_id} is being written by another sjdbench process{f' ({holder})' if holder else ''}; "
            "wait for it to finish (re-running then resumes anything left), or give this run another results_dir"
        )

    def being_written(self) -> bool:
        """Whether another process holds this run's write lock now (probed without waiting)."""
        if not self.lock_path.exists():
            return False
        try:
            with _flock(self.lock_path, blocking=False) as acquired:
                return not acquired
        except StoreError:  # a read-only store: nobody writes it
            return False

    def metadata_problems(self) -> dict[str, str]:
        """config.yaml and env.json when missing or damaged (name -> what is wrong); `prepare`
        rewrites both, so a run with them damaged loads its model even when no sample is missing."""
        from sjdbench.results.files import config_problem, read_yaml

        out = {}
        config = read_yaml(self.dir / "config.yaml")
        problem = config.problem or (config_problem(config.doc) if config.doc else None)
        if problem or config.missing:
            out["config.yaml"] = problem or "is missing"
        env = read_json(self.dir / "env.json")
        if env.problem or env.missing or "schema" not in (env.doc or {}):
            out["env.json"] = env.problem or ("is missing" if env.missing else "records no schema")
        return out

    def needs_metadata(self) -> bool:
        """Whether config.yaml or env.json must be rewritten (damaged, or missing beside samples)."""
        return any(p != "is missing" or self.samples_path.exists() for p in self.metadata_problems().values())

    def _set_aside_bad_lines(self) -> list[str]:
        """Move lines that are no sample row to `<samples file>.damaged` (kept, never deleted) and
        rewrite the sample file without them; one line per file saying so. A sample a damaged line
        held is decoded again, as any missing one."""
        path = self.samples_path
        if not path.exists():
            return []
        with _writing(path):
            data = path.read_bytes()
        read = parse_lines(data)
        if not read.bad:
            return []
        bad = {number for number, _ in read.bad}
        lines = data.split(b"\n")[:-1]  # the torn tail is gone: the data ends with a newline
        kept = [line for n, line in enumerate(lines, 1) if n not in bad and line.strip()]
        moved = [line for n, line in enumerate(lines, 1) if n in bad]
        aside = path.with_name(path.name + ".damaged")
        with _writing(aside):
            _write_synced(aside, os.O_APPEND | os.O_CREAT, b"".join(line + b"\n" for line in moved))
        atomic_write_bytes(path, b"".join(line + b"\n" for line in kept))
        return [
            f"run {self.run_id}: {describe_bad_lines(path.name, read.bad)}; set aside in {aside.name} "
            "(any sample such a line held is decoded again)"
        ]

    def prepare(self, config_yaml: str, env: dict) -> None:
        with _writing(self.images):
            self.images.mkdir(parents=True, exist_ok=True)
        mark_root(self.root)
        atomic_write_text(self.dir / "config.yaml", config_yaml)
        atomic_write_json(self.dir / "env.json", env)

    def sample_files(self) -> list[Path]:
        return sorted(self.dir.glob("samples*.jsonl"))

    def rows(self) -> list[dict]:
        """All sample rows of the run (every shard), one per (prompt_id, sample), first write wins;
        lines that are no sample row are skipped (results.runs reports them as damage)."""
        seen, merged = set(), []
        for path in self.sample_files():
            for row in read_rows(path).rows:
                key = (row["prompt_id"], row.get("sample", 0))
                if key not in seen:
                    seen.add(key)
                    merged.append(row)
        return sorted(merged, key=lambda r: (r["prompt_id"], r.get("sample", 0)))

    def done_keys(self) -> set[tuple[int, int]]:
        return {(r["prompt_id"], r.get("sample", 0)) for r in self.rows()}

    def append(self, row: dict) -> None:
        append_jsonl(self.samples_path, row)

    def summary(self) -> dict | None:
        """summary.json, or None when it is missing or damaged (results.files says how)."""
        return read_json(self.summary_path).doc

    def write_summary(self, summarise: Callable[[list[dict]], dict]) -> dict:
        """Recompute the summary from every row present and write it, under the summary lock, so the
        last writer always saw the most rows (shards finishing at once cannot regress it)."""
        with _flock(self.dir / ".summary.lock", blocking=True):
            summary = summarise(self.rows())
            if summary.get("n_samples"):
                atomic_write_json(self.summary_path, summary)
        return summary
