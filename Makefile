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
# nbmake executes copies of the notebooks (kept, with outputs, for tests/test_executed_notebooks.py);
# notebooks/ itself stays clean.
TEST_NOTEBOOKS := $(TEST_OUT)/notebooks
# The notebooks run first (their checks compare timings: nothing but the trace tests below, at the lowest priority,
# may load the machine then), then the unit tests, which read the executed copies, on TEST_WORKERS processes (pytest-xdist). 3 on 2 cores: much of the unit
# phase waits (JupyterLab and Chromium, kernels starting, subprocess ranks, stopped runs), so a third worker fills it
# (a fourth was slower: 269 against 245 s).
TEST_WORKERS ?= 3
# The unit tests that only read traces (real ones from ../shared and ones they profile for their structure: no timing
# asserted, no deadline they could miss, pure CPU) run beside the notebooks BESIDE_NOTEBOOKS at the lowest CPU priority
# (IDLE below: SCHED_IDLE on Linux), on the core those notebooks leave idle (each times one intra-op
# thread), and are left out of the unit phase after them. The other notebooks run alone first: 02's DataLoader workers
# and 06's ranks use both cores, and in a trial with the trace tests beside 02 its 2-vs-0-workers gain read
# 1.10 [1.00, 1.24] instead of the 1.8-2.2 it reads alone. With the replay tests (tests/replay) too the trace tests
# outlasted the notebooks (222 against 209 s): they stay out. 07 (one intra-op thread too) joined them. 01 stays out:
# beside them it took 45 s against 17 s alone, and 04 138 s against 76-86 s alone (its Inductor compiles: the two
# cores are not two machines). OVERLAP_TESTS= runs every notebook alone and every unit test after them.
OVERLAP_TESTS ?= tests/traces/test_doctor.py tests/traces/test_trace_reading.py tests/traces/test_show_views.py \
  tests/traces/test_diagnosis.py tests/traces/test_categories.py tests/traces/test_quality.py \
  tests/traces/test_backward_trace.py tests/traces/test_events_memo.py tests/traces/test_intervals.py \
  tests/traces/test_streaming.py tests/traces/test_doctor_cli.py tests/traces/test_straggler.py \
  tests/traces/test_gaps.py tests/traces/test_step_period.py tests/traces/test_kernels.py
# The trace tests write their traces at least 120 characters deep, whatever the checkout's own path: a report that
# depends on the length of a path (its first line once wrapped past 120 columns at a checkout path of ~45) fails here.
DEEP_TMP := $(TEST_OUT)/beside-tmp/a-checkout-as-deep-as-a-users-own/projects/learning/pytorch-performance-lab
BESIDE_NOTEBOOKS ?= 03_backward_hooks 04_torch_compile 05_diagnose 07_memory
# The lowest CPU priority there is, inherited by every process the command starts: SCHED_IDLE (util-linux's
# `chrt --idle 0`: only CPU time nothing else wants) where chrt is and may set it, else `nice -n 19`.
IDLE             := $(shell chrt --idle 0 true 2>/dev/null && echo chrt --idle 0 || echo nice -n 19)
# Once those notebooks have ended, the trace tests go back to the normal priority, and the unit phase starts beside
# what is left of them (waited for after it): on a loaded machine a SCHED_IDLE process gets almost no CPU (a nice-10
# busy loop left them 135 of their 360 s to run after the notebooks), and the unit phase waited on it.
UNIDLE           := $(if $(findstring chrt,$(IDLE)),chrt --other -a -p 0,renice -n 0 -p)
ALL_NOTEBOOKS    := $(sort $(basename $(notdir $(wildcard notebooks/[0-9][0-9]_*.ipynb))))
BESIDE_RUN       := $(if $(strip $(OVERLAP_TESTS)),$(filter $(BESIDE_NOTEBOOKS),$(ALL_NOTEBOOKS)))
ALONE_RUN        := $(filter-out $(BESIDE_RUN),$(ALL_NOTEBOOKS))
# nbmake's kernels draw figures inline, as a reader's do: a non-interactive MPLBACKEND inherited from the shell (CI's
# Agg) would make every plt.show() draw nothing in the executed copies (the runner drops it too: inline_figures).
NBMAKE           := env -u MPLBACKEND $(BIN)/python -m pytest --nbmake --nbmake-timeout=900 --overwrite

