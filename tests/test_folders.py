"""One writer and one kind per folder, for ``judge`` and the three study pipelines (issue 17).

- item 6: ``judge run`` and every pipeline take their folder's one-writer lock: a second writer is
  refused with one line, the first one's records stay exact;
- item 7: a folder holds one kind of run, recorded in its manifest; pipelines validate every
  folder they would write before writing (the bad-input table, test_hostile_judge.py, holds
  the refusals); folders recorded before kinds were, data/ included, are still recognised;
- item 13: judge manifests and the pipelines' own manifests hold no absolute machine path;
- kill tests: ``judge run`` and each pipeline, killed with SIGKILL at points spread over their
  stages and resumed, end with the records of an uninterrupted run and no duplicates (micro
  scales, below smoke; slow tier).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from polyvox import judge as J
from polyvox import stages
from polyvox.records import read_jsonl, read_manifest


def write_systems(path: Path, n: int = 20) -> Path:
    rows = [{"prompt_id": f"p{i}", "prompt": f"q{i}", "preference": "concise", "gold": "1", "n_steps": 1,
             "responses": {"x": "a" * (i + 1), "y": "b" * (n - i)}} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


SLOW_JUDGE = """
import sys, time
from pathlib import Path
sys.path.insert(0, {lib!r})
from polyvox import judge as J
def score(text, row):
    while {go!r} and not Path({go!r}).exists():
        time.sleep(0.01)
    time.sleep({sleep})
    return -len(text)
print(J.run(sys.argv[1], sys.argv[2], sys.argv[3], J.RubricJudge(score, "slow"), chunk=2), flush=True)
"""


def _judge_proc(root: Path, tmp: Path, a: str, b: str, out: Path, sleep: float = 0.05, go: Path | None = None):
    """A `judge run` in another process, each score taking ``sleep`` s (and none before ``go`` exists)."""
    script = tmp / "slow_judge.py"
    script.write_text(SLOW_JUDGE.format(lib=str(root / "lib"), sleep=sleep, go=str(go) if go else ""))
    return subprocess.Popen([sys.executable, str(script), a, b, str(out)], start_new_session=True, env=_env(root),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_lines(path: Path, n: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if path.exists() and path.read_text().count("\n") >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} did not reach {n} lines")


# ---------------------------------------------------------------- item 6: one writer per folder

def test_a_second_judge_run_on_one_folder_is_refused_and_the_first_duplicates_nothing(tmp_path, root):
    """Two concurrent `judge run`s on one folder both exited 0 and duplicated every call; now the second
    is refused with one line naming the first, and the folder holds each call once."""
    s = write_systems(tmp_path / "s.jsonl")
    a, b, out, go = f"{s}:x", f"{s}:y", tmp_path / "v", tmp_path / "go"
    first = _judge_proc(root, tmp_path, a, b, out, sleep=0.0, go=go)
    _wait_lines(out / "manifest.json", 1, first)  # written under the lock: the first run holds it
    second = subprocess.run([sys.executable, "-m", "polyvox.cli", "judge", "run", "--a", a, "--b", b, "--out", str(out)],
                            cwd=root, capture_output=True, text=True, env=_env(root))
    go.touch()
    assert first.wait(timeout=120) == 0, first.stderr.read()
    assert second.returncode == 1
    assert f"in use by process {first.pid}" in second.stderr and second.stderr.count("\n") == 1
    keys = [r["key"] for r in read_jsonl(out / J.VERDICTS)]
    assert len(keys) == len(set(keys)) == 40
    assert read_manifest(out)["status"] == "complete" and read_manifest(out)["kind"] == "judge"


def test_pipelines_hold_their_root_lock_while_they_run(tmp_path, monkeypatch):
    """Every stage runs under the root folder's lock: a stage that looks for the lock finds it held."""
    from polyvox.records import RunLock
    from polyvox.studies.collab import pipeline as C

    seen = []

    def stage_models(folder, s):
        with pytest.raises(ValueError, match="in use by process"):
            with RunLock(folder.parent):
                pass
        seen.append(folder.name)

    monkeypatch.setattr(C, "stage_models", stage_models)
    C.run(tmp_path / "c", "smoke", ("models",))
    assert seen == ["models"]
    m = read_manifest(tmp_path / "c")
    assert m["kind"] == "collab pipeline" and m["scale"] == "smoke" and m["status"] == "stages complete"
    assert read_manifest(tmp_path / "c" / "models")["kind"] == "stage"


