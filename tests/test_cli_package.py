"""The command line's shape: every command registered in one place, no import circle in the package
(nor anywhere in sjdbench),
one console pair and one fail helper, a complete command list in usage hints, and nothing heavy
(torch) imported to show help or list choices."""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sjdbench.cli

CLI = Path(sjdbench.cli.__file__).parent


def _imports(path: Path) -> set[str]:
    """Modules of sjdbench.cli that a file imports, at any level (function-local imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "sjdbench.cli":
                found |= {f"sjdbench.cli.{alias.name}" for alias in node.names}
            elif node.module.startswith("sjdbench.cli."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("sjdbench.cli.")}
    return found


def test_no_import_circle_in_the_cli_package():
    graph = {f"sjdbench.cli.{p.stem}": _imports(p) for p in CLI.glob("*.py") if p.stem != "__init__"}
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for child in graph.get(module, ()):
            assert state.get(child) != "open", " -> ".join([*path, module, child])
            if child not in state:
                visit(child, [*path, module])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [])


def _package_graph() -> dict[str, set[str]]:
    """module -> the sjdbench modules it imports, at any level (function-local and type-only imports
    included: a circle of those is a circle of concepts, even where Python tolerates it)."""
    root = CLI.parent

    def module_of(path: Path) -> str:
        parts = path.relative_to(root.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {module_of(p) for p in root.rglob("*.py") if "weights" not in p.parts}

    def target(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        if "weights" in path.parts:
            continue
        me, found = module_of(path), set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sjdbench"):
                for alias in node.names:  # `from package import module` imports that module
                    found.add(target(f"{node.module}.{alias.name}") or "")
            elif isinstance(node, ast.Import):
                found |= {target(a.name) or "" for a in node.names if a.name.startswith("sjdbench")}
        graph[me] = {m for m in found if m and m != me and not me.startswith(m + ".")}
    return graph


def test_no_import_circle_anywhere_in_the_package():
    """A package's __init__ that re-exports its modules is not a dependency of those modules (they
    may not import their own package's face), so every arrow here is one concept using another."""
    graph = _package_graph()
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for child in sorted(graph.get(module, ())):
            assert state.get(child) != "open", " -> ".join([*path, module, child])
            if child not in state:
                visit(child, [*path, module])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


# The package's floors, lowest first: a module imports its own floor and the floors below, never one
# above (an arrow back up). Packages on one floor may use each other; the circle test above keeps
# that from becoming a loop. A new top-level module or package must be given a floor here.
LAYERS = (
    (
        "sjdbench.errors",
        "sjdbench.paths",
        "sjdbench.plugins",
        "sjdbench.adapter",
        "sjdbench.runkey",
        "sjdbench.machine",
        "sjdbench.statistics_table",
        "sjdbench.decoder_identity",
    ),
    ("sjdbench.data", "sjdbench.decoding", "sjdbench.models"),
    ("sjdbench.toyworld", "sjdbench.exactness", "sjdbench.results", "sjdbench.reference"),
    ("sjdbench.config",),
    ("sjdbench.eval",),
    ("sjdbench.run",),
    ("sjdbench.report",),
    ("sjdbench.api", "sjdbench.cli", "sjdbench", "sjdbench.__main__"),
)


def _floor(module: str) -> int:
    best, floor = "", -1
    for level, roots in enumerate(LAYERS):
        for root in roots:
            if (module == root or module.startswith(root + ".")) and len(root) > len(best):
                best, floor = root, level
    assert floor >= 0, f"{module} has no floor in LAYERS: give its package one"
    return floor


def test_imports_point_down_the_layers():
    """adapter/errors/paths -> data, decoding, models -> toyworld, results -> config -> eval -> run ->
    report -> cli, api: every import (function-local and type-only ones included) stays on its floor
    or goes down."""
    up = sorted(
        f"{me} ({_floor(me)}) imports {target} ({_floor(target)})"
        for me, targets in _package_graph().items()
        for target in targets
        if _floor(target) > _floor(me)
    )
    assert not up, "arrows back up:\n" + "\n".join(up)


def test_one_console_pair_and_one_fail_helper():
    """Only console.py makes consoles or prints errors itself; every command fails through it."""
    for path in CLI.glob("*.py"):
        if path.name == "console.py":
            continue
        text = path.read_text()
        assert "Console(stderr" not in text and "def fail" not in text and "def _fail" not in text, path
        assert "typer.secho" not in text and "[bold red]" not in text, path


USAGE_ERRORS = {  # a usage error of each command (an option without its value, an extra argument, ...)
    "run": ["--show-config=yes"],
    "sweep": ["--executor"],
    "eval": ["--results-dir"],
    "report": ["--out"],
    "list": ["decoder", "model"],
    "migrate": ["--results-dir"],
    "data": ["fetch"],
    "toy": ["train", "--steps"],
    "phrases": ["mine", "--min-count"],
}


def test_every_command_is_listed_and_the_usage_hint_names_it():
    from sjdbench.cli.commands import command_names

    assert command_names() == list(USAGE_ERRORS)
    for name, words in USAGE_ERRORS.items():
        result = subprocess.run(
            [sys.executable, "-m", "sjdbench", name, *words], capture_output=True, text=True, timeout=120
        )
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, (name, result.stderr)
        assert lines[0].startswith("error: ") and lines[0].endswith(f"(see `sjdbench {name} --help`)"), lines


def test_a_broken_command_module_breaks_the_cli_loudly(monkeypatch):
    """Commands are imported unconditionally: a module that fails to import is an error, never a
    command that silently disappears."""
    import sjdbench.cli.commands as commands

    monkeypatch.delattr(sjdbench.cli, "toy")
    monkeypatch.setitem(sys.modules, "sjdbench.cli.toy", None)  # `import sjdbench.cli.toy` now fails
    with pytest.raises(ImportError):
        importlib.reload(commands)
    monkeypatch.undo()
    importlib.reload(commands)
    assert "toy" in commands.command_names()


def test_toy_and_data_groups_answer():
    from sjdbench.cli import app

    for words in (["toy", "--help"], ["toy", "train", "--help"], ["data", "fetch", "--help"]):
        result = CliRunner().invoke(app, words)
        assert result.exit_code == 0 and "Usage" in result.output, words


@pytest.mark.parametrize(
    "code",
    [
        "import sjdbench",
        "from sjdbench.cli.commands import main; import sys; sys.argv = ['sjdbench', '--help']\n"
        "try: main()\nexcept SystemExit: pass",
        "from sjdbench.cli.commands import main; import sys; sys.argv = ['sjdbench', 'list', 'model']\n"
        "try: main()\nexcept SystemExit: pass",
        "from sjdbench.cli.commands import main; import sys; sys.argv = ['sjdbench', 'list', 'reference']\n"
        "try: main()\nexcept SystemExit: pass",
    ],
)
def test_help_and_listing_do_not_import_torch(code):
    probe = f"{code}\nimport sys\nprint('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False", result.stdout
