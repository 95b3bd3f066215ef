"""`bertfit serve` under a bounded load: N concurrent clients, each sending one Rotten Tomatoes test
snippet per request for a fixed time, over TF Serving's REST API (row format).

    python -m bench.serve [--run RUN] [--clients 32] [--seconds 20]

Without --run, a MiniLM-L6 run is trained briefly first (256 rows, one epoch: serving speed does
not depend on how well the head is trained). The clients are threads of this process (stdlib
http.client, one keep-alive connection each), so on a 2-core machine they share the CPU with the
server: the figures are a floor. Writes bench/results/serve.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from bench.common import write_result
from bertfit.serve.options import ServeOptions

RUNS = Path(__file__).parent / ".runs"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train_run() -> Path:
    from bertfit.data.rotten_tomatoes import rotten_tomatoes_dir

    run = RUNS / time.strftime("serve-%Y%m%d-%H%M%S")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bertfit.cli",
            "train",
            "--model",
            "minilm-l6",
            "--train",
            str(rotten_tomatoes_dir() / "train.csv"),
            "--max-train-examples",
            "256",
            "--epochs",
            "1",
            "--max-seq-length",
            "64",
            "--pooling",
            "mean",
            "--output-dir",
            str(run),
            "--no-report",
            "--quiet",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return run


def _wait_ready(port: int, server: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"bertfit serve exited with {server.returncode}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/v1/models/model")
            if connection.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("bertfit serve did not become ready")


def _client(
    port: int,
    texts: list[str],
    stop_at: float,
    latencies: list[float],
    errors: list[int],
    seed: int,
) -> None:
    rng = random.Random(seed)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while time.monotonic() < stop_at:
        body = json.dumps({"instances": [rng.choice(texts)]})
        start = time.perf_counter()
        connection.request(
            "POST", "/v1/models/model:predict", body, {"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            errors.append(response.status)
            continue
        latencies.append(time.perf_counter() - start)


def load_test(
    run: Path,
    texts: list[str],
    clients: int,
    seconds: float,
    engine: str = "tensorflow",
    flags: tuple[str, ...] = (),
) -> dict:
    """Serves `run` with `bertfit serve --engine ENGINE [FLAGS]` on a free port of 127.0.0.1
    and sends it one text a request from `clients` threads for `seconds`; requests/s, errors
    and latency percentiles."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "bertfit.cli", "serve", "--run", str(run), "--port", str(port)]
        + ["--engine", engine, *flags],
        stdout=subprocess.DEVNULL,
    )
    try:
        _wait_ready(port, server)
        latencies: list[float] = []
        errors: list[int] = []
        stop_at = time.monotonic() + seconds
        threads = [
            threading.Thread(target=_client, args=(port, texts, stop_at, latencies, errors, i))
            for i in range(clients)
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait(timeout=60)
    ms = np.asarray(latencies) * 1000
    defaults = ServeOptions()
    return {
        "settings": {
            "clients": clients,
            "seconds": seconds,
            "texts_per_request": 1,
            "run": str(run),
            "engine": engine,
            "max_batch": defaults.max_batch,  # the server runs with serve's defaults
            "max_wait_ms": defaults.max_wait * 1000,
            "batch_threads": defaults.batch_threads,
            "flags": list(flags),  # given to serve after those defaults
        },
        "requests": len(latencies),
        "errors": len(errors),
        "requests_per_second": len(latencies) / elapsed,
        "latency_ms": {
            "p50": float(np.percentile(ms, 50)),
            "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)),
            "max": float(ms.max()),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", help="a run directory to serve (default: train one briefly)")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()

    from bertfit.data.rotten_tomatoes import load_rotten_tomatoes

    texts = [text for text, _ in load_rotten_tomatoes("test")]
    run = Path(args.run) if args.run else _train_run()
    result = load_test(run, texts, args.clients, args.seconds)
    errors = result["errors"]
    result["table_rows"] = [
        f"| `bertfit serve` (TF Serving REST), {args.clients} clients x {args.seconds:.0f} s, "
        f"1 text/request, MiniLM-L6 seq 64 | {result['requests_per_second']:.0f} req/s, "
        f"p50 {result['latency_ms']['p50']:.0f} ms, p99 {result['latency_ms']['p99']:.0f} ms, "
        f"{errors} errors | no peer here (TF Serving is not installable from PyPI) | - |"
    ]
    write_result("serve", result)


if __name__ == "__main__":
    main()
