"""SWEEP/report.html: the trials compared, from results.json alone: the table, the metric against
the learning rate (one point per run, the mean per trial joined by its other settings), and the
spread of each trial's runs (seeds × folds) around its mean ± sd."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np

from bertfit.atomic import write_text_atomic
from bertfit.report import figure, page, section, table

LEARNING_RATE = "train.learning_rate"


def write_sweep_report(sweep_path: str | Path) -> Path:
    """Writes SWEEP/report.html from SWEEP/results.json; returns its path."""
    sweep = Path(sweep_path)
    results = json.loads((sweep / "results.json").read_text(encoding="utf-8"))
    path = sweep / "report.html"
    write_text_atomic(path, _page(sweep, results))
    return path


def _page(sweep: Path, results: dict) -> str:
    metric, trials = results["metric"], results["trials"]
    direction = "higher" if results["higher_is_better"] else "lower"
    chosen = results["chosen_trial"]
    summary = (
        f"{len(trials)} trial(s); score: {metric} ({direction} is better), {results['rule']}. "
        f"Chosen: <b>{html.escape(str(chosen))}</b>"
        + (f", run {html.escape(results['chosen_run'])}" if results["chosen_run"] else "")
        + (f"; {results['folds']}-fold cross-validation" if results["folds"] else "")
    )
    sections = [
        section("Trials", [_trials_table(results)]),
        section(f"{metric} against the learning rate", [_rate_plot(results)]),
        section("Spread over the runs of each trial", [_spread_plot(results)]),
    ]
    return page(f"bertfit sweep {sweep.resolve().name}", summary, sections)


def _trials_table(results: dict) -> str:
    trials = results["trials"]
    fields = list(trials[0]["params"]) if trials else []
    header = ["trial", *(f.split(".")[-1] for f in fields), "mean", "sd", "runs"]
    rows = []
    for t in trials:
        runs = ", ".join(
            f"{_run_label(r)}: " + (f"{r['value']:.4f}" if r["value"] is not None else r["status"])
            for r in t["runs"]
        )
        mark = " (chosen)" if t["name"] == results["chosen_trial"] else ""
        rows.append(
            [
                t["name"] + mark,
                *(_setting(t["params"][f]) for f in fields),
                "-" if t["mean"] is None else t["mean"],
                "-" if t["sd"] is None else t["sd"],
                runs,
            ]
        )
    return table(header, rows)


def _setting(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _run_label(run: dict) -> str:
    return f"seed {run['seed']}" + (f" fold {run['fold']}" if run["fold"] else "")


def _rate_plot(results: dict) -> str:
    trials = [t for t in results["trials"] if any(r["value"] is not None for r in t["runs"])]
    if not trials:
        return "<p>No run has finished yet.</p>"
    metric = results["metric"]

    def rate(trial: dict) -> float | None:
        return trial["params"].get(LEARNING_RATE)

    if any(rate(t) is None for t in trials):
        return "<p>The learning rate was not swept (one value for every trial).</p>"

    def draw(figure) -> str:
        axes = figure.subplots()
        groups: dict[str, list[dict]] = {}
        for t in trials:
            others = {k.split(".")[-1]: v for k, v in t["params"].items() if k != LEARNING_RATE}
            groups.setdefault(", ".join(f"{k}={v}" for k, v in others.items()), []).append(t)
        for label, members in groups.items():
            members.sort(key=rate)
            means = [t["mean"] for t in members]
            line = axes.plot([rate(t) for t in members], means, marker="o", label=label or None)
            for t in members:
                values = [r["value"] for r in t["runs"] if r["value"] is not None]
                axes.scatter(
                    [rate(t)] * len(values), values, s=12, alpha=0.5, color=line[0].get_color()
                )
        axes.set_xscale("log")
        axes.set_xlabel("learning rate")
        axes.set_ylabel(metric)
        if any(groups):
            axes.legend(fontsize="small")
        axes.grid(alpha=0.3)
        return f"{metric} against the learning rate: the mean per trial, each run a dot"

    return figure(draw)


def _spread_plot(results: dict) -> str:
    trials = [t for t in results["trials"] if any(r["value"] is not None for r in t["runs"])]
    if not trials:
        return ""

    def draw(figure) -> str:
        axes = figure.subplots()
        for i, t in enumerate(trials):
            values = np.array([r["value"] for r in t["runs"] if r["value"] is not None])
            jitter = np.linspace(-0.12, 0.12, len(values)) if len(values) > 1 else [0.0]
            axes.scatter(i + np.asarray(jitter), values, s=16, alpha=0.7)
            axes.errorbar(i, t["mean"], yerr=t["sd"], fmt="_", color="black", capsize=6)
        axes.set_xticks(range(len(trials)), [t["name"] for t in trials], rotation=30, ha="right")
        axes.set_ylabel(results["metric"])
        axes.grid(alpha=0.3, axis="y")
        return "each trial's runs (dots) and their mean ± sd (black)"

    return figure(draw, height=3.6)
