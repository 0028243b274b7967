# Two commands do everything: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint figures clean lab lab-settings chromium

# Everything with uv: parallel downloads, 27-31 s here (against 49 s with pip for torch and `python -m venv`'s
# own pip). uv does not read pip's configuration, so pip's find-links (where this machine keeps its CPU torch wheel;
# without it both would fetch the CUDA build) are handed on. Where uv cannot be installed or fails (an index only
# pip's configuration names, say), pip does it all.
# Not installed: rfc3987-syntax (install-excludes.txt). Only jsonschema's optional "iri" format check uses it, and it
# builds a parser when imported: 1.4-2.8 s of CPU in every process that imports jsonschema. Every kernel that shows a
# plotly figure does (plotly checks nbformat's version), as does JupyterLab's server. Without it jsonschema skips
# that one format check, which nothing here uses (tests/test_install.py).
# Not installed either: matplotlib (with pillow, fonttools, kiwisolver, contourpy, cycler, pyparsing), which mnist1d
# requires for its plotting helper alone; naspipe.datasets.mnist1d never imports mnist1d's package (it would import
# matplotlib) and generates the data from the package's transform.py (tests/datasets/test_mnist1d.py).
# Bytecode is compiled at install (uv's --compile-bytecode, on both cores), not left to the first import: where
# PYTHONDONTWRITEBYTECODE is set (this machine sets it), every process would compile torch from source again.
# (`compileall -j 0` skipping the packages' own test suites, a quarter of the files, was no quicker: 20-28 s.)
FIND_LINKS = $(foreach d,$(sort $(PIP_FIND_LINKS) $(shell $(PY) -m pip config get global.find-links 2>/dev/null)),\
  --find-links $(d))
$(STAMP): pyproject.toml install-excludes.txt
	test -x $(BIN)/python || $(PY) -m venv --without-pip $(VENV)
	test -x $(BIN)/uv || $(PY) -m pip --python $(BIN)/python install -q uv || true
	test -x $(BIN)/uv && $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python $(FIND_LINKS) \
	  --excludes install-excludes.txt pip torch==2.13.0 -e '.[dev]' || { \
	  $(BIN)/python -m ensurepip --upgrade >/dev/null && $(BIN)/python -m pip install -q --upgrade pip && \
	  $(BIN)/python -m pip install -q torch==2.13.0 && $(BIN)/python -m pip install -q -e '.[dev]'; }
	$(BIN)/python -m pip uninstall -qq -y -r install-excludes.txt  # (pip installed them, or an older .venv has them)
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/naspipe demo

# pytest-xdist workers, a test module (or a share of one) per worker at a time, slow units first (tests/conftest.py
# says why);
# `make test TEST_WORKERS=0` runs the suite in this process alone
TEST_WORKERS ?= 3
test: $(STAMP) chromium
	$(BIN)/ruff check naspipe tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/python -m compileall -q naspipe tests  # (where PYTHONDONTWRITEBYTECODE is set, no process writes it)
	$(BIN)/python -m pytest -q tests -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15

# JupyterLab from the project's environment (widgets and figures work there), on 127.0.0.1 with a token.
# Its settings live in $(LAB_SETTINGS) (git-ignored), seeded by lab-settings: no "get notified about
# Jupyter news?" pop-up over the outputs (the browser test uses the same target). Without a web browser
# here, JupyterLab starts anyway and the URL to open (with its token) is the one it prints.
LAB_SETTINGS ?= .jupyterlab
NEWS_SETTINGS = $(LAB_SETTINGS)/@jupyterlab/apputils-extension/notification.jupyterlab-settings
NO_BROWSER = naspipe: no web browser found here; open the http://127.0.0.1:PORT/lab?token=... URL that JupyterLab \
prints below in a browser (from another machine: ssh -L PORT:127.0.0.1:PORT this-host first)
# The notebooks' kernels compute under naspipe's default CPU kernels (its recipe in their environment), so a reference
# trained in a notebook runs in the kernel itself and matches `naspipe reference` bit for bit.
KERNELS_ENV = $$($(BIN)/python -c "from naspipe.lifecycle import kernels as k; print(*(f'{a}={b}' for a, b in k.RECIPES[k.DEFAULT].items()))")
lab: $(STAMP) lab-settings
	@$(BIN)/python -c "import webbrowser; webbrowser.get()" 2>/dev/null || echo "$(NO_BROWSER)"
	env $(KERNELS_ENV) JUPYTERLAB_SETTINGS_DIR=$(LAB_SETTINGS) $(BIN)/jupyter lab --ip=127.0.0.1 --ServerApp.root_dir=notebooks \
	  $$($(BIN)/python -c "import webbrowser; webbrowser.get()" 2>/dev/null || echo --no-browser) \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root)

lab-settings:
	@mkdir -p $(dir $(NEWS_SETTINGS))
	@test -f $(NEWS_SETTINGS) || echo '{"fetchNews": "false", "checkForUpdates": false}' > $(NEWS_SETTINGS)

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
