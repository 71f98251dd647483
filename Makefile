# Siskin — every command of the repository.
#
#   make test    set up everything (venvs, pinned deps, npm dev deps), run all tests
#                (and the PyPy leg: chosen integration tests with their brokers on pypy3)
#   make deps    install the system packages the tests need (mosquitto, nats-server, chromium, node...; sudo)
#   make test-repeat N=5 [LOAD=1]  make test N times on a fresh clone of HEAD (LOAD=1: beside stress-ng --cpu 2)
#   make run     start the host broker on 127.0.0.1:1883 (linux board settings, ./data;
#                PYTHON=pypy3: on PyPy, from .venv-pypy)
#   make lint    ruff over the tree, mypy over the CPython host and tools
#   make fuzz    the hypothesis tests with many more examples, the atheris broker target long
#   make soak    soak tests: firmware heap under load, bystander latency bounds, many kill -9 crash iterations, bridge outages
#   make bench   benchmarks against Mosquitto and amqtt (BENCH_ARGS=--full: the full run)
#   make screenshot  docs/status-page.png anew, from the status page's Chromium test
#   make clean   remove caches and build output  (make distclean: also .venv, node_modules)
#   make firmware BOARD=rp2040_picow|unix32 MICROPY_DIR=...  a MicroPython image with Siskin frozen
#   make test-boards  the firmware tests at the boards' real heaps (needs make firmware BOARD=unix32)
#   make deb     dist/siskin_<version>_all.deb, the Debian package (make test-deb: dpkg into a Debian root)
#   make test-emu PICO_BOOTROM=...  the real .uf2 images in an emulated RP2040 (docs/boards.md)
#
# Needs: Python >= 3.11 with venv (Debian: python3-venv), PyPy >= 7.3
# (Debian: pypy3 pypy3-venv; without it the PyPy leg is left out, or fails
# under SISKIN_REQUIRE_ALL=1), and for the Node-based tests Node.js >= 20
# with npm. `make deps` (.ci/install-deps, as .ci/run does) installs the
# system packages on a fresh Debian machine.
#
# Set-up is keyed on content: the venv is (re)provisioned when pyproject.toml
# changes, node_modules when package.json/package-lock.json change, so a
# second `make test` goes straight to pytest.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

PYTHON ?= python3
# A PyPy (make run PYTHON=pypy3) gets a venv of its own.
ifneq ($(findstring pypy,$(notdir $(PYTHON))),)
VENV ?= .venv-pypy
else
VENV ?= .venv
endif
PY := $(VENV)/bin/python
# The PyPy leg of make test: the integration tests with the broker_runtime
# fixture or a RUNTIMES broker (tests/host/conftest.py) run their brokers on
# this PyPy too, from its own venv (the tests themselves stay on CPython).
PYPY ?= pypy3
PYPY_VENV ?= .venv-pypy
HAVE_PYPY := $(shell command -v $(PYPY) >/dev/null 2>&1 && echo yes)
PYTEST_ARGS ?=
# make test runs pytest in TEST_WORKERS processes (pytest-xdist): most tests
# wait on brokers and sockets, so two workers on two cores halve the wall time
# (13 min instead of 35 on a loaded 2-core machine, 2026-12-02).
# TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
# -bb: comparing bytes with str (or int) or str()-ing bytes raises instead of
# quietly being False (CONVENTIONS: pytest under python -bb, as wsproto).
PYFLAGS ?= -bb
PYTEST := $(PY) $(PYFLAGS) -m pytest

hash = $(shell cat $(1) 2>/dev/null | sha1sum | cut -c1-12)

PIP_STAMP := $(VENV)/.siskin-deps-$(call hash,pyproject.toml)
PYPY_STAMP := $(PYPY_VENV)/.siskin-deps-$(call hash,pyproject.toml)
NPM_STAMP := node_modules/.siskin-npm-$(call hash,package.json package-lock.json)
HAVE_NPM := $(shell command -v npm >/dev/null 2>&1 && echo yes)

.PHONY: help test deps test-repeat setup venv pypy-venv npm run lint fuzz soak bench screenshot firmware test-boards deb test-deb test-emu clean distclean

