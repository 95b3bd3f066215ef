"""Reading labelled text from CSV, TSV, JSONL and Parquet files into validated `Example`s.

Every row of the file becomes exactly one `Example`, in file order, with its text exactly as
written (nothing is stripped, lower-cased or re-encoded). Anything that would otherwise be
dropped or guessed at is a `DataError` naming the file, the line and what to do:

- CSV: RFC 4180 with a header line; quoted fields may contain commas, quotes (doubled) and line
  breaks. `Example.line` is the physical line where the record starts (the header is line 1).
- TSV: a header line, then one record per line, fields separated by tabs. Quotes are ordinary
  characters (as in the GLUE files), so a text cannot contain a tab or a line break.
- JSONL (`.jsonl`, `.json`, `.ndjson`): one JSON object per line. A label is a string, a number
  or a boolean (`1` → `"1"`, `0.5` → `"0.5"`, `true` → `"true"`), or a list of those (the
  classes of a multi-label row, kept as a tuple); `bertfit.data.tasks` decides what they mean.
- Parquet: needs `pyarrow`; `Example.line` is the row index + 1 and messages say "row".

Blank lines are allowed only at the end of a text file. A UTF-8 byte-order mark is skipped, and
gzip-compressed files (`data.csv.gz`) are decompressed. `"-"` reads standard input; its format
is CSV unless `SourceSpec.format` says otherwise.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import gc
import gzip
import io
import json
import os
import stat
import sys
import unicodedata
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertfit import storage
from bertfit.config import DATA_FORMATS as FORMATS  # DataConfig.format's choices
from bertfit.errors import BertfitError, DataError, MissingDependencyError

STDIN = "-"
"""The path that means "read standard input"."""

STDIN_DEFAULT_FORMAT = "csv"
"""The format of standard input when `SourceSpec.format` is None."""

EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
}
"""File extensions and their formats; each may be followed by `.gz`."""

# `DataError.code`s (the finding codes of `bertfit check`) of the problems several readers find.
UNREADABLE = "data-unreadable"
UNDECODABLE = "data-undecodable"
EMPTY_FILE = "data-empty-file"
EMPTY_TEXT = "data-empty-text"
MISSING_COLUMN = "data-missing-column"
MIXED_TYPES = "data-mixed-types"

_FLAGS = {
    "text_column": "--text-column",
    "text_pair_column": "--text-pair-column",
    "label_column": "--label-column",
}
_ROLES = {"text_column": "text", "text_pair_column": "text pair", "label_column": "label"}
_MISSING = object()


@dataclass(frozen=True, slots=True)
class Example:
    """One row of a data file.

    Args:
        text: the first (or only) text, exactly as in the file.
        text_pair: the second text for pair tasks, or None when no pair column is configured.
        label: the raw label as a string ("1", "pos", "0.5"), a tuple of strings (a JSON list:
            the classes of a multi-label row), or None when the row has no label.
        line: where the row is, 1-based: the line where a CSV record starts (header = line 1),
            the line of a JSONL object, or the row index + 1 in Parquet.

    Examples:
    >>> Example("a fine film", None, "pos", 2).label
    'pos'
    """

    text: str
    text_pair: str | None
    label: str | tuple[str, ...] | None
    line: int


@dataclass(frozen=True)
class SourceSpec:
    """How to read a data file: its format and which columns hold what.

    Args:
        format: one of `FORMATS`, or None to tell from the file extension
            (`.csv`, `.tsv`, `.jsonl`/`.json`/`.ndjson`, `.parquet`, each optionally `.gz`).
        text_column: the column (JSONL: key) with the text.
        text_pair_column: the column with the second text of a pair task, or None.
        label_column: the column with the label.
        empty_labels: whether a row's label may be empty (an empty cell, null, whitespace:
            read as None) while the column stays required: the task decides (the empty set in
            a multi-label file, an error in any other; see `bertfit.data.tasks`).

    Examples:
    >>> SourceSpec(text_column="sentence").label_column
    'label'
    """

    format: str | None = None
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    empty_labels: bool = False


def read_examples(
    path: str | os.PathLike, spec: SourceSpec = SourceSpec(), *, labels_required: bool = True
) -> list[Example]:
    """Reads every row of a data file as an `Example`, in file order, validating each one.

    Args:
        path: the file, or `"-"` for standard input (CSV unless `spec.format` is given).
        spec: the format and column names.
        labels_required: whether every row must have a non-empty label (training and
            evaluation). When False a missing label column or an empty label gives `None`.

    Raises:
        DataError: the file is missing, empty, not UTF-8 or malformed, a column is missing, or
            a row has an empty text or label; the message names the file and line.
        MissingDependencyError: a Parquet file was given and pyarrow is not installed.

    Examples:
    >>> _ = Path("train.csv").write_text("text,label\\na fine film,pos\\n")
    >>> read_examples("train.csv")
    [Example(text='a fine film', text_pair=None, label='pos', line=2)]
    >>> read_examples("train.csv", SourceSpec(label_column="stars"), labels_required=False)[0].label
    """
    fmt = check_source(path, spec.format)
    data = _read_bytes(path, display_name(path))
    return parse_examples(data, display_name(path), fmt, spec, labels_required=labels_required)


def check_source(path: str | os.PathLike, format: str | None = None) -> str:
    """What `read_examples` refuses before it reads a byte: no such file, a device or a FIFO,
    a format it cannot tell; returns the format. Standard input and URLs are said by reading.

    Examples:
    >>> _ = Path("rows.tsv").write_text("text\\tlabel\\n")
    >>> check_source("rows.tsv"), check_source("rows.tsv", "csv")
    ('tsv', 'csv')
    >>> check_source("no-such.csv")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    bertfit.errors.DataError: no-such.csv: file not found (the working directory is ...); check ...
    """
    name = display_name(path)
    if path != STDIN and not storage.is_url(path):
        if not os.path.lexists(path):
            raise _not_found(name)
        _check_regular(path, name)
    try:
        return resolve_format(path, format)
    except DataError:
        _refuse_unfinished_set(path, name)
        raise


def parse_examples(
    data: bytes,
    name: str,
    fmt: str,
    spec: SourceSpec = SourceSpec(),
    *,
    labels_required: bool = True,
) -> list[Example]:
    """`read_examples` on bytes already in memory (an upload, a fuzz test): `name` is what
    messages call them, `fmt` one of `FORMATS`; gzip is not undone here."""
    if fmt != "parquet":
        _check_line_lengths(data, name)
    parse = (
        _read_parquet if fmt == "parquet" else _read_jsonl if fmt == "jsonl" else _read_delimited
    )
    with _gc_paused():
        return parse(data, _Reader(name, spec, labels_required, fmt))


def display_name(path: str | os.PathLike) -> str:
    """How a path is named in messages: `"<stdin>"` for `"-"`, else the path as given.

    Examples:
    >>> display_name("-"), display_name(Path("data/train.csv"))
    ('<stdin>', 'data/train.csv')
    """
    return "<stdin>" if path == STDIN else os.fspath(path)


def resolve_format(path: str | os.PathLike, format: str | None = None) -> str:
    """The format to read `path` with: `format` when given, else from the file extension.

    Args:
        path: the data file, or `"-"` (standard input: `STDIN_DEFAULT_FORMAT`).
        format: an explicit format, or None.

    Raises:
        DataError: `format` is not one of `FORMATS`, or the extension is not recognised.

    Examples:
    >>> resolve_format("train.jsonl.gz"), resolve_format("-"), resolve_format("x.txt", "tsv")
    ('jsonl', 'csv', 'tsv')
    """
    name = display_name(path)
    if format is not None:
        if format not in FORMATS:
            raise DataError(
                f"unknown format {format!r}; supported formats: {', '.join(FORMATS)}",
                path=name,
                code=UNREADABLE,
            )
        return format
    if path == STDIN:
        return STDIN_DEFAULT_FORMAT
    found = format_from_extension(path)
    if found is None:
        known = ", ".join(EXTENSIONS)
        raise DataError(
            f"cannot tell the format from the file name; supported formats: "
            f"{', '.join(FORMATS)} (extensions {known}, optionally followed by .gz). "
            "Rename the file or pass --format",
            path=name,
            code=UNREADABLE,
        )
    return found


def format_from_extension(path: str | os.PathLike) -> str | None:
    """The format that the file's extension names (`.gz` skipped), or None.

    Examples:
    >>> format_from_extension("a.CSV.gz"), format_from_extension("a.txt")
    ('csv', None)
    """
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    return EXTENSIONS.get(suffixes[-1]) if suffixes else None


def example_error(
    message: str,
    path: str | os.PathLike,
    line: int,
    format: str | None = None,
    *,
    code: str,
) -> DataError:
    """A `DataError` about one example: "path:line: ..." or, for Parquet, "path: row N: ...".

    Args:
        message: what is wrong and what to do.
        path: the data file.
        line: `Example.line`.
        format: the file's format; None to tell from its extension.
        code: the kind of problem (`DataError.code`).

    Examples:
    >>> str(example_error("empty text", "a.parquet", 3, code="data-empty-text"))
    'a.parquet: row 3: empty text'
    """
    name = display_name(path)
    if (format if format is not None else format_from_extension(name)) != "parquet":
        return DataError(message, path=name, line=line, code=code)
    error = DataError(f"row {line}: {message}", path=name, code=code)
    error.line = line
    return error


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector while millions of acyclic objects are made.

    Each new `Example` would otherwise count towards collections that find nothing to free;
    pausing saves about a quarter of the time on a million rows.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# ---- bytes ----


def _read_bytes(path: str | os.PathLike, name: str) -> bytes:
    if storage.is_url(path):
        data = _read_url(os.fspath(path), name)
        return _gunzip(data, name) if data[:2] == b"\x1f\x8b" else data
    try:
        if path == STDIN:
            stream = getattr(sys.stdin, "buffer", None)
            data = stream.read() if stream is not None else sys.stdin.read().encode("utf-8")
        else:
            data = Path(path).read_bytes()
    except FileNotFoundError:
        raise _not_found(name) from None
    except IsADirectoryError:
        raise DataError(
            "is a directory; expected a data file" + _unfinished_note(Path(path).glob("*")),
            path=name,
            code=UNREADABLE,
        ) from None
    except OSError as e:
        raise DataError(f"cannot be read: {e.strerror or e}", path=name, code=UNREADABLE) from None
    return _gunzip(data, name) if data[:2] == b"\x1f\x8b" else data


def _not_found(name: str) -> DataError:
    return DataError(
        f"file not found (the working directory is {os.getcwd()}); check the path",
        path=name,
        code="data-file-not-found",
    )


def _refuse_unfinished_set(path: str | os.PathLike, name: str) -> None:
    """A folder of shards without a manifest (no format to read it with) is said to be an
    unfinished prepare rather than a file of unknown format."""
    if path == STDIN:
        return
    if storage.is_url(path):
        files = storage.list_files(os.fspath(path)) if storage.isdir(os.fspath(path)) else []
    else:
        files = list(Path(path).glob("*")) if Path(path).is_dir() else []
    note = _unfinished_note(files)
    if note:
        raise DataError(f"is a folder, not a data file{note}", path=name, code=UNREADABLE)


def _unfinished_note(files) -> str:
    """What a folder of TFRecord shards without manifest.json is: an unfinished prepare
    (`bertfit.data.shard_writer` writes the manifest last), refused as incomplete."""
    names = [Path(str(f)).name for f in files]
    if "manifest.json" in names or not any(n.startswith("shard-") for n in names):
        return ""
    return (
        " (it holds TFRecord shards but no manifest.json: a `bertfit prepare` that did not "
        "finish, since the manifest is written last; an incomplete set is never trained on. "
        "Run the prepare again)"
    )


def _read_url(url: str, name: str) -> bytes:
    """An object of a bucket (`bertfit.storage`), with the errors of a local file."""
    try:
        return storage.read_bytes(url)
    except (FileNotFoundError, IsADirectoryError):
        if storage.isdir(url):
            raise DataError(
                "is a folder of objects; expected a data file"
                + _unfinished_note(storage.list_files(url)),
                path=name,
                code=UNREADABLE,
            ) from None
        raise DataError(
            "not found: no such object, or no such bucket; check the URL",
            path=name,
            code="data-file-not-found",
        ) from None
    except BertfitError:
        raise
    except Exception as e:  # the client's own errors (permissions, network): said, not shown
        raise DataError(
            f"cannot be read: {type(e).__name__}: {str(e)[:300]}", path=name, code=UNREADABLE
        ) from None


def _check_regular(path: str | os.PathLike, name: str) -> None:
    """Devices and FIFOs are refused before a byte is read: /dev/zero never ends."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # reading it says what is wrong
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):  # a directory: said by the caller
        return
    kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a device or socket"
    raise DataError(
        f"is {kind}, not a regular file; bertfit reads data files (pass - to read standard "
        "input, e.g. `producer | bertfit predict --data - --format jsonl`)",
        path=name,
        code=UNREADABLE,
    )


