"""Every command shown in the README and in the built book runs verbatim from the root of a fresh clone
after ``make book``.

The commands are read from README.md's ``bash`` fences and from the built HTML (every ``highlight-bash``
block of every page of the session's book build, ``conftest.built_book``: the hand-written pages, the
chapters' prose and their "Re-run this chapter" boxes). Backslash continuations are joined and comments
dropped; each line is one command line. Each line is classed:

- **run**: fits a CPU in seconds (the shipped tiny models, small limits, the shipped records): run with
  ``bash -c LINE`` in a copy of the checkout (tracked files, ``.venv`` linked, the built book's
  ``_build``), exactly as written — nothing substituted; relative output folders land in the copy. The
  lines of one page run in order in one copy, so a page may create what its later lines read (a fresh
  copy of the output folders per page). It must exit 0.
- **help**: needs a GPU, a server, the network or minutes (``--backend vllm``, ``serve``, ``pip install``,
  ``rl``, the staged pipelines, a book rebuild), or reads a folder that such a line writes: the program with its subcommand words and ``--help`` must
  exit 0, and every ``--flag`` the line uses must be in that help (for ``polyvox run``: every ``-p`` name
  must be a parameter of the chapter). ``make TARGET`` runs as ``make -n TARGET`` (a dry run).

An unknown program (``polyvox`` without ``.venv/bin/``, not on a fresh shell's PATH) fails. Each page is a
test of its own (``test_every_command_of_the_page_runs[PAGE]``: README.md and every page of ``_toc.yml``),
so ``make test``'s two workers share the pages; all failures of a page are reported together, and one more
test checks that every page with commands is among them and prints the counts (``-s`` shows them).

Work done once: the same line on two pages — the same words but its ``--out`` folder, one polyvox command
that writes one new folder, met in the same checkout (the same files outside the folders the page's earlier
such lines wrote; for each of those the line names, the same earlier line, the folder unchanged since) — runs
once per session; the other page gets a copy of its folder and its exit (:class:`Page`). A program's
``--help`` (and ``make -n``) is read once per worker.
"""
from __future__ import annotations

import ast
import fnmatch
import hashlib
import html
import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from _shared_runs import once

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

# (pattern, why it runs only with --help)
HELP_ONLY = [
    (r"--backend[ =](vllm|openai)|backend=(vllm|openai)", "needs a GPU (vLLM) or a model server"),
    (r"\bCUDA_VISIBLE_DEVICES\b", "GPUs"),
    (r"\bQwen/", "a hub model of billions of parameters"),
    (r"\b(serve|lab|notebook)\b|http\.server", "starts a server"),
    (r"\bpip install\b", "changes the environment"),
    (r"\bpolyvox rl\b", "GPU training"),
    (r"\bpolyvox (world|personas|collab) run\b", "a staged pipeline (minutes on a CPU)"),
    (r"\bpolyvox run world/replication\b.*generate=true", "the world pipeline (minutes on a CPU)"),
    (r"\bpolyvox book build\b", "rebuilds the book (minutes)"),
]
SHELL_WORDS = {"do", "done", "wait", "then", "fi", "else"}
BUILTINS = {"export", "echo", "cd", "printf", "set", "true", "mkdir", "cat", "ls"}


@dataclass
class Command:
    page: str
    line: str

    def simple(self) -> list[list[str]]:
        """The simple commands of the line (split on ; && || | &), without env assignments and loop heads."""
        out = []
        for part in re.split(r";|&&|\|\||\||&(?=\s|$)", self.line):
            try:
                words = shlex.split(part)
            except ValueError:
                words = part.split()
            while words and (words[0] in SHELL_WORDS or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0])):
                words = words[1:]
            if not words or words[0] == "for":
                continue
            out.append(words)
        return out

    def help_reason(self) -> str | None:
        for pattern, why in HELP_ONLY:
            if re.search(pattern, self.line):
                return why
        return None

    def outputs(self) -> list[str]:
        """The folders the line writes (``--out X``; a shell variable in it read as ``*``)."""
        return [_glob(w[i + 1]) for w in self.simple() for i, x in enumerate(w[:-1]) if x == "--out"]

    def reads_any(self, folders: list[str]) -> bool:
        """Whether a word of the line (or a ``name=value``'s value) is, or is under, one of the folders."""
        for words in self.simple():
            for w in words[1:]:
                w = _glob(w.split("=", 1)[-1])
                if any(fnmatch.fnmatch(w, f) or fnmatch.fnmatch(f, w) or w.startswith(f.rstrip("*") + "/")
                       for f in folders):
                    return True
        return False


def _glob(word: str) -> str:
    return re.sub(r"\$\{?\w+\}?", "*", word)