help:
	@sed -n '3,19p' Makefile | sed 's/^# \{0,1\}//'

# ---------------------------------------------------------------------------
# set-up

setup: venv pypy-venv npm

venv: $(PIP_STAMP)

# A venv $(2) made by interpreter $(1) with what tools/requirements.py reads
# from pyproject.toml: the host's dependencies and the extras $(3). (The
# project itself is not installed: the tests run from the tree, with the
# repository root on sys.path.) Made anew when $(1) is another interpreter
# (implementation and version) than the venv's.
PYID := import sys; print(sys.implementation.name, *sys.version_info[:2])
define make_venv
	@if ! $(1) -c 'import sys; sys.exit(sys.version_info < ((3, 9) if sys.implementation.name == "pypy" else (3, 11)))' 2>/dev/null; then \
	  echo "make: need CPython >= 3.11 or PyPy >= 7.3 as '$(1)' (found: $$($(1) --version 2>&1 || echo none)); set PYTHON=..." >&2; exit 1; fi
	@if [ "$$($(1) -c '$(PYID)')" != "$$($(2)/bin/python -c '$(PYID)' 2>/dev/null)" ]; then \
	  echo "make: creating $(2) with $$($(1) --version | tr '\n' ' ')"; \
	  rm -rf $(2); \
	  $(1) -m venv $(2) || { echo "make: '$(1) -m venv' failed; on Debian/Ubuntu: apt-get install python3-venv (pypy3-venv for pypy3)" >&2; rm -rf $(2); exit 1; }; \
	fi
	$(2)/bin/python tools/requirements.py $(3) > $(2)/requirements.txt
	$(2)/bin/python -m pip install --quiet --disable-pip-version-check -r $(2)/requirements.txt
	@rm -f $(2)/.siskin-deps-*
	@touch $(2)/.siskin-deps-$(call hash,pyproject.toml)
endef

# The stamps' names carry a hash of the files they stand for, so they need no
# timestamp prerequisites (a fresh checkout's mtimes mean nothing). A PyPy
# as PYTHON (make run PYTHON=pypy3) needs only the pypy extra.
$(PIP_STAMP):
	$(call make_venv,$(PYTHON),$(VENV),$(if $(findstring pypy,$(notdir $(PYTHON))),pypy,test lint))

# Without pypy3 the PyPy leg is left out (.ci/run installs it and sets
# SISKIN_REQUIRE_ALL=1, which makes a missing pypy3 a failure).
ifeq ($(HAVE_PYPY),yes)
pypy-venv: $(PYPY_STAMP)
else
pypy-venv:
	@if [ -n "$${SISKIN_REQUIRE_ALL:-}" ] && [ "$${SISKIN_REQUIRE_ALL}" != 0 ]; then \
	  echo "make: $(PYPY) not found (apt-get install pypy3 pypy3-venv) and SISKIN_REQUIRE_ALL=1 forbids leaving the PyPy leg out" >&2; exit 1; fi
	@echo "make: $(PYPY) not found (apt-get install pypy3 pypy3-venv): the PyPy leg of make test is left out" >&2
endif

ifneq ($(PYPY_STAMP),$(PIP_STAMP))
$(PYPY_STAMP):
	$(call make_venv,$(PYPY),$(PYPY_VENV),pypy)
endif

npm: $(NPM_STAMP)

# npm ci installs exactly the lock file; without npm the Node-based tests
# skip (or fail under SISKIN_REQUIRE_ALL=1), so say so and carry on.
$(NPM_STAMP):
ifeq ($(HAVE_NPM),yes)
	npm ci --no-audit --no-fund --loglevel=error
	@rm -f node_modules/.siskin-npm-*
	@touch $@
else
	@echo "make: npm not found: skipping the npm dev dependencies (Node-based tests will skip)" >&2
endif


# ---------------------------------------------------------------------------
# commands

# pytest exits 5 when it collected no tests: that is a failure too.
# SISKIN_PYPY: the PyPy leg's interpreter (tests/host/conftest.py).
test: setup
	@echo "$(PYTEST) -n $(TEST_WORKERS) $(PYTEST_ARGS)"
	@SISKIN_PYPY=$(abspath $(PYPY_VENV))/bin/python $(PYTEST) -n $(TEST_WORKERS) $(PYTEST_ARGS) || { rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5): failing" >&2; fi; exit $$rc; }

