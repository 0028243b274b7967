# Two commands do everything: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint figures clean lab chromium

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/naspipe demo

test: $(STAMP) chromium
	$(BIN)/ruff check naspipe tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q tests

# JupyterLab from the project's environment (widgets and figures work there), on 127.0.0.1 with a token
lab: $(STAMP)
	$(BIN)/jupyter lab --ip=127.0.0.1 --ServerApp.root_dir=notebooks $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# the browser test drives Debian's chromium (Playwright's own browser download is not used)
chromium:
	@command -v chromium >/dev/null || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; } \
	  || echo "warning: chromium missing and not installable here: the browser test will be skipped"

lint: $(STAMP)
	$(BIN)/ruff check naspipe tests benchmarks
	$(BIN)/lint-imports

figures: $(STAMP)
	$(BIN)/python -m naspipe.experiments.figures --measured docs/figures

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