MAX_LINE_BYTES = 8 * 2**20
"""The longest line a text data file may have: far past any model's input, short of a file
that is one endless line (binary data, a wrong file)."""


def _check_line_lengths(data: bytes, name: str) -> None:
    if len(data) <= MAX_LINE_BYTES:
        return
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == ord("\n"))
    lengths = np.diff(np.concatenate(([-1], ends, [len(data)]))) - 1
    longest = int(lengths.argmax())
    if lengths[longest] > MAX_LINE_BYTES:
        raise DataError(
            f"line {longest + 1} is {int(lengths[longest]):,} bytes long, past the "
            f"{MAX_LINE_BYTES:,} a text data file may have; is this the right file (and format)?",
            path=name,
            code=UNREADABLE,
        )


def _gunzip(data: bytes, name: str) -> bytes:
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(
            f"looks gzip-compressed but cannot be decompressed ({e}); the file may be truncated",
            path=name,
            code=UNREADABLE,
        ) from None


_WIDE_BOMS = [  # UTF-32 first: its little-endian mark starts with UTF-16's
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
]


def _decode(data: bytes, name: str) -> str:
    for bom, encoding in _WIDE_BOMS:
        if data.startswith(bom):
            raise DataError(
                f"is {encoding} (it starts with a {encoding} byte-order mark); re-encode it as "
                f"UTF-8, e.g. `iconv -f {encoding} -t UTF-8 IN > OUT`",
                path=name,
                line=1,
                code=UNDECODABLE,
            )
    head = data[:4096]
    if head and head.count(0) > len(head) // 4:
        raise DataError(
            "looks like UTF-16 or UTF-32 without a byte-order mark (a quarter of its bytes are "
            "zero); re-encode it as UTF-8, e.g. `iconv -f UTF-16LE -t UTF-8 IN > OUT` (use the "
            "file's real encoding)",
            path=name,
            line=1,
            code=UNDECODABLE,
        )
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as e:
        raise _decode_error(data, skip + e.start, name) from None