# The system packages (apt-get; asks sudo for root when not root). Without
# them the tests that need them skip, and the run ends by naming them.
deps:
	bash .ci/install-deps

# A newcomer's `make test`, N times: a fresh clone of HEAD in a temporary
# directory, `make setup` once, then `make test` N times in a row, with
# LOAD=1 beside `stress-ng --cpu 2` (installed through .ci/install-deps if
# missing). A table of each run's counts, time and processes left; logs in
# build/test-repeat-<time>/. tools/test_repeat.py.
N ?= 5
LOAD ?=
test-repeat:
	$(PYTHON) -m tools.test_repeat --runs $(N) $(if $(filter-out 0,$(LOAD)),--load) \
	  $(if $(PYTEST_ARGS),--pytest-args '$(PYTEST_ARGS)')

# The README's picture of the status page: the Chromium test writes it only
# when asked (SISKIN_WRITE_SCREENSHOT=1), so an ordinary test run leaves docs/ alone.
screenshot: setup
	SISKIN_WRITE_SCREENSHOT=1 $(PYTEST) tests/host/test_status_page.py -k administrator

# Ctrl-C (SIGINT) shuts it down gracefully; docs/host.md explains the options.
run: venv
	$(PY) -m cpython_host --host 127.0.0.1 --port 1883 --config boards/linux.toml --data-dir ./data

# Both tools always run; the target fails if either found something.
lint: venv
	@rc=0; \
	echo "$(VENV)/bin/ruff check ."; $(VENV)/bin/ruff check . || rc=1; \
	dirs=$$(for d in cpython_host tools; do \
	  [ -n "$$(find $$d -name '*.py' -not -path '*/node_modules/*' 2>/dev/null | head -1)" ] && echo $$d; done; true); \
	if [ -z "$$dirs" ]; then echo "mypy: no host code yet (cpython_host/, tools/ have no .py files)"; \
	else echo "$(VENV)/bin/mypy" $$dirs; $(VENV)/bin/mypy $$dirs || rc=1; fi; \
	exit $$rc

# FUZZ_RUNS: inputs of the atheris broker target (tests/host/fuzz_broker.py;
# make test runs 20,000); its corpus grows in .fuzz/corpus from run to run and
# a crashing input is written to .fuzz/crash-*. FUZZ_ARGS: more libFuzzer options.
SISKIN_FUZZ_EXAMPLES ?= 20000
FUZZ_RUNS ?= 1000000
FUZZ_ARGS ?=
fuzz: setup
	SISKIN_FUZZ_EXAMPLES=$(SISKIN_FUZZ_EXAMPLES) $(PYTEST) tests/host -m hypothesis --timeout=0 $(PYTEST_ARGS)
	@if ! $(PY) -c 'import atheris' 2>/dev/null; then \
	  echo "make fuzz: atheris is not installed (wheels for x86-64 Linux only): the broker target is left out" >&2; \
	else mkdir -p .fuzz/corpus && set -x && \
	  $(PY) tests/host/fuzz_broker.py -runs=$(FUZZ_RUNS) -artifact_prefix=.fuzz/ -print_final_stats=1 $(FUZZ_ARGS) .fuzz/corpus; fi

