"""read_examples: every row kept as written, and every bad file named with its line and a fix."""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import json
import sys
import time

import pytest

from bertfit.data.sources import Example, SourceSpec, read_examples, resolve_format, visible
from bertfit.errors import DataError, MissingDependencyError

DEFAULT = SourceSpec()


def write(tmp_path, name: str, content: str | bytes):
    path = tmp_path / name
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def error_of(path, spec: SourceSpec = DEFAULT, **kwargs) -> str:
    with pytest.raises(DataError) as caught:
        read_examples(path, spec, **kwargs)
    return str(caught.value)


def assert_error(path, where: str, *hints: str, spec: SourceSpec = DEFAULT, **kwargs):
    """The message starts with "path:line:" (or "path:") and contains every hint."""
    message = error_of(path, spec, **kwargs)
    assert message.startswith(f"{path}{where} "), message
    for hint in hints:
        assert hint in message, message
    return message


# ---- what is read ----


def test_csv_rows_keep_their_text_exactly_and_their_line(tmp_path):
    path = write(tmp_path, "train.csv", 'text,label\n  padded  ,pos\n"a, b",neg\n')
    assert read_examples(path) == [
        Example("  padded  ", None, "pos", 2),
        Example("a, b", None, "neg", 3),
    ]


def test_csv_multiline_quoted_fields_give_the_first_line_of_each_record(tmp_path):
    content = 'text,label\n"one\ntwo\nthree",a\nfour,b\n"say ""hi""\r\n",a\nlast,b\n'
    examples = read_examples(write(tmp_path, "train.csv", content))
    assert [e.line for e in examples] == [2, 5, 6, 8]
    assert examples[0].text == "one\ntwo\nthree"
    assert examples[2].text == 'say "hi"\r\n'


def test_csv_with_crlf_endings_and_no_final_newline(tmp_path):
    examples = read_examples(write(tmp_path, "train.csv", "text,label\r\na,1\r\nb,2"))
    assert [(e.text, e.label, e.line) for e in examples] == [("a", "1", 2), ("b", "2", 3)]


def test_tsv_pairs_with_literal_quotes(tmp_path):
    content = 'premise\thypothesis\tlabel\n"quoted start\tit\'s "odd\tentailment\n'
    spec = SourceSpec(text_column="premise", text_pair_column="hypothesis")
    [example] = read_examples(write(tmp_path, "pairs.tsv", content), spec)
    assert example == Example('"quoted start', "it's \"odd", "entailment", 2)


def test_jsonl_labels_become_strings_and_lines_count_from_one(tmp_path):
    rows = [
        {"text": "a", "label": 1},
        {"text": "b\u2028c", "label": "neg"},
        {"text": "d", "label": True},
    ]
    content = "\n".join(json.dumps(row) for row in rows) + "\n\n"
    examples = read_examples(write(tmp_path, "train.jsonl", content))
    assert [(e.text, e.label, e.line) for e in examples] == [
        ("a", "1", 1), ("b\u2028c", "neg", 2), ("d", "true", 3)
    ]  # fmt: skip


def test_format_comes_from_the_extension_and_gzip_is_read(tmp_path):
    path = write(tmp_path, "train.ndjson.gz", gzip.compress(b'{"text": "a", "label": 0}\n'))
    assert resolve_format(path) == "jsonl"
    assert read_examples(path) == [Example("a", None, "0", 1)]


def test_explicit_format_wins_over_the_extension(tmp_path):
    path = write(tmp_path, "data.txt", "text\tlabel\na,b\t1\n")
    assert read_examples(path, SourceSpec(format="tsv"))[0].text == "a,b"


def test_utf8_byte_order_mark_is_skipped(tmp_path):
    path = write(tmp_path, "train.csv", b"\xef\xbb\xbftext,label\ncaf\xc3\xa9,1\n")
    assert read_examples(path) == [Example("café", None, "1", 2)]


