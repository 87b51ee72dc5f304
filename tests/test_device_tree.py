"""scripts/device_tree.sh: a checkout prepared for device calls (one commit's code in .rec, the large recordings out
of the index and of the untracked files) and restored exactly (a real git repository)."""
import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device_tree.sh"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}).stdout


def _repo(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "repo"
    for rel, text in {"lib/polyvox/a.py": "old = 1\n", "configs/w.yaml": "x: 1\n", "pyproject.toml": "[p]\n",
                      "data/runs/personas-h200/r.json": "{}\n", "data/runs/world/seed-0/g.jsonl": "{}\n",
                      "data/runs/world/models/m.json": "{}\n", "data/models/collab-h200/w.txt": "w\n",
                      "data/runs/world-v2/manifest.json": "{}\n"}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    first = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "lib/polyvox/a.py").write_text("new = 2\n")  # the checkout moves on
    _git(repo, "commit", "-q", "-am", "two")
    (repo / ".git/info/exclude").write_text("# mine\n*.swp\n")
    return repo, first


def _run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=repo, capture_output=True, text=True, timeout=60)


def test_prepare_then_restore(tmp_path):
    repo, first = _repo(tmp_path)
    tracked = _git(repo, "ls-files")
    done = _run(repo, "prepare", first[:7])
    assert done.returncode == 0, done.stderr
    assert "a call carries" in done.stdout
    assert (repo / ".rec/lib/polyvox/a.py").read_text() == "old = 1\n"  # the named commit's code, not HEAD's
    assert (repo / ".rec/COMMIT").read_text().strip() == first
    now = _git(repo, "ls-files")
    assert "data/runs/personas-h200/r.json" not in now and "data/runs/world/seed-0/g.jsonl" not in now
    assert "data/models/collab-h200/w.txt" not in now
    assert "data/runs/world/models/m.json" in now and "data/runs/world-v2/manifest.json" in now  # what a call reads
    untracked = _git(repo, "ls-files", "--others", "--exclude-standard")
    assert "data/runs" not in untracked and "data/models" not in untracked  # they do not travel as untracked files
    back = _run(repo, "restore")
    assert back.returncode == 0, back.stderr
    assert _git(repo, "ls-files") == tracked
    assert (repo / ".git/info/exclude").read_text() == "# mine\n*.swp\n"  # the user's own lines stay, ours go
    assert _git(repo, "status", "--porcelain", "--", "data") == ""


def test_prepare_refuses_an_unknown_commit(tmp_path):
    repo, _ = _repo(tmp_path)
    bad = _run(repo, "prepare", "0" * 40)
    assert bad.returncode != 0 and not (repo / ".rec").exists()
    assert "data/runs/personas-h200/r.json" in _git(repo, "ls-files")  # nothing taken out of the index