# ---------------------------------------------------------------- item 7: one kind per folder

def test_a_judge_run_into_a_sample_folder_is_refused_before_writing(tmp_path):
    """Today: exit 0 and the sample run's manifest replaced by a judge manifest."""
    s = write_systems(tmp_path / "s.jsonl", 4)
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"kind": "sample", "settings": {"task": "world", "format": "panel"}}))
    before = (run / "manifest.json").read_bytes()
    with pytest.raises(ValueError, match="holds a sample run"):
        J.run(f"{s}:x", f"{s}:y", run, J.RubricJudge(lambda t, r: -len(t), "t"))
    assert (run / "manifest.json").read_bytes() == before and sorted(p.name for p in run.iterdir()) == ["manifest.json"]


def test_a_personas_run_with_another_scale_leaves_scale_yaml_alone(tmp_path):
    """Today scale.yaml was rewritten before the stage check refused the run."""
    from polyvox.studies.personas import pipeline as P

    out = tmp_path / "p"
    out.mkdir()
    smoke = P.load_scale("smoke")
    (out / "scale.yaml").write_text(yaml.safe_dump(smoke, sort_keys=False))
    (out / "router").mkdir()
    (out / "router" / "manifest.json").write_text(json.dumps(
        {"settings": stages.settings_of(smoke, "model", "world", "router"), "status": "complete"}))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match="use a new --out"):  # refused, today and before …
        P.run(out, "cpu")  # … but now before scale.yaml is written
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_every_shipped_manifest_is_of_a_known_kind(root):
    """data/ holds runs recorded before kinds were: each manifest is still recognised by its shape."""
    unknown = [str(m.relative_to(root)) for m in sorted((root / "data").rglob("manifest.json"))
               if stages.folder_kind(json.loads(m.read_text())) is None]
    assert not unknown, unknown


@pytest.mark.parametrize("study, folder, scale", [("personas", "personas-h200", "h200"),
                                                   ("collab", "collab-h200", "h200")])
def test_shipped_pipeline_folders_are_recognised(root, study, folder, scale):
    """A rerun over a shipped folder finds its own stages (complete, same settings): nothing to redo."""
    from importlib import import_module

    P = import_module(f"polyvox.studies.{study}.pipeline")
    s = P.load_scale(scale)
    P.check(root / "data/runs" / folder, s)
    other = {"personas": "collab-h200", "collab": "personas-h200"}[study]
    with pytest.raises(ValueError, match="no manifest.json"):
        P.check(root / "data/runs" / other, s)


