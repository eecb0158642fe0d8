# Quick start: `make run` (install + the default job) and `make test` (install dev extras + tests).
PYTHON ?= python3

# Python caches each module's compiled bytecode (.pyc) on first import unless
# PYTHONDONTWRITEBYTECODE is set (some machines set it). Without the cache every process (each
# test worker, each Ray actor, each command) compiles jax, scipy, flax... from source again:
# seconds of CPU in every process; so the recipes below never inherit it.
unexport PYTHONDONTWRITEBYTECODE
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test test-fast lint bench clean

# The virtual environment gets uv (pinned in constraints.txt) from the pip it comes with; uv
# then installs the rest, several times faster than pip even with pip's cache warm, the same
# versions (constraints.txt pins every package). uv reads PyPI, not pip.conf: where
# packages come from a mirror, run `make test PIP_INSTALL="$(VENV)/bin/python -m pip install
# --quiet --no-compile -c constraints.txt"`.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt uv

# Neither uv nor (with --no-compile) pip byte-compiles the installed packages (that costs more
# CPU than the install); Python compiles the modules a run actually imports, once, on first import.
PIP_INSTALL ?= $(BIN)/uv pip install --python $(BIN)/python --quiet -c constraints.txt

$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e ".[dev]"
	touch $@ $(VENV)/.installed

# The default job: PGC-A3C with the Laplace mechanism at ε = 5 per agent, 8 trials × 30,000
# submissions (its time on 2 cores: benchmarks/RESULTS.md). Every `privrl run` defaults to its
# paper's preset; this job asks for `--preset tuned`, ours, which learns within these submissions.
run: $(VENV)/.warm
	$(BIN)/privrl run pgc-a3c --preset tuned --mechanism laplace --epsilon 5 --trials 8 --submissions 30000

# Once, after the install: the same job at 2,500 submissions (its chunks are the same programs:
# the budget is data; the chunk's length is not: 277 rounds of 9 agents for 8 trials at any
# budget above 2,493, pgc_a3c.local._chunk_rounds), so that its compiled programs are in
# privrl's persistent compilation cache and `make run` starts without compiling them. The
# cache (~/.cache/privrl/jax, or PRIVRL_CACHE_DIR) holds XLA machine code for this CPU and this
# jaxlib, made here, never shipped; privrl reads it only if it is yours and nobody else may
# write into it. Its cost and what it saves: benchmarks/RESULTS.md ("Compile time per command").
$(VENV)/.warm: $(VENV)/.installed
	tmp=$$(mktemp -d) && $(BIN)/privrl run pgc-a3c --preset tuned --mechanism laplace \
	  --epsilon 5 --trials 8 --submissions 2500 --no-progress --out $$tmp/warm > $$tmp/log 2>&1; \
	  status=$$?; \
	  if [ $$status -ne 0 ]; then cat $$tmp/log; fi; rm -rf $$tmp; test $$status -eq 0
	touch $@

# The whole suite, split over every core by pytest-xdist (tests/conftest.py says how it is
# grouped); test-fast leaves out the tests marked slow (long learning and end-to-end runs).
PYTEST := $(BIN)/python -m pytest -q -n auto --dist loadgroup --no-loadscope-reorder --durations=25

# The tests that start OS processes of their own (marked `processes`: the Ray tests' actors, a
# Flower deployment's SuperLink, SuperNodes and apps, by tests/conftest.py; the documented Ray
# and Flower commands, by tests/test_documented_commands.py) run in a pytest of
# their own, beside the rest: they spend much of their time starting, waiting and restarting,
# which the other stage fills; for the same reason two of them run at once (the Ray tests share
# one worker and its cluster: tests/conftest.py). Their output follows the rest's; either
# failing fails the target.
RAY_LOG := .pytest-ray.log
test: $(VENV)/.installed-dev
	rm -f $(RAY_LOG) $(RAY_LOG).rc; \
	( $(BIN)/python -m pytest -q -n 2 --dist loadgroup -m processes tests/systems/*/test_ray.py \
	  tests/systems/*/test_*_deployment.py tests/test_documented_commands.py > $(RAY_LOG) 2>&1; \
	  echo $$? > $(RAY_LOG).rc ) & \
	$(PYTEST) -m "not processes"; rest=$$?; wait; \
	cat $(RAY_LOG); ray=$$(cat $(RAY_LOG).rc); rm -f $(RAY_LOG) $(RAY_LOG).rc; \
	test $$rest -eq 0 && test $$ray -eq 0

test-fast: $(VENV)/.installed-dev
	$(PYTEST) -m "not slow"

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests benchmarks

# Benchmarks. bench_torch_loop.py and bench_opacus.py need the benchmark-only extra (torch==2.13.0, a CPU build
# here; elsewhere install it from PyTorch's CPU wheel index first).
bench: $(VENV)/.installed
	$(PIP_INSTALL) -e ".[bench]"
	$(BIN)/python benchmarks/bench_round.py
	$(BIN)/python benchmarks/bench_torch_loop.py
	$(BIN)/python benchmarks/bench_opacus.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info
