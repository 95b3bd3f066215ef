"""The fenced code blocks of the README and of the manual in docs/, for the tests that run or
check them (tests/test_docs.py, tests/test_readme.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# A fence may be indented (a block inside a list item); its body is un-indented by as much.
_FENCE = re.compile(
    r"^(?P<indent> *)```(?P<lang>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def code_blocks(page: Path) -> list[Block]:
    """Every fenced block of `page`, in order."""
    source = page.read_text()
    blocks = []
    for match in _FENCE.finditer(source):
        indent = len(match["indent"])
        body = "".join(line[indent:] for line in match["body"].splitlines(keepends=True))
        line = source.count("\n", 0, match.start()) + 1
        blocks.append(Block(page, line, match["lang"].strip(), body))
    return blocks


def all_blocks(lang: str | None = None) -> list[Block]:
    """The blocks of the README and every docs/ page, of one language or all."""
    return [b for page in PAGES for b in code_blocks(page) if lang is None or b.lang == lang]


def doc_block(marker: str, lang: str = "python") -> str:
    """The one block of `lang` in the README or docs/ that contains `marker`."""
    (block,) = [b.text for b in all_blocks(lang) if marker in b.text]
    return block
