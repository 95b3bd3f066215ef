"""`Finding`s and the `Report` that collects them: a stable code, a severity, where, why, fix.

Codes are part of the interface (scripts and tests match on them); the words may improve.
A report renders as a table (coloured on a terminal) or as JSON, and gives the exit code:
0 when clean, 2 when there is an error, 1 when there is a warning and `strict` is asked for.
"""

from __future__ import annotations

import dataclasses
import json
import sys

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)
TARGETS = ("tpu", "gpu", "cpu")  # the hardware a report judges for


@dataclasses.dataclass
class Finding:
    """One problem (or notable fact) about a setup.

    Args:
        code: stable identifier such as "shape-dynamic-seq".
        severity: "error" (training would fail or be wrong), "warning" (it would run, badly)
            or "info".
        message: what was found, in one sentence.
        where: file:line, column, tensor name or variable, as precise as known.
        why: why it matters on the target hardware.
        fix: what to do instead.
    """

    code: str
    severity: str
    message: str
    where: str = ""
    why: str = ""
    fix: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Report:
    """Everything `bertfit check` found, plus what it compiled and measured."""

    target: str = "cpu"
    findings: list[Finding] = dataclasses.field(default_factory=list)
    compiled: list[dict] = dataclasses.field(default_factory=list)
    memory: dict = dataclasses.field(default_factory=dict)
    stats: dict = dataclasses.field(default_factory=dict)
    # what this run's backend cannot check, said rather than silently skipped
    not_checked: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def add(
        self,
        code: str,
        severity: str,
        message: str,
        *,
        where: str = "",
        why: str = "",
        fix: str = "",
    ) -> Finding:
        finding = Finding(code, severity, message, where, why, fix)
        self.findings.append(finding)
        return finding

    @property
    def codes(self) -> list[str]:
        return [f.code for f in self.findings]

    def count(self, severity: str) -> int:
        return sum(f.severity == severity for f in self.findings)

    def exit_code(self, strict: bool = False) -> int:
        if self.count(ERROR):
            return 2
        if strict and self.count(WARNING):
            return 1
        return 0

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "ok": not self.count(ERROR),
            "errors": self.count(ERROR),
            "warnings": self.count(WARNING),
            "findings": [f.to_dict() for f in self.findings],
            "compiled": self.compiled,
            "memory": self.memory,
            "stats": self.stats,
            "not_checked": self.not_checked,
            "seconds": round(self.seconds, 2),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def render(self, color: bool | None = None) -> str:
        """A readable table: findings by severity, then compiled shapes and memory."""
        color = sys.stdout.isatty() if color is None else color
        paint = _painter(color)
        order = {s: i for i, s in enumerate(SEVERITIES)}
        lines = []
        findings = sorted(self.findings, key=lambda f: order[f.severity])
        if findings:
            width = max(len(f.code) for f in findings)
            for f in findings:
                lines.append(
                    f"{paint(f.severity, f'{f.severity:<7}')} {f.code:<{width}}  {f.message}"
                )
                pad = " " * (width + 10)
                for label, text in (("where", f.where), ("why", f.why), ("fix", f.fix)):
                    if text:
                        lines.append(f"{pad}{label}: {text}")
        if self.compiled:
            lines.append("")
            lines.append(f"compiled for {self.target}:")
            for c in self.compiled:
                status = paint("info", "ok") if c["ok"] else paint("error", "FAILED")
                memory = f"  XLA memory {_gib(c['memory_bytes'])}" if c.get("memory_bytes") else ""
                lines.append(
                    f"  {c['name']:<28} {c['shape']:<22} {c['stage']:<14} "
                    f"{c['seconds']:6.1f}s  {status}{memory}"
                )
        if self.memory:
            m = self.memory
            activations = (
                f"up to {_gib(max(m['activations_bytes'].values()))}"
                if m["activations_bytes"]
                else "not estimated (the encoder's layers and width are not known)"
            )
            lines.append("")
            lines.append(
                f"memory per replica: parameters {_gib(m['parameters_bytes'])} "
                f"({m['parameters']:,} values), + gradients and optimizer state "
                f"{_gib(m['training_state_bytes'])}, activations (estimate) {activations}"
            )
            for shape, size in m["activations_bytes"].items():
                lines.append(f"  activations {shape:<22} {_gib(size)}")
            if m.get("plan"):
                peak = m["plan"]
                remat = " with --remat" if peak["remat"] else ""
                lines.append(
                    f"  predicted peak of a training step {_gib(peak['peak_bytes'])} at "
                    f"{list(peak['shape'])}{remat} (bertfit.checks.memory)"
                )
        if self.stats:
            lines.append("")
            lines.append("checked: " + ", ".join(f"{k} {v}" for k, v in self.stats.items()))
        lines.extend(self.not_checked)
        errors, warnings = self.count(ERROR), self.count(WARNING)
        summary = (
            f"{errors} error(s), {warnings} warning(s), {self.count(INFO)} note(s) "
            f"for target {self.target} in {self.seconds:.1f}s"
        )
        lines.append("")
        lines.append(paint(ERROR if errors else WARNING if warnings else "ok", summary))
        return "\n".join(lines)


_COLORS = {ERROR: "31", WARNING: "33", INFO: "36", "ok": "32"}


def _painter(color: bool):
    if not color:
        return lambda _severity, text: text
    return lambda severity, text: f"\033[{_COLORS.get(severity, '0')}m{text}\033[0m"


def _gib(size: float) -> str:
    if size >= 2**30:
        return f"{size / 2**30:.2f} GiB"
    return f"{size / 2**20:.1f} MiB"
