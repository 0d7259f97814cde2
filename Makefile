# Cardmix: `make run` brings the whole platform up on embedded defaults; `make test` runs the suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test install lint bench clean agent messages translations

$(STAMP): pyproject.toml clients/python/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	# The SDK and `cardmix` CLI (clients/python), which the tests drive against the live server.
	$(PY) -m pip install -q -e ./clients/python
	touch $(STAMP)

install: $(STAMP) translations

# i18n: the .mo files are build output; compiled from the committed .po files (Babel, no GNU gettext needed).
translations: $(STAMP)
	$(PY) manage.py compile_translations

# i18n: update locale/zh_Hans/LC_MESSAGES/*.po from the code (needs GNU gettext), then compile. Translate the
# new (empty) and fuzzy entries and commit the .po files; tests/core/test_translations.py checks none is left.
messages: $(STAMP)
	bin/system-deps
	bin/messages

# Without DATABASE_URL: the embedded PostgreSQL in var/postgres/ (core/embedded_postgres.py), which runall stops.
run: $(STAMP) translations
	$(PY) manage.py dbserver start
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	$(PY) manage.py runall

# The Debian packages some tests need (Chromium, slurmctld, docker-compose…) are installed first
# when missing and this is root with apt-get; otherwise bin/system-deps says how.
test: $(STAMP)
	bin/system-deps
	bin/test $(ARGS)

bench: $(STAMP)
	bin/system-deps
	bin/bench $(ARGS)

# The node agent ships as one file: a zipapp of agent/cardmix_agent/ (standard library only) that a node runs
# with its own python3 (`python3 cardmix-agent.pyz …`). Rebuilt when a source is newer; written whole, then renamed.
AGENT_PYZ := build/cardmix-agent.pyz
AGENT_SRC := $(shell find agent/cardmix_agent -name '*.py' -not -path '*/__pycache__/*')

agent: $(AGENT_PYZ)

$(AGENT_PYZ): $(AGENT_SRC) Makefile
	rm -rf build/agent-zipapp && mkdir -p build/agent-zipapp
	cp -R agent/cardmix_agent build/agent-zipapp/
	find build/agent-zipapp -name __pycache__ -type d -prune -exec rm -rf {} +
	$(PYTHON) -m zipapp build/agent-zipapp -o $@.tmp -p '/usr/bin/env python3' -m 'cardmix_agent.__main__:run'
	mv $@.tmp $@
	rm -rf build/agent-zipapp

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	-test -x $(PY) && $(PY) manage.py dbserver stop
	rm -rf var/ .pytest_cache .hypothesis
