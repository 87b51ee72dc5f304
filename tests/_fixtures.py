"""Pieces several test modules build their workspaces from (imported as ``from _fixtures import ...``).

- Sample runs without a model: :class:`FakeOpenAI` (the ``openai`` backend's identity and prompts on
  ``--model m --base-url`` :data:`BASE_URL`, completions made here), :func:`make_run` (a run written by
  :func:`polyvox.runs.sample` with it, at the command line's defaults :data:`PARAMS`), :func:`edit_manifest` and
  :func:`aime_data` (a copy of the AIME files whose 2024 rows a test may edit).
- A local HTTP server: :func:`local_server` serves a :class:`QuietHandler` subclass on 127.0.0.1 (a
  free port) in a thread, for the clients' tests; :meth:`QuietHandler.send` writes one reply.
- A book: :func:`make_book`, a one-chapter Jupyter Book (chapter ``x/ch``) with nothing built.
- The shipped world run's evaluations: :func:`shipped_world` (:class:`ShippedWorld`: its first evaluated seed, that
  seed's caps and the two systems' folders, in whichever design ``data/runs/world`` holds; graded records read
  plain or stored gzipped; copies of their first problems).
"""
from __future__ import annotations

import gzip
import http.server
import json
import shutil
import threading
from contextlib import contextmanager
from dataclasses import dataclass
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


# ---------------------------------------------------------------- the shipped world run's evaluations

@dataclass(frozen=True)
class ShippedWorld:
    """The evaluations of the world run ``data/runs/world`` ships, in whichever design it holds
    (:func:`polyvox.studies.world.layout.of`): ``seed``, the first seed evaluated; ``caps``, its token caps
    (ascending); ``panel`` and ``think``, the folder names of the two evaluated systems (``tiny-panel`` and
    ``tiny-think`` in the panel-only design, ``panel`` and ``think`` in the matched one)."""

    root: Path
    design: str
    seed: int
    caps: tuple[int, ...]
    panel: str
    think: str

    @property
    def systems(self) -> tuple[str, str]:
        """The two systems' folder names, panel first (the order a folder of both lists them in)."""
        return self.panel, self.think

    def fmt(self, system: str) -> str:
        """The prompt format of a system's evaluation (``panel`` or ``think``), by its folder name."""
        return {self.panel: "panel", self.think: "think"}[system]

    def folder(self, system: str, cap: int | None = None) -> Path:
        """One system's evaluation folder (``system``: its folder name) at ``cap`` (default: the smallest)."""
        return self.cap_folder(cap) / system

    def cap_folder(self, cap: int | None = None) -> Path:
        """The folder of both systems' evaluations at ``cap`` (default: the smallest)."""
        return self.root / f"seed-{self.seed}" / "eval" / f"cap-{self.caps[0] if cap is None else cap}"

    def samples_per_problem(self, cap: int | None = None) -> int:
        """The evaluation's samples per problem (its manifest's ``n``)."""
        return int(json.loads((self.folder(self.think, cap) / "manifest.json").read_text())["settings"]["n"])

    def lines(self, system: str, cap: int | None = None) -> list[str]:
        """The lines of a system's graded.jsonl, stored plain or gzipped (``graded.jsonl.gz``)."""
        from polyvox.jsonl import stored

        path = stored(self.folder(system, cap) / "graded.jsonl")
        raw = path.read_bytes()
        return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8").splitlines()

    def copy(self, dest: Path, system: str, cap: int | None = None, problems: int | None = None) -> Path:
        """A system's evaluation copied to ``dest``: its manifest as shipped and a plain graded.jsonl of its first
        ``problems`` problems (every sample of each; all of them when None)."""
        lines = self.lines(system, cap)
        if problems is not None:
            keep = set(list(dict.fromkeys(json.loads(x)["problem_id"] for x in lines))[:problems])
            lines = [x for x in lines if json.loads(x)["problem_id"] in keep]
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.folder(system, cap) / "manifest.json", dest / "manifest.json")
        (dest / "graded.jsonl").write_text("\n".join(lines) + "\n")
        return dest


def shipped_world(root: Path) -> ShippedWorld:
    """The shipped world run's evaluations (:class:`ShippedWorld`), found by the library's own readers: its design
    (:func:`~polyvox.studies.world.layout.of`), seeds and caps (:mod:`polyvox.studies.world.analysis`) and the
    systems' folders (:func:`~polyvox.studies.world.layout.eval_folder`)."""
    from polyvox.studies.world import analysis, layout

    world = Path(root) / "data" / "runs" / "world"
    design = layout.of(world)
    assert design is not None, f"{world}: holds no world run of either design"
    seed = next(k for k in analysis.seeds(world) if analysis.caps(world, k))
    caps = tuple(analysis.caps(world, seed))
    panel, think = (layout.eval_folder(world, seed, caps[0], s).name for s in layout.SYSTEMS)
    return ShippedWorld(world, design, seed, caps, panel, think)