def test_stdin_is_csv_unless_a_format_is_given(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"text,label\nhi,1\n")))
    assert read_examples("-") == [Example("hi", None, "1", 2)]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"text": "hi"}\n')))
    spec = SourceSpec(format="jsonl")
    assert read_examples("-", spec, labels_required=False) == [Example("hi", None, None, 1)]


def test_stdin_errors_are_named_stdin(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"text,label\n ,1\n")))
    with pytest.raises(
        DataError, match=r"^<stdin>:2: the text \(column 'text'\) is only whitespace"
    ):
        read_examples("-")


def test_labels_are_optional_for_prediction(tmp_path):
    no_column = write(tmp_path, "new.csv", "text\nhello\n")
    assert read_examples(no_column, labels_required=False) == [Example("hello", None, None, 2)]
    some_empty = write(tmp_path, "mixed.csv", "text,label\na,\nb,pos\n")
    assert [e.label for e in read_examples(some_empty, labels_required=False)] == [None, "pos"]


def test_a_field_longer_than_the_csv_default_limit_is_read(tmp_path):
    text = "word " * 60_000
    path = write(tmp_path, "long.csv", f"text,label\n{text},1\n")
    assert read_examples(path)[0].text == text


def test_trailing_blank_lines_are_not_rows(tmp_path):
    assert len(read_examples(write(tmp_path, "train.csv", "text,label\na,1\n\n\n"))) == 1


def test_100k_csv_rows_read_in_under_two_seconds(tmp_path):
    path = tmp_path / "big.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows((f"review number {i}, quite good", i % 5) for i in range(100_000))
    start = time.process_time()
    examples = read_examples(path)
    assert time.process_time() - start < 2.0
    assert len(examples) == 100_000 and examples[-1].line == 100_001


# ---- the file ----


def test_missing_file(tmp_path):
    assert_error(tmp_path / "nope.csv", ":", "file not found", "check the path")


def test_directory_instead_of_a_file(tmp_path):
    folder = tmp_path / "data.csv"
    folder.mkdir()
    assert_error(folder, ":", "is a directory")


@pytest.mark.parametrize("name", ["empty.csv", "empty.tsv", "empty.jsonl"])
def test_empty_file(tmp_path, name):
    assert_error(write(tmp_path, name, "\n"), ":", "the file has no rows", "expected")


def test_header_only(tmp_path):
    assert_error(write(tmp_path, "train.csv", "text,label\n"), ":1:", "header but no rows")


def test_unknown_format_is_listed_with_the_supported_ones(tmp_path):
    path = write(tmp_path, "train.csv", "text,label\na,1\n")
    assert_error(path, ":", "unknown format 'xlsx'", "csv, tsv, jsonl, parquet",
                 spec=SourceSpec(format="xlsx"))  # fmt: skip


def test_unknown_extension_asks_for_format(tmp_path):
    assert_error(write(tmp_path, "train.txt", "x"), ":", "csv, tsv, jsonl, parquet", "--format")


def test_bad_gzip(tmp_path):
    assert_error(write(tmp_path, "train.csv.gz", b"\x1f\x8bnot gzip"), ":", "gzip")


# ---- encoding ----


def test_undecodable_bytes_give_line_and_byte_offset(tmp_path):
    path = write(tmp_path, "train.csv", b"text,label\ngood,1\ncaf\xe9 au lait,0\n")
    assert_error(path, ":3:", "0xe9", "byte 4 of the line", "byte offset 21", "re-encode")


def test_utf16_is_named(tmp_path):
    path = write(tmp_path, "train.csv", "text,label\na,1\n".encode("utf-16"))
    assert_error(path, ":1:", "UTF-16", "re-encode it as UTF-8")


# ---- columns ----


def test_missing_text_column_lists_the_columns(tmp_path):
    path = write(tmp_path, "train.csv", "sentence,label\na,1\n")
    assert_error(path, ":1:", "no column 'text'", "'sentence', 'label'", "--text-column")


