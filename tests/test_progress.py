"""The progress display as `train`, `evaluate` and `predict` use it: plain lines, few of them,
where standard error is a pipe or a CI log; one line redrawn in place on a terminal; nothing on
standard output (which carries `predict --output -`); an ETA from this run's steps only when an
epoch resumes. (Keras' Progbar writes to stdout with ANSI colours and backspaces whenever
`posix` is loaded, pipe or not; tqdm joins its updates with carriage returns in a log file.)"""

from __future__ import annotations

import io

import pytest

from bertfit import progress as progress_module
from bertfit.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch):
    """A fake `time.perf_counter`; `clock.now` is set by the test."""

    class Clock:
        now = 1000.0

    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: Clock.now)
    return Clock


def test_a_pipe_gets_a_plain_line_every_interval_and_at_the_last_step(clock):
    stream = io.StringIO()
    display = Progress("epoch 1/2", 100, stream=stream, every_seconds=10)
    for step in range(1, 101):  # 50 s, 32 examples a step
        clock.now += 0.5
        display.update(step, 32 * step, loss=0.5)
    display.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 6  # at 0.5 s, 10.5, 20.5, 30.5, 40.5 and the last step
    assert not any(c in stream.getvalue() for c in "\r\b\x1b")
    assert lines[0] == "epoch 1/2: step 1/100 loss 0.5000 64.0 ex/s ETA 50s"
    assert lines[-1] == "epoch 1/2: step 100/100 loss 0.5000 64.0 ex/s ETA 0s"


def test_a_resumed_epoch_estimates_from_the_steps_this_run_took(clock):
    stream = io.StringIO()
    display = Progress("epoch 2/3", 100, stream=stream, first_step=60)
    clock.now += 20.0
    display.update(70, 320)  # 10 steps in 20 s: 30 steps to go take 60 s
    assert stream.getvalue() == "epoch 2/3: step 70/100 16.0 ex/s ETA 60s\n"


def test_a_terminal_gets_one_line_redrawn_in_place(clock):
    stream = Terminal()
    display = Progress("eval", 4, stream=stream)
    for step in (1, 2):
        clock.now += 1.0
        display.update(step, 8 * step)
    display.close()
    assert stream.getvalue() == (
        "\r[#####...............] eval: step 1/4 8.0 ex/s ETA 3s\x1b[K"
        "\r[##########..........] eval: step 2/4 8.0 ex/s ETA 2s\x1b[K\n"
    )


def test_quiet_prints_nothing(clock):
    stream = Terminal()
    display = Progress("predict", 3, stream=stream, quiet=True)
    display.update(3, 24)
    display.close()
    assert stream.getvalue() == ""
