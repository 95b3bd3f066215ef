"""Issue 33 benchmark: does the cost of starting a run grow with the data? `bertfit train` on
10k, 100k, 1M and 5M rows (the Rotten Tomatoes training texts repeated), MiniLM-L6,
`--max-seq-length 64 --batch-size 32`, each run in its own process, one after the other:

- **in-memory**: `--train FILE.csv` (every row read and tokenized before the first step);
- **prepared**: `--train DIR` of a `bertfit prepare`d set (streamed; prepare measured once:
  rows/s and peak RSS);
- **--streaming**: `--train FILE.csv --streaming` with an empty `$BERTFIT_CACHE`, so the run
  prepares the file into the cache before its first step.

Each run: the time from launch to the end of the first optimizer step (steps.jsonl's
`wall_time`), peak RSS (`os.wait4`), and the steady training throughput (examples per second
over the steps after the first `WARMUP`). `--max-steps` keeps every run short. Then the input
pipeline alone (the batches a run's steps take, without the model: `--pipeline`) against what
a training step consumes.

    python -m bench.scale                          # every size (about an hour on 2 cores)
    python -m bench.scale --rows 10000 100000      # a quick look
    python -m bench.scale --memory-up-to 1000000   # the in-memory path only up to 1M rows

The generated files and prepared sets stay in `--work` (default $TMPDIR/bertfit-bench-scale)
for the next run; a prepared set is measured when it is written, and that measurement kept.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS, write_result
from bench.finetune import BERTFIT, run_measured
from bench.settings import BATCH, SEQ

ROWS = (10_000, 100_000, 1_000_000, 5_000_000)
STEPS = 60  # --max-steps of every run
WARMUP = 10  # steps left out of the steady throughput (tracing, buffers filling)
PIPELINE_BATCHES = 300  # batches the input pipeline alone is timed on


def write_rows(rows: int, path: Path) -> Path:
    """A `text,label` CSV of `rows` rows: the Rotten Tomatoes training rows, repeated."""
    from bertfit.data.rotten_tomatoes import load_rotten_tomatoes

    if path.is_file():
        return path
    texts = load_rotten_tomatoes("train")
    scratch = path.with_suffix(".partial")
    with scratch.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for i in range(rows):
            writer.writerow(texts[i % len(texts)])
    scratch.rename(path)
    return path


def prepared(rows: int, data: Path, work: Path) -> tuple[Path, dict]:
    """`bertfit prepare`d shards of `data` and how long writing them took (measured once)."""
    out, measured = work / f"prepared_{rows}", work / f"prepared_{rows}.json"
    if measured.is_file() and (out / "manifest.json").is_file():
        return out, json.loads(measured.read_text())
    command = [*BERTFIT, "prepare", str(data), str(out), "--max-seq-length", str(SEQ)]
    process = run_measured([*command, "--overwrite"])
    result = {
        "rows": rows,
        "seconds": process["seconds"],
        "rows_per_second": rows / process["seconds"],
        "peak_rss_mib": process["peak_rss_mib"],
        "shards": len(json.loads((out / "manifest.json").read_text())["shards"]),
    }
    measured.write_text(json.dumps(result, indent=2))
    return out, result


def train_measured(train: list[str], run: Path, steps: int, env: dict | None = None) -> dict:
    """One `bertfit train` process of `steps` steps: launch to first step, peak RSS, steady
    examples per second, and where its time went."""
    shutil.rmtree(run, ignore_errors=True)
    command = [*BERTFIT, "train", "--train", *train, "--output-dir", str(run), "--quiet"]
    command += ["--max-seq-length", str(SEQ), "--batch-size", str(BATCH)]
    command += ["--max-steps", str(steps)]
    process = run_measured(command) if env is None else _with_env(command, env)
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    metrics = json.loads((run / "metrics.json").read_text())
    steady = steps[WARMUP:]
    seconds = steady[-1]["wall_time"] - steps[WARMUP - 1]["wall_time"]
    return {
        "first_step_seconds": steps[0]["wall_time"] - process["launched"],
        "peak_rss_mib": process["peak_rss_mib"],
        "process_seconds": process["seconds"],
        "steps": len(steps),
        "steady_examples_per_second": sum(s["examples"] for s in steady) / seconds,
        "time_split": metrics["time"],
        "stopped_at_max_steps": metrics.get("stopped_at_max_steps"),
    }


def _with_env(command: list[str], env: dict) -> dict:
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        return run_measured(command)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def pipeline_throughput(train: list[str]) -> dict:
    """The input pipeline alone, in a process of its own (`--pipeline`)."""
    process = run_measured([sys.executable, "-m", "bench.scale", "--pipeline", *train])
    return json.loads(process["stdout"].strip().splitlines()[-1])


def _time_pipeline(train: list[str]) -> None:
    """Prints the batches per second of a run's training input: the setup `bertfit train`
    builds, then its first epoch's batches taken in plan order, without a model step."""
    from bertfit.tf_startup import start_tensorflow

    start_tensorflow()
    import tensorflow as tf

    from bertfit.config import RunConfig
    from bertfit.training.setup import prepare
    from bertfit.training.xla import XlaChoice

    config = RunConfig()
    config.data.train = train[0]
    config.data.streaming = "--streaming" in train
    config.model.max_seq_length, config.train.batch_size = SEQ, BATCH
    strategy = tf.distribute.get_strategy()
    setup = prepare(config, strategy, XlaChoice.for_run(None, strategy))
    batches = setup.batches(setup.train, shuffle=True, training=True)
    iterators = batches.iterators()
    plan = batches.plan[: WARMUP + PIPELINE_BATCHES]
    for step in plan[:WARMUP]:
        next(iterators[step.seq_length])
    start = time.perf_counter()
    for step in plan[WARMUP:]:
        next(iterators[step.seq_length])
    seconds = time.perf_counter() - start
    examples = sum(step.num_examples for step in plan[WARMUP:])
    print(
        json.dumps(
            {
                "batches": len(plan) - WARMUP,
                "batches_per_second": (len(plan) - WARMUP) / seconds,
                "examples_per_second": examples / seconds,
            }
        )
    )


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def measure(args) -> dict:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    sizes, prepares, loads = [], {}, []
    for rows in args.rows:
        data = write_rows(rows, work / f"train_{rows}.csv")
        directory, prepares[rows] = prepared(rows, data, work)
        row = {"rows": rows, "prepare": prepares[rows]}
        if rows <= args.memory_up_to:
            row["in_memory"] = train_measured([str(data)], work / "run", args.steps)
            loads.append(load_average())
        row["prepared"] = train_measured([str(directory)], work / "run", args.steps)
        loads.append(load_average())
        if rows <= args.streaming_flag_up_to:
            cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))
            row["streaming_flag"] = train_measured(
                [str(data), "--streaming"], work / "run", args.steps, {"BERTFIT_CACHE": str(cache)}
            )
            shutil.rmtree(cache, ignore_errors=True)
            loads.append(load_average())
        if rows in args.pipeline_rows:
            row["pipeline_alone"] = {"prepared": pipeline_throughput([str(directory)])}
            if rows <= args.memory_up_to:
                row["pipeline_alone"]["in_memory"] = pipeline_throughput([str(data)])
        row["load_average"] = load_average()
        sizes.append(row)
        print(json.dumps(row), flush=True)
    sizes.sort(key=lambda size: size["rows"])  # measured in the order given
    return {"sizes": sizes, "load_average_after_runs": loads}


