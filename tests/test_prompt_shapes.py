"""Prompt files of odd shapes: each either reads as the prompts it holds (a byte-order mark, CRLF line
ends, blank lines, trailing empty fields) or ends in one line naming the file, the line and the
fix, exit 2, before any model loads and with nothing written. Files are read directly and through
`sjdbench run` (the model is forbidden to load)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sjdbench.cli import app
from sjdbench.data.prompts import MAX_PROMPT_CHARS, read_prompt_file
from sjdbench.errors import UserError

runner = CliRunner()


@pytest.fixture
def no_model_loads(monkeypatch):
    from sjdbench.models.registry import ResolvedModel

    def forbidden(*args, **kwargs):
        raise AssertionError("a model was loaded before the prompt file was checked")

    monkeypatch.setattr(ResolvedModel, "build", forbidden)


READ = {  # file name, bytes -> the prompts read
    "bom.txt": (b"\xef\xbb\xbfa red circle\nblue square\n", ["a red circle", "blue square"]),
    "crlf.txt": (b"a red circle\r\nblue square\r\n", ["a red circle", "blue square"]),
    "blank_lines.txt": (b"\n\na red circle\n   \nblue square\n\n", ["a red circle", "blue square"]),
    "no_final_newline.txt": (b"a red circle\nblue square", ["a red circle", "blue square"]),
    "crlf.tsv": (b"Prompt\tCategory\r\na red circle\tx\r\nblue\ty\r\n", ["a red circle", "blue"]),
    "bom.tsv": (b"\xef\xbb\xbfprompt\tnote\na\tb\n", ["a"]),
    "trailing_fields_left_out.tsv": (b"prompt\tnote\textra\na\n b \tx\n", ["a", "b"]),
    "quoted.csv": (b'prompt,n\n"a, red, circle",1\n"two\nlines",2\n', ["a, red, circle", "two\nlines"]),
}

REFUSED = {  # file name, bytes, column -> what the one line says
    "empty.txt": (b"", "prompt", "contains no prompts"),
    "only_blank.txt": (b"\n \n\t\n", "prompt", "contains no prompts"),
    "only_header.tsv": (b"Prompt\tCategory\n", "Prompt", "has a header (Prompt, Category) but no prompt rows"),
    "empty.tsv": (b"", "prompt", "has no column 'prompt'"),
    "more_fields.tsv": (
        b"Prompt\tCategory\na red circle\tx\textra\n",
        "Prompt",
        "line 2 has 3 tab-separated fields but the header has 2 (a separator inside a prompt",
    ),
    "cut_row.tsv": (b"Category\tPrompt\nx\ta\ny\n", "Prompt", "line 3 has 1 tab-separated fields"),
    "more_fields.csv": (b"prompt,n\na red circle,1,2\n", "prompt", "(quote the prompt)"),
    "unclosed_quote.csv": (
        b'prompt,n\n"a red circle,1\nblue square,2\n',
        "prompt",
        "line 2 opens a quote that is never closed, so its prompt would swallow every field and line after it",
    ),
    "empty_prompt.tsv": (b"prompt\tnote\na\tx\n\ty\n", "prompt", "line 3 has an empty 'prompt'"),
    "two_columns.tsv": (b"prompt\tPROMPT\na\tb\n", "prompt", "has 2 columns named 'prompt'"),
    "latin1.txt": ("caf\xe9\n".encode("latin-1"), "prompt", "is not UTF-8 text (byte 0xe9 on line 1)"),
    "utf16.txt": ("a red circle\n".encode("utf-16"), "prompt", "is UTF-16 text; re-save it as UTF-8"),
    "binary.txt": (b"a\x00b\n", "prompt", "holds a NUL byte on line 1"),
    "huge_line.txt": (b"ok\n" + b"x" * (MAX_PROMPT_CHARS + 1) + b"\n", "prompt", "line 2 holds a prompt of 10,001"),
    "huge_field.tsv": (b"prompt\n" + b"x" * 200_000 + b"\n", "prompt", "is not valid TSV (line 2: field larger"),
    "random.txt": (bytes(range(128, 256)) * 4, "prompt", "is not UTF-8 text"),
}


@pytest.mark.parametrize("name", list(READ))
def test_prompt_files_that_read_as_they_look(tmp_path, name):
    content, prompts = READ[name]
    path = tmp_path / name
    path.write_bytes(content)
    assert read_prompt_file(path, "prompt") == prompts


@pytest.mark.parametrize("name", list(REFUSED))
def test_prompt_files_that_are_refused_in_one_line(tmp_path, no_model_loads, name):
    content, column, needle = REFUSED[name]
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UserError, match=None) as raised:
        read_prompt_file(path, column)
    assert needle in str(raised.value) and str(path) in str(raised.value) and "\n" not in str(raised.value)
    results = tmp_path / "results"
    words = ["run", "model=debug", "data=file", f"data.path={path}", f"data.column={column}", f"results_dir={results}"]
    result = runner.invoke(app, words)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert not results.exists()


def test_a_parti_file_with_a_ragged_row_is_refused(tmp_path, no_model_loads):
    path = tmp_path / "PartiPrompts.tsv"
    path.write_text("Prompt\tCategory\tChallenge\tNote\na cat\tAnimals\tBasic\t\tstray\n")
    result = runner.invoke(app, ["run", "model=debug", "data=parti", f"data.path={path}", f"results_dir={tmp_path}/r"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "has 5 tab-separated fields, expected 4" in lines[0], lines


def test_a_column_a_set_without_columns_does_not_read_is_refused(tmp_path):
    """data.column names a column of a .tsv/.csv file; given for a set read another way it would do
    nothing, so it is refused (the default's spelling, in any case, is no mistake)."""
    from sjdbench.config import compose_run
    from sjdbench.config.resolve import resolve_run

    path = tmp_path / "prompts.txt"
    path.write_text("a red circle\n")
    with pytest.raises(UserError, match=r"data.column=text does nothing: data=file reads prompts.txt, one prompt"):
        resolve_run(compose_run(["model=debug", "data=file", f"data.path={path}", "data.column=text"]))
    with pytest.raises(UserError, match=r"data.column=foo does nothing: data=toy reads toy.txt, one prompt per line"):
        resolve_run(compose_run(["model=debug", "data=toy", "data.column=foo"]))
    with pytest.raises(UserError, match=r"data.column=foo does nothing: data=coco2017 is read in its own format"):
        resolve_run(compose_run(["model=debug", "data=coco2017", f"data.path={path}", "data.column=foo"]))
    with pytest.raises(UserError, match=r"data.caption=first does nothing: data=toy has one caption per prompt"):
        resolve_run(compose_run(["model=debug", "data=toy", "data.caption=first"]))
    with pytest.raises(UserError, match=r"data.column= is empty"):
        compose_run(["data.column="])
    spec = resolve_run(compose_run(["model=debug", "data=file", f"data.path={path}", "data.column=Prompt"]))
    assert [p.text for p in spec.prompts] == ["a red circle"]
