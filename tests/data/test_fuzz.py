"""Fuzzing the readers: any bytes in, only BertfitError out, and every accepted row kept.

Hypothesis generates CSV, TSV and JSONL files three ways: well-formed rows of awkward Unicode
(lone surrogates, controls, zero-width and combining characters, line separators, special
tokens) with labels of every JSON type (huge numbers, NaN, nested lists), the same files with
bytes flipped or cut, and raw bytes. Each goes through the reader, then the task inference,
and every text accepted goes through the in-graph tokenizer at the end. 10,200 files in all.
"""

from __future__ import annotations

import csv
import io
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertfit.data.sources import parse_examples
from bertfit.data.tasks import infer_task
from bertfit.errors import BertfitError

EXAMPLES_PER_FORMAT = 3400
ACCEPTED_TEXTS: list[str] = []

# Hypothesis draws one seed per file and the file is built from a Random with that seed:
# generating with Hypothesis' own strategies cost ~20 ms a file, far past the test-time budget.
POOL = list("abc XYZ,;\"'\t\n\r|\\{}[]:0123456789.-+eE#") + [
    "\ud800",
    "\udfff",
    "\u200b",
    "\u200d",
    "\x00",
    "\x1e",
    "\x85",
    "\u2028",
    "\u00e9",
    "e\u0301",
    "\u4e2d",
    "\ufeff",
    "\U0001f600",
    "[SEP]",
    "[CLS]",
]
SPECIAL_LABELS = [
    "",
    " ",
    "\u200b",
    "pos",
    "neg",
    "1",
    "01",
    "2.5",
    "nan",
    "inf",
    "a|b",
    "9" * 4400,
    10**40,
    1e308,
    -1e308,
    float("nan"),
    True,
    None,
    [],
    [[1, [2]]],
]


def random_text(r) -> str:
    return "".join(r.choice(POOL) for _ in range(r.randrange(0, 14)))


def random_label(r):
    kind = r.randrange(6)
    if kind == 0:
        return r.choice(SPECIAL_LABELS)
    if kind == 1:
        return r.choice([r.randrange(-3, 4), r.uniform(-1e3, 1e3), r.random() < 0.5])
    if kind == 2:
        return [r.choice(["pos", "neg", "fun", random_text(r)]) for _ in range(r.randrange(4))]
    return random_text(r)


def random_rows(r) -> list[tuple[str, object]]:
    return [(random_text(r), random_label(r)) for _ in range(r.randrange(0, 7))]


def _delimited(rows, delimiter: str) -> bytes:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, delimiter=delimiter)
    writer.writerow(["text", "label"])
    for text, label in rows:
        writer.writerow([text, label if isinstance(label, str) else json.dumps(label)])
    return buffer.getvalue().encode("utf-8", "surrogatepass")


def _jsonl(rows, ascii_only: bool) -> bytes:
    lines = [
        json.dumps({"text": text, "label": label}, ensure_ascii=ascii_only) for text, label in rows
    ]
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


@st.composite
def files(draw, fmt: str) -> bytes:
    r = random.Random(draw(st.integers(0, 2**64)))
    kind = r.choice(["rows", "rows", "mutated", "bytes"])
    if kind == "bytes":
        return r.randbytes(r.randrange(300))
    table = random_rows(r)
    data = (
        _jsonl(table, r.random() < 0.5)
        if fmt == "jsonl"
        else _delimited(table, "\t" if fmt == "tsv" else ",")
    )
    if kind == "mutated" and data:
        data = bytearray(data)
        for _ in range(r.randrange(1, 5)):
            data[r.randrange(len(data))] = r.randrange(256)
        data = bytes(data[: r.randrange(len(data) + 1)])
    return data


def independent_count(data: bytes, fmt: str) -> int:
    """Rows in an accepted file, counted without bertfit's reader."""
    text = data.decode("utf-8-sig")
    if fmt == "jsonl":
        return sum(1 for line in text.split("\n") if line.strip())
    if fmt == "tsv":  # one record per line; only \r\n, \r and \n end a line
        return len(text.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n").split("\n")) - 1
    records = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    while records and not records[-1]:
        records.pop()
    return len(records) - 1


def fuzz(fmt: str, data: bytes) -> None:
    try:
        examples = parse_examples(data, f"fuzz.{fmt}", fmt)
    except BertfitError:
        return
    assert len(examples) == independent_count(data, fmt)
    ACCEPTED_TEXTS.extend(e.text for e in examples)
    try:
        infer_task(examples, f"fuzz.{fmt}")
    except BertfitError:
        pass


SETTINGS = settings(
    max_examples=EXAMPLES_PER_FORMAT,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_readers_raise_only_bertfit_errors_and_keep_every_row(fmt):
    SETTINGS(given(files(fmt))(lambda data: fuzz(fmt, data)))()


def test_every_accepted_text_tokenizes_to_at_least_one_id(tiny_hf_dir):
    from bertfit import load_encoder

    assert len(ACCEPTED_TEXTS) > 1000, "the fuzz tests above run first and accept many files"
    _, tokenizer = load_encoder(tiny_hf_dir[0])
    for start in range(0, len(ACCEPTED_TEXTS), 4096):
        ids = tokenizer.tokenize(ACCEPTED_TEXTS[start : start + 4096])
        assert int(ids.row_lengths().numpy().min()) >= 1