# SISKIN_SOAK_SECONDS: length of the firmware soak (default 180);
# SISKIN_CRASH_ITERATIONS: kill -9 iterations of the persistence crash test;
# CRASHLOSS_RUNS: kill -9 runs of tools/crashloss.py (acknowledged QoS 1
# messages lost for an offline subscriber) with each host settings file;
# BRIDGE_OUTAGE_RUNS: runs of each 60 s bridge outage of tools/bridge_outage.py
# (upstream stopped, link cut, NATS node killed; Siskin kill -9 during each).
SISKIN_CRASH_ITERATIONS ?= 100
CRASHLOSS_RUNS ?= 40
BRIDGE_OUTAGE_RUNS ?= 5
# PACING_BACKLOG: the QoS 1 backlog a paced bridge drains into an AWS-like
# throttling stand-in (tests/host/test_bridge_pacing.py; 900 in make test).
PACING_BACKLOG ?= 24000
soak: setup
	$(PYTEST) tests/soak -m soak --timeout=0 $(PYTEST_ARGS)
	SISKIN_CRASH_ITERATIONS=$(SISKIN_CRASH_ITERATIONS) $(PYTEST) tests/host/test_persist_crash.py -s --timeout=0 $(PYTEST_ARGS)
	$(PY) -m tools.crashloss --runs $(CRASHLOSS_RUNS)
	$(PY) -m tools.crashloss --runs $(CRASHLOSS_RUNS) --config boards/linux.toml
	$(PY) -m tools.bridge_outage --case stop --kill9 --qos 2 --runs $(BRIDGE_OUTAGE_RUNS)
	$(PY) -m tools.bridge_outage --case cut --kill9 --qos 2 --runs $(BRIDGE_OUTAGE_RUNS)
	$(PY) -m tools.bridge_outage --upstream nats --case node-kill --kill9 --qos 1 --runs $(BRIDGE_OUTAGE_RUNS)
	SISKIN_PACING_BACKLOG=$(PACING_BACKLOG) $(PYTEST) tests/host/test_bridge_pacing.py -k drains -s --timeout=0 $(PYTEST_ARGS)

