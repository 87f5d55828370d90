# specwatch — the two commands: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8501
CONFIG ?=
STAMP := $(VENV)/.installed

.PHONY: setup system-packages run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/streamlit run app.py --server.address 127.0.0.1 --server.port $(PORT) \
		--server.headless true --browser.gatherUsageStats false -- $(if $(CONFIG),--config $(CONFIG))

# The programs the tests start (real Prometheus, Alertmanager, VictoriaMetrics, Chromium; openssl for the TLS
# tests' CA), as Debian packages: installed when root with apt-get, else one line naming the command to run.
SYSTEM_PACKAGES := prometheus prometheus-alertmanager victoria-metrics chromium openssl

system-packages:
	@missing=""; for p in $(SYSTEM_PACKAGES); do command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing the programs the tests start:$$missing"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends$$missing; \
	else \
		echo "make test: missing$$missing; their tests will be skipped. Install them with: sudo apt-get install -y --no-install-recommends$$missing"; \
	fi

test: $(STAMP) system-packages
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 --dist loadgroup --durations=25

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) data test-output .pytest_cache .mypy_cache .ruff_cache
