# One command for the demo, one for the tests (see README Quickstart).
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3

.PHONY: install demo test lint services bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml rails/solana/pyproject.toml rails/base/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]' -e rails/solana -e rails/base
	touch $@

demo: install
	$(BIN)/envelopay demo

services:
	bash scripts/services.sh

test: install services
	$(BIN)/ruff check src rails tests bench
	$(BIN)/mypy
	$(BIN)/pytest

bench: install services
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) var demo-out