def merged(result: dict, previous: Path) -> dict:
    """`result` with the sizes of an earlier run that this one did not measure (`--merge`:
    a long size measured on its own)."""
    if not previous.is_file():
        return result
    measured = {size["rows"] for size in result["sizes"]}
    kept = [s for s in json.loads(previous.read_text())["sizes"] if s["rows"] not in measured]
    sizes = sorted([*kept, *result["sizes"]], key=lambda size: size["rows"])
    return {**result, "sizes": sizes}


def table_rows(result: dict) -> list[str]:
    """BENCHMARKS.md rows: per size, each path's time to the first step and peak RSS."""
    rows = []
    for size in result["sizes"]:
        for path in ("in_memory", "prepared", "streaming_flag"):
            if path in size:
                r = size[path]
                rows.append(
                    f"| scale: {size['rows']:,} rows, {path.replace('_', ' ')} | "
                    f"first step {r['first_step_seconds']:.1f} s, peak RSS "
                    f"{r['peak_rss_mib']:.0f} MiB, {r['steady_examples_per_second']:.1f} ex/s"
                    " | - | - |"
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    parser.add_argument("--memory-up-to", type=int, default=max(ROWS))
    parser.add_argument("--streaming-flag-up-to", type=int, default=max(ROWS))
    parser.add_argument("--steps", type=int, default=STEPS, help="--max-steps of each run")
    parser.add_argument(
        "--pipeline-rows",
        type=int,
        nargs="*",
        default=[ROWS[0]],
        help="sizes to time the input pipeline alone on",
    )
    parser.add_argument(
        "--merge", action="store_true", help="keep the sizes of results/scale.json not run now"
    )
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "bertfit-bench-scale"))
    parser.add_argument("--pipeline", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pipeline:
        _time_pipeline(args.pipeline)
        return
    result = measure(args)
    if args.merge:
        result = merged(result, RESULTS / "scale.json")
    result["settings"] = {"max_seq_length": SEQ, "batch_size": BATCH, "max_steps": args.steps}
    result["table_rows"] = table_rows(result)
    write_result("scale", result)


if __name__ == "__main__":
    main()
