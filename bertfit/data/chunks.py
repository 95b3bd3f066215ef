"""Reading a data file in chunks of rows, so that memory does not grow with the file.

`read_chunks(path, spec)` yields lists of `Example`s in file order, validated row by row with the
same rules and messages as `bertfit.data.sources.read_examples` (which reads the whole file at
once and stays the reader of the in-memory path). CSV/TSV/JSONL are read from a text stream
(gzip decompressed on the fly when the file starts with gzip's magic bytes); Parquet one record
batch at a time. A URL (`gs://`, `s3://`, `ram://`: `bertfit.storage`) is streamed the same
way, never downloaded whole; `source_files` expands a glob, local or at a URL. Standard input
(`"-"`, CSV/TSV/JSONL) is streamed too: `predict --data -` answers an endless stream in chunks.

    >>> from pathlib import Path
    >>> _ = Path("chunks.csv").write_text("text,label\\na,pos\\nb,neg\\nc,pos\\n")
    >>> [[e.text for e in chunk] for chunk in read_chunks("chunks.csv", rows=2)]
    [['a', 'b'], ['c']]
"""

from __future__ import annotations

import contextlib
import csv
import glob
import gzip
import io
import os
import sys
import zlib
from collections.abc import Iterator

from bertfit import storage
from bertfit.data import sources
from bertfit.data.sources import Example, SourceSpec, display_name, resolve_format
from bertfit.errors import BertfitError, DataError

CHUNK_ROWS = 8192


def read_chunks(
    path: str | os.PathLike,
    spec: SourceSpec | None = None,
    *,
    rows: int = CHUNK_ROWS,
    labels_required: bool = True,
) -> Iterator[list[Example]]:
    """The rows of `path` as lists of at most `rows` `Example`s, in file order.

    Raises:
        DataError: as `read_examples`: a missing or malformed file, a missing column, an empty
            text or label (the message names the file and line).
    """
    spec = spec or SourceSpec()
    name = display_name(path)
    _check_file(path, name)
    fmt = resolve_format(path, spec.format)
    reader = sources._Reader(name, spec, labels_required, fmt)
    if fmt == "parquet" and path == sources.STDIN:  # a Parquet file is read from its end
        examples = iter(sources.read_examples(path, spec, labels_required=labels_required))
    elif fmt == "parquet":
        examples = _parquet_rows(path, reader, rows)
    elif fmt == "jsonl":
        examples = _jsonl_rows(path, reader)
    else:
        examples = _delimited_rows(path, reader)
    chunk: list[Example] = []
    try:
        for example in examples:
            chunk.append(example)
            if len(chunk) == rows:
                yield chunk
                chunk = []
    except UnicodeDecodeError as e:
        raise DataError(
            f"is not valid UTF-8 ({e.reason}); re-encode the file as UTF-8, e.g. "
            "`iconv -f latin1 -t UTF-8 IN > OUT`",
            path=name,
            code=sources.UNDECODABLE,
        ) from None
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"cannot be read: {e}", path=name, code=sources.UNREADABLE) from None
    except BertfitError:
        raise
    except Exception as e:
        if not storage.is_url(path):
            raise
        raise _client_error(e, name) from None  # the store's client: permissions, network
    if chunk:
        yield chunk


def _client_error(error: Exception, name: str) -> DataError:
    message = f"cannot be read: {type(error).__name__}: {str(error)[:300]}"
    return DataError(message, path=name, code=sources.UNREADABLE)


def source_files(pattern: str, flag: str = "") -> list[str]:
    """The files a data path names: itself, or every match of a glob (local or at a URL),
    sorted by name.

    Raises:
        DataError: a glob that matches nothing.
    """
    if not glob.has_magic(pattern):
        return [pattern]
    paths = storage.glob(pattern) if storage.is_url(pattern) else sorted(glob.glob(pattern))
    if not paths:
        raise DataError(
            f"{flag + ' ' if flag else ''}{pattern!r} matches no file; check the pattern (quote "
            "it so the shell does not expand it) and the working directory.",
            code="data-file-not-found",
        )
    return paths