def _decode_error(data: bytes, offset: int, name: str) -> DataError:
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return DataError(
        f"byte 0x{data[offset]:02x} at byte {column} of the line (byte offset {offset} in the "
        "file) is not valid UTF-8; re-encode the file as UTF-8, e.g. "
        "`iconv -f latin1 -t UTF-8 IN > OUT` (use the file's real encoding in place of latin1)",
        path=name,
        line=line,
        code=UNDECODABLE,
    )


# ---- rows → examples ----


@dataclass(frozen=True)
class _Reader:
    """What every format's reader needs to validate a row and to say where a problem is."""

    name: str
    spec: SourceSpec
    labels_required: bool
    format: str

    def error(self, message: str, line: int, code: str = UNREADABLE) -> DataError:
        return example_error(message, self.name, line, self.format, code=code)

    def example(self, line: int, text: str, pair: str | None, label) -> Example:
        """Validates one row's strings; an empty label becomes None when labels are optional
        (an empty list is a multi-label row without classes, and stays)."""
        if not visible(text):
            raise self.error(_empty_message(text, "text_column", self.spec), line, EMPTY_TEXT)
        if self.spec.text_pair_column is not None and not visible(pair or ""):
            message = _empty_message(pair or "", "text_pair_column", self.spec)
            raise self.error(message, line, EMPTY_TEXT)
        if label is None or (isinstance(label, str) and not visible(label)):
            if self.labels_required and not self.spec.empty_labels:
                message = _empty_message(label, "label_column", self.spec)
                raise self.error(message, line, "data-empty-label")
            label = None
        return Example(text, pair, label, line)

    def missing_column(
        self, field: str, columns: list[str], line: int | None, what: str
    ) -> DataError:
        """The error for a column (JSONL: key) that `spec.<field>` names but the data lacks."""
        column = getattr(self.spec, field)
        flag, role = _FLAGS[field], _ROLES[field]
        close = [c for c in columns if c.strip().lower() == column.strip().lower()]
        hint = f"pass {flag} {close[0]!r}" if close else f"pass {flag} NAME to use another one"
        listed = ", ".join(repr(c) for c in columns) or "none"
        message = (
            f"no {what} {column!r} for the {role}; the {what}s are: {listed}. "
            f"Rename the {what} or {hint}"
        )
        if line is None:
            return DataError(message, path=self.name, code=MISSING_COLUMN)
        return self.error(message, line, MISSING_COLUMN)

    def empty_file(self, expected: str) -> DataError:
        return DataError(
            f"the file has no rows; expected {expected}", path=self.name, code=EMPTY_FILE
        )


