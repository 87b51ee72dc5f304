"""Re-running works for every chapter that generates or reads a run (``generate=true`` or ``runs=``).

Each such chapter runs end to end through the real command line (``.venv/bin/polyvox run CHAPTER -p …
--out …``) on a CPU with the tiny models shipped in ``data/models/``, at the smallest settings. The
commands run in a copy of the repository (its working directory, as from a fresh clone), and after
each one the copy's tree is compared with a snapshot taken before: nothing may be written outside
``--out`` (a generating chapter's pipeline writes into ``<--out>/run`` unless ``-p out=`` says otherwise). Every text file of a run names no
absolute path (paths inside a run are relative to it or to the repository root). A failed chapter
run's folder is resumed by the same command.

Slow tier (``-m slow``). Measured on 2 shared, busy cores: 4.5 minutes in all — the world on a scale below
``smoke`` 112 s (about 70 s of CPU), accuracy on the tiny models with length and explorer on its run 55 s,
collab at ``smoke`` 38 s, personas at ``smoke`` 33 s, the resume 28 s: above the 90 s it was meant to cost.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
POLYVOX = ROOT / ".venv" / "bin" / "polyvox"
COPIED = ("_toc.yml", "_config.yml", "requirements.lock", "pyproject.toml", "notebooks", "data", "configs")
IGNORED = {".pytest_cache", "__pycache__", ".ipynb_checkpoints"}
# what the real repository may gain while these tests run: other work in progress, never a run's output
REPO_BUSY = {".git", ".pytest_cache", ".venv", "lib", "tests", "_build", "bench", "scripts", "book"}

TINY_PANEL = ["-p", "generate=true", "-p", "backend=transformers", "-p", "base_model=data/models/tiny-base",
              "-p", "adapter=null", "-p", "thinking_model=data/models/tiny-think", "-p", "limit=2",
              "-p", "n_panel=1", "-p", "n_thinking=1", "-p", "panel_max_tokens=16", "-p", "thinking_max_tokens=16"]


def tree(top: Path, skip: set[str] = frozenset()) -> dict[str, tuple[int, int]]:
    """Every file under top (relative path → size, mtime in ns), minus caches and the skipped top folders."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        rel = Path(dirpath).relative_to(top)
        dirnames[:] = [d for d in dirnames if d not in IGNORED and not (rel == Path(".") and d in skip)]
        for f in filenames:
            st = (Path(dirpath) / f).stat()
            out[(rel / f).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def real_repo_before():
    return tree(ROOT, REPO_BUSY)


@pytest.fixture(scope="module")
def repo(tmp_path_factory, real_repo_before) -> Path:
    """A copy of what a chapter run reads (notebooks, data with the shipped models, configs), as a checkout."""
    dest = tmp_path_factory.mktemp("rerun") / "polyvox"
    dest.mkdir()
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns(*IGNORED))
        elif src.exists():
            shutil.copy(src, dest / name)
    (dest / "runs").mkdir()
    return dest


def polyvox_run(repo: Path, chapter: str, out: str, params: list[str], ok: bool = True) -> subprocess.CompletedProcess:
    """``.venv/bin/polyvox run CHAPTER PARAMS --out OUT`` from the copy's root; checks that the copy changed
    only under OUT, and (when it succeeded) that no text file of the run names an absolute path."""
    before = tree(repo)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["HF_HUB_OFFLINE"] = "1"
    proc = subprocess.run([str(POLYVOX), "run", chapter, *params, "--out", out], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)
    after = tree(repo)
    prefix = out.rstrip("/") + "/"
    outside = sorted(p for p in set(before) | set(after)
                     if before.get(p) != after.get(p) and not p.startswith(prefix))
    assert not outside, f"{chapter}: written outside --out {out}: {outside[:10]}"
    if ok:
        assert proc.returncode == 0, f"{chapter} failed:\n{proc.stderr[-3000:]}"
        absolute = absolute_paths(repo / out, repo)
        assert not absolute, f"{chapter}: absolute paths in the run's files: {absolute[:10]}"
    return proc


def absolute_paths(run: Path, repo: Path) -> list[str]:
    """Text files of the run that name the checkout's or the run's absolute path."""
    found = []
    needles = {str(repo), str(repo.resolve())}
    for p in sorted(run.rglob("*")):
        if not p.is_file() or p.suffix in (".safetensors", ".bin", ".pt", ".png") or p.stat().st_size > 50_000_000:
            continue
        try:
            text = p.read_text()
        except UnicodeDecodeError:
            continue
        if any(n in text for n in needles):
            found.append(p.relative_to(repo).as_posix())
    return found


