"""A progress display: one updating line on a terminal, plain periodic lines otherwise.

Not Keras' `Progbar`: it writes to standard output (where `predict --output -` writes rows),
and with ANSI colours and backspaces whenever the `posix` module is loaded, a pipe or CI log
included. Not tqdm: in a log file its updates join into one line of carriage returns, and it
would be a new dependency. tests/test_progress.py pins what this one does instead."""

from __future__ import annotations

import sys
import time


class Progress:
    """Shows step, examples, loss, examples/s and ETA for one phase (train epoch, eval, predict).

    Args:
        title: what is running, e.g. "epoch 1/3".
        total_steps: steps in this phase.
        quiet: print nothing.
        stream: where to write (default stderr).
        every_seconds: how often to print a plain line when not on a terminal.
        first_step: steps already done before this display started (a resumed epoch).
    """

    def __init__(
        self,
        title: str,
        total_steps: int,
        *,
        quiet: bool = False,
        stream=None,
        every_seconds: float = 10.0,
        first_step: int = 0,
    ):
        self.title = title
        self.total = max(total_steps, 1)
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every = every_seconds
        self.start = time.perf_counter()
        self.last_print = 0.0
        self.text = ""
        self.first_step = first_step

    def update(self, step: int, examples: int, loss: float | None = None) -> None:
        """`step` counts from the phase's start, `examples` from this display's start."""
        if self.quiet:
            return
        now = time.perf_counter()
        elapsed = now - self.start
        rate = examples / elapsed if elapsed > 0 else 0.0
        done = step - self.first_step
        eta = elapsed / done * (self.total - step) if done > 0 else 0.0
        loss_text = f" loss {loss:.4f}" if loss is not None else ""
        self.text = (
            f"{self.title}: step {step}/{self.total}{loss_text} {rate:.1f} ex/s ETA {eta:.0f}s"
        )
        if self.tty:
            width = 20
            filled = int(width * step / self.total)
            bar = "#" * filled + "." * (width - filled)
            self.stream.write(f"\r[{bar}] {self.text}\x1b[K")
            self.stream.flush()
        elif step == self.total or now - self.last_print >= self.every:
            self.stream.write(self.text + "\n")
            self.stream.flush()
            self.last_print = now

    def close(self) -> None:
        if not self.quiet and self.tty and self.text:
            self.stream.write("\n")
            self.stream.flush()


class Console:
    """What a command tells its user on standard error. `say`: what is never silent (notes,
    warnings, a resumed run); `info`: what `--quiet` leaves out. A silent console (a non-chief
    worker's: the chief speaks for the run) prints nothing.

    Args:
        quiet: leave out progress and `info`.
        silent: print nothing at all.
    """

    def __init__(self, *, quiet: bool = False, silent: bool = False):
        self.quiet = quiet or silent
        self.silent = silent

    def say(self, text: str) -> None:
        if not self.silent:
            print(text, file=sys.stderr)

    def info(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr)

    def progress(self, title: str, total_steps: int, first_step: int = 0) -> Progress:
        return Progress(title, total_steps, quiet=self.quiet, first_step=first_step)
