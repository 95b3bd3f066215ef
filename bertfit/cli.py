"""`bertfit train|tune|prepare|evaluate|predict|export|serve|report|demo|check|inspect|convert`:
argument parsing only.

User mistakes arrive here as `BertfitError`s and are printed as one clear message (exit 2),
never as a traceback. The arguments are parsed before TensorFlow loads (seconds): `--help` and
usage errors answer at once, and nothing imported here or by the flags' parsing loads it.
"""

from __future__ import annotations

import argparse
import errno
import json
import sys

from bertfit.checkpoints import commands as checkpoint_commands
from bertfit.checks import commands as check_commands
from bertfit.config import TASKS
from bertfit.data.sources import FORMATS
from bertfit.errors import BertfitError, TrainingInterrupted
from bertfit.run_flags import (
    TRAIN_FLAGS,
    add_run_output_arguments,
    add_train_arguments,
    run_config_from_args,
)
from bertfit.sweeps.audit_flags import add_audit_arguments
from bertfit.sweeps.flags import add_tune_arguments, sweep_from_args
from bertfit.tf_startup import start_tensorflow

EXPORT_FORMATS = ("saved-model", "litert", "onnx")  # bertfit.export.formats.FORMATS

# What the system refuses for reasons outside bertfit: a full disk, a read-only file system, no
# permission. Said in one line like a user mistake; any other OSError is a bug and is raised.
_SYSTEM_REFUSALS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.EFBIG,
}


def cmd_train(args) -> int:
    from bertfit.report import write_report
    from bertfit.training.run import train

    config = run_config_from_args(args)
    summary = train(
        config,
        quiet=args.quiet,
        resume=True if args.resume else None,
        overwrite=args.overwrite,
    )
    report = None
    if summary.run_dir is not None and not args.no_report:  # None: a non-chief worker's
        report = write_report(summary.run_dir)
    if args.json:
        if report is not None and not args.quiet:
            print(f"report: {report}", file=sys.stderr)
        print(json.dumps({**summary.headline, "run_dir": summary.run_dir}))
    else:
        print("\n".join(train_lines(summary, report)))
    return 0


def train_lines(summary, report) -> list[str]:
    """What `bertfit train` prints for people: the headline metrics, where the run and its
    report are (every metric is in RUN/metrics.json, and printed by --json)."""
    from bertfit.training.metrics import HEADLINE_METRICS

    final = summary.final
    if final is not None:
        names = [n for n in (*HEADLINE_METRICS[summary.task], "loss") if n in final]
        scores = ", ".join(f"{n} {final[n]:.4f}" for n in names)
        best = ", ".join(f"{k} {v:.4f}" for k, v in (summary.best or {}).items())
        lines = [f"final evaluation: {scores}" + (f" (best {best})" if best else "")]
    else:
        lines = [f"no --eval: nothing evaluated; {_scores(summary.headline)}"]
    if summary.run_dir is None:
        lines.append("run directory: none (a worker other than the chief writes no run)")
        return lines
    lines.append(f"run directory: {summary.run_dir} (every metric: metrics.json)")
    if report is not None:
        lines.append(f"report: {report}")
    return lines


def _scores(values: dict) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v:.4f}" for k, v in values.items())


def cmd_tune(args) -> int:
    from bertfit.sweeps.tune import tune

    base, spec = sweep_from_args(args)
    results = tune(base, spec, args.output_dir, quiet=args.quiet, reports=not args.no_report)
    chosen, run = results.chosen, results.chosen_run
    if args.json:
        printed = {
            "metric": results.metric,
            "chosen_trial": chosen.name if chosen else None,
            "params": chosen.params if chosen else None,
            "mean": chosen.mean if chosen else None,
            "sd": chosen.sd if chosen else None,
            "chosen_run": run.run_dir if run else None,
            "sweep_dir": args.output_dir,
        }
        print(json.dumps(printed))
        return 0
    print("\n".join(tune_lines(results, args.output_dir)))
    return 0


