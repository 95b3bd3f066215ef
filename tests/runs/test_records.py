"""A run's records: metrics.json keeps its keys (no `final` without evaluation), and reads back."""

from bertfit.runs.records import FINISHED, EpochRecord, RunSummary


def _summary(evaluated: bool) -> RunSummary:
    epochs = [
        EpochRecord(
            epoch=e,
            train_loss=1.0 / e,
            train_examples=64,
            train_examples_per_second=100.0,
            train_seconds=0.64,
            eval={"accuracy": 0.5 + e / 10, "loss": 0.7, "num_examples": 20} if evaluated else None,
            best=evaluated and e == 2,
        )
        for e in (1, 2)
    ]
    return RunSummary(
        status=FINISHED,
        task="single-label",
        labels=["neg", "pos"],
        model={"name": "tiny"},
        data={"train": "train.csv"},
        strategy={"name": "_DefaultDistributionStrategy", "replicas": 1},
        epochs=epochs,
        run_dir="runs/x",
        final=epochs[-1].eval,
        best={"accuracy": 0.7} if evaluated else None,
    )


def test_without_evaluation_metrics_json_has_no_final_and_epochs_no_eval():
    values = _summary(evaluated=False).to_dict()
    assert "final" not in values and "best" not in values and "error" not in values
    assert all("eval" not in r and "best" not in r for r in values["epochs"])
    assert _summary(evaluated=False).headline == {"train_loss": 0.5}


def test_a_summary_reads_back_from_its_dict():
    summary = _summary(evaluated=True)
    values = summary.to_dict()
    assert values["epochs"][1]["best"] is True and "best" not in values["epochs"][0]
    assert RunSummary.from_dict(values) == summary
    assert summary.headline == summary.final


def test_the_log_line_and_the_table_read_as_text():
    summary = _summary(evaluated=True)
    assert summary.epochs[1].describe() == (
        "epoch 2: train loss 0.5000 (64 examples, 100.0 ex/s, 0.6 s); eval on 20 examples: "
        "accuracy 0.7000, loss 0.7000; best so far"
    )
    header, first, second = summary.epoch_table().splitlines()
    assert header.split() == [
        "epoch",
        "train",
        "loss",
        "eval",
        "accuracy",
        "eval",
        "loss",
        "ex/s",
        "seconds",
    ]
    assert second.split()[-1] == "best" and first.split()[0] == "1"
