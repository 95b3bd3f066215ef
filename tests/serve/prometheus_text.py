"""A strict reader of Prometheus' text exposition format (version 0.0.4), for the metrics tests:
`prometheus_client` is not installed here, so this follows the format's specification
(https://prometheus.io/docs/instrumenting/exposition_formats/) and raises on anything it does
not allow, with the line number."""

from __future__ import annotations

import math
import re

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
_VALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(
    rf"^(?P<name>{_NAME})(?:\{{(?P<labels>(?:{_LABEL}={_VALUE}(?:,{_LABEL}={_VALUE})*)?,?)\}})?"
    r" (?P<value>\S+)(?: (?P<timestamp>-?[0-9]+))?$"
)
_PAIR = re.compile(rf"({_LABEL})=({_VALUE})")
_TYPE = re.compile(rf"^# TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped)$")
_TYPES_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}


def _number(text: str, where: str) -> float:
    if text in ("+Inf", "-Inf", "NaN"):
        return {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}[text]
    if not re.fullmatch(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", text):
        raise ValueError(f"{where}: {text!r} is not a sample value")
    return float(text)


def _unescape(quoted: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], quoted[1:-1])


def parse(text: str) -> dict[str, dict]:
    """{family name: {"type": ..., "samples": [(sample name, {label: value}, value)]}}."""
    if not text.endswith("\n"):
        raise ValueError("the text must end with a line feed")
    families: dict[str, dict] = {}
    current = None
    for number, line in enumerate(text[:-1].split("\n"), 1):
        where = f"line {number}"
        if line.startswith("#"):
            found = _TYPE.match(line)
            if line.startswith("# TYPE"):
                if not found:
                    raise ValueError(f"{where}: malformed TYPE line {line!r}")
                name, kind = found.groups()
                if name in families:
                    raise ValueError(f"{where}: a second TYPE line for {name}")
                families[name] = {"type": kind, "samples": []}
                current = name
            continue  # HELP and other comments
        if not line.strip():
            continue
        sample = _SAMPLE.match(line)
        if not sample:
            raise ValueError(f"{where}: malformed sample {line!r}")
        name = sample["name"]
        family = current
        suffixes = _TYPES_SUFFIXES.get(families[family]["type"], ("",)) if family else ("",)
        if family is None or name not in {family + suffix for suffix in suffixes}:
            raise ValueError(f"{where}: sample {name} is not in the family above it ({family})")
        labels = {}
        for label, value in _PAIR.findall(sample["labels"] or ""):
            if label in labels:
                raise ValueError(f"{where}: label {label} given twice")
            labels[label] = _unescape(value)
        families[family]["samples"].append((name, labels, _number(sample["value"], where)))
    for name, family in families.items():
        if family["type"] == "histogram":
            _check_histogram(name, family["samples"])
    return families


def _check_histogram(name: str, samples: list) -> None:
    """Per label set: cumulative buckets ending in le="+Inf", equal to _count, and a _sum."""
    series: dict[tuple, dict] = {}
    for sample, labels, value in samples:
        key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        entry = series.setdefault(key, {"buckets": [], "sum": None, "count": None})
        if sample.endswith("_bucket"):
            entry["buckets"].append((_number(labels["le"], name), value))
        else:
            entry[sample.rsplit("_", 1)[1]] = value
    for key, entry in series.items():
        limits = [limit for limit, _ in entry["buckets"]]
        counts = [count for _, count in entry["buckets"]]
        if not limits or limits[-1] != math.inf or limits != sorted(limits):
            raise ValueError(f'{name}{key}: buckets must rise to le="+Inf"')
        if counts != sorted(counts):
            raise ValueError(f"{name}{key}: bucket counts must be cumulative")
        if entry["count"] != counts[-1] or entry["sum"] is None:
            raise ValueError(f"{name}{key}: _count must equal the +Inf bucket, with a _sum")


def value(families: dict, name: str, sample: str | None = None, **labels) -> float:
    """The value of the sample of `name` (or its `sample`, e.g. NAME_count) with `labels`."""
    for sample_name, sample_labels, number in families[name]["samples"]:
        if sample_name == (sample or name) and all(
            sample_labels.get(k) == v for k, v in labels.items()
        ):
            return number
    raise KeyError(f"no sample {sample or name} {labels}")