def tune_lines(results, sweep_dir: str) -> list[str]:
    """What `bertfit tune` prints for people: the chosen trial and its score, the chosen run
    and the sweep directory (its table is printed above, on standard error)."""
    chosen, run = results.chosen, results.chosen_run
    if chosen is None:
        return [f"no trial finished: nothing chosen (see {sweep_dir}/sweep.log)"]
    lines = [
        f"chosen trial: {chosen.name}: {results.metric} {chosen.mean:.4f} ± {chosen.sd:.4f} "
        f"over {len(chosen.values)} run(s)"
    ]
    if run is not None:
        lines.append(f"chosen run: {run.run_dir}")
    lines.append(f"sweep directory: {sweep_dir} (results.json; chosen.yaml: its config)")
    return lines


def cmd_audit(args) -> int:
    from bertfit.sweeps.audit import audit_sweep, audit_training
    from bertfit.sweeps.audit_flags import audit_options, check_from_alone, training_from_args

    if args.from_sweep:
        check_from_alone(args)
        summary = audit_sweep(args.from_sweep, report=not args.no_report, **audit_options(args))
    else:
        base, spec = training_from_args(args)
        summary = audit_training(
            base, spec, args.output_dir, quiet=args.quiet, reports=not args.no_report,
            **audit_options(args),
        )  # fmt: skip
    if args.json:
        print(json.dumps(summary))
        return 0
    print(
        f"flagged {summary['flagged']} of {summary['rows']} training rows as likely mislabelled "
        f"({summary['method']}; about {summary['estimated_wrong']:.0f} wrong labels estimated)"
    )
    print(f"audit: {summary['output']} (issues.csv: the flagged rows, most likely wrong first;")
    print("  train-without-issues.jsonl: the other rows, for bertfit train --train)")
    return 0


PREPARE_FLAGS = (
    "--model",
    "--max-seq-length",
    "--lower-case",
    "--task",
    "--format",
    "--text-column",
    "--text-pair-column",
    "--label-column",
    "--label-separator",
)


def cmd_prepare(args) -> int:
    from bertfit.training.shards import prepare_shards

    args.train, args.config, args.output_dir = args.data, None, None
    config = run_config_from_args(args)
    manifest = prepare_shards(config, args.output, shards=args.shards, overwrite=args.overwrite)
    print(
        json.dumps({"output": args.output, "rows": manifest.rows, "shards": len(manifest.shards)})
    )
    return 0


def warn_if_unfinished(path: str | None) -> None:
    """A run that did not finish (killed, or still training) is used, but never silently: the
    warning names the checkpoint it has."""
    from bertfit.training.remote_run import open_run

    note = open_run(path, checkpoints=False).unfinished_note() if path else None
    if note:
        print(f"bertfit: warning: {note}", file=sys.stderr)


def cmd_evaluate(args) -> int:
    from bertfit.inference.run import evaluate

    warn_if_unfinished(args.run)
    metrics = evaluate(
        args.run,
        args.data,
        quiet=args.quiet or args.json,
        format=args.format,
        columns=_columns(args),
    )
    if args.json:
        print(json.dumps(metrics))
    else:
        for key, value in metrics.items():
            if isinstance(value, (int, float)):
                print(
                    f"{key:>19}: {value:.6g}" if isinstance(value, float) else f"{key:>19}: {value}"
                )
    return 0


def cmd_predict(args) -> int:
    from bertfit.inference.predictions_file import (
        check_output_path,
        write_prediction_chunks,
        write_predictions,
    )
    from bertfit.inference.run import predict, predict_chunks

    output = args.output or "-"
    check_output_path(output, args.data, args.run)
    warn_if_unfinished(args.run)
    columns = _columns(args)
    if args.data == "-":  # streamed in chunks, answered as it goes: stdin may never end
        chunks = predict_chunks(args.run, args.data, format=args.format, columns=columns)
        count = write_prediction_chunks(chunks, output)
    else:
        rows = predict(args.run, args.data, quiet=args.quiet, format=args.format, columns=columns)
        write_predictions(rows, output)
        count = len(rows)
    if output != "-" and not args.quiet:
        print(f"wrote {count} predictions to {output}", file=sys.stderr)
    return 0


def _columns(args) -> dict:
    """--text-column and co. of `evaluate` and `predict` (None: the run's own)."""
    roles = ("text", "text_pair", "label")
    return {role: getattr(args, f"{role}_column", None) for role in roles}


