"""Writing `bertfit predict`'s output: checked before anything is computed, written whole.

JSON lines by default; CSV when the output name ends in .csv , with the
columns of the run's task: `label,probabilities` (single-label), `labels,probabilities`
(multi-label; the labels as a JSON list) or `value` (regression). Probabilities are a JSON
object {label: probability}.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from bertfit.atomic import temporary_path
from bertfit.paths import STDOUT, check_output_file, write_output


def check_output_path(output: str, data: str, run: str | None = None) -> None:
    """Refuses an output that would overwrite the input or the run's files, is a directory, a
    device or a FIFO, or cannot be written, before any prediction is computed."""
    check_output_file(output, "--output", inputs=[data], run_dir=run)


def output_format(output: str, asked: str | None = None) -> str:
    """`asked`, else csv for a name ending in .csv, else jsonl."""
    if asked:
        return asked
    return "csv" if os.fspath(output).lower().endswith(".csv") else "jsonl"


def format_predictions(rows: list[dict], csv_format: bool) -> str:
    """JSON lines, or CSV with the columns of the rows' task (see the module docstring)."""
    if not csv_format:
        return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    columns = _columns(rows)
    writer.writerow(columns)
    for row in rows:
        writer.writerow(
            [
                row[c] if c in ("label", "value") else json.dumps(row[c], ensure_ascii=False)
                for c in columns
            ]
        )
    return buffer.getvalue()


def _columns(rows: list[dict]) -> list[str]:
    if not rows:
        return ["label", "probabilities"]
    if "value" in rows[0]:
        return ["value"]
    return ["labels" if "labels" in rows[0] else "label", "probabilities"]


def write_predictions(rows: list[dict], output: str, format: str | None = None) -> None:
    """Writes `rows` to `output` ("-" → stdout) in `format` (default: by the name), all or
    nothing."""
    write_output(output, format_predictions(rows, output_format(output, format) == "csv"))


def write_prediction_chunks(
    chunks: Iterable[list[dict]], output: str, format: str | None = None
) -> int:
    """Writes `predict_chunks`' rows as they come; returns how many. To standard output ("-")
    each chunk is flushed at once; a file is written to a temporary name beside it and renamed
    into place at the end (whole or absent, as `write_predictions`). The CSV header is that of
    the first chunk's task."""
    csv_format = output_format(output, format) == "csv"
    to_stdout = os.fspath(output) == STDOUT
    temporary = None if to_stdout else temporary_path(Path(output))
    stream = sys.stdout if to_stdout else open(temporary, "w", encoding="utf-8", newline="")  # noqa: SIM115
    count, header = 0, True
    try:
        for rows in chunks:
            text = format_predictions(rows, csv_format)
            if csv_format and not header:
                text = text.partition("\r\n")[2]  # the header, written with the first chunk
            stream.write(text)
            stream.flush()
            count, header = count + len(rows), header and not rows
        if header and csv_format:  # no row at all: a header alone, as `write_predictions`
            stream.write(format_predictions([], True))
        if temporary is not None:
            os.fsync(stream.fileno())
            stream.close()
            os.replace(temporary, output)
    finally:
        if temporary is not None:
            stream.close()
            temporary.unlink(missing_ok=True)
    return count
