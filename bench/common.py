"""Shared helpers for benchmarks: timing, machine description, result files."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    return next((line.split(":", 1)[1].strip() for line in lines if "model name" in line), "")


def machine() -> dict:
    return {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def best_of(fn, repeats: int = 3) -> float:
    """The fastest of `repeats` timed calls (after one warm-up call), in seconds."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def write_result(name: str, result: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    command = " ".join([f"python -m bench.{Path(sys.argv[0]).stem}", *sys.argv[1:]])
    result = {"command": command, "machine": machine(), "date": time.strftime("%Y-%m-%d"), **result}
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return path