def _check_file(path: str | os.PathLike, name: str) -> None:
    if path == sources.STDIN:
        return
    if storage.is_url(path):
        try:
            found, folder = storage.exists(os.fspath(path)), storage.isdir(os.fspath(path))
        except BertfitError:
            raise
        except Exception as e:
            raise _client_error(e, name) from None
        if found and not folder:
            return
        if folder:
            message, code = "is a folder of objects; expected a data file", sources.UNREADABLE
        else:
            message = "not found: no such object, or no such bucket; check the URL"
            code = "data-file-not-found"
        raise DataError(message, path=name, code=code)
    if not os.path.isfile(path):
        raise DataError(
            f"file not found (the working directory is {os.getcwd()}); check the path",
            path=name,
            code="data-file-not-found",
        )


def _open_binary(path: str | os.PathLike):
    """The file (or the object at a URL, streamed), open for reading bytes."""
    if storage.is_url(path):
        return storage.open_read(os.fspath(path))
    return open(path, "rb")  # noqa: SIM115


def _stdin_binary() -> io.BufferedReader:
    """Standard input as bytes that can be peeked at (a pipe cannot seek back)."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text-only stdin (an embedding program's)
        stream = io.BytesIO(sys.stdin.read().encode("utf-8"))
    return stream if hasattr(stream, "peek") else io.BufferedReader(stream)


@contextlib.contextmanager
def _text_stream(path: str | os.PathLike) -> Iterator[io.TextIOBase]:
    if path == sources.STDIN:
        raw = _stdin_binary()
        gzipped = raw.peek(2)[:2] == b"\x1f\x8b"
        binary = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
        text = io.TextIOWrapper(binary, encoding="utf-8-sig", newline="")
        try:
            yield text
        finally:
            text.detach()  # standard input stays open (and is not read further)
        return
    with _open_binary(path) as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        binary = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
        # utf-8-sig skips a byte-order mark, as read_examples does
        with io.TextIOWrapper(binary, encoding="utf-8-sig", newline="") as text:
            yield text


def _delimited_rows(path, reader) -> Iterator[Example]:
    tsv = reader.format == "tsv"
    with _text_stream(path) as text:
        if tsv:
            rows = csv.reader(text, delimiter="\t", quoting=csv.QUOTE_NONE)
        else:
            rows = csv.reader(text, strict=True)
        sources._allow_long_fields()
        header, header_line, indices, blank, start = None, 1, None, None, 1
        try:
            for row in rows:
                if not row:
                    blank = blank or start
                elif blank is not None:
                    raise sources._blank_line_error(reader.name, blank)
                elif header is None:
                    header, header_line = row, start
                    indices = sources._column_indices(header, reader, header_line)
                else:
                    if len(row) != len(header):
                        message = sources._width_message(row, header, "\t" if tsv else ",")
                        raise reader.error(message, start)
                    ti, pi, li = indices
                    yield reader.example(
                        start,
                        row[ti],
                        None if pi is None else row[pi],
                        None if li is None else row[li],
                    )
                start = rows.line_num + 1
        except csv.Error as e:
            raise sources._csv_error(e, reader.name, start) from None
        if header is None:
            raise reader.empty_file("a header line, then one row per line")


def _jsonl_rows(path, reader) -> Iterator[Example]:
    blank = None
    with _text_stream(path) as text:
        for line, raw in enumerate(text, start=1):
            raw = raw.rstrip("\r\n")
            if not raw or raw.isspace():
                blank = blank or line
                continue
            if blank is not None:
                raise sources._blank_line_error(reader.name, blank)
            obj = sources._parse_object(raw, line, reader)
            yield sources._json_example(obj, line, reader)


def _parquet_rows(path, reader, rows: int) -> Iterator[Example]:
    pq = sources._import_parquet()
    import pyarrow as pa

    spec = reader.spec
    try:
        with _open_binary(path) as raw:
            table_file = pq.ParquetFile(raw)
            needed = sources._parquet_columns(list(table_file.schema_arrow.names), reader)
            batches = table_file.iter_batches(batch_size=rows, columns=needed)
            row = 0
            for batch in batches:
                values = {name: batch.column(name).to_pylist() for name in needed}
                texts = values[spec.text_column]
                pairs = values.get(spec.text_pair_column or "", [None] * len(texts))
                labels = values.get(spec.label_column, [None] * len(texts))
                for text, pair, label in zip(texts, pairs, labels, strict=True):
                    row += 1
                    yield sources._parquet_example(row, text, pair, label, reader)
    except (pa.ArrowException, OSError) as e:
        raise DataError(
            f"cannot be read as Parquet: {e}", path=reader.name, code=sources.UNREADABLE
        ) from None
