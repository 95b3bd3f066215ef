"""The `inspect` and `convert` subcommands; `bertfit.cli` wires them in with `add_commands`."""

from __future__ import annotations

import argparse
import json

from bertfit.config import CONVERT_TARGETS


def add_commands(subparsers) -> None:
    """Adds `inspect PATH [--json]` and `convert SRC DST --to hf|tf-hub` to an argparse
    subparsers object; each sets `handler(args) -> int` (and `convert` its `preflight`)."""
    inspect = subparsers.add_parser(
        "inspect",
        help="say what a checkpoint is and whether it can be fine-tuned",
        description="Recognise a checkpoint (HF, TF1, TF2, TF Hub SavedModel or module, archive) "
        "and print its format, architecture, vocab, casing and interface.",
    )
    inspect.add_argument("path", help="a checkpoint folder, prefix, archive or packaged name")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    inspect.set_defaults(handler=run_inspect)

    convert = subparsers.add_parser(
        "convert",
        help="write a checkpoint as a HF directory or a TF Hub-style SavedModel",
        description="Convert any checkpoint bertfit loads. --to hf writes model.safetensors, "
        "config.json, vocab.txt, tokenizer_config.json; --to tf-hub writes "
        "DST/encoder (reusable SavedModel) and DST/preprocess.",
    )
    convert.add_argument(
        "source", metavar="SRC", help="a checkpoint folder, prefix, archive or packaged name"
    )
    convert.add_argument("destination", metavar="DST", help="the folder to write into")
    convert.add_argument(
        "--to",
        required=True,
        choices=CONVERT_TARGETS,
        help="hf: a Hugging Face directory; tf-hub: a TF Hub-style encoder and preprocessing",
    )
    convert.add_argument(
        "--seq-length",
        type=int,
        default=None,
        help="the preprocessing model's packed length (tf-hub only; default "
        "128, or the model's position limit when shorter)",
    )
    convert.set_defaults(handler=run_convert, preflight=check_convert_destination)


def run_inspect(args: argparse.Namespace) -> int:
    from bertfit.checkpoints.inspect import format_report, inspect_checkpoint
    from bertfit.checkpoints.registry import resolve

    report = inspect_checkpoint(resolve(args.path))
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def check_convert_destination(args: argparse.Namespace) -> None:
    """DST must be a folder bertfit may write (checked before TensorFlow loads: at once)."""
    from bertfit.paths import check_output_dir

    check_output_dir(args.destination, "DST", inputs=[args.source])


def run_convert(args: argparse.Namespace) -> int:
    from bertfit.checkpoints.convert import convert

    written = convert(args.source, args.destination, args.to, seq_length=args.seq_length)
    for what, path in written.items():
        print(f"wrote {what}: {path}")
    return 0