def visible(text: str) -> bool:
    r"""Whether `text` has a character the tokenizer keeps: not only whitespace, control,
    format (zero-width), private-use or combining characters.

    Examples:
    >>> visible(" a "), visible("\u200b\u0301 \x00")
    (True, False)
    """
    if text[:1].isalnum():  # the usual row, at once: a letter or digit is never C, Z or M
        return True
    return any(unicodedata.category(c)[0] not in "CZM" for c in text)


def _empty_message(value: str | None, field: str, spec: SourceSpec) -> str:
    if value == "":
        what = "empty"
    elif value is not None and value.isspace():
        what = f"only whitespace ({value!r})"
    else:
        what = (
            f"only invisible characters ({value!r}: control, zero-width, private-use or "
            "combining characters, which the tokenizer drops)"
        )
    if value is None:
        what = "missing (null)"
    role, column = _ROLES[field], getattr(spec, field)
    if field == "label_column":
        return (
            f"the label (column {column!r}) is {what}; every row needs a label for training and "
            "evaluation: fill it in or delete the row"
        )
    return f"the {role} (column {column!r}) is {what}; fill it in or delete the row"


# ---- CSV / TSV ----


def _read_delimited(data: bytes, reader: _Reader) -> list[Example]:
    fmt = reader.format
    delimiter = "\t" if fmt == "tsv" else ","
    records = _records(_decode(data, reader.name), fmt, reader.name)
    first = next(records, None)
    if first is None:
        sep = "\\t" if fmt == "tsv" else ","
        raise reader.empty_file(f"a header line such as 'text{sep}label', then one row per line")
    header_line, header = first
    indices = _column_indices(header, reader, header_line)
    width = len(header)
    make = reader.example
    ti, pi, li = indices
    examples = []  # the loop below runs once per row: keep it lean
    for line, row in records:
        if len(row) != width:
            raise reader.error(_width_message(row, header, delimiter), line)
        examples.append(
            make(line, row[ti], None if pi is None else row[pi], None if li is None else row[li])
        )
    if not examples:
        message = "the file has a header but no rows; add one row per example"
        raise reader.error(message, header_line, EMPTY_FILE)
    return examples


