"""Issue 34 benchmark: raw text to probabilities on the Rotten Tomatoes test texts, every way
bertfit offers against the transformers peers, plus `bertfit serve` under a bounded load.

    python -m bench.inference                   # trains a MiniLM-L6 run first (~1-2 min)
    python -m bench.inference --texts 100 --rounds 1      # a smoke test
    python -m bench.inference --work bench/.runs/inference-X   # reuse a prepared folder

bertfit's paths: `bertfit predict` as a whole process, the in-process predictor
(`load_classifier(run).predict_proba`), the exported SavedModel (`tf.saved_model.load` and its
`serving_default` signature), the LiteRT export in the LiteRT interpreter and the ONNX export in
ONNX Runtime with its `tokenizer.json` (each fp32 and `--quantize int8`). Peers, from the same
fine-tuned weights (`bench.peer_onnx`): transformers' `BertForSequenceClassification` in torch,
and that model exported to ONNX (fused by ONNX Runtime's BERT optimizer; fp32 and dynamic int8)
in ONNX Runtime, both tokenized by the fast tokenizer in batches of 64 texts of similar length
(`bench.inference_paths` has each path).

Every path runs in a process of its own with 2 threads (the machine's cores): TensorFlow's
intra- and inter-op pools, torch.set_num_threads, ONNX Runtime's intra-op threads, the LiteRT
interpreter's num_threads, RAYON_NUM_THREADS for `tokenizers`. The paths are interleaved: each
round runs every path once, in an order rotated by one each round, so load from other processes
on a shared machine falls on all of them alike; each process makes one cold pass over the texts,
then `--passes - 1` warm ones. Reported: the median over rounds of each process's median warm
pass, the launch-to-first-result time, the load average and CPU model. Each path's labels are
checked against the predictor's (peers and fp32 exports must agree on >= 99%).

Writes bench/results/inference.json (its `table_rows` go into BENCHMARKS.md's table).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import write_result
from bench.inference_paths import BATCH, PATHS, SEQ, THREADS

ROOT = Path(__file__).resolve().parent.parent
RUNS = Path(__file__).parent / ".runs"
BERTFIT = [sys.executable, "-m", "bertfit.cli"]
PREDICT_PROCESS = "bertfit-predict-process"
REFERENCE = "bertfit-predictor"
MIN_AGREEMENT = 0.99  # peers and fp32 exports: share of labels equal to the predictor's
EXPORTS = {  # folder -> `bertfit export` flags
    "saved-model": [],
    "litert-fp32": ["--format", "litert"],
    "litert-int8": ["--format", "litert", "--quantize", "int8"],
    "onnx-fp32": ["--format", "onnx"],
    "onnx-int8": ["--format", "onnx", "--quantize", "int8"],
}
# The peer each bertfit path is compared with at its precision (ONNX Runtime), and torch.
ORT_PEER = {"int8": "ort-peer-int8"}


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, **kwargs)
    if done.returncode:
        raise RuntimeError(
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}"
        )
    return done


def prepare(
    work: Path, run: Path | None, count: int, train_examples: int, exports: dict = EXPORTS
) -> list[str]:
    """Fills `work`: texts.json and test.csv (the first `count` test texts), the run, its
    `exports` (the five by default) and the peers' models; a step whose output exists is
    skipped. Returns the texts."""
    from bertfit.data.rotten_tomatoes import load_rotten_tomatoes, rotten_tomatoes_dir

    work.mkdir(parents=True, exist_ok=True)
    rows = load_rotten_tomatoes("test")[:count]
    texts = [text for text, _ in rows]
    (work / "texts.json").write_text(json.dumps(texts))
    with open(work / "test.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([("text", "label"), *rows])
    if not (work / "run").exists():
        if run is not None:
            (work / "run").symlink_to(run.resolve())
        else:
            train = rotten_tomatoes_dir() / "train.csv"
            _run(
                [*BERTFIT, "train", "--model", "minilm-l6", "--train", str(train)]
                + ["--max-train-examples", str(train_examples), "--epochs", "1"]
                + ["--learning-rate", "1e-4", "--max-seq-length", str(SEQ)]
                # the peers' BertForSequenceClassification pools [CLS] (minilm-l6's default: mean)
                + ["--pooling", "cls"]
                + ["--output-dir", str(work / "run"), "--no-report", "--quiet"]
            )
    for folder, flags in exports.items():
        if not (work / folder).exists():
            _run([*BERTFIT, "export", *flags, "--run", str(work / "run"), str(work / folder)])
    if not (work / "head.npz").exists():
        _run(
            [sys.executable, "-m", "bench.peer_onnx", "weights", "--run", str(work / "run")]
            + ["--work", str(work)]
        )
    if not (work / "peer-onnx" / "model-int8.onnx").exists():
        _run([sys.executable, "-m", "bench.peer_onnx", "export", "--work", str(work)])
    return texts


def _time_path(name: str, work: Path, passes: int) -> dict:
    """One process of path `name`: its timings file (or, for the CLI, its wall time)."""
    launched = time.time()
    start = time.perf_counter()
    if name == PREDICT_PROCESS:
        output = work / "predict-process.csv"
        _run(
            [*BERTFIT, "predict", "--run", str(work / "run"), "--data", str(work / "test.csv")]
            + ["--output", str(output), "--quiet"]
        )
        return {"process_seconds": time.perf_counter() - start, "output": str(output)}
    _run(
        [sys.executable, "-m", "bench.inference_paths", name, "--work", str(work)]
        + ["--launched", str(launched), "--passes", str(passes)]
    )
    timings = json.loads((work / "timings" / f"{name}.json").read_text())
    return {**timings, "process_seconds": time.perf_counter() - start}


def measure(work: Path, names: list[str], rounds: int, passes: int) -> dict[str, list[dict]]:
    """Every path once a round, the order rotated each round; each record has the load average
    before it ran."""
    records: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            load = os.getloadavg()[0]
            record = _time_path(name, work, passes)
            records[name].append({**record, "round": r, "load_average_1min_before": load})
            warm = record.get("pass_seconds", [None])[1:] or [record["process_seconds"]]
            print(
                f"round {r} {name}: {statistics.median(warm):.2f} s (load {load:.2f})",
                file=sys.stderr,
            )
    return records


def agreement(work: Path, names: list[str]) -> dict[str, dict]:
    """Each path's labels and probabilities against the in-process predictor's."""
    reference = np.load(work / "probabilities" / f"{REFERENCE}.npy")
    result = {}
    for name in names:
        if name == PREDICT_PROCESS:
            with open(work / "predict-process.csv", newline="", encoding="utf-8") as f:
                count = sum(1 for _ in csv.DictReader(f))
            result[name] = {"rows": count, "texts": len(reference)}
            continue
        got = np.load(work / "probabilities" / f"{name}.npy")
        result[name] = {
            "label_agreement": float(np.mean(got.argmax(1) == reference.argmax(1))),
            "max_probability_difference": float(np.abs(got - reference).max()),
        }
    return result


def summarize(records: list[dict], texts: int) -> dict:
    """Medians over rounds: warm pass seconds and texts/s, cold first result, load, tokenizing."""
    if "pass_seconds" not in records[0]:
        seconds = statistics.median(r["process_seconds"] for r in records)
        return {"process_seconds": seconds, "texts_per_second_process": texts / seconds}
    warm = [statistics.median(r["pass_seconds"][1:] or r["pass_seconds"]) for r in records]
    summary = {
        "warm_pass_seconds": statistics.median(warm),
        "texts_per_second": texts / statistics.median(warm),
        "warm_pass_seconds_per_round": warm,
        "load_seconds": statistics.median(r["load_seconds"] for r in records),
        "launch_to_first_result_seconds": statistics.median(
            r["launch_to_first_result_seconds"] for r in records
        ),
    }
    for key in ("tokenize_seconds", "token_slots_per_text"):
        if key in records[0]:
            summary[key] = statistics.median(r[key] for r in records)
    return summary


def _precision(name: str) -> str:
    return "int8" if name.endswith("int8") else "fp32"


def ratios(summary: dict) -> dict:
    """Each bertfit path's warm speed over ONNX Runtime's at its precision and over torch's;
    the CLI process against the peers' launch-to-first-result."""
    result = {}
    for name, s in summary.items():
        if not name.startswith("bertfit"):
            continue
        ort = summary[ORT_PEER.get(_precision(name), "ort-peer-fp32")]
        torch = summary["torch-peer"]
        if name == PREDICT_PROCESS:
            mine = s["process_seconds"]
            result[name] = {
                "vs_ort": ort["launch_to_first_result_seconds"] / mine,
                "vs_torch": torch["launch_to_first_result_seconds"] / mine,
            }
        else:
            result[name] = {
                "vs_ort": s["texts_per_second"] / ort["texts_per_second"],
                "vs_torch": s["texts_per_second"] / torch["texts_per_second"],
            }
    return result


