"""Part III, slow tier: the scheduler against three real `transformers serve` processes on
127.0.0.1, and the whole staged pipeline at smoke scale through `polyvox collab run`."""
import json
import os
import subprocess
import sys
import time

import pytest
from conftest import serve

from polyvox.backends import make_backend
from polyvox.backends.base import SamplingParams
from polyvox.studies.collab import cost, scheduler
from polyvox.studies.collab.tasks import collab_qa, collab_world

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def three_servers(tiny):
    with serve(tiny, copies=3) as urls:
        yield urls, str(tiny)


def test_scheduler_against_three_real_servers(three_servers, tmp_path):
    urls, model = three_servers
    agents = {name: make_backend("openai", model, base_url=url, api_key_env=None, concurrency=2)
              for name, url in zip(("small", "mid", "big"), urls)}
    probs = collab_world(levels=[1], per_level=2, seed=3) + collab_qa(n=1, seed=4)
    sc = scheduler.Scheduler(agents, "small", t_max=6, params=SamplingParams(8, 1.0))
    out = scheduler.run(tmp_path / "served", probs, sc, {"system": "three-servers"})
    recs = scheduler.load(out)
    assert sorted(r["id"] for r in recs) == sorted(p.id for p in probs)
    for r in recs:
        # a random tiny model cannot speak the protocol: violations, retries, forced hand-offs round the pool
        assert r["status"] in ("t_max", "confirmed") and 1 <= r["n_turns"] <= 6
        assert all(t["prompt_tokens"] > 0 and 0 < t["completion_tokens"] <= 8 for t in r["turns"])
    spoke = {t["agent"] for r in recs for t in r["turns"]}
    assert spoke == {"small", "mid", "big"}
    c = cost.run_cost(recs, {"small": 1.7, "mid": 4, "big": 8, "large": 14})
    assert c["calls"] > 1 and c["weighted_tokens"] > 0


def test_collab_run_smoke_pipeline_and_skip_on_rerun(tmp_path, root):
    out = tmp_path / "collab"
    cmd = [sys.executable, "-m", "polyvox.studies.collab.cli", "collab", "run", "--scale", "smoke", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(root / "lib")}
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    for stage in ("models", "pd", "rl", "eval"):
        m = json.loads((out / stage / "manifest.json").read_text())
        assert m["status"] == "complete" and m["settings"]["scale"] == "smoke" and m["seconds"] >= 0
    for system in ("solo-small", "solo-large", "sample-mid", "cl", "cl-pd", "cl-base", "homo"):
        assert (out / "eval" / system / "trajectories.jsonl").exists()
    t0 = time.time()
    again = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env)
    assert again.returncode == 0 and time.time() - t0 < 60
    bad = subprocess.run(cmd[:-2] + ["--out", str(out), "--stages", "eval,nope"], cwd=root, capture_output=True,
                         text=True, env=env)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1  # a usage error: refused as parsed