def _records(text: str, fmt: str, name: str) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of every record; blank lines are an error unless at the end."""
    if fmt == "tsv":
        rows = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        rows = csv.reader(io.StringIO(text, newline=""), strict=True)
    _allow_long_fields()
    blank, start = None, 1
    try:
        for row in rows:
            if not row:
                blank = blank or start
            elif blank is not None:
                raise _blank_line_error(name, blank)
            else:
                yield start, row
            start = rows.line_num + 1
    except csv.Error as e:
        raise _csv_error(e, name, start) from None


def _allow_long_fields() -> None:
    """Lets a CSV field be as long as a document (the csv default stops at 128 KiB)."""
    limit = 2**31 - 1
    if csv.field_size_limit() < limit:
        csv.field_size_limit(limit)


def _blank_line_error(name: str, line: int) -> DataError:
    return DataError(
        "the line is blank; blank lines are allowed only at the end of the file. Delete it, "
        "or write the empty field(s) explicitly if the row is meant to be there",
        path=name,
        line=line,
        code=UNREADABLE,
    )


def _csv_error(error: csv.Error, name: str, line: int) -> DataError:
    if "unexpected end of data" in str(error):
        message = (
            'a quoted field that starts here is never closed: the quote (") runs to the end of '
            'the file. Close the quote, or double a quote inside a quoted field ("")'
        )
    else:
        message = (
            f"malformed CSV record ({error}); put a field that contains a comma, a quote or a "
            'line break in double quotes, and double every quote inside it: "say ""hi"", ok"'
        )
    return DataError(message, path=name, line=line, code=UNREADABLE)


def _column_indices(
    header: list[str], reader: _Reader, line: int
) -> tuple[int, int | None, int | None]:
    """The positions of the text, pair and label columns; a needed column must be there."""
    spec = reader.spec

    def index(field: str, required: bool) -> int | None:
        column = getattr(spec, field)
        if column is None or (column not in header and not required):
            return None
        if column not in header:
            raise reader.missing_column(field, header, line, "column")
        if header.count(column) > 1:
            raise reader.error(f"the header names the column {column!r} more than once", line)
        return header.index(column)

    return (
        index("text_column", True),
        index("text_pair_column", True),
        index("label_column", reader.labels_required),
    )


def _width_message(row: list[str], header: list[str], delimiter: str) -> str:
    shown = ", ".join(_preview(field) for field in row)
    message = (
        f"expected {len(header)} fields like the header ({', '.join(header)}), "
        f"found {len(row)}: {shown}. "
    )
    if delimiter == "\t":
        return message + (
            "In TSV every tab separates fields and quotes are ordinary characters, so a text "
            "cannot contain a tab or a line break; remove them or convert the file to CSV or JSONL"
        )
    return message + (
        "Put a field that contains a comma or a line break in double quotes "
        '("like, this") and double every quote inside it'
    )


def _preview(value: str, limit: int = 40) -> str:
    """A field as Python writes it (whitespace and quotes visible), cut to `limit`."""
    shown = repr(value)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


def _json_preview(value: object, limit: int = 40) -> str:
    """A value as JSON writes it, cut to `limit`."""
    shown = json.dumps(value, ensure_ascii=False, default=str)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


# ---- JSONL ----


def _read_jsonl(data: bytes, reader: _Reader) -> list[Example]:
    examples = []
    blank = None
    for line, raw in enumerate(_decode(data, reader.name).split("\n"), start=1):
        if not raw or raw.isspace():
            blank = blank or line
            continue
        if blank is not None:
            raise _blank_line_error(reader.name, blank)
        examples.append(_json_example(_parse_object(raw, line, reader), line, reader))
    if not examples:
        raise reader.empty_file(
            'one JSON object per line, e.g. {"text": "a fine film", "label": 1}'
        )
    return examples


def _parse_object(raw: str, line: int, reader: _Reader) -> dict:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        hint = _ARRAY_HINT if raw.lstrip().startswith("[") else ""
        raise reader.error(
            f"malformed JSON at column {e.colno}: {e.msg}. Each line must hold one complete "
            f'JSON object, e.g. {{"text": "a fine film", "label": 1}}{hint}',
            line,
        ) from None
    except RecursionError:
        raise reader.error(
            "the JSON is nested too deeply to read; a row is one flat object, "
            'e.g. {"text": "a fine film", "label": 1}',
            line,
        ) from None
    except ValueError as e:  # e.g. an integer longer than Python's 4,300-digit limit
        raise reader.error(
            f"the JSON cannot be read: {e}. Write such a number as a string", line
        ) from None
    if not isinstance(value, dict):
        hint = _ARRAY_HINT if isinstance(value, list) else ""
        raise reader.error(
            f"expected a JSON object on each line, found {_json_kind(value)} "
            f'{_json_preview(value)}; write {{"text": ..., "label": ...}}{hint}',
            line,
        )
    return value


_ARRAY_HINT = (
    ". If the file is one JSON array, convert it to JSON Lines (one object per line), "
    "e.g. `jq -c '.[]' IN.json > OUT.jsonl`"
)


def _json_example(obj: dict, line: int, reader: _Reader) -> Example:
    spec = reader.spec
    keys = list(obj)
    text = _text_value(obj, "text_column", line, reader, keys)
    pair = None
    if spec.text_pair_column is not None:
        pair = _text_value(obj, "text_pair_column", line, reader, keys)
    label = obj.get(spec.label_column, _MISSING)
    if label is _MISSING:
        if reader.labels_required:
            raise reader.missing_column("label_column", keys, line, "key")
        label = None
    return reader.example(line, text, pair, _label_string(label, line, reader))


def _text_value(obj: dict, field: str, line: int, reader: _Reader, keys: list[str]) -> str:
    column = getattr(reader.spec, field)
    value = obj.get(column, _MISSING)
    if value is _MISSING:
        raise reader.missing_column(field, keys, line, "key")
    if value is None:
        value = ""  # reported as empty by `_Reader.example`
    if not isinstance(value, str):
        raise reader.error(
            f"the {_ROLES[field]} (column {column!r}) must be a string, found {_json_kind(value)} "
            f"{_json_preview(value)}; put it in quotes",
            line,
            MIXED_TYPES,
        )
    return _unicode(value, f"the {_ROLES[field]} (column {column!r})", line, reader)


def _unicode(value: str, what: str, line: int, reader: _Reader) -> str:
    """JSON escapes can spell a lone UTF-16 surrogate (\\ud800), which is not a character."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise reader.error(
            f"{what} holds the unpaired surrogate \\u{ord(value[e.start]):04x} at character "
            f"{e.start + 1}, which is not valid Unicode; a \\uD800-\\uDBFF escape must be "
            "followed by a \\uDC00-\\uDFFF one. Fix the text where it was produced",
            line,
            UNDECODABLE,
        ) from None
    return value


