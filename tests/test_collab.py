"""Part III: the scheduler's rules on scripted agents, kill/resume of a collaboration run,
cost recomputed from trajectory records, projections, the step judge, a dead endpoint."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from polyvox.backends.base import Completion
from polyvox.formats import Prompt
from polyvox.records import Problem, read_jsonl
from polyvox.studies.collab import cost, projections, scheduler
from polyvox.studies.collab.judge import pyramid_reward, step_judge
from polyvox.studies.collab.protocol import format_turn, parse_turn

AGENTS = ("small", "mid", "big")


class Scripted:
    """An agent whose turn is script(agent, prompt, call_index) -> text; counts calls."""

    name = "scripted"

    def __init__(self, agent, script, delay=0.0):
        self.agent, self.script, self.delay, self.calls = agent, script, delay, 0

    def prompt(self, fmt, text):
        return Prompt(text, (), False)

    def identity(self):
        return {"backend": "scripted", "model": self.agent}

    def generate(self, reqs, params):
        out = []
        for r in reqs:
            time.sleep(self.delay)
            text = self.script(self.agent, r.prompt, self.calls)
            self.calls += 1
            out.append(Completion(text, len(r.prompt.split()), len(text.split()), "stop", 0.001))
        return out


def pool(script, delay=0.0):
    return {a: Scripted(a, script, delay) for a in AGENTS}


def q(i=0, gold="7"):
    return Problem(f"q{i}", f"What is {i} + 7?", gold, {"task": "world", "steps": [f"{i} + 7 = {i + 7}"]})


def run_one(script, **kw):
    sc = scheduler.Scheduler(pool(script), "small", **kw)
    [t] = sc.run_all([q()])
    return t


def test_confirm_on_first_turn():
    t = run_one(lambda a, p, i: format_turn("0 + 7 = 7.", "7", "stop"))
    assert t.status == "confirmed" and t.final == "7" and len(t.turns) == 1


def test_handoff_passes_state_and_note():
    seen = []

    def script(agent, prompt, i):
        seen.append((agent, prompt))
        return format_turn("r", "5", "handoff", "big", "check it") if agent == "small" else format_turn("r", "7", "stop")
    t = run_one(script)
    assert [x["agent"] for x in t.turns] == ["small", "big"]
    assert t.final == "7" and "small answered 5; handoff big; note: check it" in seen[1][1]


def test_empty_stop_is_retried_then_forced_handoff():
    def script(agent, prompt, i):
        return format_turn("r", None, "stop") if agent == "small" else format_turn("r", "7", "stop")
    t = run_one(script, max_retries=1)
    assert [x["agent"] for x in t.turns] == ["small", "small", "mid"]
    assert [x["violation"] for x in t.turns[:2]] == ["empty stop", "empty stop"]
    assert t.turns[0]["forced_handoff"] is None and t.turns[1]["forced_handoff"] == "mid"
    assert t.turns[1]["attempt"] == 1 and t.status == "confirmed"


def test_malformed_action_is_a_violation_under_the_same_rule():
    def script(agent, prompt, i):
        if agent == "small":
            return "<think>r</think> <answer>3</answer> <action>pass it on</action>"
        return format_turn("r", "7", "stop")
    t = run_one(script, max_retries=2)
    assert [x["agent"] for x in t.turns] == ["small"] * 3 + ["mid"]
    assert all(x["violation"].startswith("malformed action") for x in t.turns[:3])
    assert t.turns[2]["forced_handoff"] == "mid"


def test_unknown_agent_and_missing_action_are_violations():
    assert parse_turn("<answer>1</answer> <action>handoff huge | x</action>", AGENTS).violation == "unknown agent 'huge'"
    assert parse_turn("<answer>1</answer>", AGENTS).violation == "no action"
    assert parse_turn("<answer>1</answer><action>stop</action><action>stop</action>", AGENTS).violation == "several actions"
    ok = parse_turn(format_turn("a", "1", "handoff", "mid", "n"), AGENTS)
    assert ok.violation is None and (ok.action, ok.target, ok.note) == ("handoff", "mid", "n")


def test_t_max_ends_an_endless_conversation():
    ring = {"small": "mid", "mid": "big", "big": "small"}
    t = run_one(lambda a, p, i: format_turn("r", str(i), "handoff", ring[a], "go on"), t_max=12)
    assert t.status == "t_max" and len(t.turns) == 12 and t.final is None
    assert [x["agent"] for x in t.turns[:4]] == ["small", "mid", "big", "small"]


def test_retries_count_toward_t_max():
    t = run_one(lambda a, p, i: "no protocol at all", t_max=5, max_retries=1)
    assert len(t.turns) == 5 and t.status == "t_max"
    assert [x["agent"] for x in t.turns] == ["small", "small", "mid", "mid", "big"]


def test_batched_rounds_group_questions_by_agent():
    agents = pool(lambda a, p, i: format_turn("r", "7", "handoff", "mid") if a == "small" else format_turn("r", "7", "stop"))
    sc = scheduler.Scheduler(agents, "small")
    done = sc.run_all([q(i) for i in range(5)])
    assert len(done) == 5 and agents["small"].calls == 5 and agents["mid"].calls == 5


def test_run_writes_records_and_manifest_and_refuses_other_settings(tmp_path):
    sc = scheduler.Scheduler(pool(lambda a, p, i: format_turn("r", "7", "stop")), "small")
    out = scheduler.run(tmp_path / "r", [q(i) for i in range(3)], sc, {"system": "x"})
    recs = scheduler.load(out)
    assert sorted(r["id"] for r in recs) == ["q0", "q1", "q2"]
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "complete" and man["settings"]["t_max"] == 12
    with pytest.raises(ValueError, match="other settings"):
        scheduler.run(tmp_path / "r", [q(i) for i in range(3)], sc, {"system": "y"})



def test_recorded_trajectories_are_typed_records(tmp_path):
    """A trajectories line is read as scheduler.TrajectoryRecord (turns: TurnRecord), strictly: a bad field,
    a turn without its text, an unfinished or miscounted record is an error naming file, line and field."""
    from polyvox.records import RecordError

    sc = scheduler.Scheduler(pool(lambda a, p, i: format_turn("r", "7", "stop")), "small")
    out = scheduler.run(tmp_path / "r", [q(i) for i in range(2)], sc, {"system": "x"})
    path = out / scheduler.TRAJECTORIES
    good = path.read_text().splitlines()
    rec = scheduler.read_record(json.loads(good[0]))
    assert rec.status == scheduler.TrajectoryStatus.CONFIRMED == "confirmed" and rec.n_turns == 1
    for change, message in [(lambda r: r.update(status="done"), "status"),
                            (lambda r: r.update(n_turns="1"), "n_turns"),
                            (lambda r: r["turns"][0].pop("text"), "turns[0]: missing field 'text'"),
                            (lambda r: r.update(status="open"), "unfinished"),
                            (lambda r: r.update(n_turns=2), "n_turns 2 but 1 turns"),
                            (lambda r: r.pop("id"), "'id'")]:
        bad = json.loads(good[1])
        change(bad)
        path.write_text(good[0] + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(RecordError, match=r"trajectories.jsonl:2: .*" + message.replace("[", r"\[")):
            scheduler.load(out)
        with pytest.raises(RecordError, match="trajectories.jsonl:2"):
            scheduler.run(out, [q(i) for i in range(2)], sc, {"system": "x"})

KILL_SCRIPT = """
import sys, time
sys.path.insert(0, {lib!r})
sys.path.insert(0, {tests!r})
from test_collab import pool, q
from polyvox.studies.collab import scheduler
from polyvox.studies.collab.protocol import format_turn
ring = {{"small": "mid", "mid": "big", "big": "small"}}
def script(a, p, i):
    return format_turn("r", "7", "stop") if a == "big" else format_turn("r", "6", "handoff", ring[a], "n")