def test_panel_accuracy_generates_on_tiny_models_then_length_and_explorer_read_its_run(repo):
    polyvox_run(repo, "panel/accuracy", "runs/smoke", TINY_PANEL)
    for bench in ("math_l5", "aime"):
        for system in ("panel", "thinking"):
            graded = (repo / "runs/smoke" / bench / system / "graded.jsonl").read_text().splitlines()
            assert len(graded) == 2, (bench, system)  # limit=2 problems × 1 sample
    executed = (repo / "runs/smoke/accuracy.ipynb").read_text()
    assert "Source: the run in" in executed and '"ename"' not in executed
    polyvox_run(repo, "panel/length", "runs/smoke-length", ["-p", "runs=runs/smoke"])
    assert "tokens per correct" in (repo / "runs/smoke-length/length.ipynb").read_text()
    polyvox_run(repo, "panel/explorer", "runs/smoke-explorer", ["-p", "runs=runs/smoke"])
    text = (repo / "runs/smoke-explorer/explorer.ipynb").read_text()
    assert "pv-x" in text


def test_a_failed_chapter_run_is_resumed_by_the_same_command(repo):
    """panel/length on a run that is not there yet fails (its folder says so); once the run exists, the same
    command completes in the same folder; other settings are refused there."""
    args = ("panel/length", "runs/resume-length", ["-p", "runs=runs/resume-smoke"])
    failed = polyvox_run(repo, *args, ok=False)
    assert failed.returncode != 0
    assert json.loads((repo / "runs/resume-length/manifest.json").read_text())["status"] == "failed"
    other = polyvox_run(repo, "panel/length", "runs/resume-length", ["-p", "runs=runs/elsewhere"], ok=False)
    assert other.returncode != 0
    shutil.copytree(repo / "runs/smoke", repo / "runs/resume-smoke") if (repo / "runs/smoke").exists() else \
        polyvox_run(repo, "panel/accuracy", "runs/resume-smoke", TINY_PANEL)
    polyvox_run(repo, *args)
    assert json.loads((repo / "runs/resume-length/manifest.json").read_text())["status"] == "ok"


# the world's smoke scale takes minutes on 2 cores: the test runs every stage on a smaller one (a scale may
# be a YAML path), written into the copy before the run
WORLD_TEST_SCALE = """\
seeds: [0, 1]
problems_seed: 0
models: {seed: 0, n_per_level: 40, hidden: 32, layers: 1, vocab: 400, seq_len: 128, batch: 8, base_steps: 4,
         think_steps: 2}
rl: {lora_rank: 2, group: 2, prompts: 1, stage_steps: [1, 1], climb_steps: 1, eval_every: 1, lr: 2.0e-4,
     heldout_per_level: 1, heldout_samples: 1}
sampling: {max_tokens: 16, batch_size: 64, dtype: float32}
eval: {per_level: 1, n: 2, caps: [16, 32], sweep_seeds: [0]}
bands: {pool_per_level: 1, group: 4, if_empty: whole-pool}
"""


@pytest.mark.parametrize("chapter,extra", [("personas/persona_basis", ["-p", "scale=smoke"]),
                                           ("collab/miniature", ["-p", "scale=smoke"]),
                                           ("world/replication", ["-p", "scale=runs/world-test.yaml",
                                                                  "-p", "embed_problems=6"])])
def test_a_generating_chapter_runs_its_pipeline_inside_out(repo, chapter, extra):
    (repo / "runs/world-test.yaml").write_text(WORLD_TEST_SCALE)
    out = f"runs/{chapter.replace('/', '-')}"
    polyvox_run(repo, chapter, out, ["-p", "generate=true", *extra])  # its pipeline: <out>/run by default
    assert (repo / out / "run").is_dir() and any((repo / out / "run").iterdir())
    executed = (repo / out / f"{chapter.split('/')[1]}.ipynb").read_text()
    assert '"ename"' not in executed
    if chapter == "world/replication":  # every stage ran: the sweep's evaluations and the hill-climbs
        assert "a new run at scale" in executed
        assert (repo / out / "run/seed-0/eval/cap-32/panel/graded.jsonl").exists()  # the matched design's layout
        assert (repo / out / "run/pilot/summary.json").exists() and (repo / out / "run/seed-1/rl-think").is_dir()
        assert (repo / out / "run/seed-1/hillclimb-think/heldout_trajectory.jsonl").exists()
        assert "Matched arms: yes in training." in executed and "The pilot." in executed  # the design section read the run
        # a run sampled by this code: every arm's sampled records read the prompt GRPO trained it on
        assert "Prompts checked:" in executed and "did not read its training prompt" not in executed


def test_nothing_was_written_into_the_real_repository(repo, real_repo_before):
    """The commands ran in the copy; the real checkout gained no file outside the folders other work edits
    (files already there may be edited by that work meanwhile: only new files are a run's doing)."""
    added = sorted(set(tree(ROOT, REPO_BUSY)) - set(real_repo_before))
    assert not added, added[:10]
