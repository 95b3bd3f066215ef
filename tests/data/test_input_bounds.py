"""Inputs that would read without bound are refused before or while reading: devices and FIFOs,
and a text file with an endless line."""

from __future__ import annotations

import os

import pytest

from bertfit.data.sources import MAX_LINE_BYTES, parse_examples, read_examples
from bertfit.errors import DataError


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_devices_and_fifos_are_refused_before_reading(tmp_path, kind):
    path = "/dev/zero" if kind == "device" else tmp_path / "fifo.csv"
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would block forever
    with pytest.raises(DataError, match="not a regular file") as e:
        read_examples(path)
    assert e.value.code == "data-unreadable"


def test_an_endless_line_is_refused_naming_it():
    data = b"text,label\nfine,pos\n" + b"x" * (MAX_LINE_BYTES + 1) + b",neg\n"
    with pytest.raises(DataError, match=r"big.csv: line 3 is 8,388,6\d\d bytes long"):
        parse_examples(data, "big.csv", "csv")


def test_long_files_of_short_lines_are_read():
    data = b"text,label\n" + b"a fine film,pos\nbad,neg\n" * (MAX_LINE_BYTES // 20)
    assert len(parse_examples(data, "ok.csv", "csv")) == 2 * (MAX_LINE_BYTES // 20)