def commands_of_block(page: str, text: str) -> list[Command]:
    text = text.replace("\\\n", " ")
    lines = []
    for raw in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if line:
            lines.append(Command(page, " ".join(line.split())))
    # a for loop's lines are one command line
    merged, loop = [], []
    for c in lines:
        if loop or c.line.startswith("for "):
            loop.append(c.line)
            if re.search(r"(^|;\s*)done\b", c.line):
                merged.append(Command(page, " ".join(loop)))
                loop = []
        else:
            merged.append(c)
    return merged


def readme_commands(root: Path) -> list[Command]:
    blocks = re.findall(r"^```bash\n(.*?)^```", (root / "README.md").read_text(), flags=re.S | re.M)
    return [c for b in blocks for c in commands_of_block("README.md", b)]


HTML_BLOCK = re.compile(r'<div class="highlight-(?:bash|shell|sh|console)[^"]*"><div class="highlight"><pre>(.*?)</pre>',
                        re.S)


def html_commands(html_root: Path) -> dict[str, list[Command]]:
    pages = {}
    for f in sorted(html_root.rglob("*.html")):
        rel = f.relative_to(html_root).as_posix()
        if rel.startswith(("_static/", "_sources/", "genindex", "search")):
            continue
        blocks = [html.unescape(re.sub(r"<[^>]+>", "", b)) for b in HTML_BLOCK.findall(f.read_text())]
        cmds = [c for b in blocks for c in commands_of_block(rel, b)]
        if cmds:
            pages[rel] = cmds
    return pages


def fresh_shell_env(checkout: Path) -> dict:
    """A new user's shell: no virtual environment active (its bin/ off PATH)."""
    venv_bin = str(ROOT / ".venv" / "bin")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and Path(p).resolve() != Path(venv_bin).resolve() and ".venv" not in p]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(PATH=os.pathsep.join(path), HF_HUB_OFFLINE="1", HOME=str(checkout.parent / "home"))
    (checkout.parent / "home").mkdir(exist_ok=True)
    return env


