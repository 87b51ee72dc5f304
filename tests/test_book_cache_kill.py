"""Issue 17 item 10: the book's execution cache never files new output under an old key.

A real kill at every step: ``polyvox.book.build`` runs in a (forked) subprocess whose chapter execution is
a stand-in for papermill (it writes the executed notebook with the chapter's data in an output,
in milliseconds); once the chapter has "executed", an audit hook counts every file-system change
the build makes (a file opened for writing, a rename, a removal, a new folder) and the process
SIGKILLs itself just before the N-th, for N = 1, 2, … until a build runs to its end. After each
kill the cache must hold the old pair or the new pair: a build with the old data serves the old
output (or executes), a build with the new data serves the new output (or executes), and exactly
one of the two is served from the cache.

The old cache wrote the notebook (``os.replace``) and then its key file: a kill between the two
left the new notebook beside the old key, and the next build with the old data published the new
page as cached.
"""
import importlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from polyvox import book

build_module = importlib.import_module("polyvox.book.build")  # the module (polyvox.book.build is also the function)

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import os, shutil, signal, sys
sys.path.insert(0, {lib!r})
import importlib
import fake_execute
b = importlib.import_module("polyvox.book.build")  # everything imported once; each kill point is a fork
b._library_hash = lambda root: "library"  # as in the test process (others may edit polyvox meanwhile)

base, folder = sys.argv[1], sys.argv[2]
armed, count, limit = [False], [0], [0]

def execute(chapter, params, output, root, *rest, **kw):
    fake_execute.execute(chapter, params, output, root)
    armed[0] = True  # the chapter ran: from here on, every write of the build is a kill point

b.execute = execute

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
EVENTS = ("os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.truncate", "shutil.move", "shutil.copyfile",
          "os.link", "os.symlink")

def hook(event, args):
    if not armed[0]:
        return
    if event == "open":
        mode, flags = args[1], args[2]
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & WRITE_FLAGS)
        if not writes:
            return
    elif event not in EVENTS:
        return
    count[0] += 1
    if count[0] == limit[0]:
        os.kill(os.getpid(), signal.SIGKILL)

# a build of a throwaway copy first, so that what build() imports lazily is imported before the forks
shutil.copytree(base, os.path.join(folder, "warm"))
b.build(os.path.join(folder, "warm"), html=False, progress=False)
for n in range(1, 100):
    armed[0] = False
    state = os.path.join(folder, f"kill-{{n}}")
    shutil.copytree(base, state)
    pid = os.fork()
    if pid == 0:
        limit[0] = n
        sys.addaudithook(hook)
        b.build(state, html=False, progress=False)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        print("killed", n, os.WTERMSIG(status), flush=True)
    else:
        print("finished", n, os.WEXITSTATUS(status), flush=True)
        break
"""

FAKE = r"""
from pathlib import Path
import nbformat

def execute(chapter, params, output, root):
    nb = nbformat.read(str(chapter.source), as_version=4)
    data = (Path(root) / "data" / "input.txt").read_text()
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"DATA={data}\n")]
    output.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(output))
"""


def _book(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "_config.yml").write_text("title: t\n")
    (folder / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/x/ch\n")
    (folder / "book").mkdir(parents=True)
    (folder / "book/intro.md").write_text("# intro\n")
    (folder / "notebooks/x").mkdir(parents=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(open('data/input.txt').read())")])
    nb.metadata["polyvox"] = {"inputs": ["data/input.txt"]}
    nbformat.write(nb, folder / "notebooks/x/ch.ipynb")
    (folder / "data").mkdir()
    (folder / "data/input.txt").write_text("old")
    return folder


def _page_data(root: Path) -> str:
    nb = nbformat.read(root / "book/x/ch.ipynb", as_version=4)
    texts = [o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    return "".join(texts).strip().removeprefix("DATA=")


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """The same stand-in for papermill in this process (the checks' builds) as in the killed child."""
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers/fake_execute.py").write_text(FAKE)
    sys.path.insert(0, str(tmp_path / "helpers"))
    import fake_execute

    importlib.reload(fake_execute)
    runs = []

    def execute(chapter, params, output, root, *rest, **kw):
        runs.append(chapter.name)
        fake_execute.execute(chapter, params, output, root)

    monkeypatch.setattr(build_module, "execute", execute)
    # the key's library part held fixed: polyvox's source may change while the test runs (an editor saves)
    monkeypatch.setattr(build_module, "_library_hash", lambda root: "library")
    yield runs, tmp_path / "helpers"
    sys.path.remove(str(tmp_path / "helpers"))


def _served(state: Path, dest: Path, data: str, runs: list) -> tuple[bool, str]:
    """(served from the cache?, the data the page shows) for a build of a copy of state with data."""
    shutil.copytree(state, dest)
    (dest / "data/input.txt").write_text(data)
    before = len(runs)
    report = book.build(dest, html=False, progress=False)
    assert not report.failures
    return len(runs) == before, _page_data(dest)


@pytest.mark.slow  # a subprocess forks once per kill point
def test_a_kill_at_every_write_leaves_the_old_pair_or_the_new_pair(tmp_path, fake):
    runs, helpers = fake
    base = _book(tmp_path / "base")
    book.build(base, html=False, progress=False)  # the cache holds the old data's output
    assert _page_data(base) == "old"
    (base / "data/input.txt").write_text("new")
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(lib=str(ROOT / "lib")))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(helpers)}
    (tmp_path / "states").mkdir()
    proc = subprocess.run([sys.executable, str(script), str(base), str(tmp_path / "states")], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [ln.split() for ln in proc.stdout.splitlines()]
    assert lines and lines[-1][:1] == ["finished"] and lines[-1][2] == "0", proc.stdout + proc.stderr
    kills = 0
    for what, n, sig in lines[:-1]:
        assert what == "killed" and int(sig) == signal.SIGKILL, lines
        kills += 1
        state = tmp_path / "states" / f"kill-{n}"
        old_cached, old_page = _served(state, tmp_path / f"check-old-{n}", "old", runs)
        new_cached, new_page = _served(state, tmp_path / f"check-new-{n}", "new", runs)
        assert old_page == "old", f"killed before write {n}: a build with the old data shows {old_page!r}"
        assert new_page == "new", f"killed before write {n}: a build with the new data shows {new_page!r}"
        assert old_cached != new_cached, \
            f"killed before write {n}: old pair cached {old_cached}, new pair cached {new_cached}"
    assert kills >= 3  # the filing of the chapter, its page and the manifest were each interrupted


def test_the_key_is_filed_inside_the_notebook(tmp_path, fake):
    runs, _ = fake
    root = _book(tmp_path / "b")
    book.build(root, html=False, progress=False)
    executed = root / "_build/.polyvox/executed/x/ch.ipynb"
    [ch] = book.chapters(root)
    key = book.cache_key(root, ch, {})
    assert build_module.cached_key(executed) == key and not executed.with_suffix(".key").exists()
    # a key file beside it (an older polyvox's) is not believed
    nb = nbformat.read(executed, as_version=4)
    del nb.metadata["polyvox"]["cache_key"]
    nbformat.write(nb, executed)
    executed.with_suffix(".key").write_text(key)
    assert book.build(root, html=False, progress=False).executed == ["x/ch"] and runs == ["x/ch", "x/ch"]
    assert not executed.with_suffix(".key").exists() and build_module.cached_key(executed) == key