def _label_string(value: object, line: int, reader: _Reader):
    """A label as text: "pos" → "pos", 3 → "3", 0.5 → "0.5", True → "true", a list of those →
    a tuple; None stays None."""
    if isinstance(value, list):
        return tuple(
            _scalar_label(item, line, reader, "an item of the label list") for item in value
        )
    return _scalar_label(value, line, reader, "the label")


def _scalar_label(value: object, line: int, reader: _Reader, what: str) -> str | None:
    if value is None:
        return value
    if isinstance(value, str):
        return _unicode(value, f"{what} (column {reader.spec.label_column!r})", line, reader)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    column = reader.spec.label_column
    raise reader.error(
        f"{what} (column {column!r}) is {_json_kind(value)} {_json_preview(value)}; a label is a "
        "string, a number or a boolean, or a list of those for a multi-label row",
        line,
        "data-label-invalid",
    )


def _json_kind(value: object) -> str:
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "a number"
    if value is None:
        return "null"
    return kinds.get(type(value), f"a {type(value).__name__}")


# ---- Parquet ----


def _import_parquet():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingDependencyError(
            "Reading Parquet files needs pyarrow: `pip install pyarrow`, or convert the file "
            "to CSV or JSONL."
        ) from None
    return pq


def _read_parquet(data: bytes, reader: _Reader) -> list[Example]:
    pq = _import_parquet()
    import pyarrow as pa

    spec = reader.spec
    try:
        table_file = pq.ParquetFile(pa.BufferReader(data))
        columns = list(table_file.schema_arrow.names)
        needed = _parquet_columns(columns, reader)
        table = table_file.read(columns=needed)
    except (pa.ArrowException, OSError) as e:
        raise DataError(
            f"cannot be read as Parquet: {e}", path=reader.name, code=UNREADABLE
        ) from None
    if table.num_rows == 0:
        raise reader.empty_file("at least one row")
    values = {name: table.column(name).to_pylist() for name in needed}
    texts = values[spec.text_column]
    pairs = values.get(spec.text_pair_column or "", [None] * len(texts))
    labels = values.get(spec.label_column, [None] * len(texts))
    return [
        _parquet_example(row, text, pair, label, reader)
        for row, (text, pair, label) in enumerate(zip(texts, pairs, labels, strict=True), start=1)
    ]


def _parquet_columns(columns: list[str], reader: _Reader) -> list[str]:
    spec = reader.spec
    needed = [spec.text_column]
    if spec.text_pair_column is not None:
        needed.append(spec.text_pair_column)
    for field in ("text_column", "text_pair_column"):
        column = getattr(spec, field)
        if column is not None and column not in columns:
            raise reader.missing_column(field, columns, None, "column")
    if spec.label_column in columns:
        needed.append(spec.label_column)
    elif reader.labels_required:
        raise reader.missing_column("label_column", columns, None, "column")
    return needed


def _parquet_example(row: int, text, pair, label, reader: _Reader) -> Example:
    for field, value in (("text_column", text), ("text_pair_column", pair)):
        if value is not None and not isinstance(value, str):
            column = getattr(reader.spec, field)
            raise reader.error(
                f"the {_ROLES[field]} (column {column!r}) must be a string, "
                f"found {_json_preview(value)}",
                row,
                MIXED_TYPES,
            )
    pair = None if reader.spec.text_pair_column is None else (pair or "")
    return reader.example(row, text or "", pair, _label_string(label, row, reader))