def _peer_words(name: str, summary: dict) -> str:
    ort = ORT_PEER.get(_precision(name), "ort-peer-fp32")
    if name == PREDICT_PROCESS:
        key, unit = "launch_to_first_result_seconds", "s to the first result"
        return f"ORT {summary[ort][key]:.1f} {unit}, torch {summary['torch-peer'][key]:.1f} s"
    return (
        f"ORT {_precision(name)} {summary[ort]['texts_per_second']:.0f}, "
        f"torch {summary['torch-peer']['texts_per_second']:.0f} texts/s"
    )


def rows(result: dict) -> list[str]:
    """BENCHMARKS.md's rows for a result of this benchmark: one per bertfit path against the
    ONNX Runtime peer at its precision and the torch peer, then `bertfit serve`."""
    summary, ratio = result["summary"], result["ratios"]
    checks, serve = result["agreement_with_predictor"], result.get("serve")
    texts = result["settings"]["texts"]
    lines = []
    for name in ratio:
        s, check = summary[name], checks.get(name, {})
        if name == PREDICT_PROCESS:
            mine = f"{s['process_seconds']:.1f} s"
        else:
            mine = f"{s['texts_per_second']:.0f} texts/s"
        if "label_agreement" in check and name != REFERENCE:
            mine += f" (labels {check['label_agreement']:.1%} as the predictor's)"
        lines.append(
            f"| {texts} RT test texts to probabilities: {name.removeprefix('bertfit-')} | "
            f"{mine} | {_peer_words(name, summary)} | {ratio[name]['vs_ort']:.2f}x ORT, "
            f"{ratio[name]['vs_torch']:.2f}x torch |"
        )
    if serve:
        lines.append(
            f"| `bertfit serve` (REST), {serve['settings']['clients']} clients x "
            f"{serve['settings']['seconds']:.0f} s, 1 text/request | "
            f"{serve['requests_per_second']:.0f} req/s, p50 {serve['latency_ms']['p50']:.0f} ms, "
            f"p99 {serve['latency_ms']['p99']:.0f} ms, {serve['errors']} errors | - | - |"
        )
    return lines