# Offline install. On a machine with internet: `make wheelhouse` (options below) builds a folder of
# wheels; on the offline machine: `make setup WHEELS=<that folder>` installs from it alone.
WHEELS         ?=
VENV_ARGS      ?=
WHEELHOUSE     ?= build/wheelhouse
WHEEL_PYTHON   ?=
WHEEL_PLATFORM ?=
WHEEL_EXCLUDE  ?=
BUILD_PYTHON   := $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
PIP_FROM       := $(if $(WHEELS),--no-index --find-links $(WHEELS),-c constraints.txt)

.PHONY: help setup lab test run wheelhouse gpu-kit gpu-sim hosted-sim clean distclean

# `make` alone lists the targets (it used to start the multi-GB install): each target's `##` line below.
help:
	@echo "PyTorch Performance Lab: make <target>   (the first lab/test/run installs .venv: ~6.5 GB, ~2 min)"
	@sed -n 's/^\([a-z-]*\):.*## \(.*\)/\1|\2/p' $(MAKEFILE_LIST) | awk -F'|' '{printf "  %-12s %s\n", $$1, $$2}'

setup: $(STAMP) ## install .venv from the pinned set (online), or offline from WHEELS=<folder>

# Online, labtools/install.py installs the pinned set with uv (parallel, bytecode compiled on every core; pip's
# own settings carried over), falling back to pip; offline (WHEELS=) it is pip from the wheel folder alone. Both
# install the trace doctor (doctor/, perf-doctor) editable beside the lab, which depends on it by that name.
# SETUP_STEPS: the devsetup steps after the install (.ci/run leaves out the browser while it installs Chromium).
SETUP_STEPS ?= lab-settings browser
# the lab's extras in a variable: a comma written inside $(if ...) would split its arguments
LAB_SPEC := .[lab,test]
$(STAMP): pyproject.toml doctor/pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV_ARGS) $(VENV)
	$(if $(WHEELS),$(BIN)/python -m pip install -q $(PIP_FROM) -e "./doctor[full]" -e "$(LAB_SPEC)",$(BIN)/python -m labtools.install --python $(BIN)/python)
	$(BIN)/python -m labtools.devsetup $(SETUP_STEPS)
	@touch $@

# The lab opens working copies (lab/, git-ignored: labtools/labcopy.py), so that saving a run notebook never
# writes outputs into the tracked notebooks/.
lab: setup ## JupyterLab on 127.0.0.1:8888 (PORT=...) with your working copies of the notebooks (lab/)
	$(BIN)/python -m labtools.labcopy
	cd lab && KINETO_LOG_LEVEL=$${KINETO_LOG_LEVEL:-$$(../$(BIN)/python -c 'from helpers.notebook import env; print(env.kineto_log_level())')} \
	  ../$(BIN)/jupyter lab --ip $(HOST) --port $(PORT) --no-browser $(ROOT_FLAG) \
	  --MappingKernelManager.transport_encryption=auto

test: setup ## every notebook at smoke scale, then the unit tests (8-10 min on 2 cores)
	rm -rf $(TEST_OUT)
	mkdir -p $(TEST_NOTEBOOKS) $(DEEP_TMP)
	cp notebooks/[0-9][0-9]_*.ipynb $(TEST_NOTEBOOKS)/
	export PERF_SCALE=$${PERF_SCALE:-$(TEST_SCALE)} PERF_RESULTS_DIR=$(TEST_OUT)/results PERF_RUNS_DIR=$(TEST_OUT)/runs \
	  PERF_EXECUTED_NOTEBOOKS=$(TEST_NOTEBOOKS); rc=0; \
	  $(if $(ALONE_RUN),$(NBMAKE) $(ALONE_RUN:%=$(TEST_NOTEBOOKS)/%.ipynb) || rc=1;) \
	  $(if $(BESIDE_RUN),$(IDLE) $(BIN)/python -m pytest -p no:cacheprovider \
	    --basetemp=$(DEEP_TMP) $(OVERLAP_TESTS) > $(TEST_OUT)/beside-notebooks.log 2>&1 & beside=$$!; \
	    $(NBMAKE) $(BESIDE_RUN:%=$(TEST_NOTEBOOKS)/%.ipynb) || rc=1; \
	    $(UNIDLE) $$beside > /dev/null 2>&1 || true;) \
	  $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal tests $(if $(BESIDE_RUN),$(OVERLAP_TESTS:%=--ignore=%)) \
	    || rc=1; \
	  $(if $(BESIDE_RUN),echo "--- the trace tests that ran beside $(BESIDE_RUN) ($(TEST_OUT)/beside-notebooks.log):"; \
	    wait $$beside || rc=1; cat $(TEST_OUT)/beside-notebooks.log;) \
	  exit $$rc

