"""The order of class ids: numerically when every label is an integer ("2" < "10"), else as
strings. `bertfit.data.tasks` builds the label maps of every task on it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal

INTEGER_LABEL = re.compile(r"-?[0-9]+")


def sorted_labels(labels: Iterable[str]) -> list[str]:
    """Class-id order: numeric when every label is an integer (ties such as "01"/"1" by text),
    else text."""
    labels = list(labels)
    if all(INTEGER_LABEL.fullmatch(label) for label in labels):
        # Decimal, not int: Python refuses to parse integers longer than 4,300 digits.
        return sorted(labels, key=lambda label: (Decimal(label), label))
    return sorted(labels)