sc = scheduler.Scheduler(pool(script, delay={delay}), "small")
scheduler.run(sys.argv[1], [q(i) for i in range(12)], sc, {{"system": "kill"}}, chunk=2)
"""


@pytest.mark.slow  # moved out of the fast tier (over 1.5 s on 2 cores)
def test_kill_and_resume_loses_nothing_and_duplicates_nothing(tmp_path, root):
    out = tmp_path / "run"
    script = tmp_path / "go.py"
    script.write_text(KILL_SCRIPT.format(lib=str(root / "lib"), tests=str(root / "tests"), delay=0.05))
    proc = subprocess.Popen([sys.executable, str(script), str(out)], start_new_session=True)
    path = out / scheduler.TRAJECTORIES
    deadline = time.time() + 60
    while time.time() < deadline and not (path.exists() and path.read_text().count("\n") >= 4):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = read_jsonl(path)
    assert 4 <= len(partial) < 12
    with path.open("a") as fh:  # a torn line, as a kill in mid-write leaves
        fh.write('{"id": "q11", "turns": [')
    script.write_text(KILL_SCRIPT.format(lib=str(root / "lib"), tests=str(root / "tests"), delay=0.0))
    subprocess.run([sys.executable, str(script), str(out)], check=True)
    recs = read_jsonl(path)
    ids = [r["id"] for r in recs]
    assert sorted(ids) == sorted(f"q{i}" for i in range(12)) and len(ids) == len(set(ids))
    assert recs[:len(partial)] == partial
    assert all(r["status"] == "confirmed" and r["n_turns"] == 3 for r in recs)


def test_cost_is_recomputed_from_trajectory_records(tmp_path):
    def script(agent, prompt, i):
        # small writes 4 words, mid 6, big 8 (the scripted backend counts words as tokens)
        return {"small": "<think>a</think> <answer>1</answer> <action>handoff mid | x</action> w",
                "mid": "<think>a b</think> <answer>1</answer> <action>handoff big | x</action> w w w",
                "big": "<think>a</think> <answer>7</answer> <action>stop</action> w w w w w"}[agent]
    sc = scheduler.Scheduler(pool(script), "small")
    out = scheduler.run(tmp_path / "c", [q(0), q(1)], sc, {"system": "cost"})
    recs = scheduler.load(out)
    toks = {a: len(script(a, "", 0).split()) for a in AGENTS}
    weights = {"small": 1.7, "mid": 4.0, "big": 8.0, "large": 14.0}
    want = (1.7 * toks["small"] + 4 * toks["mid"] + 8 * toks["big"]) / 27.7
    c = cost.question_cost(recs[0], weights)
    assert c["calls"] == 3 and c["tokens"] == toks and c["weighted_tokens"] == pytest.approx(want)
    run = cost.run_cost(recs, weights)
    assert run["weighted_tokens"] == pytest.approx(want) and run["calls"] == 3
    with pytest.raises(ValueError, match="no weight"):
        cost.question_cost(recs[0], {"small": 1.0})


def test_cost_is_charged_by_the_model_that_wrote_each_turn(root):
    """homo's three roles are all copies of mid (pipeline.eval_systems): a turn by role 'small' is
    charged at mid's weight. The other systems' roles are their own models, so their costs are
    those of charging by role name."""
    from polyvox.studies.collab import analysis

    w = {"small": 1.7, "mid": 4.0, "big": 8.0, "large": 14.0}
    traj = {"id": "q", "turns": [{"agent": "small", "completion_tokens": 10},
                                 {"agent": "big", "completion_tokens": 5}]}
    for full in (False, True):
        roles = analysis.role_models(full)
        assert roles["homo"] == {"small": "mid", "mid": "mid", "big": "mid"}
        assert all(roles[k] == {a: a for a in AGENTS} for k in ("cl", "cl-pd", "cl-base"))
    homo = cost.question_cost(traj, w, analysis.role_models()["homo"])
    assert homo["weighted_tokens"] == pytest.approx(4.0 * 15 / 27.7)  # by role name it would be (17 + 40) / 27.7
    assert homo["tokens"] == {"small": 10, "big": 5} and homo["model_tokens"] == {"mid": 15}
    assert cost.question_cost(traj, w)["weighted_tokens"] == pytest.approx((1.7 * 10 + 8 * 5) / 27.7)
    # the shipped run: summary/scores charge homo at mid's weight by default, the rest unchanged
    runs = analysis.load(root / "data/runs/collab-h200/eval")
    weights = analysis.cost_weights(root / "data/models/collab-h200")
    systems = {k: v for k, v in {**runs, **analysis.derived_systems(runs)}.items() if not k.startswith("sample-")}
    summ = analysis.summary(systems, weights).query("task == 'all'").set_index("system").weighted_tokens
    by_role = analysis.summary(systems, weights, models={}).query("task == 'all'").set_index("system").weighted_tokens
    norm = sum(weights.values())
    mid_only = sum(weights["mid"] * t["completion_tokens"] / norm for r in runs["homo"] for t in r["turns"]) / len(runs["homo"])
    assert summ["homo"] == pytest.approx(mid_only) and summ["homo"] > by_role["homo"] * 1.3
    for k in ("solo-small", "solo-mid", "solo-big", "solo-large", "vote", "cascade", "cl", "cl-pd", "cl-base"):
        assert summ[k] == pytest.approx(by_role[k]), k
    sc = analysis.scores(systems, weights)
    assert sc["homo"].weighted_tokens.mean() == pytest.approx(mid_only)


def test_provenance_device_is_recorded_or_marked_inferred():
    from polyvox.studies.collab.analysis import device_of

    assert device_of({"device": "cuda", "versions": {"torch": "2.11.0"}}) == "cuda"
    assert device_of({"versions": {"torch": "2.11.0+cu128"}}) == "cu128"
    assert device_of({"versions": {"torch": "2.11.0", "platform": "Linux-6.18.44-fc-v657-gpu-x86_64-with-glibc2.39"}}) \
        == "GPU host (inferred from platform)"
    assert device_of({"versions": {"torch": "2.11.0", "platform": "Linux-6.8.0-gpus-x86_64"}}) == "not recorded"
    assert device_of({}) == "not recorded"


def test_projections_name_their_source():
    t = {"status": "t_max", "final": None, "turns": [{"answer": "5"}, {"answer": None}, {"answer": "7"}, {"answer": "7"}]}
    assert projections.project(t, "final") == (None, "none")
    assert projections.project(t, "first") == ("5", "first_tentative")
    assert projections.project(t, "last") == ("7", "last_tentative")
    assert projections.project(t, "final_or_last") == ("7", "last_tentative")
    assert projections.project(t, "vote") == ("7", "vote")
    assert projections.project(t, "study") == ("5", "first_tentative")
    c = {"status": "confirmed", "final": "7", "turns": [{"answer": "5"}, {"answer": "7"}]}
    assert projections.project(c, "study") == ("7", "final") and projections.project(c, "final") == ("7", "final")


def test_step_judge_and_pyramid_reward():
    p = Problem("w", "A jar holds 12 pears...", "51", {"task": "world", "steps": ["12 + 5 = 17", "17 × 3 = 51"]})
    assert step_judge("We start with 12. 12 + 5 = 17. 17 × 3 = 51.", p.metadata) == 1.0
    assert step_judge("12 + 5 = 17. 17 × 3 = 52.", p.metadata) == pytest.approx(0.25)
    r, correct, valid = pyramid_reward(format_turn("12 + 5 = 17. 17 × 3 = 51.", "51", "stop"), p)
    assert (r, correct, valid) == (pytest.approx(1.0), True, True)
    r, correct, valid = pyramid_reward("<think>12 + 5 = 17.</think> <answer>50</answer>", p)
    assert r == pytest.approx(0.65 * 0.5) and not correct and not valid


def test_dead_endpoint_is_one_line_naming_the_agent():
    from polyvox.backends import make_backend

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = make_backend("openai", "m", base_url=f"http://127.0.0.1:{port}", api_key_env=None, max_retries=1,
                        backoff_s=0.01, timeout_s=2)
    agents = {**pool(lambda a, p, i: format_turn("r", "1", "handoff", "mid")), "mid": dead}
    sc = scheduler.Scheduler(agents, "small")
    with pytest.raises(scheduler.AgentError) as err:
        sc.run_all([q()])
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"agent mid (http://127.0.0.1:{port}) failed after retries")


def test_shipped_records_recompute(root):
    """The recorded cpu run: every trajectory parses, costs recompute from its turns, and the
    pool's cost weights come from the shipped models' parameter counts."""
    from polyvox.studies.collab import analysis

    runs = analysis.load(root / "data/runs/collab-h200/eval")
    weights = analysis.cost_weights(root / "data/models/collab-h200")
    assert set(weights) == {"small", "mid", "big", "large"} and weights["small"] < weights["mid"] < weights["big"] < weights["large"]
    assert {"solo-small", "solo-large", "cl", "cl-pd", "cl-base", "homo", "sample-small", "sample-mid"} <= set(runs)
    ids = [r["id"] for r in runs["cl"]]
    roles = analysis.role_models(full=True, pd_dir=root / "data/runs/collab-h200/pd")
    for name, recs in runs.items():
        assert [r["id"] for r in recs] == ids, name  # every system answered the same questions, once each
        model = roles.get(name, {})
        for r in recs:
            c = cost.question_cost(r, weights, model)
            assert c["calls"] == r["n_turns"] == len(r["turns"]) <= 12
            want = sum(weights[model.get(t["agent"], t["agent"])] * t["completion_tokens"]
                       for t in r["turns"]) / sum(weights.values())
            assert c["weighted_tokens"] == pytest.approx(want)
    derived = analysis.derived_systems(runs)
    assert all(len(derived[k]) == len(ids) for k in ("vote", "cascade"))


SYNTHETIC_LOG = """Toy evaluation summary written for this test
problems: 5
correct: 3
EM: 60.00%
F1: 70.00%

