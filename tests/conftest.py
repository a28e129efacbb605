import os

import pytest
import torch

torch.set_num_threads(1)  # tiny models: one thread is fastest and avoids oversubscription
os.environ.setdefault("HF_HUB_OFFLINE", "1")


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