def test_the_shipped_world_run_is_read_and_takes_stages_of_its_own_scale_alone(root):
    """The shipped data/runs/world, in whichever design it holds. Of the earlier panel-only design: the analysis
    reads it, the pipeline (the matched design) refuses in one line to add stages to it, whatever the scale. Of
    the matched design (issue 21's, which replaces it): the analysis reads it, the pipeline recognises it as a run
    of its own scale (a rerun finds every stage complete and runs none) and refuses, in one line, any other."""
    from polyvox.studies.world import analysis, layout
    from polyvox.studies.world import pipeline as W

    out = root / "data/runs/world"
    seeds = analysis.seeds(out)
    if layout.of(out) == layout.PANEL_ONLY:
        assert layout.eval_folder(out, 0, 256, "tiny-think") == out / "seed-0/eval/cap-256/tiny-think"
        assert set(layout.rl_folders(out, 1)) == {"panel"}
        for scale in ("h200", "h200-v2", "smoke"):
            with pytest.raises(ValueError) as e:
                W.check(out, W.load_scale(scale), ["hillclimb-think"])
            assert "earlier panel-only design" in str(e.value) and "\n" not in str(e.value)
        return
    assert layout.of(out) == layout.MATCHED
    seed = next(k for k in seeds if analysis.caps(out, k))
    cap = analysis.caps(out, seed)[0]
    assert layout.eval_folder(out, seed, cap, "tiny-think") == out / f"seed-{seed}/eval/cap-{cap}/think"
    assert layout.eval_folder(out, seed, cap, "tiny-panel") == out / f"seed-{seed}/eval/cap-{cap}/panel"
    for k in seeds:
        folders = layout.rl_folders(out, k)
        assert folders == {"panel": out / f"seed-{k}/rl-panel", "think": out / f"seed-{k}/rl-think"}
        assert all((f / "manifest.json").is_file() for f in folders.values())
    recorded = json.loads((out / "manifest.json").read_text())
    own = recorded["scale"]
    assert own in ("h200", "h200-v2", "smoke") and recorded["seeds"] == seeds
    pipe = W.pipeline(out, W.load_scale(own), recorded["seeds"])  # its own scale: a rerun finds every stage done
    pipe.check()
    assert {st.folder.relative_to(out).as_posix(): pipe.state(st) for st in pipe.stages} == \
        {st.folder.relative_to(out).as_posix(): "done" for st in pipe.stages}
    for scale in {"h200", "h200-v2", "smoke"} - {own}:
        with pytest.raises(ValueError) as e:
            W.check(out, W.load_scale(scale), ["hillclimb-think"])
        assert f"holds a run of the scale '{own}'" in str(e.value) and "\n" not in str(e.value)


def test_the_shipped_judge_folder_takes_more_verdicts(root):
    J.check_out(root / "data/runs/personas-h200/judge")
    with pytest.raises(ValueError, match="holds a stage run"):
        J.check_out(root / "data/runs/personas-h200/router")


# ---------------------------------------------------------------- item 13: no absolute path in a judge manifest

def test_judge_manifests_hold_portable_paths(tmp_path, monkeypatch):
    """The manifest stored FILE:SYSTEM as given (absolute); now as records.portable_path writes it, and an
    older manifest's absolute comparisons are rewritten the same way."""
    (tmp_path / "data").mkdir()
    s = write_systems(tmp_path / "data" / "s.jsonl", 4)
    out = tmp_path / "v"
    judge = J.RubricJudge(lambda t, r: -len(t), "t")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    J.run(f"{s}:x", f"{s}:y", out, judge)
    text = (out / "manifest.json").read_text()
    assert str(tmp_path) not in text
    assert read_manifest(out)["comparisons"] == [["data/s.jsonl:x", "data/s.jsonl:y"]]
    m = read_manifest(out)
    m["comparisons"].append([f"{s}:y", f"{s}:x"])  # as the old code wrote it
    (out / "manifest.json").write_text(json.dumps(m))
    monkeypatch.chdir(tmp_path)
    J.run(f"{s}:x", f"{s}:y", out, judge)
    assert str(tmp_path) not in (out / "manifest.json").read_text()
    assert read_manifest(out)["comparisons"] == [["data/s.jsonl:x", "data/s.jsonl:y"],
                                                 ["data/s.jsonl:y", "data/s.jsonl:x"]]


# ---------------------------------------------------------------- item 16: verdicts are checked

