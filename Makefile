# PyTorch Performance Lab. Needs only Python 3.10+ to start: `make lab` or `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
HOST   := 127.0.0.1
PORT   ?= 8888
# JupyterLab refuses to start as root unless told to (containers, CI machines)
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
# Tests run at smoke scale unless PERF_SCALE says otherwise; their results and runs
# go to build/ so they never overwrite the results of `make run`.
TEST_SCALE ?= smoke
TEST_OUT   := $(CURDIR)/build/test

.PHONY: setup lab test run clean distclean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[test]"
	@test -x /usr/bin/chromium || echo "NOTE: the browser test needs Debian's Chromium: sudo apt-get install -y chromium"
	@touch $@

lab: setup
	cd notebooks && ../$(BIN)/jupyter lab --ip $(HOST) --port $(PORT) --no-browser $(ROOT_FLAG)

test: setup
	rm -rf $(TEST_OUT)
	PERF_SCALE=$${PERF_SCALE:-$(TEST_SCALE)} PERF_RESULTS_DIR=$(TEST_OUT)/results PERF_RUNS_DIR=$(TEST_OUT)/runs \
	  $(BIN)/python -m pytest --nbmake --nbmake-timeout=900 notebooks tests

run: setup
	$(BIN)/python -m helpers.runner

clean:
	rm -rf build results runs .pytest_cache

distclean: clean
	rm -rf $(VENV)
