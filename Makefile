# Two commands do everything: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint figures clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/naspipe demo

test: $(STAMP)
	$(BIN)/ruff check naspipe tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q tests

lint: $(STAMP)
	$(BIN)/ruff check naspipe tests benchmarks

figures: $(STAMP)
	$(BIN)/python -m naspipe.experiments.figures --measured docs/figures

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