def _lscpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return ""
    return next(
        (
            line.split(":", 1)[1].strip()
            for line in out.splitlines()
            if line.startswith("Model name")
        ),
        "",
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, help="folder for the run, exports and outputs")
    parser.add_argument("--run", type=Path, help="a run to use (default: train one)")
    parser.add_argument("--texts", type=int, default=1283, help="first N test texts")
    parser.add_argument("--train-examples", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=2, help="per process: 1 cold + warm ones")
    parser.add_argument("--clients", type=int, default=16, help="bertfit serve's load")
    parser.add_argument("--serve-seconds", type=float, default=20.0, help="0: no serve test")
    args = parser.parse_args()
    work = args.work or RUNS / time.strftime("inference-%Y%m%d-%H%M%S")
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    texts = prepare(work, args.run, args.texts, args.train_examples)
    names = [PREDICT_PROCESS, *PATHS]
    records = measure(work, names, args.rounds, args.passes)
    checks = agreement(work, names)
    serve = None
    if args.serve_seconds > 0:
        from bench.serve import load_test

        serve = load_test(work / "run", texts, args.clients, args.serve_seconds)
    summary = {name: summarize(records[name], len(texts)) for name in names}
    ratio = ratios(summary)
    failed = [
        name
        for name, check in checks.items()
        if "label_agreement" in check
        and _precision(name) == "fp32"
        and check["label_agreement"] < MIN_AGREEMENT
    ]
    result = {
        "settings": {
            "texts": len(texts),
            "rounds": args.rounds,
            "passes_per_process": args.passes,
            "threads": THREADS,
            "batch": BATCH,
            "max_seq_length": SEQ,
            "work": str(work),
        },
        "load": {
            "uptime_before": uptime_before,
            "uptime_after": subprocess.run(
                ["uptime"], capture_output=True, text=True
            ).stdout.strip(),
            "lscpu_model": _lscpu_model(),
        },
        "summary": summary,
        "ratios": ratio,
        "agreement_with_predictor": checks,
        "agreement_failures": failed,
        "serve": serve,
        "records": records,
    }
    if len(texts) == 1283:  # the whole test split: the result BENCHMARKS.md shows
        write_result("inference", result)
    else:
        (work / "result.json").write_text(json.dumps(result, indent=2))
        print("\n".join(rows(result)))
    if failed:
        raise SystemExit(f"labels differ from the predictor's on more than 1%: {failed}")


if __name__ == "__main__":
    main()
