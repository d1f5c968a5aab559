# Two entry points: `make demo` and `make test`. Both create .venv and install pinned packages first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck format bench clean report-screenshot

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

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools
	$(BIN)/python tools/typecheck.py

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
