"""The child process of tests/test_without_tensorflow.py: `bertfit` with `--backend jax` where
TensorFlow cannot be imported, as on a TPU VM or a GPU box with `bertfit[jax]` alone.

    KERAS_BACKEND=jax python -m tests.without_tensorflow tests.jax_without_tensorflow \
        STAGE MODEL TRAIN EVAL RUN
    KERAS_BACKEND=jax python -m tests.without_tensorflow tests.jax_without_tensorflow \
        distill TEACHER UNLABELLED INITIAL STUDENT

- `killed`: `bertfit train --backend jax` (`train_args`), killed with SIGKILL after the step
  lines of its fifth host call, mid-epoch, two steps after its checkpoint of step 3 (as
  tests/training/killed_train.py kills);
- `resumed`: the same command again (it resumes the run), then `bertfit predict` of EVAL into
  RUN-predictions.jsonl, `evaluate`, `check`, `export` and `serve`; prints one JSON line: each
  command's exit code and the lines it wrote to standard error, and the TensorFlow modules
  loaded (none may be).
- `distill`: `bertfit distill --backend jax` of the teacher run (`distill_args`), its student
  starting from the weights in INITIAL (`starting_from`); prints the TensorFlow modules loaded
  as one JSON line.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

from tests.training.killed_train import kill_on_call

TENSORFLOW = {"tensorflow", "tensorflow_text", "tf_keras"}
KILLED_AFTER = 5  # host calls (one step each): the resume repeats steps 4 and 5


def train_args(model: str, train: str, evaluation: str, run: str) -> list[str]:
    """Four epochs of 16 batches of 8 on the model, in one bucket (one step to compile),
    with dropout on (a resume continues its RNG) and a checkpoint every 3 steps."""
    return [
        *("--backend", "jax", "--model", model, "--train", train, "--eval", evaluation),
        *("--max-seq-length", "16", "--buckets", "16", "--batch-size", "8", "--epochs", "4"),
        *("--learning-rate", "5e-3", "--dropout", "0.1", "--seed", "3"),
        *("--save-every-steps", "3", "--output-dir", run, "--quiet"),
    ]


def commands(model: str, train: str, evaluation: str, run: str) -> dict[str, list[str]]:
    """What `resumed` runs, in order."""
    data = ["--run", run, "--data", evaluation]
    return {
        "train": ["train", *train_args(model, train, evaluation, run)],
        "predict": ["predict", "--backend", "jax", *data, "--output", f"{run}-predictions.jsonl"],
        "evaluate": ["evaluate", "--backend", "jax", *data, "--json"],
        # no --output-dir; no XLA compilation of the train step for each bucket (its own
        # seconds: tests/checks/test_jax_check.py compiles them), the rest of the check
        "check": ["check", *train_args(model, train, evaluation, run)[:-3], "--no-compile"],
        "export": ["export", "--run", run, f"{run}-export"],
        "serve": ["serve", "--run", run],
    }


def distill_args(teacher: str, unlabelled: str, student: str, backend: str) -> list[str]:
    """A student of one layer cut from the teacher, its vocabulary pruned and its feed-forwards
    narrowed, learning 32 of the teacher's training rows and 8 unlabelled ones for one epoch."""
    return [
        *("distill", "--teacher", teacher, "--output-dir", student, "--backend", backend),
        *("--student-layers", "1", "--prune-vocab", "--student-intermediate-size", "16"),
        *("--unlabelled", unlabelled, "--max-train-examples", "32", "--epochs", "1"),
        *("--temperature", "3", "--calibrate", "off", "--no-report", "--quiet"),
    ]


@contextlib.contextmanager
def starting_from(initial: str):
    """`bertfit distill`'s student starts from the weights in the folder `initial`, written
    there by the first run (its cut layer, and the head each backend draws from the seed its
    own way): the steps of two backends are then the same steps."""
    from bertfit.distill import run
    from bertfit.runs.checkpoint_files import latest_checkpoint, save_checkpoint
    from bertfit.runs.weights import checkpoint_variables, restore_model, variable_values

    use_teacher = run._use_teacher

    def and_start_from_initial(setup, *args):
        use_teacher(setup, *args)
        model = setup.trainer.model
        if latest_checkpoint(initial):
            restore_model(model, latest_checkpoint(initial))
        else:
            save_checkpoint(initial, 0, variable_values(checkpoint_variables(model)))

    run._use_teacher = and_start_from_initial
    try:
        yield
    finally:
        run._use_teacher = use_teacher


def tensorflow_loaded() -> list[str]:
    return sorted({name.split(".")[0] for name, m in sys.modules.items() if m} & TENSORFLOW)


def main() -> None:
    from bertfit.cli import main as bertfit

    stage, paths = sys.argv[1], sys.argv[2:]
    if stage == "distill":
        teacher, unlabelled, initial, student = paths
        with starting_from(initial):
            assert bertfit(distill_args(teacher, unlabelled, student, "jax")) == 0
        print(json.dumps({"loaded": tensorflow_loaded()}))
        return
    if stage == "killed":
        from bertfit.training.run_dir import TrainingRunDir

        kill_on_call(TrainingRunDir, "append_steps", KILLED_AFTER, after=True)
        bertfit(["train", *train_args(*paths)])
        return
    codes, errors = {}, {}
    for name, args in commands(*paths).items():
        said = io.StringIO()
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
            codes[name] = bertfit(args)
        errors[name] = said.getvalue().splitlines()
    print(json.dumps({"codes": codes, "errors": errors, "loaded": tensorflow_loaded()}))


if __name__ == "__main__":
    main()
