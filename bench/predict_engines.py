"""Issue 44, item 5: whole-process `bertfit predict` with each engine against ONNX Runtime fp32
and torch running the same fine-tuned model, on the Rotten Tomatoes test texts.

    python -m bench.predict_engines                    # 1,283 texts, 3 rounds (trains first)
    python -m bench.predict_engines --texts 100 --rounds 1       # a smoke test
    python -m bench.predict_engines --work bench/.runs/inference-X   # reuse bench.inference's

Each figure is one whole process, launch to exit, as a user runs it: `bertfit predict --engine
tensorflow` and `bertfit predict --engine onnx` (the run's kept ONNX export; made once before
the rounds, not timed), and the peers `bench.inference_paths ort-peer-fp32` (transformers'
`BertForSequenceClassification` exported by torch.onnx and fused by ONNX Runtime's BERT
optimizer, tokenized by the fast tokenizer, batches of 64 texts of similar length) and `torch-
peer` (the same model in torch, length-sorted), one pass each. After each round's processes,
`bertfit serve` with each engine under `--clients` threads sending one text a request
(`bench.serve`), so serve and predict share the rounds' load. Every process has 2
threads (the machine's cores); `RAYON_NUM_THREADS=2`. The processes alternate: each round runs
every command once, in an order rotated by one each round, so a shared machine's load falls on
all alike; the load average is recorded before each run. Reported per engine: median seconds
over rounds, user+system CPU seconds, peak RSS, the ratios to the peers (their seconds over
ours: above 1 is faster than the peer), and the onnx engine's largest probability difference
from the tensorflow engine's (rows of `bertfit predict`).

Writes bench/results/predict_engines.json for the whole test split (`--result NAME`: NAME.json;
else WORK/engines.json).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import write_result
from bench.inference import BERTFIT, RUNS, _lscpu_model, prepare
from bench.inference_paths import THREADS
from bertfit.config import ENGINES

PEERS = ("ort-peer-fp32", "torch-peer")


def commands(work: Path, peers: tuple[str, ...]) -> dict[str, list[str]]:
    """Each timed process's command line, by name: one per engine, one per peer."""
    result = {
        f"bertfit predict --engine {engine}": [
            *BERTFIT,
            "predict",
            "--engine",
            engine,
            "--run",
            str(work / "run"),
            "--data",
            str(work / "test.csv"),
            "--output",
            str(work / f"predict-{engine}.csv"),
            "--quiet",
        ]
        for engine in ENGINES
    }
    for peer in peers:
        result[peer] = [
            *[sys.executable, "-m", "bench.inference_paths", peer, "--work", str(work)],
            *["--launched", "0", "--passes", "1"],
        ]
    return result


def time_process(command: list[str]) -> dict:
    """One whole process: wall seconds, its CPU seconds and peak RSS (the kernel's accounting
    of that child, `wait4`)."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryFile() as errors:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors, env=_env())
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode:
            errors.seek(0)
            text = errors.read().decode("utf-8", "replace")
            raise RuntimeError(f"{' '.join(command)} failed:\n{text[-3000:]}")
    return {
        "wall_seconds": wall,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,  # Linux: KiB
        "load_average_1min_before": load,
    }


def _env() -> dict:
    return {**os.environ, "RAYON_NUM_THREADS": str(THREADS)}


def measure(
    named: dict[str, list[str]], rounds: int, after_round=lambda: None
) -> dict[str, list[dict]]:
    """Every command once a round, the order rotated each round; `after_round()` after each."""
    names = list(named)
    records: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            record = time_process(named[name])
            records[name].append({**record, "round": r})
            print(
                f"round {r} {name}: {record['wall_seconds']:.2f} s "
                f"(load {record['load_average_1min_before']:.2f})",
                file=sys.stderr,
            )
        after_round()
    return records


def _probabilities(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return [json.loads(row["probabilities"]) for row in csv.DictReader(f)]


def engines_agree(work: Path) -> dict:
    """The onnx engine's rows against the tensorflow engine's: the largest probability
    difference and the share of equal labels."""
    tensorflow = _probabilities(work / "predict-tensorflow.csv")
    onnx = _probabilities(work / "predict-onnx.csv")
    differences = [abs(a[k] - b[k]) for a, b in zip(onnx, tensorflow, strict=True) for k in a]
    labels = [max(a, key=a.get) == max(b, key=b.get) for a, b in zip(onnx, tensorflow, strict=True)]
    return {
        "rows": len(onnx),
        "max_probability_difference": max(differences, default=0.0),
        "label_agreement": sum(labels) / max(len(labels), 1),
    }


def summarize(records: dict[str, list[dict]]) -> dict[str, dict]:
    """Medians over rounds, and each engine's ratio to each peer (peer seconds / ours)."""
    summary = {
        name: {
            "wall_seconds": statistics.median(r["wall_seconds"] for r in runs),
            "wall_seconds_per_round": [round(r["wall_seconds"], 3) for r in runs],
            "cpu_seconds": statistics.median(r["cpu_seconds"] for r in runs),
            "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in runs),
            "load_average_1min_before": [r["load_average_1min_before"] for r in runs],
        }
        for name, runs in records.items()
    }
    for engine in ENGINES:
        mine = summary[f"bertfit predict --engine {engine}"]
        for peer in (name for name in summary if name in PEERS):
            mine[f"speed_vs_{peer}"] = summary[peer]["wall_seconds"] / mine["wall_seconds"]
    return summary


