# lerobotstream — set-up, build, test, demo.
#   make demo   sets everything up if needed, then runs the main job
#   make test   sets everything up if needed, then runs the test suite
# Re-running is fast when nothing changed (stamp files under .venv/).

SHELL := /bin/bash
PYTHON_BOOT ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# torch/torchcodec pairing: torchcodec 0.11–0.13 load with the CPU torch 2.13; 0.14+ need a CUDA torch.
TORCH_SPEC ?= torch==2.13.0
TORCHCODEC_SPEC ?= torchcodec==0.13.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
EXT_SOURCES := $(shell find lerobotstream csrc -name '*.pyx' -o -name '*.pxd' -o -name '*.c' -path 'csrc/*' -o -name '*.h' 2>/dev/null)
PYTEST_ARGS ?=

.PHONY: setup build test lint format demo clean ffmpeg setup-lerobot test-lerobot

setup: $(VENV)/.stamp-deps

# Debian's FFmpeg shared libraries (torchcodec dlopens libavcodec & co).
ffmpeg:
	@if ! ldconfig -p | grep -q 'libavformat\.so'; then \
	  echo ">> installing Debian's FFmpeg libraries (apt-get install -y ffmpeg)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq ffmpeg >/dev/null; \
	fi

$(VENV)/.stamp-deps: pyproject.toml setup.py | ffmpeg
	@[ -x $(PY) ] || $(PYTHON_BOOT) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)" "$(TORCHCODEC_SPEC)" "cython>=3.0" "numpy>=2.0" setuptools wheel
	$(PIP) install -q --no-build-isolation -e ".[test,plot]"
	@touch $@ $(VENV)/.stamp-ext

# Rebuild the Cython extensions in place when a .pyx/.pxd/C source changed.
$(VENV)/.stamp-ext: $(VENV)/.stamp-deps $(EXT_SOURCES)
	$(PY) setup.py -q build_ext --inplace
	@touch $@

build: ffmpeg $(VENV)/.stamp-ext

test: build
	$(PY) -m pytest -q $(PYTEST_ARGS)

# ruff (pinned in pyproject's `lint` dependency group): the format check and the lint rules; CI runs it.
$(VENV)/.stamp-lint: pyproject.toml | $(VENV)/.stamp-deps
	$(PIP) install -q --group lint
	@touch $@

lint: $(VENV)/.stamp-lint
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

# rewrite the tree as the formatter and the safe lint fixes want it
format: $(VENV)/.stamp-lint
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The main job: train ACT with lerobotstream-train (streaming, 2 workers) on data/g1_v30, resume, summary.
demo: setup-lerobot
	$(LPY) tools/demo.py $(DEMO_ARGS)

clean:
	rm -rf build *.egg-info $(VENV)/.stamp-*
	find lerobotstream -name '*.so' -delete
	find lerobotstream -name '*.c' -delete

# ---- LeRobot integration ----------------------------------------------------------------------
# LeRobot 0.6.1 (the current release; Python >= 3.12) pins torch<2.12 / torchcodec<0.12, so it
# lives in its own venv (torch 2.11 + torchcodec 0.11, ~5 GB, about two minutes to install). Our
# package is installed into it from a snapshot of the working tree (non-editable: the Cython
# extensions are compiled inside that venv, for its Python and numpy, without touching the
# in-place .so files of .venv). LeRobot 0.4.4 (Python 3.11) still works:
#   make test-lerobot LEROBOT_SPEC=lerobot==0.4.4 LEROBOT_PYTHON=python3.11 LEROBOT_VENV=.venv-lerobot044
LEROBOT_VENV ?= .venv-lerobot
LEROBOT_SPEC ?= lerobot[dataset,diffusion]==0.6.1
LEROBOT_EXTRAS ?= accelerate
LEROBOT_PYTHON ?= $(shell ls -d /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -1 | grep . || command -v python3.12)
LPY := $(LEROBOT_VENV)/bin/python
LPIP := $(LPY) -m pip --disable-pip-version-check
LRS_SOURCES := $(shell find lerobotstream csrc -type f \( -name '*.py' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.h' -o -path 'csrc/*.c' \) 2>/dev/null)

setup-lerobot: $(LEROBOT_VENV)/.stamp-lrs

$(LEROBOT_VENV)/.stamp-lerobot: | ffmpeg
	@[ -x $(LPY) ] || $(LEROBOT_PYTHON) -m venv $(LEROBOT_VENV)
	$(LPIP) install -q --upgrade pip
	@echo ">> installing $(LEROBOT_SPEC) into $(LEROBOT_VENV) with $$($(LPY) --version) (first time: a few minutes, ~5 GB: LeRobot pulls its own torch)"
	$(LPIP) install -q "$(LEROBOT_SPEC)" $(LEROBOT_EXTRAS) "cython>=3.0" setuptools wheel "pytest>=7"
	@touch $@

# Extensions: (re)built when a .pyx/.pxd/C source, setup.py or pyproject.toml changed.
$(LEROBOT_VENV)/.stamp-lrs-ext: $(LEROBOT_VENV)/.stamp-lerobot pyproject.toml setup.py $(filter-out %.py,$(LRS_SOURCES))
	@rm -rf $(LEROBOT_VENV)/src && mkdir -p $(LEROBOT_VENV)/src
	@tar cf - --exclude='*.so' --exclude='__pycache__' pyproject.toml setup.py README.md lerobotstream csrc | tar xf - -C $(LEROBOT_VENV)/src
	@find $(LEROBOT_VENV)/src/lerobotstream -name '*.c' -delete
	flock /tmp/lrs-build.lock $(LPIP) install -q --no-deps --no-build-isolation --force-reinstall $(LEROBOT_VENV)/src
	@touch $@

# Pure-Python changes: copy the .py files over the installed package (no recompile); a module
# deleted from the tree is deleted there too, so it cannot stay importable.
$(LEROBOT_VENV)/.stamp-lrs: $(LEROBOT_VENV)/.stamp-lrs-ext $(filter %.py,$(LRS_SOURCES))
	@dest=$$($(LPY) -I -c 'import lerobotstream, os; print(os.path.dirname(lerobotstream.__file__))' 2>/dev/null) \
	  && case "$$dest" in */site-packages/*) ;; *) echo "lerobotstream is not installed in $(LEROBOT_VENV)"; exit 1;; esac \
	  && (cd lerobotstream && find . -name '*.py' | tar cf - -T -) | tar xf - -C "$$dest" \
	  && (cd "$$dest" && find . -name '*.py') | while read -r f; do [ -e "lerobotstream/$$f" ] || rm -f "$$dest/$$f"; done
	@touch $@

test-lerobot: setup-lerobot
	cd tests_lerobot && ../$(LEROBOT_VENV)/bin/pytest -q -p no:cacheprovider $(PYTEST_ARGS) .
