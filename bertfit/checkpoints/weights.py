"""Fill a `BertEncoder` from a dict of stored arrays through a format's name table."""

from __future__ import annotations

import dataclasses

import numpy as np

from bertfit.checkpoints.names import OPTIONAL, Source
from bertfit.errors import CheckpointError


@dataclasses.dataclass
class LoadReport:
    """What a load did with each tensor; `str(report)` is a readable summary."""

    source: str
    format: str
    loaded: list[str] = dataclasses.field(default_factory=list)
    missing: list[str] = dataclasses.field(
        default_factory=list
    )  # optional weights left as initialised
    unexpected: list[str] = dataclasses.field(default_factory=list)
    mismatched: list[str] = dataclasses.field(default_factory=list)
    ignored: list[str] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.format} checkpoint {self.source}: loaded {len(self.loaded)} tensors"]
        for title, items in (
            ("missing (left as initialised)", self.missing),
            ("unexpected (not used)", self.unexpected),
            ("ignored (not encoder weights)", self.ignored),
        ):
            if items:
                lines.append(f"  {title}: {', '.join(items)}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _find(stored: dict[str, np.ndarray], source: Source) -> str | None:
    return next((name for name in source.names if name in stored), None)


def assign_weights(
    encoder,
    stored: dict[str, np.ndarray],
    table: dict[str, Source],
    report: LoadReport,
    ignored_prefixes: tuple[str, ...] = (),
    optional: tuple[str, ...] = OPTIONAL,
) -> LoadReport:
    """Copies `stored` arrays into `encoder` through `table`.

    A missing required weight or a shape mismatch raises `CheckpointError` naming the tensor; a
    missing pooler is allowed and reported. Stored tensors the table does not use are reported
    as unexpected (or ignored, when a prefix says they are known non-encoder tensors).
    """
    variables = encoder.named_variables()
    used: set[str] = set()
    missing_required, values = [], {}
    for canonical, variable in variables.items():
        source = table.get(canonical)
        if source is None:  # the config asks for a layer the format's names lack
            missing_required.append(canonical)
            continue
        name = _find(stored, source)
        if name is None:
            (report.missing if canonical in optional else missing_required).append(source.names[0])
            continue
        used.add(name)
        value = source.to_encoder(np.asarray(stored[name]))
        if tuple(value.shape) != tuple(variable.shape):
            report.mismatched.append(
                f"{name}: checkpoint {tuple(value.shape)}, encoder {tuple(variable.shape)}"
            )
            continue
        values[canonical] = value
    if missing_required or report.mismatched:
        raise CheckpointError(_problem_message(report, missing_required, len(stored)))
    for canonical, value in values.items():
        variables[canonical].assign(value.astype(variables[canonical].dtype))
        report.loaded.append(canonical)
    for name in sorted(set(stored) - used):
        (report.ignored if name.startswith(ignored_prefixes) else report.unexpected).append(name)
    return report


SHOWN = 3  # tensors named in a message; the rest are counted


def _few(items: list[str], separator: str = ", ") -> str:
    shown = separator.join(items[:SHOWN])
    return shown if len(items) <= SHOWN else f"{shown} and {len(items) - SHOWN} more"


def _problem_message(report: LoadReport, missing_required: list[str], stored: int) -> str:
    lines = [f"Cannot load the {report.format} checkpoint {report.source}:"]
    if missing_required:
        lines.append(
            f"  missing {len(missing_required)} required tensors of {stored} stored: "
            + _few(missing_required)
        )
    if report.mismatched:
        lines.append("  shape mismatches: " + _few(report.mismatched, "; "))
    lines.append(
        "The checkpoint is truncated or does not match its config file "
        "(num_hidden_layers, hidden_size, vocab_size, ...). Re-export it, or fix the config."
    )
    return "\n".join(lines)


def read_weights(encoder, table: dict[str, Source]) -> dict[str, np.ndarray]:
    """The encoder's weights under a format's names, in that format's layout (for writers)."""
    return {
        table[canonical].names[0]: table[canonical].from_encoder(np.asarray(variable.numpy()))
        for canonical, variable in encoder.named_variables().items()
    }