def serve_engines(
    work: Path, clients: int, seconds: float, runs: dict[str, list], also: tuple[str, ...] = ()
) -> None:
    """`bertfit serve --engine E` under `clients` threads sending one text a request for
    `seconds` (`bench.serve.load_test`), each engine in turn, then `--engine onnx` with each of
    `also`'s flags, with the load before each: one record each appended to `runs`, under
    "ENGINE[ FLAGS]"."""
    from bench.serve import load_test

    texts = json.loads((work / "texts.json").read_text())
    variants = [(engine, ()) for engine in ENGINES] + [("onnx", tuple(f.split())) for f in also]
    for engine, flags in variants:
        name = " ".join((engine, *flags))
        load = os.getloadavg()[0]
        record = load_test(work / "run", texts, clients, seconds, engine, flags)
        runs.setdefault(name, []).append({**record, "load_average_1min_before": load})
        print(
            f"serve --engine {name}: {record['requests_per_second']:.0f} req/s (load {load:.2f})",
            file=sys.stderr,
        )


def serve_medians(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Each engine's round of median requests/s, with every round's requests/s."""
    result = {}
    for engine, records in runs.items():
        ordered = sorted(records, key=lambda record: record["requests_per_second"])
        result[engine] = {
            **ordered[(len(ordered) - 1) // 2],
            "requests_per_second_per_round": [r["requests_per_second"] for r in records],
        }
    return result


def rows(result: dict) -> list[str]:
    """BENCHMARKS.md's table rows: one per process, the engine or peer named."""
    texts, summary = result["settings"]["texts"], result["summary"]
    lines = []
    for name, s in summary.items():
        ratios = ", ".join(
            f"{value:.2f}x {key.removeprefix('speed_vs_')}"
            for key, value in s.items()
            if key.startswith("speed_vs_")
        )
        loads = "-".join(
            f"{x:.1f}"
            for x in (min(s["load_average_1min_before"]), max(s["load_average_1min_before"]))
        )
        lines.append(
            f"| {name} | {texts} | {s['wall_seconds']:.2f} s "
            f"({', '.join(f'{x:.2f}' for x in s['wall_seconds_per_round'])}) | "
            f"{s['cpu_seconds']:.2f} s | {s['peak_rss_mib']:.0f} MiB | {ratios or '-'} | {loads} |"
        )
    for engine, s in (result.get("serve") or {}).items():
        per_round = ", ".join(f"{x:.0f}" for x in s["requests_per_second_per_round"])
        lines.append(
            f"| bertfit serve --engine {engine}, {s['settings']['clients']} clients x "
            f"{s['settings']['seconds']:.0f} s, 1 text/request | {s['requests_per_second']:.0f} "
            f"req/s ({per_round}), p50 {s['latency_ms']['p50']:.0f} ms, "
            f"p99 {s['latency_ms']['p99']:.0f} ms, {s['errors']} errors | "
            f"load {s['load_average_1min_before']:.1f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, help="folder for the run, exports and outputs")
    parser.add_argument("--run", type=Path, help="a run to use (default: train one)")
    parser.add_argument("--texts", type=int, default=1283, help="first N test texts")
    parser.add_argument("--train-examples", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated; '' for none")
    parser.add_argument("--clients", type=int, default=16, help="bertfit serve's load")
    parser.add_argument("--serve-seconds", type=float, default=20.0, help="0: no serve test")
    parser.add_argument("--result", default="predict_engines", help="bench/results/NAME.json")
    parser.add_argument(
        "--serve-also",
        action="append",
        default=[],
        metavar="FLAGS",
        help="also serve --engine onnx with these flags each round, e.g. '--batch-threads 1'",
    )
    args = parser.parse_args()
    work = args.work or RUNS / "predict-engines"
    peers = tuple(p for p in args.peers.split(",") if p)
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    prepare(work, args.run, args.texts, args.train_examples, exports={})
    named = commands(work, peers)
    # The onnx engine's export, made (or found) once before the timed rounds.
    subprocess.run(named["bertfit predict --engine onnx"], check=True, env=_env())
    serve_runs: dict[str, list[dict]] = {}

    def serve_round() -> None:
        if args.serve_seconds:
            serve_engines(work, args.clients, args.serve_seconds, serve_runs, args.serve_also)

    records = measure(named, args.rounds, serve_round)
    serve = serve_medians(serve_runs)
    summary = summarize(records)
    for served in serve.values():  # issue 58's goal: serve's req/s >= predict's texts/s
        engine = served["settings"]["engine"]
        predicted = args.texts / summary[f"bertfit predict --engine {engine}"]["wall_seconds"]
        served["vs_predict_texts_per_second"] = served["requests_per_second"] / predicted
    result = {
        "settings": {"texts": args.texts, "rounds": args.rounds, "threads": THREADS},
        "load": {
            "uptime_before": uptime_before,
            "uptime_after": subprocess.run(
                ["uptime"], capture_output=True, text=True
            ).stdout.strip(),
            "lscpu_model": _lscpu_model(),
        },
        "commands": {name: " ".join(command) for name, command in named.items()},
        "summary": summary,
        "engines_agree": engines_agree(work),
        "serve": serve,
        "records": records,
    }
    result["table_rows"] = rows(result)
    if args.texts == 1283:  # the whole test split: the result BENCHMARKS.md shows
        write_result(args.result, result)
    else:
        (work / "engines.json").write_text(json.dumps(result, indent=2))
    print("\n".join(result["table_rows"]))
    agree = result["engines_agree"]
    print(f"onnx vs tensorflow engine: {agree}", file=sys.stderr)
    if agree["max_probability_difference"] > 1e-5:
        raise SystemExit("the engines' probabilities differ by more than 1e-5")


if __name__ == "__main__":
    main()
