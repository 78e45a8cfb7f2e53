# Two entry points: `make demo` runs the main job on the embedded default, `make test` runs every check.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: demo test lint postgres chromium java notebook console-screenshots

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/hindsight demo

# Postgres runs on the machine (PostgreSQL 15 on 127.0.0.1:5432, trust auth; README.md); start it if it is down.
postgres:
	@pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start
	@for i in $$(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && exit 0; sleep 1; done; echo "Postgres did not start" >&2; exit 1

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Reference MCP servers from npm that the proxy tests run as upstreams (versions pinned by the lock file).
PROXY_SERVERS := tests/e2e/proxy/servers
$(PROXY_SERVERS)/node_modules/.installed: $(PROXY_SERVERS)/package.json $(PROXY_SERVERS)/package-lock.json
	npm ci --prefix $(PROXY_SERVERS) --no-audit --no-fund
	touch $@

# The console's browser test drives Debian's chromium through Playwright (tests/e2e/console): installed when missing.
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# TextWorldExpress (the textworld extra, bench/textworld and its test) runs on a Java runtime: installed when missing.
java:
	@command -v java >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null; }

test: lint postgres chromium java $(PROXY_SERVERS)/node_modules/.installed
	RAY_AUTH_MODE=disabled $(BIN)/pytest

# Runs notebooks/ on the demo's data (run `make demo` first for the full picture) and saves its plots in docs/notebook/.
notebook: $(BIN)/.installed
	$(BIN)/python -m notebooks.run

# Refreshes docs/console/*.png from the console's browser test (needs /usr/bin/chromium: apt-get install chromium).
console-screenshots: $(BIN)/.installed
	HINDSIGHT_SCREENSHOTS=docs/console RAY_AUTH_MODE=disabled $(BIN)/pytest tests/e2e/console/test_console_browser.py -q
