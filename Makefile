# The documented entry points: `make demo`, `make test`, `make bench`.
VENV   := .venv
PYTHON := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
EXTRAS := dev,torch,demo,hub,serve,export


.PHONY: install demo test test-fast bench lint clean

$(PYTHON):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PYTHON)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -e '.[$(EXTRAS)]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/bertfit demo

# Two workers: most tests wait on TensorFlow start-up or subprocesses; worksteal balances the
# long ones (resume, export parity, distributed) across both.
test: install
	$(PYTHON) -m pytest -q -n 2 --dist worksteal

# The inner loop (under 2 minutes on 2 cores): no `slow` test (MiniLM, Rotten Tomatoes, the
# tiny-model tests that take seconds: tests/conftest.py lists them) and no `distributed` one.
test-fast: install
	$(PYTHON) -m pytest -q -n 2 --dist worksteal -m "not slow and not distributed"

bench: install
	$(PYTHON) -m pip install -q -e '.[$(EXTRAS),bench]'
	$(PYTHON) -m bench.run

# Only ruff: linting needs neither TensorFlow nor torch.
lint: | $(PYTHON)
	$(PYTHON) -m pip install -q 'ruff>=0.6'
	$(VENV)/bin/ruff check bertfit tests bench conftest.py
	$(VENV)/bin/ruff format --check bertfit tests bench conftest.py

clean:
	rm -rf $(VENV) .pytest_cache
