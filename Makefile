# Two commands on a fresh machine:  `make run` (install, start the dashboard)  and  `make test`.
# Both are idempotent: the virtualenv is rebuilt only when requirements change.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RAY_STAMP := $(VENV)/.installed-ray
S3_STAMP  := $(VENV)/.installed-s3
PORT   ?= 8501

.PHONY: install install-ray install-s3 run test test-parallel test-fast browser bwrap bench clean

install: $(STAMP)

# The optional Ray backend (`launch --backend ray`, the fleet on Ray actors): `make test` installs it
# so CI runs the Ray tests; `make run` does without it.
install-ray: $(RAY_STAMP)

# Chunks through S3 (s3fs) and the S3 endpoint the tests start (moto's server): `make test` installs them.
install-s3: $(S3_STAMP)

$(S3_STAMP): $(STAMP) requirements-s3.txt constraints.txt
	$(BIN)/python -m pip install --quiet -r requirements-s3.txt -c constraints.txt
	touch $(S3_STAMP)

$(RAY_STAMP): $(STAMP) requirements-ray.txt constraints.txt
	$(BIN)/python -m pip install --quiet -r requirements-ray.txt -c constraints.txt
	touch $(RAY_STAMP)

$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, from the CPU wheel; the constraints file keeps anything else from replacing it
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -r requirements.txt -c constraints.txt
	# the package itself, editable: `import agentrl` and the `agentrl` command work from any folder
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# ui.serve guards the server before it listens and prints the link that gives a browser the key.
run: install
	@echo "agentrl dashboard on http://127.0.0.1:$(PORT) (runs in $${AGENTRL_RUNS_DIR:-runs/})"
	HF_HUB_OFFLINE=1 $(BIN)/python -m ui.serve --server.port $(PORT)

browser:
	scripts/ensure-chromium.sh

# The test sandbox's allow-listed view of the files (Debian's bubblewrap; runs fall back to a
# hide-list without it, and say so).
bwrap:
	scripts/ensure-bwrap.sh

test: install install-ray install-s3 browser bwrap
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest

# Every test in two passes: two pytest-xdist workers, then the `serial` tests alone (tests/conftest.py
# says which and why). Its first pass takes 9.5 minutes against about 20 for `make test`, but it is not yet steady: see the README's Tests.
test-parallel: install install-ray install-s3 browser bwrap
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -n 2 --dist loadgroup -m "not serial"
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -m serial

# The inner loop: everything but the browser, language-model and slow tests (`make test` runs them all).
test-fast: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -m "not slow and not lm and not browser"

# `python -m agentrl bench` (the store at scale, ingest_rate, write_path, fleet; writes docs/benchmarks.md,
# about 10 minutes), then the benchmarks it does not run.
bench: install install-ray browser bwrap
	HF_HUB_OFFLINE=1 $(BIN)/python -m agentrl bench
	$(BIN)/python benchmarks/flush_latency.py
	$(BIN)/python benchmarks/live_latency.py
	$(BIN)/python benchmarks/page_queries.py
	$(BIN)/python benchmarks/parallel_scoring.py
	nice -n 10 $(BIN)/python benchmarks/sandbox_view.py
	$(BIN)/python benchmarks/onset.py --rounds 40
	$(BIN)/python benchmarks/behaviours.py
	$(BIN)/python benchmarks/ray_backend.py
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/lm_pair.py

clean:
	rm -rf $(VENV) .pytest_cache
