# The book's commands. `make demo` and `make test` create .venv on first use.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
export NO_MKDOCS_2_WARNING := 1

.PHONY: demo test test-py test-notebooks test-practice test-book test-lab notebooks lab book book-build clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,book]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m minillm demo

# The full test command (CI runs exactly this): unit and property tests, every notebook under nbval,
# every exercise's reference solution and starter, and the site (strict build + browser test).
test: $(STAMP)
	$(PY) -m pytest tests -q
	$(PY) -m pytest --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg notebooks -q
	$(PY) practice/judge.py check

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
test-book: $(STAMP)
	$(PY) -m pytest tests/test_site.py -q

# Only the JupyterLab checks: chapters 3 and 5 run and played with in JupyterLab, in headless Chromium.
test-lab: $(STAMP)
	$(PY) -m pytest tests/test_lab.py -q

clean:
	rm -rf site test-artifacts .pytest_cache
