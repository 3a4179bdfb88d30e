# One command for the demo, one for the tests (see README Quickstart).
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3

.PHONY: install demo test lint services bench clean devnet tools

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml rails/solana/pyproject.toml rails/base/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]' -e rails/solana -e rails/base
	touch $@

demo: install
	$(BIN)/envelopay demo

# --- devnet (README "Two terminals"): anvil from npm when npm is here, else eth-tester ---
tools:
	@if command -v npm >/dev/null 2>&1 && [ ! -x tools/node_modules/.bin/anvil ]; then \
	  cd tools && npm ci --no-audit --no-fund --silent; fi

devnet: install tools
	$(BIN)/envelopay devnet up --detach
# --- end devnet ---

services:
	bash scripts/services.sh

test: install services
	$(BIN)/ruff check src rails tests bench
	$(BIN)/mypy
	$(BIN)/pytest

bench: install services
	# Every figure-printing script; _*.py are shared helpers and parse_ab.py compares two
	# trees (it takes the other tree's src/ as its argument).
	# BENCH_KEEP: no script removes its files before the series ends (bench/_workdir.py:
	# on a file system without a journal, removed files slow file creation for minutes).
	keep=$$(mktemp -d -t envelopay-bench-XXXXXX) && trap 'rm -rf "$$keep"' EXIT && \
	for b in bench/*.py; do case $$(basename $$b) in _*|parse_ab.py) continue;; esac; \
	  BENCH_KEEP=$$keep $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) var demo-out
