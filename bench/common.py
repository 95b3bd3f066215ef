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
        "matmul_gflops": matmul_gflops(),
    }


def matmul_gflops() -> float:
    """This machine's float32 matrix-product speed now, in GFLOP/s: numpy's fastest of 30
    products the size of a BERT feed-forward layer's (2048 x 384 x 1536), after a second of
    warm-up (the first products run at half speed).

    The machines behind "2 CPUs" differ (torch's MiniLM forward at seq 64 did 132 ex/s on
    one and 37-40 on another), so results record what the machine could do, and peers'
    figures are checked against it (`fraction_of_peak`).
    """
    import numpy as np

    rows, inner, columns = 2048, 384, 1536
    a = np.random.default_rng(0).random((rows, inner), dtype=np.float32)
    b = np.random.default_rng(1).random((inner, columns), dtype=np.float32)
    warm = time.perf_counter() + 1.0
    while time.perf_counter() < warm:
        a @ b
    seconds = best_of(lambda: a @ b, repeats=30)
    return 2 * rows * inner * columns / seconds / 1e9


def bert_forward_gflop(config: dict, batch: int, seq_length: int) -> float:
    """The matrix products of one BERT encoder forward over a padded [batch, seq_length]
    batch, in GFLOP (`bertfit.model.config.forward_flops_per_token`, which `bertfit doctor`
    counts too). `config` is a Hugging Face config.json's dict.

    >>> round(bert_forward_gflop(
    ...     {"hidden_size": 384, "intermediate_size": 1536, "num_hidden_layers": 6}, 64, 64), 1)
    89.4
    """
    from bertfit.model.config import forward_flops_per_token

    per_token = forward_flops_per_token(
        config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"], seq_length
    )
    return batch * seq_length * per_token / 1e9


def fraction_of_peak(gflop: float, seconds: float, peak_gflops: float) -> float:
    """How much of the machine's matmul speed a run of `gflop` in `seconds` used. A peer far
    below 1 is being slowed by the harness (threads, a shared process), not by its code."""
    return gflop / seconds / peak_gflops


def call_times(fn, repeats: int = 3) -> list[float]:
    """The seconds of each of `repeats` timed calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def best_of(fn, repeats: int = 3) -> float:
    """The fastest of `repeats` timed calls (after one warm-up call), in seconds."""
    return min(call_times(fn, repeats))


def write_result(name: str, result: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    command = " ".join([f"python -m bench.{Path(sys.argv[0]).stem}", *sys.argv[1:]])
    result = {"command": command, "machine": machine(), "date": time.strftime("%Y-%m-%d"), **result}
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return path
