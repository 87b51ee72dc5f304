"""Pieces several test modules build their workspaces from (imported as ``from _fixtures import ...``).

- Sample runs without a model: :class:`FakeOpenAI` (the ``openai`` backend's identity and prompts on
  ``--model m --base-url`` :data:`BASE_URL`, completions made here), :func:`make_run` (a run written by
  :func:`polyvox.runs.sample` with it, at the command line's defaults :data:`PARAMS`), :func:`edit_manifest` and
  :func:`aime_data` (a copy of the AIME files whose 2024 rows a test may edit).
- A local HTTP server: :func:`local_server` serves a :class:`QuietHandler` subclass on 127.0.0.1 (a
  free port) in a thread, for the clients' tests; :meth:`QuietHandler.send` writes one reply.
- A book: :func:`make_book`, a one-chapter Jupyter Book (chapter ``x/ch``) with nothing built.
"""
from __future__ import annotations

import http.server
import json
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from polyvox.backends import Completion, SamplingParams
from polyvox.backends.openai import OpenAIBackend

BASE_URL = "http://127.0.0.1:9"  # nothing listens there: a case that reached the network would fail


# ---------------------------------------------------------------- sample runs without a model

# the command line's defaults, so ``polyvox sample ... --backend openai --model m`` reaches the same settings
PARAMS = SamplingParams(4096, 1.0, 1.0)


class FakeOpenAI:
    """The openai backend's identity and prompts; completions made here (``answer``: a text, or a function
    of the request). The ``fail_on`` call numbers (1-based) raise, as a server that went away."""

    name = "openai"

    def __init__(self, answer="<answer>9</answer>", fail_on=()):
        self.answer, self.fail_on, self.calls = answer, set(fail_on), 0
        self.inner = OpenAIBackend("m", base_url=BASE_URL)

    def identity(self) -> dict:
        return self.inner.identity()

    def prompt(self, fmt: str, text: str):
        return self.inner.prompt(fmt, text)

    def generate(self, requests, params):
        self.calls += 1
        if self.calls in self.fail_on:
            raise RuntimeError("the server went away")
        answer = self.answer
        return [Completion(answer(r) if callable(answer) else answer, 12, 5, "stop", 0.01) for r in requests]


def make_run(out: Path, task="world", n=2, limit=3, data_dir="data", backend=None, **kw) -> Path:
    """A complete sample run in ``out`` (panel format, :class:`FakeOpenAI` unless ``backend`` is given)."""
    from polyvox import runs

    return runs.sample(out, task, "panel", backend or FakeOpenAI(), n, PARAMS, limit=limit,
                       data_dir=data_dir, progress=False, **kw)


def edit_manifest(folder: Path, change) -> None:
    """``change(manifest)`` applied to folder/manifest.json, written back."""
    path = folder / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2) + "\n")


def aime_data(root: Path, dest: Path, change=None) -> Path:
    """A copy of the AIME files the aime tasks read, under ``dest``; ``change(rows_2024)`` edits the 2024 rows."""
    for year in (2024, 2025):
        (dest / f"benchmarks/aime{year}").mkdir(parents=True)
        rows = [json.loads(x) for x in (root / f"data/benchmarks/aime{year}/test.jsonl").read_text().splitlines()
                if x.strip()]
        if change and year == 2024:
            change(rows)
        (dest / f"benchmarks/aime{year}/test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dest


# ---------------------------------------------------------------- a local HTTP server

class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that logs nothing; subclasses answer with :meth:`send`."""

    def body(self) -> bytes:
        """The request's body (read once)."""
        return self.rfile.read(int(self.headers["Content-Length"]))

    def send(self, status: int, body, content_type: str | None = "application/json", **headers: str) -> None:
        """One reply: ``body`` as bytes, or any other value as JSON; ``headers`` by name (``Retry_After``
        is sent as ``Retry-After``)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def completion(text="ok", usage=True, **choice) -> dict:
    """An OpenAI completions reply of one choice (``usage``: three prompt tokens, one completion token)."""
    reply = {"choices": [{"text": text, "finish_reason": "stop", **choice}]}
    return {**reply, "usage": {"prompt_tokens": 3, "completion_tokens": 1}} if usage else reply


@contextmanager
def local_server(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on 127.0.0.1 (a free port) in a thread: yields the server's URL, stops it after."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # a short poll: shutdown() waits for the loop's next poll, 0.5 s by default, paid by every test that serves
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()
        srv.server_close()


# ---------------------------------------------------------------- a book

def make_book(root: Path, code: str, parameters: str = 'n = 1\nrun_dir = "runs/x"', *extra_cells: str) -> Path:
    """A one-chapter book (x/ch: a parameters cell holding ``parameters``, then ``code``, then any
    ``extra_cells``) with nothing built."""
    import nbformat

    root.mkdir(parents=True, exist_ok=True)
    (root / "_config.yml").write_text("title: t\nexecute:\n  execute_notebooks: 'off'\n")
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/x/ch\n")
    (root / "book").mkdir(exist_ok=True)
    (root / "book/intro.md").write_text("# intro\n")
    (root / "notebooks/x").mkdir(parents=True, exist_ok=True)
    params = nbformat.v4.new_code_cell(parameters)
    params.metadata["tags"] = ["parameters"]
    cells = [nbformat.v4.new_markdown_cell("# ch"), params, nbformat.v4.new_code_cell(code)]
    cells += [nbformat.v4.new_code_cell(c) for c in extra_cells]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "notebooks/x/ch.ipynb")
    (root / "data").mkdir(exist_ok=True)
    return root
