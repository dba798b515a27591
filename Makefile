# The two commands of the README:
#   make run    installs everything into .venv and runs the main job (ARGS= overrides it), downloading missing data
#   make test   installs everything into .venv and runs the test suite (what .ci/run calls)
PYTHON ?= python3.11
VENV ?= .venv
ARGS ?= model=seq2seq data=scan_simple
PYTEST_ARGS ?=
DATASETS ?= scan_sp_simple geo_funql_iid

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --upgrade pip
	$(VENV)/bin/pip install -e '.[test]'
	touch $@

.PHONY: install run test leaderboard verify
install: $(VENV)/.installed

run: $(VENV)/.installed
	$(VENV)/bin/python benchmarks/run.py data.download=true $(ARGS)

test: $(VENV)/.installed
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest $(PYTEST_ARGS)

leaderboard: $(VENV)/.installed
	$(VENV)/bin/python benchmarks/leaderboard.py

verify: $(VENV)/.installed
	$(VENV)/bin/python -m zoo.formalisms verify $(DATASETS)
