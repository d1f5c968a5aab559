# Two entry points: `make demo` and `make test`. Both create .venv and install pinned packages first.
# The inner loop: `make test-fast` (tests/unit, property and golden, without the slow tests and those needing a
# Slurm, a Kubernetes control plane, a browser, Ray or a GPU). `make test ARGS="-k fgd -x"` passes ARGS to pytest.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint ruff typecheck format bench clean report-screenshot

$(STAMP): pyproject.toml requirements.lock
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/wattsched demo --out runs/demo

# A demo-sized set of runs (built-in data, a generated price and carbon series), their HTML report and a
# screenshot of it in headless Chromium: runs/report/report.html and runs/report/report.png.
report-screenshot: $(STAMP)
	$(BIN)/python tools/report_screenshot.py --out runs/report

# Every test (tests/unit, property, golden, integration, live); the skipped ones say why at the end (-rs).
test: $(STAMP)
	$(BIN)/python -m pytest $(ARGS)

FAST_TESTS := tests/unit tests/property tests/golden
FAST_MARKERS := not slow and not slurm and not k8s and not browser and not ray and not gpu
test-fast: $(STAMP)
	$(BIN)/python -m pytest $(FAST_TESTS) -m "$(FAST_MARKERS)" $(ARGS)

lint: ruff typecheck

# ruff's lint rules and its formatter, checked (`make format` applies them).
ruff: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools

# mypy on src/wattsched, held to tools/mypy-baseline.txt (no file may gain errors; docs/architecture.md).
typecheck: $(STAMP)
	$(BIN)/python tools/typecheck.py

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks tools
	$(BIN)/ruff check --fix src tests benchmarks tools

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache .mypy_cache