def test_missing_column_suggests_a_near_match(tmp_path):
    path = write(tmp_path, "train.csv", "text, Label\na,1\n")
    assert_error(path, ":1:", "no column 'label'", "--label-column ' Label'")


def test_missing_pair_column(tmp_path):
    path = write(tmp_path, "pairs.tsv", "a\tlabel\nx\t1\n")
    spec = SourceSpec(text_column="a", text_pair_column="b")
    assert_error(path, ":1:", "no column 'b'", "--text-pair-column", spec=spec)


def test_missing_jsonl_key_lists_the_keys_of_that_line(tmp_path):
    path = write(tmp_path, "train.jsonl", '{"text": "a", "label": 1}\n{"txt": "b", "label": 0}\n')
    assert_error(path, ":2:", "no key 'text'", "'txt', 'label'", "--text-column")


def test_missing_jsonl_label_key(tmp_path):
    path = write(tmp_path, "train.jsonl", '{"text": "a"}\n')
    assert_error(path, ":1:", "no key 'label'", "--label-column")


def test_duplicate_header_column(tmp_path):
    path = write(tmp_path, "train.csv", "text,text,label\na,b,1\n")
    assert_error(path, ":1:", "'text' more than once")


# ---- values ----


@pytest.mark.parametrize(
    ("content", "line", "hint"),
    [
        ("text,label\na,1\n,0\n", ":3:", "the text (column 'text') is empty"),
        ("text,label\na,1\n b,1\n \t ,0\n", ":4:", "is only whitespace (' \\t ')"),
        ('text,label\n"\n\n",1\n', ":2:", "is only whitespace ('\\n\\n')"),
    ],
)
def test_empty_or_blank_text(tmp_path, content, line, hint):
    assert_error(write(tmp_path, "train.csv", content), line, hint, "fill it in or delete the row")


def test_empty_text_pair(tmp_path):
    path = write(tmp_path, "pairs.csv", "a,b,label\nx,y,1\nx, ,0\n")
    spec = SourceSpec(text_column="a", text_pair_column="b")
    assert_error(path, ":3:", "the text pair (column 'b') is only whitespace", spec=spec)


@pytest.mark.parametrize(
    ("name", "content", "line", "hint"),
    [
        ("train.csv", "text,label\na,1\nb,\n", ":3:", "the label (column 'label') is empty"),
        ("train.csv", "text,label\na, \n", ":2:", "is only whitespace"),
        ("train.jsonl", '{"text": "a", "label": null}\n', ":1:", "is missing (null)"),
    ],
)
def test_missing_label_when_required(tmp_path, name, content, line, hint):
    assert_error(write(tmp_path, name, content), line, hint, "every row needs a label")


def test_blank_line_in_the_middle(tmp_path):
    path = write(tmp_path, "train.csv", "text,label\na,1\n\nb,0\n")
    assert_error(path, ":3:", "blank", "only at the end")


def test_blank_jsonl_line_in_the_middle(tmp_path):
    path = write(
        tmp_path, "train.jsonl", '{"text": "a", "label": 1}\n \n{"text": "b", "label": 0}\n'
    )
    assert_error(path, ":2:", "blank", "only at the end")


# ---- malformed records ----


@pytest.mark.parametrize(
    ("content", "line", "found"),
    [
        ("text,label\na,1\nfine, really,1\n", ":3:", "found 3"),
        ('text,label\n"multi\nline",1\nno label\n', ":4:", "found 1"),
    ],
)
def test_csv_row_with_the_wrong_number_of_fields(tmp_path, content, line, found):
    path = write(tmp_path, "train.csv", content)
    assert_error(path, line, "expected 2 fields", found, "double quotes")


def test_tsv_row_with_the_wrong_number_of_fields(tmp_path):
    path = write(tmp_path, "train.tsv", "text\tlabel\na\tb\t1\n")
    assert_error(path, ":2:", "expected 2 fields", "found 3", "cannot contain a tab")


