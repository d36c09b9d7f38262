# Two commands set everything up on a fresh machine: `make book` and `make test`.
# Both create (or reuse) the virtual environment .venv and install requirements.txt into it.

PYTHON ?= python3
JUPYTERLAB := jupyterlab==4.6.6
VENV := .venv
BIN := $(VENV)/bin
NOTEBOOKS := build/notebooks

.PHONY: install export notebooks test test-quick test-browser chromium book web-packages train lab clean

install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

# Write the `export` cells of the chapters into transformer/ (commit both).
export: install
	$(BIN)/python tools/export.py

# The chapters as .ipynb notebooks, for nbval (the same files the launch buttons open).
notebooks: install
	rm -rf $(NOTEBOOKS)
	$(BIN)/python tools/notebooks.py $(NOTEBOOKS)

# The test processes, nbval's kernels, the browser tests and the book's build share one cache
# of prepared corpora and trained runs, so a run that a chapter trains under `make test` is
# loaded, not trained again, by the browser tests (and `make book` builds from the chapters'
# outputs of `make test`); not ~/.cache: the reader's own runs stay apart.
test test-quick test-browser book: export TRANSFORMER_CACHE := $(CURDIR)/build/cache

# A test process for each core (pytest-xdist), each with one thread (two processes that each
# spread torch's work over every core make each other wait); a file, or a chapter's
# notebook, runs whole in one of them, the heaviest first (tests/conftest.py).
PYTEST := $(BIN)/python -m pytest -n auto --dist loadfile --no-loadscope-reorder
# The browser tests too: they load the runs `make test` trained, whose cache key holds torch's
# thread count (book/trainer.md's train_once: the count changes a run's last bits).
test test-quick test-browser: export OMP_NUM_THREADS := 1

# Everything: every chapter run by nbval (the book's build then reuses what they printed,
# tests/conftest.py), the package tests and the export check.
test: notebooks
	$(PYTEST) $(NOTEBOOKS) tests --nbval-lax --nbval-current-env --nbval-cell-timeout=600 --durations=20

# The package tests only (a couple of minutes).
test-quick: install
	$(PYTEST) tests -q -m "not slow and not browser"

# Every page of the built book in headless Chromium, the translator's and the explorers'
# weights against Python's, and a chapter run and saved in JupyterLab (Playwright is in
# requirements.txt; the browser is Debian's chromium, installed by `make chromium`).
test-browser: book chromium
	$(BIN)/python -m pip install --quiet $(JUPYTERLAB)
	$(BIN)/python -m pytest tests/test_browser.py -v --durations=10

# A Chromium for the browser tests: the system's, or Debian's chromium installed where this
# runs as root with apt-get; otherwise a refusal that says what to install.
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null \
	  || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } \
	  || { echo "the browser tests need Chromium: apt-get install chromium (or your system's package)"; exit 1; }

# The executed HTML book in _build/html, warnings as errors; then the deploy chapter's
# in-page translator (tools/web.py), whose runtime npm installs from web/package-lock.json.
# Without npm the book still builds, and that page says what is missing.
# tools/web.py runs with one thread, as make test trained the book's number model: its cached
# run is loaded, not trained again (train_once's key holds torch's thread count).
book: install web-packages
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going
	OMP_NUM_THREADS=1 $(BIN)/python tools/web.py

web-packages:
	@if command -v npm >/dev/null; then \
	  [ web/node_modules/.package-lock.json -nt web/package-lock.json ] \
	  || npm ci --prefix web --ignore-scripts --no-audit --no-fund --loglevel=error; \
	else \
	  echo "make book: no npm, so the in-page translator is left out (install Node.js 20+" \
	    "with npm, e.g. apt-get install nodejs npm, then make book again)"; \
	fi

# Train the small preset on the embedded number corpus (the README says how long it takes on a
# 2-core CPU, from benchmarks/results/fresh_clone.json). The budget is in steps, so a slower
# machine trains the same model for longer; the final model is the average of the run's last
# checkpoints (runs/numbers/checkpoint_average.pt).
train: install
	$(BIN)/python -m transformer train --preset small --max-steps 1000 --out runs/numbers --overwrite

# The chapters as notebooks in JupyterLab (jupytext opens the .md files directly).
lab: install
	$(BIN)/python -m pip install --quiet $(JUPYTERLAB)
	$(BIN)/jupyter lab book/

clean:
	rm -rf _build build
