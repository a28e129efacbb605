"""The front door and the documentation site: the README fits on a screen and opens with the two
set-up commands, which stay true; every relative link of the README and of docs/ resolves (file and
anchor); every page is in the site's navigation; every measured-table fragment a page includes
exists; and `mkdocs build --strict` passes."""

import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAX_README_LINES = 250
COMMANDS = ["make install && .venv/bin/sjdbench run", "make test"]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
SNIPPET = re.compile(r'^--8<-- "([^"]+)"\s*$', re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def pages() -> list[Path]:
    """The site's pages: every Markdown file under docs/ but the generated fragments."""
    return sorted(p for p in DOCS.rglob("*.md") if "generated" not in p.relative_to(DOCS).parts)


def slug(heading: str) -> str:
    """A heading's anchor as Python-Markdown's toc extension makes it (mkdocs' default)."""
    text = re.sub(r"`|\*\*|\*", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    for include in SNIPPET.findall(text):  # headings of included fragments are the page's too
        text += "\n" + (DOCS / include).read_text(encoding="utf-8")
    return {slug(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Relative links of a Markdown file whose target file or anchor does not exist."""
    problems = []
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        file, _, anchor = target.partition("#")
        destination = (path.parent / file).resolve() if file else path
        if not destination.exists():
            problems.append(f"{path.relative_to(root)}: {target} (no such file)")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            problems.append(f"{path.relative_to(root)}: {target} (no such heading)")
    return problems


def test_the_readme_fits_on_a_screen_and_opens_with_the_two_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; keep it under {MAX_README_LINES}"
    assert lines[0] == "# sjdbench" and lines[1] == "" and lines[2] == "```bash"
    commands = [line.split("#")[0].strip() for line in lines[3:5]]
    assert commands == COMMANDS and lines[5] == "```"


def test_the_two_commands_stay_true():
    """`make install` installs the package into .venv (which provides the `sjdbench` script) and
    `make test` exists: the first two lines of the README do what they say."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^VENV \?= \.venv$", makefile, re.M) and re.search(r"^BIN := \$\(VENV\)/bin$", makefile, re.M)
    assert re.search(r"^install: .*\n\t\$\(BIN\)/pip install --quiet -e \"\.\[dev\]\"$", makefile, re.M)
    assert re.search(r"^test: ", makefile, re.M)
    project = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'sjdbench = "sjdbench.cli.commands:main"' in project


def test_every_relative_link_of_the_readme_resolves():
    assert broken_links(README) == []


def test_every_relative_link_of_the_docs_resolves():
    assert [problem for page in pages() for problem in broken_links(page)] == []


def test_the_link_checker_finds_a_broken_file_and_a_broken_anchor(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A title\n\n[ok](#a-title) [file](nope.md) [anchor](#nope) `[code](nope.md)`\n")
    assert broken_links(page, tmp_path) == ["page.md: nope.md (no such file)", "page.md: #nope (no such heading)"]


def test_every_page_is_in_the_navigation_and_every_nav_entry_is_a_page():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def entries(nav) -> list[str]:
        out = []
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            out += entries(value) if isinstance(value, list) else [value]
        return out

    listed = entries(config["nav"])
    assert sorted(listed) == sorted(str(p.relative_to(DOCS)) for p in pages())
    assert len(listed) == len(set(listed))


def test_every_included_fragment_exists_and_every_fragment_is_included():
    included = {include for page in pages() for include in SNIPPET.findall(page.read_text(encoding="utf-8"))}
    assert included and all((DOCS / path).is_file() for path in included)
    fragments = {str(p.relative_to(DOCS)) for p in (DOCS / "generated").glob("*.md")}
    assert fragments == included, "a fragment no page includes, or an include without a fragment"
    for path in fragments:  # each says how it was made: the command, the machine, the date
        assert re.search(r"^Measured with `[^`]+` on .+, \d{4}-\d{2}-\d{2}", (DOCS / path).read_text(), re.M), path


def test_the_readme_names_every_preset_and_every_model():
    text = README.read_text(encoding="utf-8")
    presets = sorted(p.stem for p in (ROOT / "conf" / "decoder").glob("*.yaml"))
    models = sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml") if p.stem != "debug")
    assert [p for p in presets if f"`{p}`" not in text] == []
    assert [m for m in models if f"`{m}`" not in text] == []


@pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import mkdocs, material, mkdocstrings"], capture_output=True).returncode,
    reason="the docs extra is not installed (pip install -e '.[docs]')",
)
def test_the_site_builds_strictly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "API.html").read_text(encoding="utf-8").count("build_decoder") > 1
