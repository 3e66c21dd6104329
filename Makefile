# Two entry points for a fresh machine: `make search` runs a real local search, `make test` runs
# the whole suite. Both create .venv and install what they need.
PY ?= python3
VENV := .venv
PIP := $(VENV)/bin/pip
export HF_HUB_OFFLINE := 1

.PHONY: venv test search slurm-up slurm-down

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[cpu,test]"
	$(PIP) install -q --no-deps "verl==0.9.1"
	touch $@

venv: $(VENV)/.installed

# Lint, type check, then the whole suite (the local Slurm cluster included).
test: venv slurm-up
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m pytest -q

# A real search on the embedded CPU trainer (local processes when no Slurm cluster answers).
search: venv
	bin/llmzero-start examples/cpu-addition.yaml

# The private local Slurm cluster the slurm-marked tests use (installs Debian's packages when
# missing), plus shellcheck, which the rendering tests run on phase scripts.
slurm-up:
	command -v shellcheck >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends shellcheck)
	bin/llmzero-local-slurm start

slurm-down:
	bin/llmzero-local-slurm stop