def cmd_export(args) -> int:
    from bertfit.inference.predictor import load_classifier
    from bertfit.paths import check_output_dir

    if args.quantize and args.format == "saved-model":
        raise BertfitError(
            "--quantize int8 is for --format litert or onnx; a saved-model export keeps the "
            "run's weights as they are."
        )
    check_output_dir(args.output, "OUT", run_dir=args.run)
    warn_if_unfinished(args.run)
    classifier = load_classifier(args.run)
    if args.format == "saved-model":
        from bertfit.export.serving import export_classifier

        path = export_classifier(classifier, args.output, version=args.version)
    else:
        from bertfit.export.formats import exporter

        write = exporter(args.format)
        path = write(classifier, args.output, version=args.version, quantize=args.quantize)
    print(path)
    return 0


def cmd_serve(args) -> int:
    try:
        from bertfit.serve.app import serve
    except ModuleNotFoundError as e:
        from bertfit.errors import MissingDependencyError

        raise MissingDependencyError(
            f"bertfit serve needs {e.name}: pip install 'bertfit[serve]' (uvicorn and starlette)."
        ) from None

    warn_if_unfinished(args.run)
    serve(
        args.run or args.export,
        host=args.host,
        port=args.port,
        grpc_port=grpc_port_of(args),
        model_name=args.model_name,
        max_batch=args.max_batch,
        max_wait=args.max_wait_ms / 1000,
        max_request_instances=args.max_request_instances,
        max_body_bytes=args.max_request_bytes,
        read_timeout=args.read_timeout_seconds,
        max_queued_requests=args.max_queued_requests,
        rest_timeout=args.rest_api_timeout_in_ms / 1000,
        version_policy=args.version_policy,
        poll_wait=args.file_system_poll_wait_seconds,
        version_labels=args.version_labels,
        enable_cors=args.enable_cors,
    )
    return 0


def grpc_port_of(args) -> int:
    """--grpc-port, or TF Serving's 8500; with --port 0 (any free port) any free one too, so
    that a server started for a test or beside others takes no fixed port."""
    if args.grpc_port is not None:
        return args.grpc_port
    return 0 if args.port == 0 else 8500


def cmd_report(args) -> int:
    from bertfit.report import write_report

    path = write_report(args.run, args.output)
    if args.output != "-":
        print(path)
    return 0


def cmd_demo(args) -> int:
    from bertfit.demo import run_demo

    run_demo(
        output_dir=args.output_dir,
        epochs=args.epochs,
        max_train_examples=args.max_train_examples,
        quiet=args.quiet,
        task=args.task,
    )
    return 0


def _version() -> str:
    """The installed distribution's version (pyproject.toml's), read without importing more."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bertfit")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _version_labels(text: str) -> dict[str, int]:
    """`stable=1,canary=2` → {"stable": 1, "canary": 2}."""
    labels = {}
    for item in filter(None, text.split(",")):
        label, _, version = item.partition("=")
        label, version = label.strip(), version.strip()
        if not label or not version.isdigit() or int(version) < 1 or "/" in label or ":" in label:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not LABEL=VERSION (a label without '/' or ':', a version of 1 or "
                "more); e.g. --version-labels stable=1,canary=2"
            )
        labels[label] = int(version)
    return labels


def _serving_version(text: str) -> int:
    """TF Serving's versions are positive int64 numbers."""
    try:
        version = int(text)
    except ValueError:
        version = 0
    if not 1 <= version < 2**63:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from 1 to {2**63 - 1} (TF Serving's versions); got {text!r}"
        )
    return version


def _check_convert_destination(args) -> None:
    from bertfit.paths import check_output_dir

    check_output_dir(args.destination, "DST", inputs=[args.source])