def test_a_verdict_with_another_choice_is_refused_not_tallied(tmp_path):
    s = write_systems(tmp_path / "s.jsonl", 4)
    a, b, out = f"{s}:x", f"{s}:y", tmp_path / "v"
    judge = J.RubricJudge(lambda t, r: -len(t), "t")
    J.run(a, b, out, judge)
    lines = (out / J.VERDICTS).read_text().splitlines()
    rec = json.loads(lines[1])
    rec["choice"] = "T"  # an outcome letter, not a choice: was counted as a tie
    lines[1] = json.dumps(rec)
    (out / J.VERDICTS).write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"verdicts.jsonl:2: choice 'T' is not one of"):
        J.tally(a, b, out, judge, n_boot=10)


# ---------------------------------------------------------------- kill tests

VOLATILE = ("latency", "second", "time", "started", "finished", "updated", "git_commit", "versions")


def _normal(x):
    if isinstance(x, dict):
        return {k: _normal(v) for k, v in x.items() if not any(w in k for w in VOLATILE)}
    if isinstance(x, list):
        return [_normal(v) for v in x]
    return x


def records(out: Path) -> dict[str, list[str]]:
    """Every JSONL file under out (an interrupted RL attempt's kept logs and the request cache aside):
    its records without timings, sorted — a duplicate or a missing record changes the list."""
    found = {}
    for f in sorted(out.rglob("*.jsonl")):
        if ".attempt-" in f.name or f.name == "cache.jsonl":
            continue
        found[str(f.relative_to(out))] = sorted(json.dumps(_normal(r), sort_keys=True) for r in read_jsonl(f))
    return found


def assert_same_records(resumed: Path, reference: Path) -> None:
    a, b = records(resumed), records(reference)
    assert sorted(a) == sorted(b), (sorted(set(a) ^ set(b)))
    for name in a:
        assert a[name] == b[name], f"{name}: records differ between the resumed and the uninterrupted run"
    for f in resumed.rglob("*.jsonl"):  # each line once (the sorted lists above equal; no key twice)
        if ".attempt-" not in f.name and f.name != "cache.jsonl":
            lines = f.read_text().splitlines()
            assert len(lines) == len(set(lines)) or f.name in ("train_log.jsonl",), f


# PEFT writes the base model's path into an adapter's README.md and adapter_config.json: those are
# adapters.py's to make portable, not the pipelines' own records
PEFT_FILES = ("README.md", "adapter_config.json")


def assert_no_machine_path(out: Path, *paths: Path) -> None:
    """The run's own records — manifests, cards, tallies, its scale copy, every JSON/JSONL/YAML/text
    file — name no absolute path of this machine."""
    for f in out.rglob("*"):
        if f.suffix not in (".json", ".jsonl", ".yaml", ".md", ".txt") or f.name in PEFT_FILES:
            continue
        text = f.read_text()
        for p in paths:
            assert str(p) not in text, f"{f} names {p}"


