"""Writing `bertfit predict`'s output: checked before anything is computed, written whole."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import tempfile
from pathlib import Path

from bertfit.atomic import write_text_atomic
from bertfit.errors import ConfigError

STDOUT = "-"


def check_output_path(output: str, data: str) -> None:
    """Refuses an output that would overwrite the input, is a directory, or cannot be written,
    before any prediction is computed."""
    if output == STDOUT:
        return
    path = Path(output)
    if data != STDOUT and path.exists() and os.path.samefile(path, data):
        raise ConfigError(
            f"--output {output} is the input file --data {data}; writing the "
            "predictions there would destroy the input. Choose another --output."
        )
    if path.is_dir():
        raise ConfigError(
            f"--output {output} is a directory; give a file name such as "
            f"{path / 'predictions.jsonl'}."
        )
    parent = path.absolute().parent
    if not parent.is_dir():
        raise ConfigError(f"--output {output}: the folder {parent} does not exist.")
    try:
        os.remove(tempfile.mkstemp(prefix=".bertfit-write-test-", dir=parent)[1])
    except OSError as e:
        raise ConfigError(f"--output {output}: cannot write in {parent} ({e.strerror}).") from None


def format_predictions(rows: list[dict], csv_format: bool) -> str:
    """JSON lines, or CSV with a `label` column and the probabilities as JSON."""
    if not csv_format:
        return "".join(json.dumps(row) + "\n" for row in rows)
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["label", "probabilities"])
    for row in rows:
        writer.writerow([row["label"], json.dumps(row["probabilities"])])
    return buffer.getvalue()


def write_predictions(rows: list[dict], output: str) -> None:
    """Writes `rows` to `output` (.csv → CSV, else JSON lines; "-" → stdout), all or nothing."""
    text = format_predictions(rows, output.endswith(".csv"))
    if output == STDOUT:
        sys.stdout.write(text)
    else:
        write_text_atomic(output, text)
