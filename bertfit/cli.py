"""`bertfit train|distill|tune|prepare|evaluate|predict|export|serve|report|demo|check|inspect|
convert`: argument parsing only.

User mistakes arrive here as `BertfitError`s and are printed as one clear message (exit 2),
never as a traceback. The arguments are parsed before TensorFlow loads (seconds): `--help` and
usage errors answer at once, and nothing imported here or by the flags' parsing loads it.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import errno
import json
import signal
import sys
import warnings

from bertfit.checkpoints import commands as checkpoint_commands
from bertfit.checks import commands as check_commands
from bertfit.config import BACKENDS, DATA_FORMATS, ENGINES, TASKS, TENSORFLOW_BACKEND, RunConfig
from bertfit.data.run_files import check_run_files
from bertfit.data.sources import check_source
from bertfit.errors import BertfitError, CheckpointWarning, Interrupted
from bertfit.export.formats import FORMATS as EXPORT_FORMATS
from bertfit.flags import add_flags, flags_of, given
from bertfit.paths import check_not_nested
from bertfit.run_flags import (
    RUN_FLAGS,
    add_run_output_arguments,
    add_train_arguments,
    run_config_from_args,
    train_preflight,
)
from bertfit.serve.options import ServeOptions
from bertfit.sweeps.audit_flags import add_audit_arguments, audit_preflight
from bertfit.sweeps.flags import add_tune_arguments, sweep_from_args, tune_preflight
from bertfit.tf_build import require_tensorflow
from bertfit.tf_startup import keras_backend, select_keras_backend, start_tensorflow

# The commands whose preflight makes --backend Keras' backend (`train_preflight`,
# `distill_preflight`, check's and doctor's `select_run_backend`, `tune_preflight`,
# `audit_preflight`, evaluate's and predict's `select_inference_backend`); every other runs
# Keras on TensorFlow.
BACKEND_COMMANDS = ("train", "distill", "doctor", "check", "tune", "audit", "evaluate", "predict")
# Those of them that load TensorFlow only when their backend needs it
# (`Backend.loads_tensorflow`: not --backend jax); `doctor` reports TensorFlow's build on any.
TENSORFLOW_ON_DEMAND = ("train", "distill", "check", "tune", "audit", "evaluate", "predict")
# The commands that run no model: TensorFlow is never loaded
WITHOUT_KERAS = ("relabel",)
# What runs without TensorFlow, said when a command that needs it is refused where it is not
# installed (a JAX-only install)
WITHOUT_TENSORFLOW = {
    "export": "a run trained with --backend jax exports on any machine that has it",
    "serve": "a run trained with --backend jax is served on any machine that has it; "
    "bertfit predict --backend jax needs none",
}
JAX_RUNS = (
    "bertfit train, distill, evaluate, predict and check with --backend jax run without it: "
    "pip install 'bertfit[jax]'"
)

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
    check_not_nested(config.output_dir, "--output-dir")
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
    from bertfit.runs.metrics import HEADLINE_METRICS, support_note

    final = summary.final
    if final is not None:
        names = [n for n in (*HEADLINE_METRICS[summary.task], "loss") if n in final]
        scores = ", ".join(f"{n} {final[n]:.4f}" for n in names)
        best = ", ".join(f"{k} {v:.4f}" for k, v in (summary.best or {}).items())
        lines = [f"final evaluation: {scores}" + (f" (best {best})" if best else "")]
        note = support_note(final)
        lines += [note] if note else []
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


def distill_configs(args):
    """`bertfit distill`'s own flags (`DistillConfig`, checked) and the student's run config
    (the teacher's, or --config's, with the flags on top); reads no more than their files."""
    from bertfit.distill.config import DistillConfig, open_teacher, student_config

    options = DistillConfig(**given(args, flags_of(DistillConfig))).validate()
    teacher = open_teacher(options.teacher)
    base = RunConfig.load(args.config) if args.config else teacher.load_config()
    flags = given(args, RUN_FLAGS.values())
    chosen = not args.config and teacher.chosen_schedule() is not None
    config = student_config(base, args.output_dir, flags, options.student_model, chosen)
    check_not_nested(config.output_dir, "--output-dir")
    return options, config


def distill_preflight(args) -> None:
    """`distill`'s preflight, before TensorFlow loads: its settings checked, and the student's
    --backend (the teacher's unless given) made Keras' backend, which the teacher labels on."""
    _, config = distill_configs(args)
    select_keras_backend(config.train.backend)


def cmd_distill(args) -> int:
    from bertfit.distill.run import distill
    from bertfit.report import write_report

    options, config = distill_configs(args)
    summary = distill(
        config,
        options,
        quiet=args.quiet,
        resume=True if args.resume else None,
        overwrite=args.overwrite,
    )
    report = None if args.no_report else write_report(summary.run_dir)
    if args.json:
        print(json.dumps({**summary.headline, "run_dir": summary.run_dir}))
    else:
        print("\n".join(train_lines(summary, report)))
    return 0


def cmd_tune(args) -> int:
    from bertfit.sweeps.tune import tune

    base, spec = sweep_from_args(args)
    check_not_nested(args.output_dir, "--output-dir")
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
    from bertfit.sweeps.audit import (
        acting_advice,
        audit_sweep,
        audit_training,
        predicted_by,
        wrong_labels,
    )
    from bertfit.sweeps.audit_flags import audit_options, check_from_alone, training_from_args

    if args.from_sweep:
        check_from_alone(args)
        summary = audit_sweep(args.from_sweep, report=not args.no_report, **audit_options(args))
    else:
        base, spec = training_from_args(args)
        check_not_nested(args.output_dir, "--output-dir")
        summary = audit_training(
            base, spec, args.output_dir, quiet=args.quiet, reports=not args.no_report,
            **audit_options(args),
        )  # fmt: skip
    if summary["warning"]:
        print(f"bertfit audit: warning: {summary['warning']}", file=sys.stderr)
    if args.json:
        print(json.dumps(summary))
        return 0
    print(
        f"flagged {summary['flagged']} of {summary['rows']} training rows as likely mislabelled "
        f"({summary['method']}; {wrong_labels(summary)})"
    )
    print(
        f"  the folds are right on {summary['out_of_fold_accuracy']:.1%} of the rows (the most "
        f"common label alone: {summary['majority_rate']:.1%}): the audit is as good as they are"
    )
    if summary.get("per_fold_choice"):
        print(f"  (predicted by {predicted_by(summary)})")
    if not summary["warning"] and summary["found"] < summary["flagged_by_method"]:
        found, all_rows = summary["found"], summary["flagged_by_method"]
        print(
            f"  (the first {found} of the {all_rows} rows {summary['method']} flags: as many as "
            "the folds see wrong, their own mistakes left out; --flag all for every one)"
        )
    if not summary["warning"] and summary["flagged"] < summary["found"]:
        kept, found = summary["flagged"], summary["found"]
        print(f"  (the review budget kept the first {kept} of {found} found)")
    print(f"audit: {summary['output']} (issues.csv: the flagged rows, most likely wrong first;")
    print(
        "  train-without-issues.jsonl: the other rows, for bertfit train --train once the list "
        f"is reviewed ({acting_advice(summary)});"
    )
    print("  fill in issues.csv's decision column, then: bertfit relabel ISSUES_CSV --output FILE)")
    return 0


def cmd_relabel(args) -> int:
    from bertfit.sweeps.review import apply_review

    done = apply_review(args.issues, args.output, args.train)
    print(
        f"wrote {done['rows']} training rows to {args.output} ({done['dropped']} dropped, "
        f"{done['relabelled']} relabelled): bertfit train --train {args.output}"
    )
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


def prepare_config(args) -> RunConfig:
    """The run config `bertfit prepare` tokenizes DATA for: its flags, DATA as `--train`."""
    args.train, args.config, args.output_dir = args.data, None, None
    return run_config_from_args(args)


def prepare_preflight(args) -> None:
    """DATA's first rows read before TensorFlow loads (`check_run_files`; the prepare streams
    the rest through the same reader)."""
    check_run_files(prepare_config(args), first_rows_only=True)


def cmd_prepare(args) -> int:
    from bertfit.training.shards import prepare_shards

    config = prepare_config(args)
    manifest = prepare_shards(config, args.output, shards=args.shards, overwrite=args.overwrite)
    print(
        json.dumps({"output": args.output, "rows": manifest.rows, "shards": len(manifest.shards)})
    )
    return 0


def warn_if_unfinished(path: str | None) -> None:
    """A run that did not finish (killed, or still training) is used, but never silently: the
    warning names the checkpoint it has."""
    from bertfit.runs.run_dir import open_run

    note = open_run(path, checkpoints=False).unfinished_note() if path else None
    if note:
        print(f"bertfit: warning: {note}", file=sys.stderr)


def cmd_evaluate(args) -> int:
    from bertfit.inference.run import evaluate

    metrics = evaluate(
        backend_run(args),
        args.data,
        quiet=args.quiet or args.json,
        format=args.format,
        columns=_columns(args),
        engine=args.engine,
    )
    if args.json:
        print(json.dumps(metrics))
    else:
        from bertfit.runs.metrics import support_note

        for key, value in metrics.items():
            if isinstance(value, (int, float)):
                print(
                    f"{key:>19}: {value:.6g}" if isinstance(value, float) else f"{key:>19}: {value}"
                )
        note = support_note(metrics)
        if note:
            print(note)
    return 0


def predict_preflight(args) -> None:
    """`select_inference_backend`, and --output checked (`check_output_path`), before
    TensorFlow loads."""
    from bertfit.inference.predictions_file import check_output_path

    select_inference_backend(args)
    check_output_path(args.output or "-", args.data, args.run)


def cmd_predict(args) -> int:
    from bertfit.inference.predictions_file import write_prediction_chunks, write_predictions
    from bertfit.inference.run import predict, predict_chunks
    from bertfit.training.interrupt import StopRequests

    output = args.output or "-"
    run, engine, columns = backend_run(args), args.engine, _columns(args)
    if args.data == "-":  # streamed in chunks, answered as it goes: stdin may never end
        chunks = predict_chunks(run, args.data, format=args.format, columns=columns, engine=engine)
        with StopRequests(note=None) as stop:  # SIGTERM, Ctrl-C: what was predicted is kept
            count = write_prediction_chunks(stop.until_stopped(chunks), output)
        if stop.signal is not None:
            where = "standard output" if output == "-" else output
            raise Interrupted(
                f"{signal.Signals(stop.signal).name}: stopped; wrote {count} predictions to "
                f"{where} (the rows read after them were not predicted)",
                stop.signal,
            )
    else:
        rows = predict(
            run, args.data, quiet=args.quiet, format=args.format, columns=columns, engine=engine
        )
        write_predictions(rows, output)
        count = len(rows)
    if output != "-" and not args.quiet:
        print(f"wrote {count} predictions to {output}", file=sys.stderr)
    return 0


def engine_run(args, engine: str | None = None) -> str:
    """What `--engine` runs for `--run`, after the warning for an unfinished run: the run or
    export itself (tensorflow), or its ONNX export (onnx: a run's is made once and kept in it,
    `bertfit.export.onnx_engine`). The onnx engine loads TensorFlow only to make that export
    or to say which checkpoint an unfinished run has."""
    if (engine or args.engine) != "onnx":
        warn_if_unfinished(args.run)
        return args.run
    from bertfit.export.onnx_engine import onnx_engine_folder, run_unfinished

    if run_unfinished(args.run):
        start_tensorflow(for_inference=True)
        warn_if_unfinished(args.run)
    return str(onnx_engine_folder(args.run, quiet=getattr(args, "quiet", False)))


def select_inference_backend(args) -> None:
    """evaluate's preflight (and predict's): what --backend cannot run is refused
    (`bertfit.inference.backends`), then it becomes Keras' backend; a --data file that
    is missing, or of a format bertfit cannot tell, and the packages --engine onnx needs
    (`check_engine_installed`) are said before TensorFlow loads."""
    from bertfit.inference.backends import inference_backend

    inference_backend(args.backend).check(args.run, args.engine)
    select_keras_backend(args.backend)
    check_source(args.data, args.format)
    if args.engine == "onnx":
        from bertfit.export.onnx_engine import check_engine_installed

        check_engine_installed(args.run)


def backend_run(args):
    """`engine_run`'s run or export, as the --backend runs it (a run's classifier on the JAX
    devices with --backend jax)."""
    from bertfit.inference.backends import inference_backend

    return inference_backend(args.backend).classifier(engine_run(args))


def _columns(args) -> dict:
    """--text-column and co. of `evaluate` and `predict` (None: the run's own)."""
    roles = ("text", "text_pair", "label")
    return {role: getattr(args, f"{role}_column", None) for role in roles}


def cmd_export(args) -> int:
    from bertfit.inference.predictor import load_classifier
    from bertfit.paths import check_output_dir

    if args.quantize and args.format in ("saved-model", "hf"):
        raise BertfitError(
            f"--quantize int8 is for --format litert or onnx; a {args.format} export keeps the "
            "run's weights as they are."
        )
    if args.version is not None and args.format == "hf":
        raise BertfitError(
            "--version is not for --format hf: its export is OUT itself, one folder as "
            "transformers loads it; leave --version out."
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
        if args.format == "hf":
            from bertfit.export.hf import flavour_note

            note = flavour_note(path)
            if note is not None:
                print(f"bertfit export: {note}", file=sys.stderr)
    print(path)
    return 0


def serve_options(args) -> ServeOptions:
    """The `ServeOptions` of `bertfit serve`'s flags (a `ConfigError` for a value no server can
    work with; `main` builds them once before TensorFlow loads, so that is said at once)."""
    return ServeOptions(**given(args, flags_of(ServeOptions)))


def serve_preflight(args) -> None:
    """`serve_options`, and with --engine onnx the packages it needs (`check_engine_installed`),
    before TensorFlow loads."""
    if serve_options(args).engine == "onnx" and args.run is not None:
        from bertfit.export.onnx_engine import check_engine_installed

        check_engine_installed(args.run)


def cmd_serve(args) -> int:
    options = serve_options(args)
    try:
        from bertfit.serve.app import serve
    except ModuleNotFoundError as e:
        from bertfit.errors import MissingDependencyError

        raise MissingDependencyError(
            f"bertfit serve needs {e.name}: pip install 'bertfit[serve]' (uvicorn and starlette)."
        ) from None

    engine_export = None
    if options.engine == "onnx":  # the signatures stay TensorFlow's: it runs beside ONNX Runtime
        if args.run is None:
            raise BertfitError(
                "--engine onnx serves a run directory (--run RUN) through its ONNX export; "
                "serve an --export with --engine tensorflow (the default)."
            )
        engine_export = engine_run(args, "onnx")
    else:
        warn_if_unfinished(args.run)
    serve(args.run or args.export, options, engine_export=engine_export)
    return 0


def cmd_report(args) -> int:
    from bertfit.report import write_report

    path = write_report(args.run, args.output)
    if args.output != "-":
        print(path)
    return 0


def cmd_demo(args) -> int:
    from bertfit.demo import run_demo

    check_not_nested(args.output_dir, "--output-dir")
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


# Commands that only run a trained model: TensorFlow's graph optimizer stays on for them
# (bertfit.tf_startup says why and what it measured).
INFERENCE_COMMANDS = ("evaluate", "predict", "serve")


class CommandLine(argparse.ArgumentParser):
    """argparse's parser, with a usage error in one line, `bertfit CMD: error: ...` (the usage
    block is `--help`'s), and a mistyped flag, command or choice answered with the closest
    ones (`difflib`): `unrecognized arguments: --epcohs 3 (did you mean --epochs?)`. Each
    command's parser is one too (`add_subparsers` makes its own kind)."""

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._command(getattr(parsed, "command", None))
            command.error(_unrecognized(extras, command))
        return parsed

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _check_value(self, action, value):  # argparse's check of a command or a --flag choice
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as e:
            close = difflib.get_close_matches(str(value), [str(c) for c in action.choices])
            if close:
                e.message += f"; did you mean {' or '.join(close)}?"
            raise

    def _command(self, name: str | None) -> argparse.ArgumentParser:
        """The parser of command `name` (this one without)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and name in action.choices:
                return action.choices[name]
        return self


def _unrecognized(extras: list[str], parser: argparse.ArgumentParser) -> str:
    """argparse's message for arguments no flag takes, with the flags closest to each."""
    flags = [name for action in parser._actions for name in action.option_strings]
    close = {}
    for word in extras:
        typed = word.partition("=")[0]
        if typed.startswith("--"):
            close[typed] = difflib.get_close_matches(typed, flags, n=3, cutoff=0.75)
    message = f"unrecognized arguments: {' '.join(extras)}"
    found = {typed: names for typed, names in close.items() if names}
    if not found:
        return f"{message}; {parser.prog} --help lists every flag"
    if len(close) == 1:
        (names,) = found.values()
        return f"{message} (did you mean {' or '.join(names)}?)"
    said = "; ".join(f"{typed}: {' or '.join(names)}" for typed, names in found.items())
    return f"{message} (did you mean {said}?)"


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every command, its flags, their help. Each command's parser
    sets `handler(args) -> exit code`, and may set `preflight(args)`: checks of its options
    and outputs that `main` runs before TensorFlow loads (seconds), so a mistake is said at
    once."""
    parser = CommandLine(
        prog="bertfit", description="Fine-tune BERT-family encoders for text classification."
    )
    parser.add_argument("--version", action="version", version=f"bertfit {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add_command in (
        _add_train,
        _add_distill,
        _add_prepare,
        _add_evaluate,
        _add_predict,
        _add_export,
        _add_serve,
        _add_report,
        _add_demo,
        _add_tune,
        _add_audit,
        _add_relabel,
        checkpoint_commands.add_commands,  # they live with their subsystem
        check_commands.add_commands,
    ):
        add_command(sub)
    return parser


def _add_train(sub) -> None:
    train = sub.add_parser("train", help="fine-tune a classifier")
    add_run_output_arguments(add_train_arguments(train))
    train.set_defaults(handler=cmd_train, preflight=train_preflight)


def _add_distill(sub) -> None:
    from bertfit.distill.config import DistillConfig

    distill = sub.add_parser(
        "distill",
        help="train a smaller student on a fine-tuned run's probabilities (its teacher)",
        description="The teacher (a finished run) labels the training rows, and any "
        "--unlabelled texts, with its probabilities; the student (the teacher's embeddings and "
        "some of its layers, or --student-model) learns them and the given labels. The other "
        "flags default to the teacher's run settings; the student's run directory is a run "
        "like any (evaluate, predict, export, serve).",
    )
    add_flags(distill.add_argument_group("distillation"), flags_of(DistillConfig))
    add_run_output_arguments(add_train_arguments(distill))
    distill.set_defaults(handler=cmd_distill, preflight=distill_preflight)


def _add_prepare(sub) -> None:
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
    add_flags(prepare, [RUN_FLAGS[flag] for flag in PREPARE_FLAGS])
    prepare.add_argument(
        "--shards", type=int, help="how many files (default: one per 100,000 rows, at most 256)"
    )
    prepare.add_argument("--overwrite", action="store_true", help="replace a prepared set in OUT")
    prepare.set_defaults(handler=cmd_prepare, preflight=prepare_preflight)


def _add_evaluate(sub) -> None:
    evaluate = sub.add_parser("evaluate", help="metrics of a trained run on a labelled file")
    evaluate.add_argument(
        "--run", required=True, help="a run directory from `bertfit train`, or an export"
    )
    evaluate.add_argument("--data", required=True, help="a file, or - for standard input")
    evaluate.add_argument(
        "--json", action="store_true", help="print the metrics as JSON (every one of them)"
    )
    _add_data_arguments(evaluate, label=True)
    _add_quiet(evaluate)
    _add_engine(evaluate)
    _add_backend(evaluate)
    evaluate.set_defaults(handler=cmd_evaluate, preflight=select_inference_backend)


def _add_predict(sub) -> None:
    predict = sub.add_parser("predict", help="predict labels, one output row per input row")
    predict.add_argument("--run", required=True, help="a run directory, or an export")
    predict.add_argument("--data", required=True, help="a file, or - for standard input")
    predict.add_argument(
        "--output",
        help="output .csv or .jsonl (default, or -: JSON lines on standard output)",
    )
    _add_data_arguments(predict, label=False)
    _add_quiet(predict)
    _add_engine(predict)
    _add_backend(predict)
    predict.set_defaults(handler=cmd_predict, preflight=predict_preflight)


def _add_data_arguments(command, label: bool) -> None:
    """How `evaluate` and `predict` read --data (default: as the run's training files)."""
    command.add_argument(
        "--format",
        choices=DATA_FORMATS,
        help="the format of --data (default: from its name; standard input: csv)",
    )
    command.add_argument(
        "--text-column", help="the column of the text (default: the training files')"
    )
    command.add_argument(
        "--text-pair-column",
        help="the column of the second text, for a pair classifier (default: the training files')",
    )
    if label:
        command.add_argument(
            "--label-column", help="the column of the label (default: the training files')"
        )


def _add_engine(command) -> None:
    command.add_argument(
        "--engine",
        choices=ENGINES,
        default=ENGINES[0],
        help="what runs the model: tensorflow (default: every run and export) or onnx (the "
        "run's ONNX export in ONNX Runtime, made once and kept in the run; no TensorFlow "
        "in the process, so it starts faster; runs without --long-documents chunk; needs "
        "bertfit[export])",
    )


def _add_backend(command) -> None:
    command.add_argument(
        "--backend",
        choices=BACKENDS,
        default=TENSORFLOW_BACKEND,
        help="the Keras backend the model runs on: tensorflow (default, whichever backend "
        "trained the run) or jax (the run's checkpoint on the JAX devices: TPUs TensorFlow "
        "cannot drive, GPUs; one compile per length bucket, batches split over the local "
        "devices; the same outputs and metrics; a run directory with --engine tensorflow; "
        "needs bertfit[jax])",
    )


def _add_quiet(command) -> None:
    command.add_argument("--quiet", action="store_true", help="no progress output")


def _add_export(sub) -> None:
    export = sub.add_parser(
        "export",
        help="write a trained classifier as a TF Serving SavedModel (OUT/<version>/), LiteRT, "
        "ONNX or a Hugging Face folder",
    )
    export.add_argument("--run", required=True, help="a run directory from `bertfit train`")
    export.add_argument(
        "output",
        metavar="OUT",
        help="folder of versions; the next free version number is used (--format hf: the "
        "folder itself, absent or empty)",
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
        "inside); onnx (token ids in, tokenizer.json beside); hf (a transformers "
        "AutoModelForSequenceClassification folder, for TEI and vLLM too, or a "
        "sentence-transformers one where transformers' heads cannot hold the run; "
        "docs/exports.md)",
    )
    export.add_argument(
        "--quantize",
        choices=["int8"],
        help="int8 weights (dynamic-range quantization) for --format litert or onnx",
    )
    export.set_defaults(handler=cmd_export)


def _add_serve(sub) -> None:
    serve = sub.add_parser("serve", help="serve a classifier over TF Serving's REST and gRPC APIs")
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="a run directory from `bertfit train`")
    source.add_argument(
        "--export",
        help="an export from `bertfit export` (its BASE folder): the versions --version-policy "
        "wants, polled for new ones (the newest answers requests that name none)",
    )
    add_flags(serve, flags_of(ServeOptions))  # declared on ServeOptions' fields
    serve.set_defaults(handler=cmd_serve, preflight=serve_preflight)


def _add_report(sub) -> None:
    report = sub.add_parser("report", help="an HTML page of a run's curves, metrics and data")
    report.add_argument("run", metavar="RUN", help="a run directory from `bertfit train`")
    report.add_argument(
        "--output", help="the HTML file (default: RUN/report.html; - for standard output)"
    )
    report.set_defaults(handler=cmd_report)


def _add_demo(sub) -> None:
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
    _add_quiet(demo)
    demo.set_defaults(handler=cmd_demo)


def _add_tune(sub) -> None:
    tune = sub.add_parser(
        "tune",
        help="sweep settings (a grid or random draw) × seeds, or k-fold cross-validate; "
        "choose the best mean",
    )
    add_tune_arguments(tune)
    tune.set_defaults(handler=cmd_tune, preflight=tune_preflight)


def _add_audit(sub) -> None:
    audit = sub.add_parser(
        "audit",
        help="rank training rows whose label is likely wrong, from k-fold out-of-fold "
        "predictions (confident learning)",
    )
    add_audit_arguments(audit)
    audit.set_defaults(handler=cmd_audit, preflight=audit_preflight)


def _add_relabel(sub) -> None:
    relabel = sub.add_parser(
        "relabel",
        help="apply the decisions of a reviewed audit issues.csv: a corrected training file",
    )
    relabel.add_argument(
        "issues",
        metavar="ISSUES_CSV",
        help="an audit's issues.csv, its decision column filled in: keep (or empty), drop, or "
        "relabel with the class in new_label",
    )
    relabel.add_argument(
        "--output",
        required=True,
        metavar="FILE.jsonl",
        help="the corrected training file: every training row in order, dropped ones left "
        "out, relabelled ones changed, in the training file's columns",
    )
    relabel.add_argument(
        "--train",
        metavar="FILE",
        help="the training file the audit read (default: the audited sweep's --train)",
    )
    relabel.set_defaults(handler=cmd_relabel)


@contextlib.contextmanager
def checkpoint_warnings_in_one_line():
    """In the block, a `CheckpointWarning` is printed `bertfit: warning: ...` (Python's way is
    `file:line: UserWarning: ...` and the line of source that warned); any other warning as
    Python prints it."""
    with warnings.catch_warnings():
        show = warnings.showwarning

        def one_line(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, CheckpointWarning):
                print(f"bertfit: warning: {message}", file=sys.stderr)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = one_line
        yield


def loads_tensorflow(args) -> bool:
    """Whether the command runs on TensorFlow: not the onnx engine of evaluate and predict
    (`engine_run` starts TensorFlow where it needs it; serve's signatures are TensorFlow's with
    either engine), not a command whose backend needs none (`TENSORFLOW_ON_DEMAND`), not one
    that runs no model (`WITHOUT_KERAS`); every other."""
    from bertfit.training.backends import BACKENDS as TRAINING_BACKENDS

    if getattr(args, "engine", None) == "onnx" and args.command != "serve":
        return False
    if args.command in WITHOUT_KERAS:
        return False
    if args.command in TENSORFLOW_ON_DEMAND:
        return TRAINING_BACKENDS[keras_backend()].loads_tensorflow
    return True


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # --help and usage errors exit here, without TensorFlow
    with checkpoint_warnings_in_one_line():
        return _run(args)


def _run(args) -> int:
    """The command's preflight, TensorFlow's start-up and its handler; a user mistake or an
    interruption said in one line."""
    try:
        preflight = getattr(args, "preflight", None)
        if preflight is not None:
            preflight(args)
        tensorflow = loads_tensorflow(args)
        if tensorflow:  # where it is not installed, said first
            note = WITHOUT_TENSORFLOW.get(args.command, JAX_RUNS)
            require_tensorflow(f"bertfit {args.command}", note)
        if args.command not in BACKEND_COMMANDS:  # a KERAS_BACKEND=jax exported for them
            select_keras_backend(TENSORFLOW_BACKEND)  # must not reach the TensorFlow commands
        if tensorflow:  # before any handler imports it: it reads its settings on load
            start_tensorflow(for_inference=args.command in INFERENCE_COMMANDS)
        return args.handler(args)
    except BertfitError as e:
        print(f"bertfit {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in _SYSTEM_REFUSALS:
            raise
        where = f"{e.filename}: " if e.filename else ""
        print(f"bertfit {args.command}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print(f"bertfit {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