ZYGOTE = """
import json, os, sys
sys.path.insert(0, {lib!r})
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import polyvox.cli
for name in {modules!r}:
    __import__(name)
# what transformers, TRL and PEFT load lazily, on first use, costs most of a small run's CPU
from transformers import (AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen3Config,  # noqa
                          Qwen3ForCausalLM, TrainerCallback)
from trl import GRPOConfig, GRPOTrainer  # noqa
from peft import LoraConfig, PeftModel, get_peft_model  # noqa
import datasets, math_verify  # noqa
print("ready", flush=True)
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        os.chdir(req["cwd"])
        fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        rc = 1
        try:
            if "code" in req:
                exec(req["code"], {{"argv": req["argv"]}})
                rc = 0
            else:
                rc = polyvox.cli.main(req["argv"])
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc or 0)
    print(pid, flush=True)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


class Zygote:
    """A process that imports polyvox and its heavy libraries once, then forks one child per run.

    Each run is a real process in its own session, killed with SIGKILL like any other; the fork
    saves the 5–15 s of CPU an interpreter spends importing torch, transformers and TRL, so a test
    can kill and restart a pipeline many times within the slow tier's budget. The zygote itself
    never runs a tensor operation, so its children start with no thread pool to inherit.
    """

    MODULES = ("torch", "transformers", "peft", "trl", "polyvox.judge", "polyvox.runs", "polyvox.grading",
               "polyvox.studies.personas.pipeline", "polyvox.studies.personas.router",
               "polyvox.studies.collab.pipeline", "polyvox.studies.collab.models", "polyvox.studies.collab.judge",
               "polyvox.studies.world.pipeline", "polyvox.studies.world.models", "polyvox.train.grpo",
               "polyvox.train.distill", "polyvox.train.fastgen", "polyvox.backends.hf", "polyvox.adapters")

    def __init__(self, root: Path, tmp: Path):
        script = tmp / "zygote.py"
        script.write_text(ZYGOTE.format(lib=str(root / "lib"), modules=self.MODULES))
        self.proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=root, env=_env(root), start_new_session=True)
        assert self.proc.stdout.readline().strip() == "ready"
        self.root, self.logs, self.log = root, tmp, None

    def start(self, argv: list, code: str | None = None) -> int:
        """Fork a child running ``polyvox argv`` (or ``code`` with ``argv`` in its globals); its pid."""
        self.log = self.logs / f"run-{time.time_ns()}.log"
        req = {"argv": list(map(str, argv)), "cwd": str(self.root), "log": str(self.log),
               **({"code": code} if code else {})}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def wait(self) -> int:
        """The last child's exit status (−9: killed)."""
        return int(self.proc.stdout.readline())

    @staticmethod
    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False

    def run(self, argv: list, code: str | None = None) -> None:
        self.start(argv, code)
        rc = self.wait()
        assert rc == 0, self.log.read_text()[-3000:]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def zygote(root, tmp_path_factory):
    z = Zygote(root, tmp_path_factory.mktemp("zygote"))
    yield z
    z.close()


def kill_and_resume(z: Zygote, argv: list, points, code: str | None = None) -> list[str]:
    """Start argv, SIGKILL it (its whole process group) at each point — a predicate that says the run got
    there, and a delay after it — restarting it after each kill; then let one more start finish."""
    reached = []
    for name, ready, delay in points:
        pid = z.start(argv, code)
        deadline = time.time() + 300
        while z.alive(pid) and time.time() < deadline and not ready():
            time.sleep(0.01)
        time.sleep(delay)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        rc = z.wait()
        if rc == -signal.SIGKILL:
            reached.append(f"killed at {name}")
        else:
            assert rc == 0, z.log.read_text()[-3000:]
            reached.append(f"finished before {name}")
    z.run(argv, code)
    return reached


def _exists(path: Path, n_lines: int = 0):
    return lambda: path.exists() and (n_lines == 0 or path.read_text().count("\n") >= n_lines)


def _glob(folder: Path, pattern: str, n: int = 1):
    return lambda: len(list(folder.glob(pattern))) >= n


