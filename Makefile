# The front door: make html | make html-noplot | make test | make clean
#
# On a fresh machine `make html` and `make test` create .venv and install requirements.txt into it.
# To use an interpreter that already has everything (a GPU runner, say): make html PYTHON=python3
# One tutorial only: make html TUTORIAL=01

VENV    ?= .venv
PYTHON  ?= $(VENV)/bin/python
BUILD   ?= _build
TUTORIAL ?=
SPHINXOPTS ?=

ifeq ($(PYTHON),$(VENV)/bin/python)
DEPS := $(VENV)/.installed
else
DEPS :=
endif

# -j auto: the pages read and written by a process a core (the gallery runs before, in its own processes)
SPHINX = SOL_TUTORIAL="$(TUTORIAL)" $(PYTHON) -m sphinx -b html -c . -W --keep-going -j auto $(SPHINXOPTS) docs $(BUILD)/html

.PHONY: html html-noplot test clean setup

html: $(DEPS)
	$(SPHINX)
	@echo "Built: $(BUILD)/html/index.html  (view: $(PYTHON) -m http.server -d $(BUILD)/html 8000)"

html-noplot: $(DEPS)
	$(SPHINX) -D plot_gallery=0
	@echo "Built without running the tutorials: $(BUILD)/html/index.html"

# ruff first (ruff.toml: the lint everywhere, the format check outside tutorials/), then the tests.
# -n auto (pytest-xdist): a test worker per core on a CPU-only machine, one process on a GPU machine (tests/conftest.py)
test: $(DEPS)
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m pytest tests -n auto --dist worksteal

setup: $(DEPS)

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install --upgrade pip
	$(VENV)/bin/python -m pip install -r requirements.txt
	touch $@

clean:
	rm -rf $(BUILD) docs/tutorials docs/_generated docs/sg_execution_times.rst
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
