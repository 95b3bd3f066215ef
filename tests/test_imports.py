"""The package's imports go one way: no module imports, directly or through others, a module
that imports it back, and each package imports only packages of a lower rank (`RANKS`, the
order ARCHITECTURE.md states). Function-level imports count; `if TYPE_CHECKING:` blocks are not
imports at run time. And `import bertfit` and the CLI module do not load TensorFlow (`--help` and
usage errors: tests/test_cli_startup.py); when the CLI loads it, it leaves out Keras' unused
optional imports and sets TensorFlow up for speed on a CPU (`bertfit.tf_startup`)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "bertfit"


def _modules() -> dict[str, Path]:
    modules = {}
    for file in PACKAGE.rglob("*.py"):
        parts = file.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = file
    return modules


def _runtime_imports(tree: ast.AST):
    """Import nodes, skipping the bodies of `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in _runtime_imports(child))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _runtime_imports(node)


def import_graph() -> dict[str, set[str]]:
    """module -> the bertfit modules it imports, with the packages whose __init__ that runs."""
    modules = _modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, file in modules.items():
        package = name if file.name == "__init__.py" else name.rpartition(".")[0]
        for node in _runtime_imports(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            for target in targets:
                found = known(target) if target.startswith("bertfit") else None
                if found is None or found == name:
                    continue
                parts = found.split(".")
                for k in range(2, len(parts) + 1):  # the packages on the way run their __init__
                    step = ".".join(parts[:k])
                    if step in modules and step != name and not name.startswith(step + "."):
                        graph[name].add(step)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycles():
    assert cycles(import_graph()) == []


# Import ranks (ARCHITECTURE.md: errors, config < text, model < checkpoints, data < runs <
# training, inference < export, serve, checks, report < cli), for the packages and the top-level
# modules of bertfit: each may import only those of a lower rank (and itself), so packages of one
# rank import nothing from each other: inference reads runs through `runs/`, never through
# `training/`. A new package or module needs a rank here.
RANKS = {
    **dict.fromkeys(["errors", "cache", "progress"], 0),
    **dict.fromkeys(["atomic", "translate", "storage", "tf_build", "flags"], 1),
    **dict.fromkeys(["config", "paths", "tf_startup"], 2),
    "jax_devices": 2,  # the JAX devices a step runs on, for training and inference
    **dict.fromkeys(["text", "model"], 3),
    **dict.fromkeys(["checkpoints", "data"], 4),
    "runs": 5,  # a run as a format: its directory read, records, scores, checkpoint weights
    **dict.fromkeys(["training", "inference", "run_flags"], 6),
    **dict.fromkeys(["export", "serve", "checks", "report"], 7),
    "demo": 8,  # `make demo`: trains, evaluates and writes the report
    "sweeps": 8,  # `bertfit tune`: runs of training, predictions of inference, reports
    "distill": 8,  # `bertfit distill`: a run's predictions, then a run of training
    "cli": 9,
    "bertfit": 10,  # the package's __init__ (its public names, imported on first use)
}

# Imports against the ranks still to be moved: (importing module, imported package) → why it is
# here and where it goes. Empty it; never add to it.
KNOWN_VIOLATIONS = {
    # Convenience constructors from a checkpoint name, as KerasHub's from_preset: they belong
    # in checkpoints/ (e.g. checkpoints.load.load_preprocessor / load_classifier_head).
    ("bertfit.text.preprocessor", "checkpoints"): "BertPreprocessor.from_checkpoint",
    ("bertfit.model.classifier", "checkpoints"): "BertClassifier.from_checkpoint",
}


def _rank_of(module: str) -> str:
    """The package (or top-level module) of bertfit that `module` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def rank_violations(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(importing module, imported package) → the imported modules, for each import of a
    package whose rank is not lower than the importer's."""
    found: dict[tuple[str, str], list[str]] = {}
    for module, targets in graph.items():
        own = _rank_of(module)
        for target in sorted(targets):
            other = _rank_of(target)
            if other != own and RANKS[other] >= RANKS[own]:
                found.setdefault((module, other), []).append(target)
    return found


def test_every_package_and_top_level_module_has_a_rank():
    assert {_rank_of(module) for module in import_graph()} - set(RANKS) == set()


def test_packages_import_only_packages_of_a_lower_rank():
    found = rank_violations(import_graph())
    new = [
        f"{module} ({_rank_of(module)}, rank {RANKS[_rank_of(module)]}) imports "
        f"{', '.join(found[module, other])} ({other}, rank {RANKS[other]})"
        for module, other in sorted(found)
        if (module, other) not in KNOWN_VIOLATIONS
    ]
    assert not new, (
        "imports against the package ranks (tests/test_imports.py RANKS): a package may import "
        "only packages of a lower rank; move the code it needs down, or the importer up:\n  "
        + "\n  ".join(new)
    )
    gone = sorted(set(KNOWN_VIOLATIONS) - set(found))
    assert not gone, f"fixed, so take them out of KNOWN_VIOLATIONS: {gone}"


def test_what_only_reads_a_run_loads_nothing_of_training():
    """Evaluating, predicting, exporting, serving and reporting read a run through `runs/`,
    not through `training/`: inference has training's rank, so it may not import it (the rank
    test), and what sits above inference reaches training through nothing it imports."""
    graph = import_graph()
    readers = ("inference", "export", "serve", "report")
    reached, todo = set(), [m for m in graph if _rank_of(m) in readers]
    while todo:
        for target in graph[todo.pop()] - reached:
            reached.add(target)
            todo.append(target)
    assert RANKS["inference"] == RANKS["training"]
    assert sorted(m for m in reached if _rank_of(m) == "training") == []


def test_the_rank_check_names_an_import_upwards():
    graph = {"bertfit.model.inputs": {"bertfit.data", "bertfit.data.pipeline", "bertfit.errors"}}
    assert rank_violations(graph) == {
        ("bertfit.model.inputs", "data"): ["bertfit.data", "bertfit.data.pipeline"]
    }


def test_the_rank_check_names_an_import_between_packages_of_one_rank():
    graph = {"bertfit.inference.predictor": {"bertfit.training", "bertfit.training.run"}}
    assert rank_violations(graph) == {
        ("bertfit.inference.predictor", "training"): ["bertfit.training", "bertfit.training.run"]
    }


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_import_bertfit_and_the_cli_module_do_not_load_tensorflow():
    code = (
        "import sys, bertfit, bertfit.cli, bertfit.config, bertfit.errors\n"
        "print('tensorflow' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def test_the_cli_loads_tensorflow_without_keras_unused_optional_imports(tmp_path):
    # Keras imports these whenever they are installed (the demo extra installs them); the CLI
    # hides them while TensorFlow loads, then they import as usual. Stand-in packages make
    # them "installed" whatever this environment has (matplotlib is a bertfit dependency).
    (tmp_path / "sklearn").mkdir()
    (tmp_path / "sklearn" / "__init__.py").write_text("__version__ = '1.6.0'\n")
    (tmp_path / "scipy" / "sparse").mkdir(parents=True)
    (tmp_path / "scipy" / "__init__.py").write_text("")
    (tmp_path / "scipy" / "sparse" / "__init__.py").write_text(
        "def issparse(x):\n    return False\n"
    )
    code = (
        "import sys\n"
        "from bertfit.tf_startup import start_tensorflow\n"
        "start_tensorflow()\n"
        "loaded = [m for m in ('sklearn', 'scipy', 'matplotlib') if m in sys.modules]\n"
        "import keras, sklearn, scipy.sparse, matplotlib.pyplot\n"
        "print(loaded, 'keras' in sys.modules, scipy.sparse.issparse(1))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(PACKAGE.parent)])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.stdout.strip() == "[] True False", done.stderr


def _tensorflow_started_by_the_cli(for_inference: bool = False, **environment: str) -> list[str]:
    """What a process's TensorFlow runs with after the CLI's start-up: a pooling CPU allocator,
    oneDNN kernels, Grappler off (on `for_inference`); `environment` overrides the parent's
    variables."""
    code = (
        "from bertfit.tf_startup import start_tensorflow\n"
        f"start_tensorflow(for_inference={for_inference})\n"
        "import tensorflow as tf\n"
        "from tensorflow.python.util import _pywrap_util_port\n"
        "tf.matmul(tf.ones([64, 64]), tf.ones([64, 64])).numpy()\n"
        "try:\n"
        "    pooled = tf.config.experimental.get_memory_info('CPU:0')['peak'] > 0\n"
        "except ValueError:  # only a pooling allocator keeps statistics\n"
        "    pooled = False\n"
        "grappler_off = tf.config.optimizer.get_experimental_options()['disable_meta_optimizer']\n"
        "print(pooled, _pywrap_util_port.IsMklEnabled(), grappler_off)\n"
    )
    names = ("TF_CPU_ALLOCATOR_USE_BFC", "TF_ENABLE_ONEDNN_OPTS")
    env = {k: v for k, v in os.environ.items() if k not in names} | environment
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    return done.stdout.split() or [done.stderr]


def test_the_cli_sets_tensorflow_up_for_speed_on_a_cpu():
    assert _tensorflow_started_by_the_cli() == ["True", "True", "True"]


def test_commands_that_only_run_a_model_keep_the_graph_optimizer(monkeypatch):
    assert _tensorflow_started_by_the_cli(for_inference=True) == ["True", "True", "False"]
    from bertfit import cli

    started = []
    monkeypatch.setattr(cli, "start_tensorflow", lambda **kw: started.append(kw))
    monkeypatch.setattr(cli, "build_parser", _parser_that_stops_after_start_up)
    for command in ("predict", "evaluate", "serve", "train", "export"):
        cli.main([command])
    assert [kw["for_inference"] for kw in started] == [True, True, True, False, False]


def _parser_that_stops_after_start_up():
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.set_defaults(handler=lambda args: 0)
    return parser


def test_a_users_own_tensorflow_settings_win():
    users = {"TF_CPU_ALLOCATOR_USE_BFC": "false", "TF_ENABLE_ONEDNN_OPTS": "0"}
    assert _tensorflow_started_by_the_cli(**users) == ["False", "False", "True"]


def test_the_test_environment_has_no_triton_to_crash_tensorflow():
    """triton (a CUDA build of torch brings it) imported after TensorFlow segfaults on TF 2.20
    and 2.21, and a test worker imports TensorFlow and torch (the parity references): the tests
    run with the CPU build of torch, which has none, rather than let a worker crash mid-suite."""
    import importlib.util

    assert importlib.util.find_spec("triton") is None, (
        "triton is installed: importing it after TensorFlow can segfault a test worker; "
        "use torch's CPU build (torch==2.13.0+cpu, from PyTorch's CPU index) or "
        "pip uninstall triton"
    )
