"""One static `report.html`: provenance header, warnings, tables and figures, with relative links to
the files beside it, so a report folder can be zipped, mailed or served as it is (no server, no
scripts, no external assets).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

from sjdbench.report.render import to_html
from sjdbench.report.tables import Table

STYLE = """
body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px auto; max-width: 1320px;
       color: #1b1b1b; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; margin: 22px 0 6px; }
table { border-collapse: collapse; font-size: 12.5px; margin: 4px 0; }
th, td { padding: 3px 9px; border-bottom: 1px solid #e4e4e4; white-space: nowrap; }
thead th { border-bottom: 2px solid #888; text-align: left; background: #fafafa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
ul.prov { font-size: 12px; color: #555; margin: 4px 0 8px; padding-left: 18px; }
li.warn, p.warn { color: #9a4a00; }
.header { background: #f6f8fa; border: 1px solid #e1e4e8; padding: 8px 14px; border-radius: 6px; font-size: 12.5px; }
.figs { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 18px 26px; margin: 18px 0; }
figure { margin: 0; } figure.wide { grid-column: 1 / -1; }
figure img { width: 100%; max-height: 760px; object-fit: contain; object-position: left top; border: 1px solid #eee; }
figure.wide img { width: auto; max-width: 100%; max-height: none; }
figcaption { font-size: 12px; color: #444; }
.files a { margin-right: 10px; } .skipped { font-size: 12px; color: #666; }
"""


@dataclass
class FigureEntry:
    title: str
    caption: str
    image: str  # path relative to the report folder
    other: list[str] = field(default_factory=list)  # the same figure in other formats
    wide: bool = False  # spans the page (multi-panel figures, image grids)


@dataclass
class Section:
    title: str  # "toy on toy"
    main: list[Table]
    figures: list[FigureEntry]
    ablations: list[Table]
    categories: list[Table]
    quality: list[Table]
    skipped: list[str]


def page(
    title: str, header: list[str], warnings: list[str], unused: list[str], sections: list[Section], files: list[str]
) -> str:
    """The whole document; every href/src is a relative path given by the caller."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        '<div class="header">',
    ]
    out += [f"<div>{html.escape(line)}</div>" for line in header]
    out += [f'<p class="warn">{html.escape(w)}</p>' for w in warnings]
    if unused:
        out.append(f"<div>Not used ({len(unused)}):</div><ul>")
        out += [f"<li>{html.escape(line)}</li>" for line in unused]
        out.append("</ul>")
    links = " ".join(f'<a href="{html.escape(f)}">{html.escape(f)}</a>' for f in files)
    out.append(f'<div class="files">Files: {links} (figures: PNG and SVG under figures/)</div></div>')
    for section in sections:
        out.append(f"<h2>{html.escape(section.title)}</h2>")
        out += [to_html(t) for t in section.main]
        out.append('<div class="figs">')
        for figure in section.figures:
            alt = " ".join(
                f'<a href="{html.escape(o)}">{html.escape(Path(o).suffix[1:].upper())}</a>' for o in figure.other
            )
            wide = ' class="wide"' if figure.wide else ""
            out.append(
                f'<figure{wide}><img src="{html.escape(figure.image)}" alt="{html.escape(figure.title)}">'
                f"<figcaption><b>{html.escape(figure.title)}.</b> {html.escape(figure.caption)} {alt}"
                "</figcaption></figure>"
            )
        out.append("</div>")
        for heading, tables in (
            ("Ablations", section.ablations),
            ("Quality", section.quality),
            ("Per category", section.categories),
        ):
            if tables:
                out.append(f"<h2>{html.escape(section.title)}: {heading.lower()}</h2>")
                out += [to_html(t) for t in tables]
        if section.skipped:
            out.append(
                '<ul class="skipped">' + "".join(f"<li>{html.escape(s)}</li>" for s in section.skipped) + "</ul>"
            )
    out.append("</body></html>")
    return "\n".join(out) + "\n"
