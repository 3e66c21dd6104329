# Two entry points for a fresh machine: `make search` runs a real local search, `make test` runs
# the whole suite. Both create .venv and install what they need.
PY ?= python3
VENV := .venv
PIP := $(VENV)/bin/pip
# PyPI's Linux torch is a CUDA build of several GB; where PyTorch's CPU index answers, its
# 2.13.0+cpu wheel is taken instead (a local version sorts above PyPI's plain 2.13.0).
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
export HF_HUB_OFFLINE := 1

.PHONY: venv test lock search slurm-up slurm-down

# Installed with constraints.txt, the versions the suite was last run with (see `make lock`).
$(VENV)/.installed: setup.cfg pyproject.toml constraints.txt
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else \
	  "$(PY) is Python %d.%d; llmzero-slurm needs 3.11 or newer (make PY=python3.11 ...)" % sys.version_info[:2])'
	$(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	@echo "installing torch (its CPU build where PyTorch's index answers), the CPU trainer and" \
	  "the test extras into $(VENV): a first install downloads them and can take several minutes"
	$(PIP) install -q -c constraints.txt torch $$(curl -sf --max-time 10 -o /dev/null \
	  $(TORCH_CPU_INDEX)/ && echo --extra-index-url $(TORCH_CPU_INDEX))
	$(PIP) install -q -c constraints.txt -e ".[cpu,test]"
	$(PIP) install -q -c constraints.txt --no-deps verl
	touch $@

venv: $(VENV)/.installed

# Lint, type check, the whole suite (the local Slurm cluster included), and beside it the tests
# whose numbers depend on floating-point code paths once more on a second path (MKL's
# compatible kernels), as another CPU would run them, so that nothing numeric holds on this
# machine only. The suite mostly waits on jobs, so it runs as three processes: the Slurm tests
# and the numeric pass in the background, each in its own temporary directory, the rest in the
# foreground; the two suite halves share one warm-started base. The background logs follow the
# foreground's output, and any process failing fails the target.
PYTEST := $(VENV)/bin/python -m pytest -q
test: venv slurm-up
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	@tmp=$$(mktemp -d); export LLMZERO_TEST_BASE_CACHE="$$tmp/base-cache"; \
	background() { name=$$1; shift; \
	  ( "$$@" -p no:cacheprovider --basetemp="$$tmp/$$name" >"$$tmp/$$name.log" 2>&1; \
	    echo $$? >"$$tmp/$$name.rc" ) & }; \
	background numeric env MKL_CBWR=COMPATIBLE LLMZERO_TEST_BASE_CACHE= $(PYTEST) -m numeric; \
	background slurm $(PYTEST) -m slurm --durations=10; \
	$(PYTEST) -m "not slurm" --durations=10; rc=$$?; wait; \
	for name in slurm numeric; do echo "== pytest -m $$name (run beside the above):"; \
	  cat "$$tmp/$$name.log"; rc=$$((rc | $$(cat "$$tmp/$$name.rc"))); done; \
	rm -rf "$$tmp"; exit $$rc

# Rewrite constraints.txt from the current environment (after a deliberate upgrade).
lock: venv
	{ sed -n '1,3p' constraints.txt; $(PIP) freeze --all --exclude-editable | grep -v '^pip==' \
	  | sed 's/+cpu$$//'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

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
