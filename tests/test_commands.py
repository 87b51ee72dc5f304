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

An unknown program (``polyvox`` without ``.venv/bin/``, not on a fresh shell's PATH) fails. All failures of
a page are reported together; the counts are printed (``-s`` shows them).
"""
from __future__ import annotations

import ast
import fnmatch
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
            proc = subprocess.run(["make", "-n", *targets], cwd=checkout, env=env, capture_output=True, text=True,
                                  timeout=120)
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
        proc = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=120)
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


@pytest.fixture(scope="module")
def book_html(request) -> Path:
    """The built book's HTML: ``POLYVOX_BOOK_HTML`` (a built ``_build/html``, as tests/test_browser.py reads it)
    if set, else the session's build (``conftest.built_book``)."""
    given = os.environ.get("POLYVOX_BOOK_HTML")
    if given:
        return Path(given).resolve()
    return request.getfixturevalue("built_book")[1].html


@pytest.fixture(scope="module")
def checkout(book_html, tmp_path_factory) -> Path:
    """A fresh clone after ``make book``: the tracked files, ``.venv`` (linked) and the built book."""
    dest = tmp_path_factory.mktemp("commands") / "polyvox"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    for rel in filter(None, files):
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
    return dest


def test_every_command_of_the_readme_and_the_built_book_runs(checkout, book_html, capsys):
    pages = {"README.md": readme_commands(ROOT), **html_commands(book_html)}
    assert len(pages) >= 5 and "book/rerunning.html" in pages and "README.md" in pages, sorted(pages)
    env = fresh_shell_env(checkout)
    baseline = {p.name for p in checkout.iterdir()}
    failures, ran, helped = [], [], []
    for page, cmds in pages.items():
        for extra in [p for p in checkout.iterdir() if p.name not in baseline]:  # each page starts fresh
            shutil.rmtree(extra) if extra.is_dir() and not extra.is_symlink() else extra.unlink()
        not_run: list[str] = []  # what --help-only lines would have written: later lines reading it cannot run
        for cmd in cmds:
            why = (cmd.help_reason() or ("a dry run" if any(Path(w[0]).name == "make" for w in cmd.simple()) else None)
                   or ("reads what a --help-only line writes" if cmd.reads_any(not_run) else None))
            if why:
                not_run += cmd.outputs()
                helped.append(cmd)
                failures += [f"{page}: `{cmd.line}` (--help): {p}" for p in check_help(cmd, checkout, env)]
            else:
                ran.append(cmd)
                problem = run_line(cmd, checkout, env)
                if problem:
                    failures.append(f"{page}: `{cmd.line}`: {problem}")
    with capsys.disabled():
        print(f"\ncommands: {len(ran) + len(helped)} from {len(pages)} pages; {len(ran)} run, "
              f"{len(helped)} with --help or a dry run only; {len(failures)} failure(s)")
    assert len(ran) >= 10 and len(helped) >= 10
    assert not failures, f"{len(failures)} command(s) fail:\n" + "\n".join(failures)