def test_csv_quote_never_closed(tmp_path):
    path = write(tmp_path, "train.csv", 'text,label\na,1\n"open,1\nb,0\n')
    assert_error(path, ":3:", "never closed", "Close the quote")


def test_csv_text_after_a_closing_quote(tmp_path):
    path = write(tmp_path, "train.csv", 'text,label\n"quoted" tail,1\n')
    assert_error(path, ":2:", "malformed CSV record", "double every quote")


def test_malformed_json(tmp_path):
    path = write(tmp_path, "train.jsonl", '{"text": "a", "label": 1}\n{"text": "b" "label": 0}\n')
    assert_error(path, ":2:", "malformed JSON at column 14", "one complete JSON object")


def test_a_json_array_file_is_explained(tmp_path):
    path = write(tmp_path, "train.json", '[{"text": "a", "label": 1}]\n')
    assert_error(path, ":1:", "found an array", "convert it to JSON Lines")


def test_jsonl_line_that_is_not_an_object(tmp_path):
    path = write(tmp_path, "train.jsonl", '{"text": "a", "label": 1}\n"just text"\n')
    assert_error(path, ":2:", "expected a JSON object", "found a string")


def test_jsonl_text_must_be_a_string(tmp_path):
    path = write(tmp_path, "train.jsonl", '{"text": 42, "label": 1}\n')
    assert_error(path, ":1:", "must be a string", "found a number 42")


def test_json_numbers_and_lists_are_labels_for_bertfit_data_tasks_to_read(tmp_path):
    path = write(
        tmp_path,
        "train.jsonl",
        '{"text": "a", "label": 1.5}\n'
        '{"text": "b", "label": [1, "fun", true]}\n'
        '{"text": "c", "label": []}\n',
    )
    assert [e.label for e in read_examples(path)] == ["1.5", ("1", "fun", "true"), ()]


@pytest.mark.parametrize(
    ("label", "kind", "what"),
    [('{"a": 1}', "an object", "the label"), ("[[1]]", "an array", "an item of the label list")],
)
def test_non_scalar_label(tmp_path, label, kind, what):
    path = write(tmp_path, "train.jsonl", f'{{"text": "a", "label": {label}}}\n')
    assert_error(path, ":1:", f"{what} (column 'label') is {kind}", "a label is a string")


# ---- Parquet ----


def test_parquet_without_pyarrow_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    path = write(tmp_path, "train.parquet", b"PAR1")
    with pytest.raises(MissingDependencyError, match="pip install pyarrow"):
        read_examples(path)


