"""`bertfit demo` stopped by SIGTERM says the demo's own command that resumes it: train's hint
names --resume and `bertfit train --config`, which the demo does not take."""

from __future__ import annotations

import signal

from bertfit.cli import build_parser
from bertfit.demo import _interrupted_demo
from bertfit.errors import TrainingInterrupted


def test_a_stopped_demo_names_the_demo_command_that_resumes_it():
    stopped = TrainingInterrupted(
        "stopped by SIGTERM at epoch 1, step 40; checkpoint saved to runs/x/checkpoints/latest. "
        "Run the same command again to resume (or add --resume).",
        signal.SIGTERM,
        run_dir="runs/x",
    )
    said = _interrupted_demo(stopped, epochs=2, max_train_examples=None, task="regression")
    assert str(said) == (
        "stopped by SIGTERM; the demo's checkpoint is saved in runs/x. To resume the demo: "
        "bertfit demo --output-dir runs/x --epochs 2 --task regression"
    )
    assert said.exit_code == 143 and "--resume" not in str(said)
    command = str(said).split("To resume the demo: bertfit ")[1].split()
    args = build_parser().parse_args(command)  # a command the demo takes
    assert (args.output_dir, args.epochs, args.task) == ("runs/x", 2, "regression")