def chapter_parameters(root: Path, chapter: str) -> set[str] | None:
    nb = root / "notebooks" / f"{chapter}.ipynb"
    if not nb.exists():
        return None
    for cell in json.loads(nb.read_text())["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            tree = ast.parse("".join(cell["source"]))
            return {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return set()


_HELP: dict[tuple, subprocess.CompletedProcess] = {}


def _help_run(argv: list[str], checkout: Path, env: dict) -> subprocess.CompletedProcess:
    """``PROGRAM … --help`` (or ``make -n``) once per worker and argument list: the same help is read again for
    every line that uses the program (the checkout and its environment are the same for all of them)."""
    key = (str(checkout), *argv)
    if key not in _HELP:
        _HELP[key] = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=120)
    return _HELP[key]


def check_help(cmd: Command, checkout: Path, env: dict) -> list[str]:
    """Each simple command: its program exists, ``PROGRAM SUBCOMMANDS --help`` exits 0, its flags are in the help."""
    problems = []
    for words in cmd.simple():
        prog = words[0]
        if prog in BUILTINS:
            continue
        exe = checkout / prog if "/" in prog else shutil.which(prog, path=env["PATH"])
        if exe is None or not Path(exe).exists():
            problems.append(f"{prog}: no such program ({'not on a fresh PATH' if '/' not in prog else 'missing'})")
            continue
        if Path(prog).name == "make":
            targets = [w for w in words[1:] if not w.startswith("-")]
            proc = _help_run(["make", "-n", *targets], checkout, env)
            if proc.returncode:
                problems.append(f"make -n {' '.join(targets)}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
            continue
        head = []
        for w in words[1:]:
            if w.startswith("-"):
                break
            head.append(w)
        if prog.endswith(("python", "python3")) and head[:1] == [] and words[1:3][:1] == ["-m"]:
            head = words[1:3]  # python3 -m MODULE --help
        argv = [str(exe), *head, "--help"]
        proc = _help_run(argv, checkout, env)
        if proc.returncode:
            problems.append(f"{' '.join([prog, *head])} --help: exit {proc.returncode}: "
                            f"{(proc.stderr or proc.stdout).strip()[-300:]}")
            continue
        text = proc.stdout + proc.stderr
        flags = {w.split("=")[0] for w in words[1:] if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", w)}
        for flag in flags - ({"-m"} if head[:1] == ["-m"] else set()):
            if not re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", text):
                problems.append(f"{prog} {' '.join(head)}: flag {flag} is not in its --help")
        if Path(prog).name == "polyvox" and head[:1] == ["run"] and len(head) > 1:
            declared = chapter_parameters(checkout, head[1])
            if declared is None:
                problems.append(f"polyvox run {head[1]}: no such chapter")
            else:
                names = [words[i + 1].split("=")[0] for i, w in enumerate(words[:-1]) if w == "-p"]
                problems += [f"polyvox run {head[1]}: -p {n}: not a parameter of the chapter"
                             for n in names if n not in declared]
    return problems


def run_line(cmd: Command, checkout: Path, env: dict) -> str | None:
    proc = subprocess.run(["bash", "-c", cmd.line], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode:
        return f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-600:]}"
    return None


def tree(top: Path) -> dict[str, tuple[int, int]]:
    """Every file under top (relative path → size, mtime in ns), caches left out. The copies of the checkout
    keep their sources' times (``copy2``), so two workers' copies in the same state give the same tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d not in ("__pycache__", ".ipynb_checkpoints", ".pytest_cache")]
        rel = Path(dirpath).relative_to(top)
        for f in filenames:
            st = os.lstat(os.path.join(dirpath, f))
            out[(rel / f).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def _under(path: str, folder: str) -> bool:
    folder = folder.rstrip("/")
    return path == folder or path.startswith(folder + "/")


def single_out(cmd: Command) -> tuple[list[str], str] | None:
    """(the words without ``--out X``, X) when the line is one polyvox command, no shell syntax, writing one
    relative ``--out`` folder; else None."""
    if re.search(r"[$`*?<>|;&(){}]", cmd.line):
        return None
    words = shlex.split(cmd.line)
    if not words or Path(words[0]).name != "polyvox" or any(w.startswith("--out=") for w in words):
        return None
    at = [i for i, w in enumerate(words[:-1]) if w == "--out"]
    if len(at) != 1:
        return None
    out = words[at[0] + 1].rstrip("/")
    if not out or Path(out).is_absolute() or ".." in Path(out).parts:
        return None
    return words[:at[0]] + words[at[0] + 2:], out


class Page:
    """Runs a page's lines in order in the checkout. A line that is one polyvox command writing one new
    ``--out`` folder runs once per session across pages and workers (``_shared_runs.once``) when the same words
    (but ``--out``) meet the same checkout: the same tree outside the folders the page's earlier shared lines
    wrote, and, for each of those folders the line names, the same earlier line, the folder unchanged since.
    The first page to reach it runs it (and may share it only when it wrote nothing outside its ``--out``);
    another page gets a copy of its folder and its result."""

    def __init__(self, page: str, checkout: Path, env: dict, tmp_path_factory):
        self.page, self.checkout, self.env, self.tmp = page, checkout, env, tmp_path_factory
        self.written: dict[str, tuple[str, dict]] = {}  # --out folder -> (key of its line, its tree then)

    def key(self, cmd: Command) -> tuple[str, str] | None:
        found = single_out(cmd)
        if found is None:
            return None
        words, out = found
        if (self.checkout / out).exists():
            return None
        named = {_glob(w.split("=", 1)[-1]) for w in words[1:]}
        reads = {}
        for folder, (key, then) in self.written.items():
            if any(_under(w, folder) or _under(folder, w) for w in named):
                if tree(self.checkout / folder) != then:
                    return None  # changed since its line wrote it
                reads[folder] = key
        rest = sorted((p, v) for p, v in tree(self.checkout).items()
                      if not any(_under(p, f) for f in self.written))
        blob = json.dumps([words, reads, rest]).encode()
        return hashlib.sha256(blob).hexdigest()[:20], out

    def run(self, cmd: Command) -> str | None:
        keyed = self.key(cmd)
        if keyed is None:
            return run_line(cmd, self.checkout, self.env)
        key, out = keyed
        produced = []

        def produce(folder: Path) -> dict:
            produced.append(True)
            before = tree(self.checkout)
            problem = run_line(cmd, self.checkout, self.env)
            after = tree(self.checkout)
            outside = [p for p in set(before) | set(after) if before.get(p) != after.get(p) and not _under(p, out)]
            shared = problem is None and not outside and (self.checkout / out).is_dir()
            if shared:
                shutil.copytree(self.checkout / out, folder / "out", symlinks=True)
            return {"problem": problem, "page": self.page, "line": cmd.line, "shared": shared}

        folder, result = once(self.tmp, f"command-{key}", produce)
        if not produced:  # another page ran it
            if result["problem"]:
                return f"{result['problem']} (the same run as `{result['line']}` on {result['page']})"
            if not result["shared"]:  # it wrote outside its --out folder: this page runs it itself
                return run_line(cmd, self.checkout, self.env)
            shutil.copytree(folder / "out", self.checkout / out, symlinks=True)
        elif result["problem"]:
            return result["problem"]
        self.written[out] = (key, tree(self.checkout / out))
        return None


def plan(cmds: list[Command]) -> list[tuple[Command, str | None]]:
    """Each line with the reason it runs only with --help (or as a dry run), None when it runs."""
    planned, not_run = [], []  # what --help-only lines would have written: later lines reading it cannot run
    for cmd in cmds:
        why = (cmd.help_reason() or ("a dry run" if any(Path(w[0]).name == "make" for w in cmd.simple()) else None)
               or ("reads what a --help-only line writes" if cmd.reads_any(not_run) else None))
        if why:
            not_run += cmd.outputs()
        planned.append((cmd, why))
    return planned


def book_pages(root: Path) -> list[str]:
    """README.md and every page of _toc.yml as the built book names it (book/panel/accuracy.html)."""
    import yaml

    def files(node) -> list[str]:
        if isinstance(node, dict):
            return ([node["file"]] if "file" in node else []) + [f for v in node.values() for f in files(v)]
        if isinstance(node, list):
            return [f for v in node for f in files(v)]
        return []

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    pages = [f"{toc['root']}.html"] + [f"{f}.html" for f in files(toc.get("parts", []))]
    # the longest pages first (measured: the dispersion chapter embeds every trace), so the two workers end together
    first = ("book/panel/dispersion.html", "book/world/replication.html", "book/rerunning.html", "README.md",
             "book/reproduce.html", "book/panel/explorer.html")
    return [p for p in first if p in pages or p == "README.md"] + [p for p in pages if p not in first]


PAGES = book_pages(ROOT)


@pytest.fixture(scope="module")
def book_html(request) -> Path:
    """The built book's HTML: ``POLYVOX_BOOK_HTML`` (a built ``_build/html``, as tests/test_browser.py reads it)
    if set, else the session's build (``conftest.built_book``, built once for both workers)."""
    given = os.environ.get("POLYVOX_BOOK_HTML")
    if given:
        return Path(given).resolve()
    return request.getfixturevalue("built_book")[1].html


@pytest.fixture(scope="module")
def pages(book_html) -> dict[str, list[Command]]:
    return {"README.md": readme_commands(ROOT), **html_commands(book_html)}


@pytest.fixture(scope="module")
def checkout(book_html, tmp_path_factory) -> tuple[Path, set[str]]:
    """A fresh clone after ``make book``: the tracked files, ``.venv`` (linked) and the built book; with the
    names at its top, so that each page starts from it."""
    dest = tmp_path_factory.mktemp("commands") / "polyvox"
    # the index's files and the last commit's (a file staged for removal but still on disk is still shipped)
    files = set()
    for argv in (["git", "ls-files", "-z"], ["git", "ls-tree", "-r", "-z", "--name-only", "HEAD"]):
        files |= set(subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\0"))
    for rel in sorted(filter(None, files)):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    built = book_html.parents[1]  # the folder holding _build/html
    shutil.copytree(built / "_build", dest / "_build", symlinks=True, dirs_exist_ok=True)
    for nb in (built / "book").rglob("*.ipynb"):  # the executed chapters make book writes into book/
        (dest / nb.relative_to(built)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(nb, dest / nb.relative_to(built))
    return dest, {p.name for p in dest.iterdir()}


@pytest.mark.after_book
def test_the_readme_and_the_built_book_show_commands_of_both_kinds(pages, capsys):
    assert len(pages) >= 5 and "book/rerunning.html" in pages and "README.md" in pages, sorted(pages)
    untested = sorted(set(pages) - set(PAGES))
    assert not untested, f"pages with commands that no test runs (not in _toc.yml): {untested}"
    planned = [why for cmds in pages.values() for _, why in plan(cmds)]
    ran, helped = planned.count(None), len(planned) - planned.count(None)
    with capsys.disabled():
        print(f"\ncommands: {len(planned)} from {len(pages)} pages; {ran} run, {helped} with --help or a dry run only")
    assert ran >= 10 and helped >= 10


@pytest.mark.after_book
@pytest.mark.parametrize("page", PAGES)
def test_every_command_of_the_page_runs(page, pages, checkout, book_html, tmp_path_factory):
    """Each page in its own test (the two workers share them), from a fresh copy of the checkout's top."""
    cmds = pages.get(page)
    if not cmds:  # a page of the book with no bash block: it is in the book
        assert page != "README.md" and (book_html / page).is_file(), f"{page}: not in the built book"
        return
    folder, baseline = checkout
    for extra in [p for p in folder.iterdir() if p.name not in baseline]:  # each page starts fresh
        shutil.rmtree(extra) if extra.is_dir() and not extra.is_symlink() else extra.unlink()
    env = fresh_shell_env(folder)
    runner = Page(page, folder, env, tmp_path_factory)
    failures = []
    for cmd, why in plan(cmds):
        if why:
            failures += [f"{page}: `{cmd.line}` (--help): {p}" for p in check_help(cmd, folder, env)]
        else:
            problem = runner.run(cmd)
            if problem:
                failures.append(f"{page}: `{cmd.line}`: {problem}")
    assert not failures, f"{len(failures)} command(s) fail:\n" + "\n".join(failures)
