"""Runs bertfit's CLI on user mistakes inside one process and prints, per case, the exit code and
everything written to file descriptors 1 and 2 (C++ output included), as JSON.

Used by tests/test_cli_errors.py in a subprocess: one TensorFlow start-up for every case.
Usage: python -m tests.cli_errors WORKDIR MODEL_DIR
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import sys
import tempfile
import zipfile
from pathlib import Path


@contextlib.contextmanager
def captured_fds():
    """Sends fds 1 and 2 to temporary files; yields a dict filled with their text on exit."""
    out: dict[str, str] = {}
    files = {fd: tempfile.TemporaryFile() for fd in (1, 2)}
    saved = {fd: os.dup(fd) for fd in files}
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, f in files.items():
        os.dup2(f.fileno(), fd)
    try:
        yield out
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, f in files.items():
            os.dup2(saved[fd], fd)
            os.close(saved[fd])
            f.seek(0)
            out["stdout" if fd == 1 else "stderr"] = f.read().decode("utf-8", "replace")


def cases(work: Path, model: str) -> dict[str, list[str]]:
    """Each case: the argv of one mistake from issue 13."""
    from tests.tiny import sentiment_rows, train_args, write_csv, write_jsonl

    good = write_csv(work / "good.csv", sentiment_rows(16))
    long_texts = write_csv(
        work / "long.csv", [(" ".join(["good"] * 100), "pos"), ("bad", "neg")] * 8
    )
    (work / "surrogate_text.jsonl").write_text('{"text": "a \\ud800 b", "label": "pos"}\n')
    (work / "surrogate_label.jsonl").write_text('{"text": "fine", "label": "\\ud800"}\n')
    (work / "huge_int.csv").write_text("text,label\nfine," + "9" * 5000 + "\n")
    (work / "huge_int.jsonl").write_text('{"text": "fine", "label": ' + "9" * 5000 + "}\n")
    (work / "nested.jsonl").write_text(
        '{"text": "fine", "label": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    )
    (work / "utf32.csv").write_bytes(
        codecs.BOM_UTF32_LE + "text,label\nfine,pos\n".encode("utf-32-le")
    )
    write_jsonl(work / "invisible.jsonl", [("\u200b\u200d\u0007", "pos"), ("fine", "neg")])
    (work / "string_length.yaml").write_text('model:\n  max_seq_length: "64"\n')
    (work / "a_file").write_text("not a directory\n")
    bomb = work / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("model/model.safetensors", b"\0" * (32 * 2**20))
    # train's own batch size and epochs: a case's message may depend on them
    train = train_args(model, good, max_seq_length=32, batch_size=None, epochs=None)
    fake_run = work / "fake_run"  # enough of a run for the commands to check their outputs
    fake_run.mkdir()
    (fake_run / "config.yaml").write_text("model:\n  name: tiny\n")
    (fake_run / "metrics.json").write_text('{"status": "finished", "epochs": []}')
    damaged = {
        "truncated": '{"status": "finish',
        "list": "[1, 2, 3]",
        "latin1": '{"status": "caf\xe9"}',
    }
    for name, text in damaged.items():
        (work / f"damaged_{name}").mkdir()
        (work / f"damaged_{name}" / "config.yaml").write_text("model:\n  name: tiny\n")
        (work / f"damaged_{name}" / "metrics.json").write_bytes(text.encode("latin-1"))
    os.mkfifo(work / "fifo")
    (work / "list.yaml").write_text("- model\n- data\n")
    (work / "deep.yaml").write_text("model: " + "[" * 100_000 + "]" * 100_000 + "\n")
    (work / "binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    (work / "broken.yaml").write_text("model: [\n")

    def predict_to(output: str) -> list[str]:
        return ["predict", "--run", str(work / "no-run"), "--data", str(good), "--output", output]

    def train_on(name: str, run: str) -> list[str]:
        return train_args(
            model,
            work / name,
            work / run,
            max_seq_length=32,
            batch_size=None,
            epochs=None,
            quiet=None,
        )

    return {
        "length past the position table": [
            "train",
            "--model",
            model,
            "--train",
            str(long_texts),
            "--max-seq-length",
            "128",
            "--output-dir",
            str(work / "r1"),
        ],
        "negative learning rate": [
            *train,
            "--learning-rate=-5e-3",
            "--output-dir",
            str(work / "r2"),
        ],
        "huge learning rate": [
            *train,
            "--learning-rate",
            "1e10",
            "--output-dir",
            str(work / "r14"),
        ],
        "overflowing learning rate": [
            *train,
            "--learning-rate",
            "1e39",
            "--output-dir",
            str(work / "r15"),
        ],
        "seed past 32 bits": [*train, "--seed", str(2**32), "--output-dir", str(work / "r16")],
        "100000 cpu replicas": [
            *train,
            "--cpu-replicas",
            "100000",
            "--output-dir",
            str(work / "r17"),
        ],
        "mirrored on one cpu": [
            *train,
            "--strategy",
            "mirrored",
            "--output-dir",
            str(work / "r18"),
        ],
        "float16 on a cpu": [
            *train,
            "--precision",
            "mixed_fp16",
            "--output-dir",
            str(work / "r19"),
        ],
        "demo with zero epochs": ["demo", "--epochs", "0", "--output-dir", str(work / "r20")],
        "check on mirrored on one cpu": [
            "check",
            "--model",
            model,
            "--train",
            str(good),
            "--strategy",
            "mirrored",
            "--no-compile",
        ],
        "check on float16 on a cpu": [
            "check",
            "--model",
            model,
            "--train",
            str(good),
            "--precision",
            "mixed_fp16",
            "--no-compile",
        ],
        "train on /dev/zero": [*train, "--train", "/dev/zero", "--output-dir", str(work / "r21")],
        "train on a fifo": [
            *train,
            "--train",
            str(work / "fifo"),
            "--output-dir",
            str(work / "r22"),
        ],
        "yaml config that is a list": [*train, "--config", str(work / "list.yaml")],
        "deeply nested yaml config": [*train, "--config", str(work / "deep.yaml")],
        "binary yaml config": [*train, "--config", str(work / "binary.yaml")],
        "broken yaml config": [*train, "--config", str(work / "broken.yaml")],
        "zero cpu replicas": [*train, "--cpu-replicas", "0", "--output-dir", str(work / "r3")],
        "negative cpu replicas": [*train, "--cpu-replicas", "-2", "--output-dir", str(work / "r4")],
        "yaml string where a number is due": [
            *train,
            "--config",
            str(work / "string_length.yaml"),
            "--output-dir",
            str(work / "r5"),
        ],
        "lone surrogate in a text": train_on("surrogate_text.jsonl", "r6"),
        "lone surrogate in a label": train_on("surrogate_label.jsonl", "r7"),
        "5000-digit label (csv)": train_on("huge_int.csv", "r8"),
        "5000-digit label (jsonl)": train_on("huge_int.jsonl", "r9"),
        "deeply nested json": train_on("nested.jsonl", "r10"),
        "output dir is a file": [*train, "--output-dir", str(work / "a_file")],
        "output dir cannot be created": [*train, "--output-dir", "/proc/bertfit-run"],
        "tpu without a tpu": [*train, "--tpu", "local", "--output-dir", str(work / "r11")],
        "zip bomb": ["inspect", str(bomb)],
        "utf-32 data": train_on("utf32.csv", "r12"),
        "invisible text": train_on("invisible.jsonl", "r13"),
        "check on a length past the position table": [
            "check",
            "--model",
            model,
            "--train",
            str(long_texts),
            "--max-seq-length",
            "128",
            "--no-compile",
        ],
        "predict into /dev/null": predict_to("/dev/null"),
        "predict into a fifo": predict_to(str(work / "fifo")),
        "predict into a missing folder": predict_to(str(work / "missing" / "p.csv")),
        "predict into a directory": predict_to(str(work)),
        "predict into a read-only file system": predict_to("/proc/p.csv"),
        "predict into the run": [
            "predict",
            "--run",
            str(fake_run),
            "--data",
            str(good),
            "--output",
            str(fake_run / "p.csv"),
        ],
        "report over the run's config": [
            "report",
            str(fake_run),
            "--output",
            str(fake_run / "config.yaml"),
        ],
        "report into /dev/null": ["report", str(fake_run), "--output", "/dev/null"],
        "report into a missing folder": [
            "report",
            str(fake_run),
            "--output",
            str(work / "missing" / "r.html"),
        ],
        "report on a truncated metrics.json": ["report", str(work / "damaged_truncated")],
        "report on a list-shaped metrics.json": ["report", str(work / "damaged_list")],
        "report on a latin-1 metrics.json": ["report", str(work / "damaged_latin1")],
        "export into a file": ["export", "--run", str(fake_run), str(work / "a_file")],
        "export into a fifo": ["export", "--run", str(fake_run), str(work / "fifo")],
        "export into the run": ["export", "--run", str(fake_run), str(fake_run / "export")],
        "export into a read-only file system": ["export", "--run", str(fake_run), "/proc/x/y"],
        "convert into a file": ["convert", model, str(work / "a_file"), "--to", "hf"],
        "convert into its source": ["convert", model, str(Path(model) / "out"), "--to", "hf"],
        "predict over its own input": [
            "predict",
            "--run",
            str(work / "no-run"),
            "--data",
            str(good),
            "--output",
            str(good),
        ],
    }


def main(work: Path, model: str) -> None:
    from bertfit.cli import main as bertfit
    from bertfit.tf_startup import start_tensorflow

    start_tensorflow()  # as the `bertfit` command does, before the cases load anything

    os.environ["BERTFIT_CACHE"] = str(work / "cache")
    results = {}
    for name, argv in cases(work, model).items():
        with captured_fds() as out:
            try:
                code = bertfit(argv)
            except SystemExit as e:  # argparse
                code = e.code
            except BaseException as e:  # the test reports any escape
                import traceback

                traceback.print_exc()
                code = f"raised {type(e).__name__}"
        results[name] = {"argv": argv, "code": code, **out}
    print(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
