"""A bounded soak of `bertfit serve --export BASE` on 127.0.0.1 (issue 44's "done when"): its
capacity measured first, then valid requests at a fixed fraction of it (80%) for a few minutes
while other clients send bad requests, and a new version dropped into BASE half-way.

    python -m bench.serve_soak [--run RUN] [--seconds 120] [--load 0.8]

Reports the failed valid requests (the goal: 0), the bad requests' statuses, p50/p99 latency of
the valid ones, the versions' states at the end (the new one AVAILABLE, the old one END), and
the server's RSS sampled every second (flat after warm-up: the last quarter's peak against the
first quarter's). Without --run, a MiniLM-L6 run is trained briefly first (`bench.serve`). The
clients are threads of this process, so on a small machine they share the CPU with the server.
Writes bench/results/serve_soak.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from bench.common import write_result
from bench.serve import RUNS, _free_port, _train_run, _wait_ready

PREDICT = "/v1/models/model:predict"
BAD_BODIES = [
    b"{not json",
    b'{"instances": [5]}',
    b'{"instances": []}',
    b'{"signature_name": "nope", "instances": ["a"]}',
    json.dumps({"instances": ["x"] * 5000}).encode(),  # over --max-request-instances
    b'{"instances": ["\\ud800"]}',
    b'{"nested": ' + b"[" * 20000 + b"]" * 20000 + b', "instances": ["deep"]}',
]


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _post(connection: http.client.HTTPConnection, body: bytes) -> int:
    connection.request("POST", PREDICT, body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    return response.status


def capacity(port: int, texts: list[str], clients: int, seconds: float) -> float:
    """Requests/s the server answers to `clients` closed-loop clients (one text each)."""
    done = []
    stop_at = time.monotonic() + seconds

    def client(seed: int) -> None:
        rng, connection = random.Random(seed), http.client.HTTPConnection("127.0.0.1", port)
        while time.monotonic() < stop_at:
            body = json.dumps({"instances": [rng.choice(texts)]}).encode()
            if _post(connection, body) == 200:
                done.append(1)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(done) / (time.perf_counter() - started)


def soak(port, texts, rate, seconds, workers, new_version, server_pid) -> dict:
    """Valid requests at `rate`/s (open loop) from `workers` connections, bad ones from two
    more threads (and a stalled body every few seconds), `new_version()` called half-way."""
    tickets: queue.Queue = queue.Queue()
    latencies, failures, bad_statuses, rss = [], [], {}, []
    stop_at = time.monotonic() + seconds

    def worker(seed: int) -> None:
        rng, connection = random.Random(seed), http.client.HTTPConnection("127.0.0.1", port)
        while tickets.get() is not None:
            body = json.dumps({"instances": [rng.choice(texts)]}).encode()
            began = time.perf_counter()
            try:
                status = _post(connection, body)
            except (OSError, http.client.HTTPException) as e:
                failures.append(repr(e))
                connection = http.client.HTTPConnection("127.0.0.1", port)
                continue
            if status != 200:
                failures.append(status)
            else:
                latencies.append(time.perf_counter() - began)

    def bad_client(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop_at:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            try:
                status = _post(connection, rng.choice(BAD_BODIES))
            except (OSError, http.client.HTTPException) as e:
                status = type(e).__name__
            bad_statuses[status] = bad_statuses.get(status, 0) + 1
            connection.close()
            if rng.random() < 0.05:  # a client that stalls half-way through its body
                stalled = socket.create_connection(("127.0.0.1", port))
                head = f"POST {PREDICT} HTTP/1.1\r\nHost: soak\r\nContent-Length: 999\r\n\r\n{{"
                stalled.sendall(head.encode())
                threading.Timer(40, stalled.close).start()
            time.sleep(0.2)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    threads += [threading.Thread(target=bad_client, args=(1000 + i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    started, dropped = time.monotonic(), False
    next_sample, sent = started, 0
    while (now := time.monotonic()) < stop_at:
        due = int((now - started) * rate)
        for _ in range(due - sent):
            tickets.put(1)
        sent = max(sent, due)
        if not dropped and now - started > seconds / 2:
            at_new_version = _rss_kib(server_pid)
            new_version()
            dropped = True
        if now >= next_sample:
            rss.append((round(now - started, 1), _rss_kib(server_pid)))
            next_sample += 1.0
        time.sleep(0.005)
    for _ in range(workers):
        tickets.put(None)
    for thread in threads:
        thread.join()
    ms = np.asarray(latencies) * 1000
    quarter = max(1, len(rss) // 4)
    return {
        "valid_requests_sent": sent,
        "valid_answered": len(latencies),
        "valid_failed": len(failures),
        "failures": failures[:20],
        "bad_requests": {str(k): v for k, v in sorted(bad_statuses.items(), key=str)},
        "latency_ms": {
            "p50": float(np.percentile(ms, 50)),
            "p99": float(np.percentile(ms, 99)),
            "max": float(ms.max()),
        },
        "rss_mib": {
            "first_quarter_peak": max(r for _, r in rss[:quarter]) / 1024,
            "when_the_new_version_was_dropped": at_new_version / 1024,
            "last_quarter_peak": max(r for _, r in rss[-quarter:]) / 1024,
            "peak": max(r for _, r in rss) / 1024,
            "samples": [(t, round(r / 1024)) for t, r in rss[::5]],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", help="a run directory to export and serve (default: train one)")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--load", type=float, default=0.8, help="fraction of measured capacity")
    parser.add_argument("--clients", type=int, default=16, help="connections (capacity, soak)")
    args = parser.parse_args()

    from bertfit.data.rotten_tomatoes import load_rotten_tomatoes

    texts = [text for text, _ in load_rotten_tomatoes("test")]
    run = Path(args.run) if args.run else _train_run()
    base = RUNS / time.strftime("soak-export-%Y%m%d-%H%M%S")
    export = [sys.executable, "-m", "bertfit.cli", "export", "--run", str(run), str(base)]
    subprocess.run(export, check=True, stdout=subprocess.DEVNULL)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "bertfit.cli", "serve", "--export", str(base), "--port", str(port)]
        + ["--grpc-port", "-1", "--model-name", "model"],
        stdout=subprocess.DEVNULL,
    )

    def new_version() -> None:  # as an export writes it: whole, renamed into place
        shutil.copytree(base / "1", base / ".2.tmp")
        os.replace(base / ".2.tmp", base / "2")

    try:
        _wait_ready(port, server)
        measured = capacity(port, texts, args.clients, 10.0)
        result = soak(
            port, texts, args.load * measured, args.seconds, args.clients, new_version, server.pid
        )
        connection = http.client.HTTPConnection("127.0.0.1", port)
        connection.request("GET", "/v1/models/model")
        states = json.loads(connection.getresponse().read())["model_version_status"]
    finally:
        server.terminate()
        code = server.wait(timeout=120)
    result = {
        "settings": {**vars(args), "run": str(run), "cpus": os.cpu_count()},
        "capacity_requests_per_second": measured,
        "target_requests_per_second": args.load * measured,
        **result,
        "versions_at_end": [(s["version"], s["state"]) for s in states],
        "exit_code_after_sigterm": code,
    }
    write_result("serve_soak", result)


if __name__ == "__main__":
    main()
