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

from bertfit.paths import check_output_file, write_output


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