# Checks of a command's outputs run before its own code: commands that live with their subsystem
# get them here.
PREFLIGHT = {"convert": _check_convert_destination}
# Commands that only run a trained model: TensorFlow's graph optimizer stays on for them
# (bertfit.tf_startup says why and what it measured).
INFERENCE_COMMANDS = ("evaluate", "predict", "serve")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertfit", description="Fine-tune BERT-family encoders for text classification."
    )
    parser.add_argument("--version", action="version", version=f"bertfit {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="fine-tune a classifier")
    add_run_output_arguments(add_train_arguments(train))
    train.set_defaults(handler=cmd_train)

    prepare = sub.add_parser(
        "prepare", help="tokenize a data file into TFRecord shards and a manifest for `train`"
    )
    prepare.add_argument(
        "data",
        metavar="DATA",
        help="a CSV, TSV, JSONL or Parquet file, or a quoted glob; local or a URL (gs://, s3://)",
    )
    prepare.add_argument(
        "output",
        metavar="OUT",
        help="the directory of shards to write: local or gs:// (not s3://: TF cannot read it)",
    )
    for flag in PREPARE_FLAGS:
        prepare.add_argument(flag, default=argparse.SUPPRESS, **TRAIN_FLAGS[flag][1])
    prepare.add_argument(
        "--shards", type=int, help="how many files (default: one per 100,000 rows, at most 256)"
    )
    prepare.add_argument("--overwrite", action="store_true", help="replace a prepared set in OUT")
    prepare.set_defaults(handler=cmd_prepare)

    evaluate = sub.add_parser("evaluate", help="metrics of a trained run on a labelled file")
    evaluate.add_argument(
        "--run", required=True, help="a run directory from `bertfit train`, or an export"
    )
    evaluate.add_argument("--data", required=True, help="a file, or - for standard input")
    evaluate.add_argument(
        "--json", action="store_true", help="print the metrics as JSON (every one of them)"
    )
    evaluate.set_defaults(handler=cmd_evaluate)

    predict = sub.add_parser("predict", help="predict labels, one output row per input row")
    predict.add_argument("--run", required=True, help="a run directory, or an export")
    predict.add_argument("--data", required=True, help="a file, or - for standard input")
    predict.add_argument(
        "--output",
        help="output .csv or .jsonl (default, or -: JSON lines on standard output)",
    )
    predict.set_defaults(handler=cmd_predict)

    export = sub.add_parser(
        "export", help="write a trained classifier as a TF Serving SavedModel (OUT/<version>/)"
    )
    export.add_argument("--run", required=True, help="a run directory from `bertfit train`")
    export.add_argument(
        "output", metavar="OUT", help="folder of versions; the next free version number is used"
    )
    export.add_argument(
        "--version",
        type=_serving_version,
        help="the version number, 1 or more (default: next free)",
    )
    export.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        default="saved-model",
        help="saved-model (TF Serving, the default); litert (raw strings in, the tokenizer "
        "inside); onnx (token ids in, tokenizer.json beside)",
    )
    export.add_argument(
        "--quantize",
        choices=["int8"],
        help="int8 weights (dynamic-range quantization) for --format litert or onnx",
    )
    export.set_defaults(handler=cmd_export)

    serve = sub.add_parser("serve", help="serve a classifier over TF Serving's REST and gRPC APIs")
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="a run directory from `bertfit train`")
    source.add_argument(
        "--export",
        help="an export from `bertfit export` (its BASE folder): the versions --version-policy "
        "wants, polled for new ones (the newest answers requests that name none)",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: all)",
    )
    serve.add_argument(
        "--port", type=int, default=8501, help="the REST API's port (default 8501; 0: any free)"
    )
    serve.add_argument(
        "--grpc-port",
        type=int,
        help="TF Serving's gRPC API (default 8500, or any free port with --port 0; 0: any "
        "free port; -1: no gRPC server)",
    )
    serve.add_argument("--model-name", default="model", help="NAME in /v1/models/NAME")
    serve.add_argument(
        "--max-batch",
        type=int,
        default=64,
        help="most texts per model call when batching requests (default 64)",
    )
    serve.add_argument(
        "--max-wait-ms",
        type=float,
        default=5.0,
        help="how long a request waits for others to share its batch (ms)",
    )
    serve.add_argument(
        "--max-request-instances",
        type=int,
        default=4096,
        help="the most texts one request may send; more is answered 400 (default 4096)",
    )
    serve.add_argument(
        "--max-request-bytes",
        type=int,
        default=16 << 20,
        help="largest REST body or gRPC message (default 16 MiB); a larger one is refused (413 "
        "/ RESOURCE_EXHAUSTED)",
    )
    serve.add_argument(
        "--read-timeout-seconds",
        type=float,
        default=30.0,
        help="a request's headers and body must arrive within this (default 30); a slower "
        "one is answered 408 and its connection closed",
    )
    serve.add_argument(
        "--version-policy",
        default="latest",
        help="which versions of --export BASE to serve (TF Serving's model_version_policy): "
        "latest (default), latest:N, all, or specific:1,3",
    )
    serve.add_argument(
        "--file-system-poll-wait-seconds",
        type=float,
        default=1.0,
        help="how often --export BASE is polled for new or removed versions (TF Serving's flag, "
        "default 1; 0: only at start)",
    )
    serve.add_argument(
        "--max-queued-requests",
        type=int,
        default=256,
        help="most requests in progress at once (default 256); one more is answered 429 / "
        "RESOURCE_EXHAUSTED at once",
    )
    serve.add_argument(
        "--rest-api-timeout-in-ms",
        type=float,
        default=30000.0,
        help="a REST request's deadline once its body is in (TF Serving's flag, default "
        "30000); past it: 504. gRPC requests keep their client's deadline",
    )
    serve.add_argument(
        "--version-labels",
        type=_version_labels,
        default={},
        help="labels for /v1/models/NAME/labels/LABEL, e.g. stable=1,canary=2 (TF Serving's "
        "version_labels)",
    )
    serve.add_argument(
        "--enable-cors",
        action="store_true",
        help="add CORS headers (Access-Control-Allow-Origin: *) to every answer",
    )
    serve.set_defaults(handler=cmd_serve)

    report = sub.add_parser("report", help="an HTML page of a run's curves, metrics and data")
    report.add_argument("run", metavar="RUN", help="a run directory from `bertfit train`")
    report.add_argument(
        "--output", help="the HTML file (default: RUN/report.html; - for standard output)"
    )
    report.set_defaults(handler=cmd_report)

    demo = sub.add_parser(
        "demo", help="fine-tune MiniLM-L6 on Rotten Tomatoes, report test accuracy"
    )
    demo.add_argument("--output-dir", help="run directory (default: a new runs/<date>-<time>)")
    demo.add_argument(
        "--epochs", type=int, default=None, help="passes over the training split (default 1)"
    )
    demo.add_argument(
        "--max-train-examples",
        type=int,
        default=None,
        help="train on the first N training rows only (default: all)",
    )
    demo.add_argument(
        "--task",
        choices=TASKS,
        default="single-label",
        help="Rotten Tomatoes as sentiment (default), sentiment + topic tags "
        "(multi-label) or log2 word count (regression)",
    )
    demo.set_defaults(handler=cmd_demo)

    tune = sub.add_parser(
        "tune",
        help="sweep settings (a grid or random draw) × seeds, or k-fold cross-validate; "
        "choose the best mean",
    )
    add_tune_arguments(tune)
    tune.set_defaults(handler=cmd_tune)

    audit = sub.add_parser(
        "audit",
        help="rank training rows whose label is likely wrong, from k-fold out-of-fold "
        "predictions (confident learning)",
    )
    add_audit_arguments(audit)
    audit.set_defaults(handler=cmd_audit)

    for name in ("evaluate", "predict"):
        command = sub.choices[name]
        command.add_argument(
            "--format",
            choices=FORMATS,
            help="the format of --data (default: from its name; standard input: csv)",
        )
        command.add_argument(
            "--text-column", help="the column of the text (default: the training files')"
        )
        command.add_argument(
            "--text-pair-column",
            help="the column of the second text, for a pair classifier (default: the "
            "training files')",
        )
    sub.choices["evaluate"].add_argument(
        "--label-column", help="the column of the label (default: the training files')"
    )
    for name in ("evaluate", "predict", "demo"):
        sub.choices[name].add_argument("--quiet", action="store_true", help="no progress output")
    for commands in (checkpoint_commands, check_commands):  # they live with their subsystem
        commands.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # --help and usage errors exit here, without TensorFlow
    handler = getattr(args, "handler", None) or args.func
    try:
        if args.command in PREFLIGHT:
            PREFLIGHT[args.command](args)
        # Before any handler imports TensorFlow: it reads its settings on load.
        start_tensorflow(for_inference=args.command in INFERENCE_COMMANDS)
        return handler(args)
    except BertfitError as e:
        print(f"bertfit {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in _SYSTEM_REFUSALS:
            raise
        where = f"{e.filename}: " if e.filename else ""
        print(f"bertfit {args.command}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except TrainingInterrupted as e:
        print(f"bertfit {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
