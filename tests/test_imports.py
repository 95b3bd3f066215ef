"""The package's imports go one way: no module imports, directly or through others, a module
that imports it back (function-level imports included; `if TYPE_CHECKING:` blocks are not
imports at run time). And `import bertfit` / `bertfit --help` do not load TensorFlow; when the CLI
loads it, it leaves out Keras' unused optional imports and sets TensorFlow up for speed on a CPU
(`bertfit.tf_startup`)."""

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


def _tensorflow_started_by_the_cli(**environment: str) -> list[str]:
    """What a process's TensorFlow runs with after the CLI's start-up: a pooling CPU allocator,
    oneDNN kernels, Grappler off; `environment` overrides the parent's variables."""
    code = (
        "from bertfit.tf_startup import start_tensorflow\n"
        "start_tensorflow()\n"
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


def test_a_users_own_tensorflow_settings_win():
    users = {"TF_CPU_ALLOCATOR_USE_BFC": "false", "TF_ENABLE_ONEDNN_OPTS": "0"}
    assert _tensorflow_started_by_the_cli(**users) == ["False", "False", "True"]