def test_parquet_round_trip_and_row_numbers(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow is optional; install it to read Parquet")
    import pyarrow.parquet as pq

    path = tmp_path / "train.parquet"
    table = pa.table({"text": [" a ", "b", "c"], "label": [2, 10, 2], "extra": [1, 2, 3]})
    pq.write_table(table, path)
    assert read_examples(path) == [
        Example(" a ", None, "2", 1), Example("b", None, "10", 2), Example("c", None, "2", 3)
    ]  # fmt: skip
    pq.write_table(pa.table({"text": ["a", " "], "label": ["x", "y"]}), path)
    assert_error(path, ":", "row 2: the text (column 'text') is only whitespace")
    pq.write_table(pa.table({"sentence": ["a"], "label": ["x"]}), path)
    assert_error(path, ":", "no column 'text'", "'sentence', 'label'", "--text-column")
    pq.write_table(pa.table({"text": ["a", "b"], "label": [[0.5], [1.5, 2.0]]}), path)
    assert [e.label for e in read_examples(path)] == [("0.5",), ("1.5", "2.0")]
    pq.write_table(pa.table({"text": ["a"], "label": [{"k": 1}]}), path)
    assert_error(path, ":", "row 1:", "the label (column 'label') is an object")


@pytest.mark.parametrize(
    "content, expected",
    [
        (
            '{"text": "ok\\ud800", "label": "a"}\n',
            "the text (column 'text') holds the unpaired surrogate \\ud800 at character 3",
        ),
        (
            '{"text": "ok", "label": "\\udc00"}\n',
            "the label (column 'label') holds the unpaired surrogate \\udc00",
        ),
        ('{"text": "ok", "label": ' + "9" * 5000 + "}\n", "Write such a number as a string"),
        ('{"text": ' + "[" * 100000 + "]" * 100000 + "}\n", "nested too deeply"),
        ('{"text": "\\u200b\\u200d\\u0301", "label": "a"}\n', "only invisible characters"),
    ],
)
def test_jsonl_traps_are_data_errors_with_the_line(tmp_path, content, expected):
    path = write(tmp_path, "train.jsonl", content)
    assert_error(path, ":1:", expected)


def test_wide_encodings_are_named_correctly(tmp_path):
    text = "text,label\na,1\n"
    for encoding, bom, name in (
        ("utf-32-le", codecs.BOM_UTF32_LE, "UTF-32"),
        ("utf-16-le", codecs.BOM_UTF16_LE, "UTF-16"),
    ):
        path = tmp_path / f"{encoding}.csv"
        path.write_bytes(bom + text.encode(encoding))
        assert_error(path, ":1:", f"is {name}", f"iconv -f {name} -t UTF-8")
    path = tmp_path / "nobom.csv"
    path.write_bytes(text.encode("utf-16-le"))
    assert_error(path, ":1:", "without a byte-order mark")


def test_a_label_longer_than_pythons_integer_limit_is_a_class_like_any_other(tmp_path):
    from bertfit.data.tasks import infer_task

    huge = "1" * 5000
    path = write(tmp_path, "train.csv", f"text,label\na,{huge}\nb,2\n")
    task, _ = infer_task(read_examples(path), path)
    assert task.labels == ("2", huge)


@pytest.mark.parametrize(
    "name, content, code",
    [
        ("missing.csv", None, "data-file-not-found"),
        ("a.csv", "text,label\n", "data-empty-file"),
        ("a.csv", "text,label\n\n", "data-empty-file"),
        ("a.csv", "sentence,label\nfilm,pos\n", "data-missing-column"),
        ("a.jsonl", '{"text": "film"}\n', "data-missing-column"),
        ("a.csv", "text,label\n\u200b,pos\n", "data-empty-text"),
        ("a.csv", "text,label\nfilm, \n", "data-empty-label"),
        ("a.csv", b"text,label\ncaf\xe9,pos\n", "data-undecodable"),
        ("a.csv", codecs.BOM_UTF32_LE + "text,label\n".encode("utf-32-le"), "data-undecodable"),
        ("a.jsonl", '{"text": "\\ud800", "label": 1}\n', "data-undecodable"),
        ("a.jsonl", '{"text": 5, "label": 1}\n', "data-mixed-types"),
        ("a.jsonl", '{"text": "film", "label": {"a": 1}}\n', "data-label-invalid"),
        ("a.csv", 'text,label\n"film,pos\n', "data-unreadable"),
        ("a.txt", "text,label\nfilm,pos\n", "data-unreadable"),
    ],
)
def test_every_reader_error_carries_the_code_check_reports(tmp_path, name, content, code):
    path = tmp_path / name if content is None else write(tmp_path, name, content)
    with pytest.raises(DataError) as caught:
        read_examples(path)
    assert caught.value.code == code, str(caught.value)


def test_visibles_fast_path_holds_for_every_code_point():
    """`visible` takes a leading letter or digit as visible without looking it up: no code
    point that `str.isalnum` accepts is in a category `visible` rejects (C, Z or M)."""
    import unicodedata

    rejected = [
        c for c in map(chr, range(0x110000)) if c.isalnum() and unicodedata.category(c)[0] in "CZM"
    ]
    assert rejected == []
    assert visible("a\u200b") and visible("\u200ba") and not visible("\u200b\u0301")
