"""The machine a sample was timed on: CPU threads, load, CPU and GPU model.

A latency is only worth comparing when the machine was not oversubscribed while it was measured.
Each sample row records a `machine` dict (see `snapshot`); a sample counts as *busy* when the
1-minute load average (taken before and after the decode, the larger of the two) exceeded the CPUs
this process may run on. The load average is system-wide and includes this process's own threads,
so one torch thread on two free cores reads about 1, and "busy" means that other work and ours
together wanted more cores than there were.

The default CPU thread count is 1 (`threads: null` in the config). Measured on a 2-core machine,
toy model, side by side in one process (docs/PERFORMANCE.md, "Threads"): two
threads win little on a quiet machine and collapse when any other process competes for the cores,
because OpenMP threads of one matmul wait for each other; one thread stays within ~1.5x.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from pathlib import Path

DEFAULT_CPU_THREADS = 1


def cpus_available() -> int:
    """CPUs this process may run on (its affinity mask; containers and taskset narrow it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS has no affinity mask
        return os.cpu_count() or 1


def load_1m() -> float | None:
    """The system's 1-minute load average, or None where the OS has none (Windows)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


@functools.cache
def cpu_model() -> str:
    """The CPU's marketing name ("AMD EPYC 9B14"), falling back to the architecture."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def gpu_model(device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    import torch

    return torch.cuda.get_device_name(torch.device(device)) if torch.cuda.is_available() else None


def choose_threads(threads: int | None, device: str) -> int:
    """The torch CPU thread count for a run: the config's (at most the CPUs this process may use:
    more threads only wait for each other, and a thousand of them make a sample take a minute), else
    $OMP_NUM_THREADS, else 1 on CPU.

    On a GPU the host threads only feed kernels, so torch's own default is kept there.
    """
    import torch

    if threads is not None:
        return max(1, min(threads, cpus_available()))
    if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        return int(os.environ["OMP_NUM_THREADS"])
    if device.startswith("cpu"):
        return DEFAULT_CPU_THREADS
    return torch.get_num_threads()


def apply_threads(threads: int | None, device: str) -> int:
    import torch

    chosen = choose_threads(threads, device)
    if torch.get_num_threads() != chosen:
        torch.set_num_threads(chosen)
    return chosen


def is_busy(load: float | None, cpus: int) -> bool:
    """More runnable work than cores: every thread, ours included, waited for a core."""
    return load is not None and load > cpus


def snapshot(device: str, load_before: float | None = None) -> dict:
    """The `machine` dict of a sample row (load: the larger of before and after the decode)."""
    import torch

    cpus = cpus_available()
    now = load_1m()
    loads = [x for x in (load_before, now) if x is not None]
    load = max(loads) if loads else None
    return {
        "load_1m": load,
        "cpus": cpus,
        "torch_threads": torch.get_num_threads(),
        "busy": is_busy(load, cpus),
        "cpu": cpu_model(),
        "gpu": gpu_model(device),
        "host": platform.node(),
    }


def git_commit() -> str | None:
    """The commit of the sjdbench checkout in use (None outside a git checkout)."""
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device: str, dtype: str = "float32") -> dict:
    """What env.json records about the software and the machine a run decodes on."""
    import torch

    info = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "device": device,
        "dtype": dtype,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "cpus_available": cpus_available(),
        "cpu": cpu_model(),
        "git_commit": git_commit(),
    }
    gpu = gpu_model(device)
    if gpu:
        info["gpu"] = gpu
    try:
        from importlib.metadata import version

        info["sjdbench"] = version("sjdbench")
    except Exception:  # noqa: BLE001 - metadata is optional (source checkout)
        info["sjdbench"] = None
    return info
