"""Every dependency pyproject.toml declares is used: imported by sjdbench, or needed by a named call
of ours into a library that loads it (checked by looking for that call in our code)."""

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]

# distribution name -> the module it provides (where the two differ)
MODULE = {
    "hydra-core": "hydra",
    "torch-fidelity": "torch_fidelity",
    "open_clip_torch": "open_clip",
    "pillow": "PIL",
    "huggingface_hub": "huggingface_hub",
    "beautifulsoup4": "bs4",
}

# dependencies we never import ourselves: (file of ours, the call that needs them, why)
INDIRECT = {
    "torch-fidelity": (
        "sjdbench/eval/evaluators/inception.py",
        "NoTrainInceptionV3",
        "torchmetrics' Inception feature extractor comes from torch-fidelity",
    ),
}


def declared() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = list(project["dependencies"]) + list(project["optional-dependencies"]["models"])
    return [re.split(r"[<>=!~\[ ;]", name, maxsplit=1)[0] for name in names]


def imported_modules() -> set[str]:
    pattern = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_][A-Za-z0-9_]*)", re.M)
    found: set[str] = set()
    for path in (ROOT / "sjdbench").rglob("*.py"):
        found |= set(pattern.findall(path.read_text(encoding="utf-8")))
    return found


def test_every_declared_dependency_is_used():
    imported = imported_modules()
    unused = []
    for name in declared():
        if name in INDIRECT:
            where, call, why = INDIRECT[name]
            assert call in (ROOT / where).read_text(encoding="utf-8"), (
                f"{name}: {why}, but {where} no longer calls {call}"
            )
            continue
        if MODULE.get(name, name) not in imported:
            unused.append(name)
    assert not unused, f"declared in pyproject.toml but never imported by sjdbench: {unused}"


def test_the_suite_cannot_reach_the_network():
    """conftest.py refuses connections beyond this machine, so a test that would download fails fast."""
    import socket

    import pytest

    with pytest.raises(OSError, match="tests run offline"):
        socket.create_connection(("192.0.2.1", 443), timeout=1)  # TEST-NET-1: never a real host


# the docs extra: each package is used by the documentation site (file, what in it needs the package)
DOCS_USE = {
    "mkdocs": ("Makefile", "$(BIN)/mkdocs build --strict"),
    "mkdocs-material": ("mkdocs.yml", "name: material"),
    "mkdocstrings": ("mkdocs.yml", "- mkdocstrings:"),
    "mkdocstrings-python": ("mkdocs.yml", "python:"),
    "pymdown-extensions": ("mkdocs.yml", "pymdownx."),
}


def test_every_docs_dependency_is_used_by_the_site():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    docs = [re.split(r"[<>=!~\[ ;]", name, maxsplit=1)[0] for name in extras["docs"]]
    assert sorted(docs) == sorted(DOCS_USE), "a docs dependency nothing uses, or a use without its dependency"
    for name, (where, needs) in DOCS_USE.items():
        assert needs in (ROOT / where).read_text(encoding="utf-8"), f"{name}: {where} no longer has {needs!r}"
    assert "sjdbench[docs]" in extras["dev"]  # `make install` brings the site's tools