# Siskin (.venv, on asyncio's loop and on uvloop; .venv-pypy, on PyPy) side by side with Mosquitto
# (/usr/sbin/mosquitto, Debian package) and amqtt. amqtt and py-spy go into a
# separate .venv-bench so that their dependencies never touch the pinned test
# venv. BENCH_ARGS=--full: the full run of docs/benchmarks.md.
BENCH_VENV ?= .venv-bench
BENCH_PKGS := amqtt==0.12.1 py-spy==0.4.3
BENCH_STAMP := $(BENCH_VENV)/.siskin-bench-$(shell echo '$(BENCH_PKGS)' | sha1sum | cut -c1-12)
BENCH_ARGS ?=
bench: venv pypy-venv
	@if [ ! -f $(BENCH_STAMP) ]; then \
	  echo "make bench: creating $(BENCH_VENV) with $(BENCH_PKGS)"; \
	  rm -rf $(BENCH_VENV); \
	  $(PYTHON) -m venv $(BENCH_VENV) && echo '*' > $(BENCH_VENV)/.gitignore && \
	  $(BENCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(BENCH_PKGS) && \
	  touch $(BENCH_STAMP) || { rm -rf $(BENCH_VENV); exit 1; }; \
	fi
	@[ -x /usr/sbin/mosquitto ] || echo "make bench: no /usr/sbin/mosquitto (apt-get install mosquitto): it is left out" >&2
	$(PY) -m tools.bench $(BENCH_ARGS)

# A MicroPython v1.28.0 image with Siskin frozen in (tools/image.py, docs/boards.md):
#   BOARD=rp2040_picow  dist/rp2040_picow/siskin-<version>.uf2
#   BOARD=unix32        dist/unix32/micropython (32-bit unix port: the boards' word size)
# MICROPY_DIR: the MicroPython checkout with its submodules (not vendored here);
# PICO_SDK_PATH: another pico-sdk (default: MICROPY_DIR/lib/pico-sdk);
# PICOTOOL_DIR: a picotool install prefix, built from source (rp2040_picow).
# Build output goes to build/<board>/. Only the Python standard library is needed.
# FIRMWARE_BUILD: where MicroPython's build runs (default build/ here).
BOARD ?=
MICROPY_DIR ?=
PICO_SDK_PATH ?=
PICOTOOL_DIR ?=
FIRMWARE_JOBS ?= 2
FIRMWARE_BUILD ?=
firmware:
	@[ -n "$(BOARD)" ] || { echo "make firmware: set BOARD=rp2040_picow, rp2040_pico or unix32 (ESP32: docs/boards.md)" >&2; exit 2; }
	$(PYTHON) -m tools.build --image --board $(BOARD) --jobs $(FIRMWARE_JOBS) \
	  $(if $(MICROPY_DIR),--micropython $(MICROPY_DIR)) $(if $(PICO_SDK_PATH),--pico-sdk $(PICO_SDK_PATH)) \
	  $(if $(PICOTOOL_DIR),--picotool $(PICOTOOL_DIR)) $(if $(FIRMWARE_BUILD),--build-dir $(FIRMWARE_BUILD))

# The firmware tests under the 32-bit unix MicroPython of `make firmware
# BOARD=unix32`, with the boards' real heaps and Siskin's code frozen, as in
# the images (tests/host/test_firmware_boards.py reads MICROPY_UNIX32). Not part
# of `make test`: CI has no MicroPython checkout to build it from.
MICROPY_UNIX32 ?= dist/unix32/micropython
test-boards: setup
	@[ -x "$(MICROPY_UNIX32)" ] || { echo "make test-boards: no $(MICROPY_UNIX32): make firmware BOARD=unix32 MICROPY_DIR=... first" >&2; exit 2; }
	MICROPY_UNIX32=$(abspath $(MICROPY_UNIX32)) $(PYTEST) tests/host/test_firmware_boards.py -m boards $(PYTEST_ARGS)

# The Debian package (tools/deb.py: dpkg-deb over the tree's files, Debian's
# python3-* packages as its dependencies); make test checks it with lintian
# and runs it from its files on Debian's python3 (tests/host/test_deb.py).
# Only the standard library (3.11: tomllib) and dpkg-deb: no venv to build first.
DEB_PYTHON ?= python3
DEB_OUT ?= dist
deb:
	$(DEB_PYTHON) -m tools.deb --out $(DEB_OUT)

# The package installed by apt/dpkg (maintainer scripts and all) into a
# Debian 12 root that debootstrap makes once (a few minutes, as root) and
# keeps in DEB_ROOT; not part of make test.
DEB_ROOT ?= .cache/deb-root
test-deb: setup
	@[ -x $(DEB_ROOT)/usr/bin/python3 ] || { mkdir -p $(dir $(DEB_ROOT)) && \
	  debootstrap --variant=minbase --include=python3,adduser,init-system-helpers bookworm $(DEB_ROOT) http://deb.debian.org/debian; }
	SISKIN_DEB_ROOT=$(abspath $(DEB_ROOT)) $(PYTEST) tests/host/test_deb.py -m deb $(PYTEST_ARGS)

# The Pico W and plain Pico images of `make firmware` booted in rp2040js
# (tests/emu/; docs/boards.md "The images in an emulated RP2040"): needs
# PICO_BOOTROM, a bootrom.bin built from raspberrypi/pico-bootrom. Not part
# of `make test` (CI cannot fetch the sources); the runner's own tests are.
PICO_BOOTROM ?=
EMU_PICOW_UF2 ?= dist/rp2040_picow/siskin-0.1.0.uf2
EMU_PICO_UF2 ?= dist/rp2040_pico/siskin-0.1.0.uf2
test-emu: setup
	@[ -f "$(PICO_BOOTROM)" ] || { echo "make test-emu: set PICO_BOOTROM to a bootrom.bin built from raspberrypi/pico-bootrom (docs/boards.md)" >&2; exit 2; }
	@for f in $(EMU_PICOW_UF2) $(EMU_PICO_UF2); do [ -f "$$f" ] || { echo "make test-emu: no $$f: make firmware BOARD=rp2040_picow / rp2040_pico first" >&2; exit 2; }; done
	PICO_BOOTROM=$(abspath $(PICO_BOOTROM)) EMU_PICOW_UF2=$(abspath $(EMU_PICOW_UF2)) EMU_PICO_UF2=$(abspath $(EMU_PICO_UF2)) \
	  SISKIN_REQUIRE_ALL=1 $(PYTEST) tests/emu -m emu -s $(PYTEST_ARGS)

clean:
	rm -rf .pytest_cache .hypothesis .mypy_cache .ruff_cache .fuzz dist build *.egg-info
	find . -path ./$(VENV) -prune -o -path ./node_modules -prune -o \
	  \( -name __pycache__ -o -name '*.mpy' \) -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV) node_modules
