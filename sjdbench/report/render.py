"""Tables to text: Markdown (tabulate, pipe format), LaTeX (booktabs, written here), CSV (raw numbers)
and HTML. Formatting only: values, CIs and the best cell per column come from `tables.Table`.
"""

from __future__ import annotations

import html
import io
from dataclasses import replace

import pandas as pd
from tabulate import tabulate

from sjdbench.report.tables import Metric, Table


def header(metric: Metric) -> str:
    return f"{metric.header} {metric.arrow}".strip()


def display_frame(table: Table, bold: str = "**{}**", ci_format: str = "{} [{}, {}]") -> pd.DataFrame:
    """Label columns and formatted metric cells, the best per column wrapped in `bold`."""
    out = table.frame[table.labels].astype(str).copy()
    for metric in table.metrics:
        best = table.best(metric)
        cells = [table.cell(row, metric, ci_format) for _, row in table.frame.iterrows()]
        out[header(metric)] = [bold.format(c) if b and c != "–" else c for c, b in zip(cells, best)]
    return out


def to_markdown(table: Table) -> str:
    """A `###` title, the table, then provenance and warnings as a bullet list."""
    frame = display_frame(table)
    body = tabulate(
        frame.values.tolist(),
        headers=list(frame.columns),
        tablefmt="pipe",
        disable_numparse=True,
        colalign=["left"] * len(table.labels) + ["right"] * len(table.metrics),
    )
    lines = [f"### {table.title}", "", body, ""]
    lines += [f"- {line}" for line in table.warnings + table.notes]
    return "\n".join(lines) + "\n"


# -- LaTeX ----------------------------------------------------------------------------------------

LATEX_SPECIAL = {
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "\\": r"\textbackslash{}",
}
LATEX_SYMBOLS = {
    "λ": r"$\lambda$",
    "γ": r"$\gamma$",
    "δ": r"$\delta$",
    "τ": r"$\tau$",
    "Δ": r"$\Delta$",
    "↑": r"$\uparrow$",
    "↓": r"$\downarrow$",
    "×": r"$\times$",
    "–": "--",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
}


def latex_escape(text: str) -> str:
    out = []
    for char in str(text):
        out.append(LATEX_SPECIAL.get(char) or LATEX_SYMBOLS.get(char) or char)
    return "".join(out)


def to_latex(table: Table) -> str:
    """One booktabs `table` environment: bold best values, arrows in headers, CIs in small type,
    provenance in the caption (short) and in comment lines (full)."""
    frame = table.frame
    cells = display_frame(table, bold="\\textbf{{{}}}", ci_format="{} {{\\scriptsize[{}, {}]}}")
    lines = [f"% {latex_escape(line)}".replace("\n", " ") for line in table.warnings + table.notes]
    spec = "l" * len(table.labels) + "r" * len(table.metrics)
    heads = [latex_escape(label) for label in table.labels] + [latex_escape(header(m)) for m in table.metrics]
    lines += [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        f"\\caption{{{latex_escape(table.title)}{_caption_tail(table)}}}",
        f"\\label{{tab:{table.name}}}",
        f"\\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(heads) + r" \\",
        r"\midrule",
    ]
    for i in range(len(frame)):
        row = []
        for j, _column in enumerate(cells.columns):
            text = cells.iloc[i, j]
            if j < len(table.labels):
                row.append(latex_escape(text))
            else:  # metric cells: already LaTeX (bold/CI markup); escape only the number text
                row.append(text.replace("–", "--"))
        lines.append(" & ".join(row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


def _caption_tail(table: Table) -> str:
    warned = " Warnings in the comments above." if table.warnings else ""
    return latex_escape(f". Best value per column in bold; 95 % CIs in brackets.{warned}")


def csv_frame(table: Table) -> pd.DataFrame:
    """Raw numbers (full precision, CI bounds as their own columns) with the table's name and run id,
    for pandas; tables of one kind stack into one CSV."""
    columns = list(table.labels)
    for metric in table.metrics:
        columns.append(metric.key)
        if metric.ci:
            columns += [f"{metric.key}_lo", f"{metric.key}_hi"]
    out = table.frame[[c for c in columns if c in table.frame]].copy()
    out.insert(0, "table", table.name)
    if "run_id" in table.frame:
        out["run_id"] = table.frame["run_id"]
    rename = {m.key: m.header for m in table.metrics}
    rename.update({f"{m.key}_lo": f"{m.header} ci_lo" for m in table.metrics if m.ci})
    rename.update({f"{m.key}_hi": f"{m.header} ci_hi" for m in table.metrics if m.ci})
    return out.rename(columns=rename)


def to_csv(tables: list[Table]) -> str:
    buffer = io.StringIO()
    pd.concat([csv_frame(t) for t in tables], ignore_index=True).to_csv(buffer, index=False)
    return buffer.getvalue()


def to_html(table: Table) -> str:
    """A <table> with escaped cells, best cells in <b>, provenance below it."""
    cells = display_frame(table, bold="\x00{}\x01")
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cells.columns)
    body = []
    for i in range(len(cells)):
        tds = []
        for j, _column in enumerate(cells.columns):
            text = html.escape(cells.iloc[i, j]).replace("\x00", "<b>").replace("\x01", "</b>")
            cls = "" if j < len(table.labels) else ' class="num"'
            tds.append(f"<td{cls}>{text}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    warnings = "".join(f'<li class="warn">{html.escape(w)}</li>' for w in table.warnings)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in table.notes)
    return (
        f'<h3 id="{html.escape(table.name)}">{html.escape(table.title)}</h3>\n'
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>\n"
        f'<ul class="prov">{warnings}{notes}</ul>\n'
    )


TERMINAL_HEADERS = {
    "latency_s_mean": "sec",
    "step_compression": "step x",
    "acceptance_rate": "accept",
    "mean_accepted_length": "len",
}


def to_rich(table: Table):
    """The table for the terminal: short headers, growth statistics left to the files, best bold."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table as RichTable

    shown = [m for m in table.metrics if not m.key.startswith("growth_")]
    short = Table(
        table.name,
        table.title,
        table.labels,
        [replace(m, header=TERMINAL_HEADERS.get(m.key, m.header)) for m in shown],
        table.frame,
    )
    cells = display_frame(short, bold="\x00{}\x01").map(
        lambda text: escape(text).replace("\x00", "[bold]").replace("\x01", "[/bold]")
    )
    out = RichTable(title=table.title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for j, column in enumerate(cells.columns):
        out.add_column(column, justify="left" if j < len(table.labels) else "right", no_wrap=True)
    for i in range(len(cells)):
        out.add_row(*[cells.iloc[i, j] for j in range(len(cells.columns))])
    return out
