"""LlamaGen's caption cleaning: the exact text its T5 encoder saw in training.

LlamaGen (FoundationVision/LlamaGen, `language/t5.py`, `T5Embedder.text_preprocessing`) passes every
caption twice through the DeepFloyd-IF / PixArt-alpha cleaner (`T5Embedder.clean_caption`) before
T5 encodes it. The cleaner is not a formality for benchmark captions: it removes size patterns
(`2x2`), `&` and a list of other symbols, a trailing `,` or `'`, runs of dots, and puts a space after
the dots of `U.S.` (`u. s.`), so 24 of the 1,632 PartiPrompts and 101 of the 30,000 captions of
LlamaGen's COCO list come out different from a plain lower-cased caption, and with them the T5
conditioning. Here the cleaner is reproduced step for step, in its order (the steps interact: the
symbol removal runs after the URL and HTML steps, the size pattern after ftfy), so that every
caption gets the released text; `tests/test_llamagen_captions.py` holds the released outputs.

The steps need `ftfy` and `beautifulsoup4` (the `models` extra), imported when a caption is first
cleaned.
"""

from __future__ import annotations

import html
import re
import urllib.parse
import warnings
from functools import cache
from typing import Any, Callable

from sjdbench.errors import UserError

Rule = tuple[re.Pattern[str], str]


def _rules(*pairs: tuple[str, str]) -> list[Rule]:
    return [(re.compile(pattern), replacement) for pattern, replacement in pairs]


# a domain or an http(s):/www: scheme, as the released cleaner recognises a URL (two passes: http, www)
_DOMAIN = r"[a-zA-Z0-9.\-]+\.(?:com|co|ru|net|org|edu|gov|it)[\w/-]*\b/?(?!@)"
_URLS = _rules(
    (r"\b((?:https?:(?:/{1,3}|[a-zA-Z0-9%])|" + _DOMAIN + r"))", ""),
    (r"\b((?:www:(?:/{1,3}|[a-zA-Z0-9%])|" + _DOMAIN + r"))", ""),
)

# between the HTML step and ftfy: handles, CJK, dashes and quotes, entities, ids and file names, symbols
_SYMBOL_CLASS = "#®•©™&@·º½¾¿¡§~)(\\]\\[}{|\\\\/*"  # replaced by a space wherever they occur
_FILE_TYPES = "png|jpg|jpeg|bmp|webp|eps|pdf|apk|mp4"
_BEFORE_FTFY = _rules(
    (r"@[\w\d]+\b", ""),  # @nickname
    (r"[\u31c0-\u9fff]+", ""),  # CJK strokes, kana extensions, enclosed CJK, compatibility, ideographs
    (
        r"[\u002D\u058A\u05BE\u1400\u1806\u2010-\u2015\u2E17\u2E1A\u2E3A\u2E3B\u2E40"
        r"\u301C\u3030\u30A0\uFE31\uFE32\uFE58\uFE63\uFF0D]+",
        "-",
    ),  # every kind of dash, a run of them becoming one '-'
    (r"[`´«»“”¨]", '"'),
    (r"[‘’]", "'"),
    (r"&quot;?", ""),
    (r"&amp", ""),
    (r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}", " "),  # IP addresses
    (r"\d:\d\d\s+$", ""),  # a trailing article id
    (r"\\n", " "),  # a literal backslash-n
    (r"#\d{1,3}\b", ""),
    (r"#\d{5,}\b", ""),
    (r"\b\d{6,}\b", ""),
    (r"\S+\.(?:" + _FILE_TYPES + ")", ""),  # file names
    (r"[\"']{2,}", '"'),
    (r"\.{2,}", " "),
    ("[" + _SYMBOL_CLASS + "]+", " "),
    (r"\s+\.\s+", " "),
)
_SEPARATORS = re.compile(r"[-_]")  # more than 3 of them: a slug (this-is-my-cat), split into words

# after ftfy: product codes, shop phrases, sizes, spacing around punctuation, then the edges
_AFTER_FTFY = _rules(
    (r"\b[a-zA-Z]{1,3}\d{3,15}\b", ""),  # jc6640
    (r"\b[a-zA-Z]+\d+[a-zA-Z]+\b", ""),  # jc6640vc
    (r"\b\d+[a-zA-Z]+\d+\b", ""),  # 6640vc231
    (r"(worldwide\s+)?(free\s+)?shipping", ""),
    (r"(free\s)?download(\sfree)?", ""),
    (r"\bclick\b\s(?:for|on)\s\w+", ""),
    (r"\b(?:" + _FILE_TYPES + r")(\simage[s]?)?", ""),
    (r"\bpage\s+\d+\b", ""),
    (r"\b\d*[a-zA-Z]+\d+[a-zA-Z]+\d+[a-zA-Z\d]*\b", " "),  # j2d1a2a...
    (r"\b\d+\.?\d*[xх×]\d+\.?\d*\b", ""),  # sizes: 2x2, 1.5×3 (Latin x, Cyrillic х, ×)
    (r"\b\s+:\s+", ": "),
    (r"(\D[,./])\b", r"\1 "),  # a space after punctuation that touches the next word: u.s. -> u. s.
    (r"\s+", " "),
    (r"^[\"']([\w\W]+)[\"']$", r"\1"),  # one pair of surrounding quotes
    (r"^['_,\-:;]", ""),  # one leading separator
    (r"['_,\-:+]$", ""),  # one trailing separator
    (r"^\.\S+$", ""),  # a caption that is a single dotted word
)


@cache
def _libraries() -> tuple[Callable[[str], str], Any]:
    """ftfy's fix_text and BeautifulSoup, or one line saying how to install them."""
    try:
        import ftfy
        from bs4 import BeautifulSoup
    except ImportError as error:
        raise UserError(
            f"model 'llamagen' cleans captions with ftfy and beautifulsoup4 ({error.name} is missing): "
            "pip install 'sjdbench[models]'"
        ) from None
    return ftfy.fix_text, BeautifulSoup


def _html_text(caption: str) -> str:
    """The text of the caption read as HTML (tags dropped, entities decoded), as html.parser reads it."""
    _, soup = _libraries()
    with warnings.catch_warnings():  # a caption that looks like a file name or URL is not a mistake here
        warnings.simplefilter("ignore")
        return soup(caption, features="html.parser").text


def _apply(rules: list[Rule], caption: str) -> str:
    for pattern, replacement in rules:
        caption = pattern.sub(replacement, caption)
    return caption


def clean_caption_once(caption: str) -> str:
    """One pass of the released cleaner."""
    fix_text, _ = _libraries()
    caption = urllib.parse.unquote_plus(str(caption)).strip().lower()
    caption = caption.replace("<person>", "person")
    caption = _html_text(_apply(_URLS, caption))
    caption = _apply(_BEFORE_FTFY, caption)
    if len(_SEPARATORS.findall(caption)) > 3:
        caption = _SEPARATORS.sub(" ", caption)
    caption = html.unescape(html.unescape(fix_text(caption))).strip()
    return _apply(_AFTER_FTFY, caption).strip()


def clean_caption(caption: str) -> str:
    """The caption LlamaGen's T5 encodes: the cleaner applied twice, as in training."""
    return clean_caption_once(clean_caption_once(caption))