def _env(root: Path) -> dict:
    # POLYVOX_GIT_COMMIT: manifests take the commit from here instead of running `git status`, which
    # takes the checkout's .git/index.lock; a SIGKILL to the run's process group would leave it behind
    # one intra-op thread: a micro model gains nothing from more, and idle OpenMP threads spin on a shared CPU
    return {**os.environ, "PYTHONPATH": str(root / "lib"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "POLYVOX_GIT_COMMIT": os.environ.get("POLYVOX_GIT_COMMIT", "kill-test")}


KILLED_JUDGE = """
import time
from polyvox import judge as J
def score(text, row):
    time.sleep(0.01)
    return -len(text)
J.run(argv[0], argv[1], argv[2], J.RubricJudge(score, "slow"), chunk=2)
"""


@pytest.mark.slow
def test_judge_run_killed_anywhere_resumes_to_the_same_verdicts(tmp_path, zygote):
    s = write_systems(tmp_path / "s.jsonl", 30)
    a, b, out, ref = f"{s}:x", f"{s}:y", tmp_path / "v", tmp_path / "ref"
    zygote.run([a, b, ref], KILLED_JUDGE)
    verdicts = out / J.VERDICTS
    points = [("the manifest", _exists(out / "manifest.json"), 0.0),  # before the first verdict
              ("verdict 4", _exists(verdicts, 4), 0.013),  # mid-chunk
              ("verdict 20", _exists(verdicts, 20), 0.0),
              ("verdict 40", _exists(verdicts, 40), 0.021),
              ("verdict 56", _exists(verdicts, 56), 0.0)]
    reached = kill_and_resume(zygote, [a, b, out], points, KILLED_JUDGE)
    print(reached)
    assert sum(r.startswith("killed") for r in reached) >= 4, reached
    assert_same_records(out, ref)
    judge = J.RubricJudge(lambda t, r: -len(t), "slow")
    assert J.tally(a, b, out, judge, n_boot=50)["overall"]["n"] == 30
    assert read_manifest(out)["status"] == "complete" and read_manifest(out)["kind"] == "judge"


# Micro scales: each stage does the least work that still runs its code (numbers mean nothing).
PERSONAS_MICRO = """
name: micro
model: {path: data/models/tiny-chat}
world: {n_users: 24, per_user: 2, seed: 0}
router: {h: 8, epochs: 5, lr: 3.0e-3, seed: 0}
distill: {top_k: 8, lora_rank: 2, lora_alpha: 4, lr: 2.0e-3, steps: 2, batch: 2, save_every: 1,
          validation_prompts: 2, teacher_temperature: 1.0}
arms: {losses: [forward], seeds: [0]}
generate: {backend: transformers, max_tokens: 12, batch_size: 64, threads: 1}
judge: {kind: rubric, chunk: 16, n_boot: 20}
"""

COLLAB_MICRO = """
name: micro
threads: 1
data: {world_levels: [1, 2], world_per_level: 6, qa_n: 12, seed: 0}
models:
  vocab: 300
  seq_len: 128
  batch: 4
  lr: 3.0e-3
  sizes:
    small: {hidden: 32, layers: 1, intermediate: 32, steps: 2}
    mid: {hidden: 32, layers: 1, intermediate: 48, steps: 2}
    big: {hidden: 32, layers: 1, intermediate: 64, steps: 2}
    large: {hidden: 32, layers: 1, intermediate: 80, steps: 2}
pd: {rank: 2, steps: 2, lr: 1.0e-3, batch: 4, slip: 0.3}
rl: {steps: 1, group: 2, prompts: 2, problems: 2, lr: 1.0e-4, max_tokens: 12}
eval: {world_per_level: 2, qa_n: 2, t_max: 4, max_retries: 1, max_tokens: 12, cascade_temperature: 0.7, batch_size: 64}
"""

# bands.if_empty: the hill-climbs train on the whole pool when a random model's band is empty
WORLD_MICRO = """
name: micro
seeds: [0]
problems_seed: 0
models: {seed: 0, n_per_level: 20, hidden: 32, layers: 1, vocab: 300, seq_len: 128, batch: 8, base_steps: 2,
         think_steps: 1}
rl: {lora_rank: 2, group: 2, prompts: 2, stage_steps: [1, 1], climb_steps: 1, eval_every: 100, lr: 2.0e-4,
     heldout_per_level: 1, heldout_samples: 1}
sampling: {max_tokens: 12, batch_size: 64, dtype: float32}
eval: {per_level: 1, n: 2, caps: [12], sweep_seeds: [0]}
bands: {pool_per_level: 1, group: 2, if_empty: whole-pool}
"""


def _scale_file(tmp: Path, name: str, text: str) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_personas_pipeline_killed_in_every_stage_resumes_to_the_same_records(tmp_path, root, zygote):
    scale = _scale_file(tmp_path, "micro", PERSONAS_MICRO)
    ref, out = tmp_path / "ref", tmp_path / "run"
    argv = ["personas", "run", "--scale", str(scale), "--out"]
    zygote.run(argv + [ref])
    heads = out / "heads" / "forward-s0"
    points = [("router", _exists(out / "router" / "test_pred.jsonl"), 0.0),
              ("heads", _exists(heads / "concise" / "train_log.jsonl"), 0.3),
              ("generate", _glob(out / "gen", "*/rollouts.jsonl", 3), 0.1),
              ("systems", _exists(out / "systems"), 0.0),
              ("judge", _exists(out / "judge" / J.VERDICTS), 0.05)]
    reached = kill_and_resume(zygote, argv + [out], points)
    print(reached)
    assert sum(r.startswith("killed") for r in reached) >= 4, reached
    assert_same_records(out, ref)
    assert json.loads((out / "judge" / "tallies.json").read_text()) == \
        json.loads((ref / "judge" / "tallies.json").read_text())
    assert read_manifest(out)["kind"] == "personas pipeline" and read_manifest(out / "router")["kind"] == "stage"
    assert_no_machine_path(out, tmp_path, root)


@pytest.mark.slow
def test_collab_pipeline_killed_in_every_stage_resumes_to_the_same_records(tmp_path, root, zygote):
    scale = _scale_file(tmp_path, "micro", COLLAB_MICRO)
    ref, out = tmp_path / "ref", tmp_path / "run"
    argv = ["collab", "run", "--scale", str(scale), "--out"]
    zygote.run(argv + [ref])
    points = [("models", _exists(out / "models" / "small" / "config.json"), 0.0),
              ("pd", _glob(out / "pd", "*/adapter_config.json", 1), 0.0),
              ("rl", _exists(out / "rl" / "manifest.json"), 0.5),
              ("eval", _glob(out / "eval", "*/trajectories.jsonl", 3), 0.05)]
    reached = kill_and_resume(zygote, argv + [out], points)
    print(reached)
    assert sum(r.startswith("killed") for r in reached) >= 3, reached
    assert_same_records(out, ref)
    assert read_manifest(out)["kind"] == "collab pipeline"
    assert_no_machine_path(out, tmp_path, root)


@pytest.mark.slow
def test_world_pipeline_killed_in_every_stage_resumes_to_the_same_records(tmp_path, root, zygote):
    scale = _scale_file(tmp_path, "micro", WORLD_MICRO)
    ref, out = tmp_path / "ref", tmp_path / "run"
    argv = ["world", "run", "--scale", str(scale), "--out"]
    zygote.run(argv + [ref])
    seed = out / "seed-0"
    points = [("models", _exists(out / "models" / "tiny-base" / "config.json"), 0.0),
              ("pilot", _exists(out / "pilot" / "think" / "samples" / "rollouts.jsonl"), 0.0),
              ("rl-panel", _exists(seed / "rl-panel" / "manifest.json"), 0.5),
              ("rl-think", _exists(seed / "rl-think" / "manifest.json"), 0.5),
              ("eval", _glob(seed / "eval", "cap-*/*/rollouts.jsonl", 1), 0.0),
              ("bands", _exists(out / "bands" / "panel" / "samples" / "rollouts.jsonl"), 0.0),
              ("bands-redraw", _exists(out / "bands-redraw" / "think" / "samples" / "manifest.json"), 0.0),
              ("hillclimb-panel", _exists(seed / "hillclimb-panel" / "manifest.json"), 0.3),
              ("hillclimb-think", _exists(seed / "hillclimb-think" / "manifest.json"), 0.2)]
    reached = kill_and_resume(zygote, argv + [out], points)
    print(reached)
    assert sum(r.startswith("killed") for r in reached) >= 7, reached
    assert_same_records(out, ref)
    assert read_manifest(out)["kind"] == "world pipeline"
    assert_no_machine_path(out, tmp_path, root)
