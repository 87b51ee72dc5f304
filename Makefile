# The two commands of the README. Both create .venv when it is missing.
PY := .venv/bin/python
PIP := .venv/bin/pip

.PHONY: book test venv clean

venv: .venv/.installed

.venv/.installed: requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PIP) install -q --upgrade pip
	# torch first and exact: the CPU wheel; a looser spec pulls a multi-GB CUDA build
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -r requirements.txt
	$(PIP) install -q --no-deps -e .
	touch $@

book: venv
	$(PY) -m polyvox.cli book build

test: venv
	$(PY) -m pytest -q tests

clean:
	rm -rf _build book/panel/*.ipynb book/corrections.md