Rows (JSONL):
{"problem_id": "toy_0", "answer": "3", "gold_answer": "3", "answer_source": "first_tentative_overlong", "em": 1, "soft_f1": 1.0}
{"problem_id": "toy_1", "answer": "8", "gold_answer": "9", "answer_source": "first_tentative_overlong", "em": 0, "soft_f1": 0.5}
{"problem_id": "toy_2", "answer": "x", "gold_answer": "x", "answer_source": "first_tentative_overlong", "em": 1, "soft_f1": 1.0}
{"problem_id": "toy_3", "answer": "2", "gold_answer": "2", "answer_source": "raw_final_answer", "em": 1, "soft_f1": 1.0}
{"problem_id": "toy_4", "answer": "0", "gold_answer": "1", "answer_source": "raw_final_answer", "em": 0, "soft_f1": 0.0}
"""


def test_audit_count_recounts_a_log_and_compares_with_the_shipped_json(tmp_path, root):
    from polyvox.studies.collab import audit_count

    c = audit_count.count(SYNTHETIC_LOG)
    assert c["answer_source_counts"] == {"first_tentative_overlong": {"rows": 3, "correct": 2, "wrong": 1},
                                         "raw_final_answer": {"rows": 2, "correct": 1, "wrong": 1}}
    assert (c["rows"], c["correct"]) == (5, 3) and c["header"] == {"problems": 5, "correct": 3, "em_percent": 60.0,
                                                                    "f1_percent": 70.0}
    shipped = json.loads(json.dumps({"answer_source_counts": c["answer_source_counts"], "header": c["header"]}))
    assert audit_count.compare(c, shipped) == []
    shipped["answer_source_counts"]["raw_final_answer"]["correct"] = 2
    assert audit_count.compare(c, shipped) == ["raw_final_answer.correct: shipped 2, counted 1"]
    # the command line: exit 0 when the log reproduces the JSON, 1 (with the disagreement) otherwise
    log, good, bad = tmp_path / "evaluation.log", tmp_path / "good.json", tmp_path / "bad.json"
    log.write_text(SYNTHETIC_LOG)
    good.write_text(json.dumps({"answer_source_counts": c["answer_source_counts"], "header": c["header"]}))
    bad.write_text(json.dumps(shipped))
    env = {**os.environ, "PYTHONPATH": str(root / "lib")}
    ok = subprocess.run([sys.executable, "-m", "polyvox.studies.collab.audit_count", str(log), "--audit", str(good)],
                        capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and "agrees with" in ok.stdout
    no = subprocess.run([sys.executable, "-m", "polyvox.studies.collab.audit_count", str(log), "--audit", str(bad)],
                        capture_output=True, text=True, env=env)
    assert no.returncode == 1 and "raw_final_answer.correct: shipped 2, counted 1" in no.stderr
    # the shipped audit file holds what compare() reads, and its own totals are consistent
    audit = json.loads((root / "data/collab/study_audit.json").read_text())
    src = audit["answer_source_counts"]
    assert sum(v["rows"] for v in src.values()) == audit["header"]["problems"]
    assert sum(v["correct"] for v in src.values()) == audit["header"]["correct"]
    assert all(v["rows"] == v["correct"] + v["wrong"] for v in src.values())


def test_paired_tests_and_topology_from_records(root):
    """The chapter's verdicts and topology come from these functions; check them on the shipped run."""
    from polyvox.studies.collab import analysis

    t = analysis.exact_mcnemar([1, 1, 1, 0, 1], [0, 0, 0, 0, 1])
    assert (t["a_only"], t["b_only"]) == (3, 0) and t["p"] == pytest.approx(0.25)
    assert analysis.verdict({"a_only": 11, "b_only": 0, "p": 0.001}) == "higher"
    runs = analysis.load(root / "data/runs/collab-h200/eval")
    topo = analysis.topology(runs["cl"]).set_index("agent")
    h = analysis.handoffs(runs["cl"])
    assert topo.turns.sum() == sum(len(r["turns"]) for r in runs["cl"]) == len(h)
    assert (topo.retries + topo["voluntary hand-offs"] + topo["forced hand-offs"]).sum() + len(runs["cl"]) == len(h)
    assert topo.violations.sum() == analysis.violations(runs["cl"])["violations"]
    prov = analysis.provenance(root / "data/runs/collab-h200/eval", full=True).set_index("arm")
    assert prov.loc["solo-small", "weights"] == "base (no PD)" and "RL" in prov.loc["cl", "weights"]
