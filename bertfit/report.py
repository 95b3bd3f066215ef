"""`bertfit report RUN`: one self-contained HTML page of what a run did.

Plots (PNG, embedded as data URIs, so the file opens anywhere without a network): the training
loss and learning rate per step, the gradient norm and throughput, the evaluation metrics per
epoch, the confusion matrix (single-label), per-label F1 (multi-label) or predicted against true
values (regression), the reliability diagram before and after calibration with its expected
calibration error (a run calibrated on --eval: calibration.json), the token-length histogram
with the bucket edges (for `--long-documents
chunk`: documents' token lengths against the window edges, windows per document and the share of
text dropped). Tables: the final metrics, per-class precision/recall/F1, padding waste per
bucket, where the time went, the data and the model. Everything comes from the run directory's
files (`bertfit.runs.run_dir`).
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import numpy as np

from bertfit import storage
from bertfit.data.profile import LengthProfile
from bertfit.data.tasks import MULTI_LABEL, REGRESSION, Task
from bertfit.data.windowed import WindowProfile
from bertfit.errors import ConfigError
from bertfit.paths import STDOUT, check_output_file, write_output
from bertfit.runs.calibration import Calibration
from bertfit.runs.metrics import HEADLINE_METRICS, support_note
from bertfit.runs.records import EarlyStop
from bertfit.runs.run_dir import open_run

# ---- the HTML report ----


def write_report(run_path: str | Path, output: str | Path | None = None) -> Path | str:
    """Writes the report of the run in `run_path` (default `RUN/report.html`; "-": standard
    output); returns its path. Raises ConfigError when `run_path` holds no run, or when
    `output` cannot be written or is one of the run's own files."""
    run = open_run(run_path, checkpoints=False)
    if not run.metrics_file.is_file():
        raise ConfigError(
            f"{run.shown} holds no bertfit run (no metrics.json); pass the run "
            "directory that `bertfit train` wrote."
        )
    path = output if output is not None else run.report_file
    check_output_file(path, "--output", run_dir=run.path, allowed_in_run=[run.report_file.name])
    metrics = read_metrics(run.metrics_file)
    try:
        page = _page(
            run.path,
            metrics,
            run.read_steps(),
            run.load_task(),
            run.load_eval_outputs(),
            run.load_calibration(),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConfigError(
            f"{run.metrics_file} is not a complete bertfit metrics file ({type(e).__name__}: "
            f"{str(e)[:200]}); the run directory may be damaged."
        ) from None
    write_output(path, page)
    if output is None and storage.is_url(run_path):  # a run at a URL: upload it there
        url = storage.join(run.shown, run.report_file.name)
        storage.upload_file(path, url)
        return url
    return path if path == STDOUT else Path(path)


def read_metrics(file: Path) -> dict:
    """A run's metrics.json as a dict, or a ConfigError saying what is wrong with it."""
    try:
        metrics = json.loads(file.read_bytes().decode("utf-8"))
    except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError included
        reason = e.strerror if isinstance(e, OSError) else str(e).splitlines()[0][:200]
        raise ConfigError(
            f"{file} cannot be read as the run's metrics ({reason}); the run directory may be "
            "damaged or still being written. Rerun `bertfit train` to rewrite it."
        ) from None
    if not isinstance(metrics, dict) or not isinstance(metrics.get("epochs", []), list):
        raise ConfigError(
            f"{file} is not a bertfit metrics file (expected a JSON object with a list of "
            "epochs); the run directory may be damaged."
        )
    return metrics


def _page(
    run: Path,
    metrics: dict,
    steps: list[dict],
    task: Task,
    eval_outputs,
    calibration: Calibration | None = None,
) -> str:
    epochs = metrics.get("epochs", [])
    last_eval = next((r["eval"] for r in reversed(epochs) if "eval" in r), None)
    sections = [
        section("Training", [_loss_plot(steps, epochs), _rate_plot(steps)]),
        section("Gradient norm and throughput", [_norm_plot(steps)]),
    ]
    if last_eval is not None:
        evaluations = metrics.get("evaluations", [])
        plot = (
            _step_eval_plot(epochs, evaluations, steps, task)
            if evaluations
            else _eval_plot(epochs, task)
        )
        stop = _stop_note(metrics.get("stopped_early"))
        sections.append(section("Evaluation", [plot, stop, _final_table(last_eval, task)]))
        sections.append(section(_task_title(task), _task_parts(task, last_eval, eval_outputs)))
        sections.append(_calibration_section(calibration))
    data = metrics.get("data", {})
    if "windows" in data:  # --long-documents chunk: its token_lengths count windows
        windows = WindowProfile.from_dict(data["windows"])
        buckets = LengthProfile.from_dict(data["token_lengths"])
        sections.append(section("Long documents in windows", _window_parts(windows, buckets)))
    elif "token_lengths" in data:
        lengths = LengthProfile.from_dict(data["token_lengths"])
        sections.append(
            section("Token lengths and buckets", [_length_plot(lengths), _waste_table(lengths)])
        )
    if "time" in metrics:
        sections.append(section("Where the time went", [_time_table(metrics["time"])]))
    sections.append(section("Data and model", [_about_table(metrics, task)]))
    status = metrics.get("status", "unknown")
    title = f"bertfit run {run.resolve().name}"
    intro = (
        f"{html.escape(str(run.resolve()))} · status <b>{html.escape(status)}</b> ·\n"
        f"task {html.escape(task.kind)} · {len(epochs)} epoch(s), {len(steps)} optimizer steps"
    )
    return page(title, intro, sections)


def page(title: str, intro: str, sections: list[str]) -> str:
    """A whole self-contained HTML page: the title, an intro paragraph (HTML) and sections
    (`section`); the run report and the sweep report look alike."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }}
h1 {{ font-size: 1.5em; }} h2 {{ font-size: 1.2em; border-bottom: 1px solid #ccc; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1em; }}
td, th {{ border: 1px solid #ddd; padding: 3px 8px; text-align: right; }}
th {{ background: #f4f4f4; }} td:first-child, th:first-child {{ text-align: left; }}
img {{ max-width: 100%; }} table.about td {{ text-align: left; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{intro}</p>
{"".join(sections)}
</body></html>
"""


def section(title: str, parts: list[str]) -> str:
    """An <h2> and its parts (HTML; empty parts left out)."""
    return f"<h2>{html.escape(title)}</h2>\n" + "\n".join(p for p in parts if p) + "\n"


def figure(draw, width: float = 9.0, height: float = 3.2) -> str:
    """Runs `draw(canvas)` on a matplotlib Figure; returns an <img> with the PNG inlined and
    the alt text `draw` returned."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    canvas = Figure(figsize=(width, height), dpi=100, layout="constrained")
    alt = draw(canvas)
    buffer = io.BytesIO()
    canvas.savefig(buffer, format="png")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def table(header: list[str] | None, rows: list[list], css_class: str = "") -> str:
    """An HTML table; floats shown to 4 decimals."""
    head = (
        ""
        if header is None
        else ("<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in header) + "</tr>")
    )
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f'<table class="{css_class}">{head}{body}</table>'


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    if len(values) < window or window < 2:
        return values
    kernel = np.ones(window) / window
    return np.convolve(values, kernel, mode="valid")


def _loss_plot(steps: list[dict], epochs: list[dict]) -> str:
    if not steps:
        return "<p>No optimizer step was logged.</p>"

    def draw(figure):
        axes = figure.subplots()
        x = np.array([s["global_step"] for s in steps])
        loss = np.array([s["loss"] for s in steps])
        axes.plot(x, loss, color="#9ab", linewidth=0.8, label="loss per step")
        window = max(1, len(loss) // 50)
        if window > 1:
            axes.plot(
                x[window - 1 :],
                _smooth(loss, window),
                color="#145",
                label=f"mean of {window} steps",
            )
        ends = _epoch_end_steps(steps)
        evals = [
            (ends[r["epoch"]], r["eval"]["loss"])
            for r in epochs
            if "eval" in r and r["epoch"] in ends
        ]
        if evals:
            axes.plot(*zip(*evals, strict=True), "o-", color="#c50", label="eval loss")
        axes.set(xlabel="optimizer step", ylabel="loss", title="Loss")
        axes.legend()
        return "training loss per step"

    return figure(draw)


def _epoch_end_steps(steps: list[dict]) -> dict[int, int]:
    ends = {}
    for s in steps:
        ends[s["epoch"]] = max(ends.get(s["epoch"], 0), s["global_step"])
    return ends


def _rate_plot(steps: list[dict]) -> str:
    rated = [s for s in steps if "learning_rate" in s]
    if not rated:
        return ""

    def draw(figure):
        axes = figure.subplots()
        axes.plot([s["global_step"] for s in rated], [s["learning_rate"] for s in rated])
        axes.set(xlabel="optimizer step", ylabel="learning rate", title="Learning rate")
        return "learning rate per step"

    return figure(draw, height=2.6)


def _norm_plot(steps: list[dict]) -> str:
    rated = [s for s in steps if "grad_norm" in s]
    if not rated:
        return "<p>This run logged no gradient norms.</p>"

    def draw(figure):
        left, right = figure.subplots(1, 2)
        x = [s["global_step"] for s in rated]
        left.plot(x, [s["grad_norm"] for s in rated], linewidth=0.8)
        left.set(
            xlabel="optimizer step", ylabel="global norm", title="Gradient norm (before clipping)"
        )
        right.plot(x, [s["examples_per_second"] for s in rated], linewidth=0.8, color="#585")
        right.set(xlabel="optimizer step", ylabel="examples/s", title="Training throughput")
        return "gradient norm and throughput per step"

    return figure(draw)


def _eval_plot(epochs: list[dict], task: Task) -> str:
    evaluated = [r for r in epochs if "eval" in r]
    names = HEADLINE_METRICS[task.kind]

    def draw(figure):
        axes = figure.subplots()
        x = [r["epoch"] for r in evaluated]
        for name in names:
            axes.plot(x, [r["eval"][name] for r in evaluated], "o-", label=name)
        axes.set(xlabel="epoch", title="Evaluation per epoch")
        if task.kind != REGRESSION:  # scores in [0, 1]
            axes.set_ylim(0, 1.02)
        axes.set_xticks(x)
        axes.legend()
        return "evaluation metrics per epoch"

    return figure(draw, height=2.8)


def _step_eval_plot(
    epochs: list[dict], evaluations: list[dict], steps: list[dict], task: Task
) -> str:
    """The evaluations at epoch ends and every --eval-every-steps, by global step."""
    ends = _epoch_end_steps(steps)
    points = {ends[r["epoch"]]: r["eval"] for r in epochs if "eval" in r and r["epoch"] in ends}
    points.update({e["global_step"]: e["metrics"] for e in evaluations})
    x = sorted(points)
    names = HEADLINE_METRICS[task.kind]

    def draw(figure):
        axes = figure.subplots()
        for name in names:
            axes.plot(x, [points[step][name] for step in x], "o-", markersize=3, label=name)
        for end in sorted(ends.values())[:-1]:
            axes.axvline(end, color="#bbb", linewidth=0.8, linestyle=":")
        axes.set(xlabel="optimizer step (dotted: epoch ends)", title="Evaluations")
        if task.kind != REGRESSION:
            axes.set_ylim(0, 1.02)
        axes.legend()
        return "evaluation metrics per evaluation"

    return figure(draw, height=2.8)


def _stop_note(stopped_early: dict | None) -> str:
    if not stopped_early:
        return ""
    return f"<p>{html.escape(EarlyStop(**stopped_early).describe().capitalize())}.</p>"


def _final_table(last_eval: dict, task: Task) -> str:
    rows = [
        [name, value]
        for name, value in last_eval.items()
        if isinstance(value, (int, float)) and name not in ("wall_seconds",)
    ]
    note = support_note(last_eval)
    unmeasured = f"<p>{html.escape(note[0].upper() + note[1:])}.</p>" if note else ""
    return "<p>Last evaluation:</p>" + table(["metric", "value"], rows) + unmeasured


def _task_title(task: Task) -> str:
    return {MULTI_LABEL: "Per label", REGRESSION: "Predicted against true values"}.get(
        task.kind, "Per class"
    )


def _task_parts(task: Task, last_eval: dict, eval_outputs) -> list[str]:
    if task.kind == REGRESSION:
        return [_scatter_plot(task, eval_outputs)]
    if task.kind == MULTI_LABEL:
        f1 = last_eval.get("per_label_f1", {})
        return [
            _bar_plot(f1, "F1 per label"),
            table(["label", "F1"], [[name, value] for name, value in f1.items()]),
        ]
    per_class = last_eval.get("per_class", {})
    return [
        _confusion_plot(last_eval.get("confusion_matrix"), list(task.labels)),
        table(
            ["class", "precision", "recall", "F1", "support"],
            [
                [name, v["precision"], v["recall"], v["f1"], v["support"]]
                for name, v in per_class.items()
            ],
        ),
    ]


def _confusion_plot(confusion, labels: list[str]) -> str:
    if confusion is None:
        return ""
    matrix = np.asarray(confusion)

    def draw(figure):
        axes = figure.subplots()
        axes.imshow(matrix, cmap="Blues")
        for (i, j), count in np.ndenumerate(matrix):
            axes.text(
                j,
                i,
                str(count),
                ha="center",
                va="center",
                color="white" if count > matrix.max() / 2 else "black",
            )
        ticks = range(len(labels))
        axes.set_xticks(ticks, labels, rotation=45 if len(labels) > 4 else 0)
        axes.set_yticks(ticks, labels)
        axes.set(xlabel="predicted", ylabel="gold", title="Confusion matrix")
        return "confusion matrix"

    size = min(8.0, 2.5 + 0.5 * len(labels))
    return figure(draw, width=size, height=size)


def _calibration_section(calibration: Calibration | None) -> str:
    """The reliability diagram before and after calibration, and a table of ECE, Brier and NLL
    on the eval rows (and the thresholds per label of a multi-label run)."""
    if calibration is None:
        return ""
    c = calibration
    if c.task == REGRESSION:
        return section(
            "Predictive interval",
            [
                f"<p>value ± {c.interval:.6g} (split conformal on {c.eval_rows} eval rows) holds "
                f"{c.after['interval_coverage']:.1%} of their true values; predict gives it as "
                "<code>interval</code>, the SavedModel as <code>value_low</code> and "
                "<code>value_high</code>.</p>"
            ],
        )
    fitted = ", ".join(f"{t:.3f}" for t in c.fitted_temperatures) or "none (--calibrate off)"
    kept = ", ".join(f"{t:.3f}" for t in c.temperatures) or "none"
    rows = [
        [name, f"{c.before[key]:.4f}", f"{c.after[key]:.4f}"]
        for key, name in (("ece", "expected calibration error"), ("brier", "Brier"), ("nll", "NLL"))
    ]
    parts = [
        f"<p>Temperature scaling on {c.eval_rows} eval rows: fitted {html.escape(fitted)}; "
        f"kept {html.escape(kept)} (a temperature is kept where it lowers the NLL of eval rows "
        "it was not fitted on by more than 2 standard errors). The model's probabilities "
        "everywhere (predict, evaluate, serve, every export) are the kept ones.</p>",
        *(f"<p>{html.escape(note[0].upper() + note[1:])}.</p>" for note in c.notes),
        _reliability_plot(c),
        table(["on the eval rows", "before", "after"], rows),
    ]
    if c.thresholds:
        names = list(c.metrics.get("thresholds", {}))
        parts.append(
            table(
                ["label", "threshold", "F1"],
                [
                    [name, f"{t:.3f}", f"{c.metrics['per_label_f1'][name]:.4f}"]
                    for name, t in zip(names, c.thresholds, strict=True)
                ],
            )
            + f"<p>micro-F1 {c.metrics['micro_f1']:.4f}, macro-F1 {c.metrics['macro_f1']:.4f}"
            " at these thresholds.</p>"
        )
    return section("Calibration", parts)


def _reliability_plot(calibration: Calibration) -> str:
    def draw(figure):
        axes = figure.subplots()
        axes.plot([0, 1], [0, 1], color="#999", linestyle="--", label="perfectly calibrated")
        for bins, name, color in (
            (calibration.reliability_before, "before", "#c64"),
            (calibration.reliability_after, "after", "#468"),
        ):
            ece = calibration.before["ece"] if name == "before" else calibration.after["ece"]
            axes.plot(
                [b["confidence"] for b in bins],
                [b["frequency"] for b in bins],
                marker="o",
                color=color,
                label=f"{name} (ECE {ece:.3f})",
            )
        axes.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="observed frequency")
        axes.legend(loc="upper left")
        return "reliability diagram before and after calibration"

    return figure(draw, width=4.5, height=4.5)


def _bar_plot(values: dict, title: str) -> str:
    if not values:
        return ""

    def draw(figure):
        axes = figure.subplots()
        axes.bar(list(values), list(values.values()), color="#468")
        axes.set(ylim=(0, 1), title=title)
        axes.tick_params(axis="x", rotation=45 if len(values) > 4 else 0)
        return title

    return figure(draw, height=3.0)


def _scatter_plot(task: Task, eval_outputs) -> str:
    if eval_outputs is None:
        return "<p>No evaluation outputs were saved.</p>"
    targets, outputs = eval_outputs
    truth, predicted = task.values(targets), task.values(outputs[:, 0])

    def draw(figure):
        axes = figure.subplots()
        axes.scatter(truth, predicted, s=6, alpha=0.5)
        low, high = (
            float(min(truth.min(), predicted.min())),
            float(max(truth.max(), predicted.max())),
        )
        axes.plot([low, high], [low, high], color="#c50", linewidth=1, label="y = x")
        axes.set(xlabel="true value", ylabel="predicted", title="Predicted against true")
        axes.legend()
        return "predicted against true values"

    return figure(draw, width=5.0, height=5.0)


def _length_plot(lengths: LengthProfile) -> str:
    def draw(figure):
        axes = figure.subplots()
        axes.bar(list(lengths.counts), list(lengths.counts.values()), width=1.0, color="#579")
        for edge in lengths.buckets:
            axes.axvline(edge + 0.5, color="#c50", linestyle="--", linewidth=1)
        axes.set(
            xlabel="tokens ([CLS]/[SEP] included, truncated)",
            ylabel="examples",
            title=f"Training token lengths; buckets {lengths.buckets} (dashed)",
        )
        return "token-length histogram with bucket edges"

    return figure(draw, height=3.0)


def _window_parts(windows: WindowProfile, buckets: LengthProfile) -> list[str]:
    """Documents' token lengths against the window edges, windows per document, the share of
    text dropped, and the padding windows of each chunk-count bucket."""
    ends = windows.window_ends()

    def draw(figure):
        axes = figure.subplots()
        counts = windows.token_counts  # long documents: up to 60 bins, not one bar a length
        bins = min(60, max(counts, default=0) - min(counts, default=0) + 1)
        axes.hist(list(counts), bins=bins, weights=list(counts.values()), color="#579")
        for end in ends:
            axes.axvline(end + 0.5, color="#c50", linestyle="--", linewidth=1)
        axes.set(
            xlabel="tokens per document (no [CLS]/[SEP])",
            ylabel="documents",
            title=f"Training documents' token lengths; the ids 1 to {windows.max_chunks} "
            f"windows of {windows.max_seq_length} hold (dashed)",
        )
        return "document token-length histogram with window edges"

    per_document = table(
        ["windows kept", "documents"], [[k, n] for k, n in sorted(windows.windows.items())]
    )
    dropped = table(
        None,
        [
            ["documents", windows.documents],
            ["median / longest (ids)", f"{windows.median_tokens:g} / {windows.max_tokens}"],
            [
                "window, stride (overlap), most windows",
                f"{windows.max_seq_length}, {windows.stride}, {windows.max_chunks}",
            ],
            [f"documents cut at {windows.max_chunks} windows", windows.cut_documents],
            ["share of the text dropped", f"{windows.dropped_share:.1%}"],
        ],
        "about",
    )
    return [
        f"<p>{html.escape(windows.line())}</p>",
        figure(draw, height=3.0),
        per_document,
        dropped,
        _waste_table(buckets, unit="windows"),
    ]


def _waste_table(lengths: LengthProfile, unit: str = "tokens") -> str:
    rows = [
        [bucket, examples, real, slots, f"{waste:.1%}"]
        for bucket, examples, real, slots, waste in zip(
            lengths.buckets,
            lengths.examples,
            lengths.real_tokens,
            lengths.slots,
            lengths.padding_waste(),
            strict=True,
        )
    ]
    singular = unit.rstrip("s")
    return table(
        [
            f"bucket ({unit})",
            "examples",
            f"real {unit}",
            f"{singular} slots computed",
            "padding waste",
        ],
        rows,
    )


def _time_table(split: dict) -> str:
    names = {
        "load": "load the checkpoint",
        "tokenize": "read and tokenize",
        "build": "build the model and optimizer",
        "trace": "trace and compile (first calls)",
        "few_shot": "few-shot stage 1 (pairs)",
        "train": "train",
        "eval": "evaluate",
        "save": "write checkpoints",
        "other": "the rest (run directory, logs, summaries)",
        "wall": "whole run",
    }
    wall = split.get("wall") or 1.0
    return table(
        ["phase", "seconds", "share"],
        [
            [label, f"{split[key]:.1f}", f"{split[key] / wall:.0%}"]
            for key, label in names.items()
            if key in split
        ],
    )


def _about_table(metrics: dict, task: Task) -> str:
    data, model = metrics.get("data", {}), metrics.get("model", {})
    strategy = metrics.get("strategy", {})
    rows = [
        [
            "training data",
            f"{data.get('train')} ({data.get('train_rows')} of {data.get('train_rows_read')} rows)",
        ],
        [
            "evaluation data",
            f"{data.get('eval')} ({data.get('eval_rows')} rows)" if data.get("eval") else "none",
        ],
        ["task and labels", f"{task.kind}: {', '.join(task.labels) or '(a value)'}"],
        ["checkpoint", f"{model.get('name')} ({model.get('format')})"],
        ["parameters", f"{model.get('parameters', 0):,}"],
        ["load report", model.get("load_report", "")],
        ["strategy", f"{strategy.get('name')} with {strategy.get('replicas')} replica(s)"],
    ]
    return table(None, rows, css_class="about")
