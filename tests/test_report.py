"""What a run shows: TensorBoard events, steps.jsonl, train.log lines and the HTML report."""

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bertfit.cli import main
from bertfit.runs.records import RunSummary

PLOTS = [
    "training loss per step",
    "learning rate per step",
    "gradient norm and throughput per step",
    "evaluation metrics per epoch",
    "confusion matrix",
    "reliability diagram before and after calibration",  # the run is calibrated on its --eval rows
    "token-length histogram with bucket edges",
]


class _Page(HTMLParser):
    """Collects the <img> tags and the text of a page, failing on unbalanced tags."""

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self):
        super().__init__()
        self.images, self.text, self.open = [], [], []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs))
        elif tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1:]}>"
        self.open.pop()

    def handle_data(self, data):
        self.text.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    assert page.open == [], f"unclosed tags {page.open}"
    return page


def _events(run: Path) -> dict[str, list[tuple[int, float | str]]]:
    tags: dict[str, list] = {}
    for file in (run / "tensorboard").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(file)):
            for value in event.summary.value:
                tensor = tf.make_ndarray(value.tensor)
                tags.setdefault(value.tag, []).append((event.step, tensor))
    return tags


def test_train_writes_a_self_contained_report_with_the_runs_numbers(trained_run):
    _, result = trained_run
    run = Path(result.run_dir)
    assert (run / "report.html").is_file()
    page = _parse(run / "report.html")
    text = " ".join(page.text)
    metrics = json.loads((run / "metrics.json").read_text())
    assert [img["alt"] for img in page.images] == PLOTS
    assert all(img["src"].startswith("data:image/png;base64,") for img in page.images)
    assert "http://" not in (run / "report.html").read_text() and "https://" not in text
    assert f"{metrics['final']['accuracy']:.4f}" in text
    assert f"{metrics['final']['loss']:.4f}" in text
    assert "padding waste" in text and "trace and compile" in text


def test_tensorboard_holds_step_eval_length_and_config_summaries(trained_run):
    _, result = trained_run
    run = Path(result.run_dir)
    tags = _events(run)
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    for name in ("loss", "learning_rate", "grad_norm", "examples_per_second"):
        logged = tags[f"train/{name}"]
        assert [s for s, _ in logged] == [row["global_step"] for row in steps]
        np.testing.assert_allclose(
            [float(v) for _, v in logged], [row[name] for row in steps], rtol=1e-6
        )
    metrics = json.loads((run / "metrics.json").read_text())
    accuracy = [float(v) for _, v in tags["eval/accuracy"]]
    assert accuracy == pytest.approx([e["eval"]["accuracy"] for e in metrics["epochs"]])
    assert {"eval/macro_f1", "eval/loss", "data/token_length", "data/buckets", "config"} <= set(
        tags
    )


def test_steps_log_learning_rate_warmup_and_decay_and_gradient_norms(trained_run):
    config, result = trained_run
    steps = [
        json.loads(line) for line in Path(result.run_dir, "steps.jsonl").read_text().splitlines()
    ]
    rates = [row["learning_rate"] for row in steps]
    peak = config.train.learning_rate
    assert max(rates) <= peak + 1e-12 and rates[-1] < max(rates)
    assert all(row["grad_norm"] > 0 for row in steps)
    assert all(row["examples_per_second"] > 0 for row in steps)


def test_train_log_lines_read_as_sentences(trained_run):
    _, result = trained_run
    log = Path(result.run_dir, "train.log").read_text()
    assert "epoch 1: train loss " in log and "eval on " in log
    assert "{'" not in log  # no Python dict reprs


def test_end_of_run_table_has_a_row_per_epoch(trained_run):
    _, result = trained_run
    metrics = json.loads(Path(result.run_dir, "metrics.json").read_text())
    lines = RunSummary.from_dict(metrics).epoch_table().splitlines()
    assert lines[0].split()[:4] == ["epoch", "train", "loss", "eval"]
    assert len(lines) == 1 + len(metrics["epochs"])


def test_the_last_evaluation_says_which_labels_had_no_eval_rows():
    from bertfit.data.tasks import Task
    from bertfit.report import _final_table

    last = {"micro_f1": 0.8, "macro_f1": 0.85, "labels_without_support": ["acting"]}
    shown = _final_table(last, Task("multi-label", ("fresh", "acting")))
    assert "No eval rows of &#x27;acting&#x27;: its F1 is not measured" in shown


def test_report_command_writes_elsewhere_and_refuses_a_non_run(trained_run, tmp_path, capsys):
    _, result = trained_run
    out = tmp_path / "r.html"
    assert main(["report", result.run_dir, "--output", str(out)]) == 0
    assert [img["alt"] for img in _parse(out).images] == PLOTS
    assert main(["report", str(tmp_path)]) == 2
    assert "holds no bertfit run" in capsys.readouterr().err
