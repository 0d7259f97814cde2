# Cardmix: `make run` brings the whole platform up on embedded defaults; `make test` runs the suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test install lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
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

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf var/ .pytest_cache .hypothesis