# On a fresh clone `make run` sets up .venv first, as `make test` and `make lab` do. Without a package registry (a
# borrowed GPU machine) skip that with SETUP= : the .venv's Python when there is one, else $(PYTHON) with the GPU kit
# on PYTHONPATH (docs/gpu.md). e.g. make run SETUP= RUN_ARGS="--scale full --out build/gpu-run --budget 360"
SETUP      ?= setup
RUN_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
RUN_ARGS   ?=
run: $(SETUP) ## execute the notebooks headless: RUN_ARGS="--scale full --budget 300 ..." (labtools.runner)
	$(RUN_PYTHON) -m labtools.runner $(RUN_ARGS)

# e.g. make wheelhouse WHEEL_PYTHON=3.12 WHEEL_PLATFORM=manylinux_2_28_x86_64 WHEEL_EXCLUDE="torch torchvision"
wheelhouse: ## build a folder of wheels for an offline `make setup WHEELS=...`
	$(BUILD_PYTHON) -m labtools.wheelhouse --dest $(WHEELHOUSE) \
	  $(if $(WHEEL_PYTHON),--python-version $(WHEEL_PYTHON)) $(if $(WHEEL_PLATFORM),--platform $(WHEEL_PLATFORM)) \
	  $(if $(WHEEL_EXCLUDE),--exclude $(WHEEL_EXCLUDE))

# The GPU kit (gpu-kit.txt, labtools/gpukit.py): the wheels a borrowed GPU machine (torch 2.11 set preinstalled,
# no index) needs to execute every notebook headless, into build/gpu-kit. Online.
gpu-kit: ## the wheels a borrowed GPU machine needs, into build/gpu-kit
	$(BUILD_PYTHON) -m labtools.gpukit build

# That machine simulated here (labtools/gpusim.py): a Python 3.12 venv with torch 2.11.0 and the preinstalled
# set, the kit installed with --no-index and the notebooks run through the runner with the network cut (unshare -n).
# e.g. PYENV_VERSION=3.12.1 make gpu-sim, or make gpu-sim SIM_PYTHON=/usr/bin/python3.12
SIM_PYTHON ?= python3.12
SIM_ARGS   ?=
gpu-sim: ## that GPU machine simulated here, offline (Python 3.12, torch 2.11)
	$(BUILD_PYTHON) -m labtools.gpusim --python "$(SIM_PYTHON)" $(SIM_ARGS)

# A hosted notebook (Colab, Kaggle) simulated here (labtools/hosted.py): a venv with a given torch (HOSTED_ARGS=
# "--torch 2.13.0+cpu --torchvision 0.28.0", the default) and README's `pip install ./doctor .` on top in a copy of the
# project, which must leave that torch as it was. e.g. make hosted-sim HOSTED_ARGS="--torch 2.14.1 --torchvision 0.29.1"
HOSTED_ARGS ?=
hosted-sim: ## a hosted notebook simulated: the lab installed on a given torch, which it keeps
	$(BUILD_PYTHON) -m labtools.hosted $(HOSTED_ARGS)

# build/wheelhouse is kept: on an offline machine it cannot be fetched again
clean: ## remove test outputs, results/ and runs/
	rm -rf $(TEST_OUT) results runs .pytest_cache

distclean: clean ## clean, and remove .venv
	rm -rf $(VENV)
