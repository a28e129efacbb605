import os
import socket

import pytest
import torch

torch.set_num_threads(1)  # tiny models: one thread is fastest and avoids oversubscription
# Tests never touch the network: the hub libraries are offline (subprocesses inherit this), and any
# connection this process tries beyond this machine fails at once instead of waiting on a timeout.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _this_machine() -> set[str]:
    names = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}
    try:
        names |= {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        pass
    return names


LOCAL = _this_machine()
_connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex


def _checked(address) -> None:
    if isinstance(address, tuple) and str(address[0]) not in LOCAL:
        raise OSError(f"tests run offline: refused a connection to {address[0]}:{address[1]}")


def _offline_connect(self, address):
    _checked(address)
    return _connect(self, address)


def _offline_connect_ex(self, address):
    _checked(address)
    return _connect_ex(self, address)


socket.socket.connect = _offline_connect  # local services (Ray, submitit's local jobs) still connect
socket.socket.connect_ex = _offline_connect_ex


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Derived artefacts (LANTERN tables) go to a per-session temp dir, never the user's cache."""
    monkeypatch.setenv("SJDBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "sjdbench-cache"))
    monkeypatch.delenv("SJDBENCH_RESULTS", raising=False)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
