"""Every user mistake ends in a `BertfitError`: what was wrong, where, and what to do instead.

The CLI prints these without a traceback; anything else is a bug in bertfit.
"""

from __future__ import annotations


class BertfitError(Exception):
    """A problem the user can fix. The message says what, where and how."""


class InputFormatError(BertfitError):
    """The encoder or tokenizer got inputs in the wrong form (names, dtype, raw strings)."""


class CheckpointError(BertfitError):
    """A checkpoint could not be found, recognised or loaded."""


class DataError(BertfitError):
    """A data file has a problem; the message names the file and line, `code` the kind of
    problem: the finding code `bertfit check` reports it under, e.g. "data-missing-column"."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        path: str | None = None,
        line: int | None = None,
    ):
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line
        self.code = code


class ConfigError(BertfitError):
    """A configuration value is missing, inconsistent or impossible on the chosen hardware."""


class CheckpointWarning(UserWarning):
    """A checkpoint that loads, but perhaps not as meant: tokenizer files of another model or
    passed over, a vocab at odds with its casing or its embedding table, a config assumed.
    Said, not refused: the CLI prints it in one line (`bertfit: warning: ...`), and `bertfit
    check` counts it as a warning finding of `code` (its `--strict` fails on it).

    Examples:
    >>> import warnings
    >>> warnings.warn(CheckpointWarning("vocab.txt has capitals", code="model-vocab-casing"))
    ...  # doctest: +SKIP
    """

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


class MissingDependencyError(BertfitError):
    """An optional package is needed for what was asked; the message says which to install."""


class Interrupted(Exception):
    """A command stopped on SIGTERM or Ctrl-C at a safe point, keeping what it had done.

    Not a user mistake: the message says what was kept, and the CLI exits with `exit_code`
    (128 + the signal: 143 for SIGTERM, 130 for Ctrl-C).
    """

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


class TrainingInterrupted(Interrupted):
    """Training stopped on SIGTERM or Ctrl-C after saving a resumable checkpoint: the message
    says where the checkpoint is and how to resume."""

    def __init__(self, message: str, signum: int, run_dir: str | None = None):
        super().__init__(message, signum)
        self.run_dir = run_dir  # where the checkpoint is
