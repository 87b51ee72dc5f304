"""tiny-judge (issue 22, item 4): the persona world's pairwise data and its ground truth, the judge model trained
on it, its calibration on held-out pairs, and the judge served by a real `transformers serve` through
`polyvox judge plan|run|tally`.

Fast tests build the data and measure scripted and program judges; the slow ones train the smoke judge once
(through its command line) and use the saved folder: loaded by ``from_pretrained``, calibrated, served."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import serve

from polyvox import judge as J
from polyvox.studies.personas import judge_calibration as C
from polyvox.studies.personas import judge_data as D
from polyvox.studies.personas import judge_model as M
from polyvox.studies.personas import world as pw
from polyvox.studies.personas.judging import rubric_judge

MODULE = "polyvox.studies.personas.judge_model"


def problem():
    return pw.prompts(24, 1, 0, split="train")[0].problem


def cand(poles, correct=True, seed=0):
    import random

    return D.candidate(problem(), tuple(poles), correct, random.Random(seed))


def test_ground_truth_is_the_rubric_sum_from_generation_labels():
    p = problem()
    wrong = cand(("warm", "concise"), correct=False)
    assert pw.final_integer(wrong.text) != str(p.answer) and pw.style_of(wrong.text)["tone"] == "warm"
    assert D.utility(cand(("warm", "concise")), "warm+concise") == 3 and D.utility(wrong, "warm+concise") == 2
    assert D.truth(wrong, cand(()), "warm+concise") == "A"  # two poles outweigh the right answer, as in the rubric
    assert D.truth(cand(()), wrong, "concise") == "tie"  # right and neutral vs wrong and concise: 1 = 1
    assert D.truth(cand(("warm", "concise")), cand(("warm", "thorough")), "warm") == "tie"
    # the documented departure: a neutral tone earns an impersonal user 1/4 in the rubric, 0 in the truth
    neutral, warm = cand(("concise",)), cand(("warm", "concise"))
    assert D.truth(neutral, warm, "impersonal+concise") == "tie"
    call = D.JudgePair("x/0", "u", "train", "x", "q", "impersonal+concise", str(p.answer), len(p.steps),
                       p.expression, neutral, warm, "tie").call()
    assert rubric_judge().ask([call]) == ["[[A]]"]


def test_pairs_come_from_training_users_and_held_out_pairs_share_nothing():
    train = D.make_pairs("train", 64, 3, 2)
    held = D.make_pairs("test", 64, 3, 1)
    split_of = {u.id: u.split for u in pw.users(64)}
    assert {split_of[p.user] for p in train} == {"train"} and {split_of[p.user] for p in held} == {"test"}
    assert len(train) == 2 * 3 * sum(s == "train" for s in split_of.values())
    D.check_disjoint(train, held)
    with pytest.raises(ValueError, match="share .* user"):
        D.check_disjoint(train, train[:3])
    assert all(p.first.text != p.second.text for p in train + held)
    assert set(D.label_counts(train)) == {"A", "B", "tie"} and min(D.label_counts(train).values()) > 0.2 * len(train)
    assert D.digest(train) == D.digest(D.make_pairs("train", 64, 3, 2))  # seeded: the same pairs again
    assert D.digest(train) != D.digest(D.make_pairs("train", 64, 3, 2, seed=1))


class Recording:
    """A backend that records what LLMJudge sends and answers a fixed reply."""

    name = "recording"

    def __init__(self, reply="[[A]]"):
        self.sent, self.reply = [], reply

    def identity(self):
        return {"backend": "recording"}

    def generate(self, requests, params):
        from polyvox.backends.base import Completion

        self.sent += requests
        return [Completion(self.reply, 0, 1, "stop", 0.0) for _ in requests]


def test_training_examples_are_what_the_llm_judge_sends():
    pairs = D.make_pairs("train", 32, 1, 1)[:5]
    be = Recording()
    J.LLMJudge(be).ask([c for p in pairs for c in (p.call(False), p.call(True))])
    examples = D.examples(pairs)
    assert [r.prompt for r in be.sent] == [e[0] for e in examples] and all(r.chat for r in be.sent)
    for p, (ab, ba) in zip(pairs, zip(examples[::2], examples[1::2])):
        assert J.parse_verdict(ab[1]) == p.truth and J.parse_verdict(ba[1]) == D.swap(p.truth)
    # in-process calibration renders the message as a server does: the tokens the model was trained on
    from polyvox.train.pretrain import train_tokenizer

    from polyvox.backends.base import local_prompt

    tok = train_tokenizer([e[0] + " " + e[1] for e in examples], None, 400)
    rows = M.encode(tok, examples, 512)
    assert [tok(local_prompt(tok, r), add_special_tokens=False)["input_ids"] for r in be.sent] == \
        [ids[:n] for ids, n in rows]


def in_unit(r: C.Rate) -> bool:
    return r.n > 0 and 0 <= r.low <= r.rate <= r.high <= 1 and (r.user_low is None or 0 <= r.user_low <= r.user_high <= 1)


def test_calibration_of_the_rubric_and_of_a_judge_that_always_picks_a():
    held = D.make_pairs("test", 128, 2, 1)
    rubric = C.measure(held, C.judge_verdicts(rubric_judge(), held), n_boot=200)
    assert rubric["agreement_rubric"].rate == 1.0 and rubric["flip_rate"].rate == 0.0
    assert rubric["agreement_truth"].rate == rubric["rubric_agreement_truth"].rate < 1.0
    assert rubric["verdicts"]["unparseable"] == 0 and rubric["calls"] == 2 * len(held)
    first = C.measure(held, C.judge_verdicts(J.LLMJudge(Recording("[[A]]")), held), n_boot=200)
    assert first["flip_rate"].rate == 1.0 and first["first_pick"].rate == 1.0
    # every pair folds to a tie: its agreement with the truth is the share of true ties
    assert first["agreement_truth"].k == first["true_tie_share"].k
    assert all(b.judge_a.rate in (None, 1.0) for b in first["length_bins"])
    assert sum(b.calls for b in first["length_bins"]) == first["calls"]
    for m in C.Calibration.RATES:
        assert in_unit(rubric[m]) and in_unit(first[m]), m
    garbage = C.measure(held, C.judge_verdicts(J.LLMJudge(Recording("no idea")), held), n_boot=50)
    assert garbage["verdicts"]["unparseable"] == garbage["calls"] and garbage["agreement_truth"].n == 0


def test_settings_are_checked():
    assert M.settings_for("h200").device == "cuda" and M.settings_for("smoke", steps=7).steps == 7
    for bad, match in (({"steps": 0}, "steps"), ({"lr": -1.0}, "lr"), ({"head_dim": 48}, "multiple"),
                       ({"held_split": "train"}, "held_split"), ({"bogus": 1}, "unknown judge setting")):
        with pytest.raises(ValueError, match=match):
            M.settings_for("smoke", **bad)
    with pytest.raises(ValueError, match="unknown judge size"):
        M.settings_for("huge")


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_line_refusal(args, capsys, match):
    capsys.readouterr()  # what earlier steps wrote (a progress bar) is not this refusal's
    assert M.main(args) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("judge_model: ") and "\n" not in err and "Traceback" not in err and match in err, err


def test_refuses_a_complete_or_foreign_folder_before_any_work(tmp_path, capsys):
    done = tmp_path / "done"
    done.mkdir()
    (done / "manifest.json").write_text(json.dumps({"kind": M.KIND, "status": "complete"}))
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    before = snapshot(tmp_path)
    one_line_refusal(["train", "--out", str(done), "--quiet"], capsys, "already holds a complete judge model")
    one_line_refusal(["train", "--out", str(other), "--quiet"], capsys, "not empty")
    one_line_refusal(["calibrate", "--model", str(other), "--quiet"], capsys, "not a complete judge model")
    assert snapshot(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["done", "other"]


# ---------------------------------------------------------------- the trained smoke judge (slow)

@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    """The smoke judge, trained once through the command line (CPU), for 20 steps at a high learning rate
    (configs/personas/smoke.yaml's judge): enough for verdicts the parser reads, which is all these tests ask."""
    out = tmp_path_factory.mktemp("judge") / "tiny-judge"
    r = subprocess.run([sys.executable, "-m", MODULE, "train", "--out", str(out), "--size", "smoke", "--steps", "20",
                        "--lr", "1e-2", "--quiet"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    print(r.stdout)
    return out


@pytest.mark.slow
def test_trained_judge_is_a_loadable_qwen3_with_its_manifest(judge_dir, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    m = M.read_manifest(judge_dir)
    s = M.settings_for("smoke", steps=20, lr=1e-2)  # the fixture's
    assert m["kind"] == M.KIND and m["status"] == "complete" and m["settings"] == M.dataclasses.asdict(s)
    assert [r["step"] for r in m["train_log"]] == list(range(s.steps))
    losses = [r["loss"] for r in m["train_log"]]
    assert m["final_loss"] < 0.5 * losses[0]  # it learned at least the reply's format
    assert m["data"]["digest"] == D.digest(D.make_pairs("train", s.n_users, s.per_user, s.pairs_per_prompt))
    assert m["data"]["examples"] == 2 * m["data"]["train_pairs"] and m["data"]["train_users"] == 80
    names = {p.name for p in judge_dir.iterdir()}
    assert "model.safetensors" in names and not {n for n in names if n.endswith((".bin", ".pt", ".pkl"))}
    assert not [p for p in judge_dir.parent.iterdir() if ".partial-" in p.name]  # nothing left half-written
    model = AutoModelForCausalLM.from_pretrained(judge_dir)
    assert type(model).__name__ == "Qwen3ForCausalLM" and m["parameters"] == model.num_parameters()
    assert len(AutoTokenizer.from_pretrained(judge_dir)) == m["vocab"]
    before = snapshot(judge_dir)
    one_line_refusal(["train", "--out", str(judge_dir), "--quiet"], capsys, "already holds a complete judge model")
    assert snapshot(judge_dir) == before


@pytest.mark.slow
def test_calibration_on_held_out_pairs(judge_dir):
    r = subprocess.run([sys.executable, "-m", MODULE, "calibrate", "--model", str(judge_dir), "--quiet"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    print(r.stdout)  # the measured numbers (pytest -s shows them)
    rec = json.loads((judge_dir / C.FILE).read_text())
    assert rec["pairs"] == 96 and rec["users"] == 24 and rec["calls"] == 192 and rec["split"] == "test"
    assert rec["held"]["train_digest_matches_manifest"] is True
    assert sum(rec["verdicts"].values()) == 192 and len(rec["per_pair"]) == 96
    for m in C.Calibration.RATES:
        x = rec[m]
        if x["n"]:
            assert 0 <= x["low"] <= x["rate"] <= x["high"] <= 1, m
    assert rec["verdicts"]["unparseable"] == 0  # the trained judge answers in the format the parser reads
    assert "agreement_truth" in r.stdout and "flip_rate" in r.stdout


@pytest.mark.slow
def test_served_judge_through_polyvox_judge_plan_run_tally(judge_dir, tmp_path):
    """A real `transformers serve` of the trained judge; `polyvox judge plan|run|tally --judge openai` on six
    held-out pairs in both orders, and the rubric judge on the same pairs beside it."""
    held = D.make_pairs("test", 128, 4, 1)[:6]
    systems = tmp_path / "pairs.jsonl"
    systems.write_text("".join(json.dumps({**p.row(), "responses": {"first": p.first.text, "second": p.second.text}})
                               + "\n" for p in held))
    a, b = f"{systems}:first", f"{systems}:second"
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}

    def polyvox(*args):
        r = subprocess.run([sys.executable, "-m", "polyvox.cli", "judge", *args, "--a", a, "--b", b],
                           capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout

    with serve(judge_dir) as (url,):
        model = ["--judge", "openai", "--model", str(judge_dir), "--base-url", url, "--concurrency", "2"]
        plan = polyvox("plan", "--out", str(tmp_path / "model"), *model)
        assert "6 prompts, 0 identical (free ties), 12 judge calls needed, 0 cached: 12 calls to make" in plan
        polyvox("run", "--out", str(tmp_path / "model"), *model)
        tally = polyvox("tally", "--out", str(tmp_path / "model"), *model, "--by", "preference", "--n-boot", "50")
        assert "12 calls to make" not in polyvox("plan", "--out", str(tmp_path / "model"), *model)
    polyvox("run", "--out", str(tmp_path / "rubric"), "--judge", "rubric")
    print(tally, polyvox("tally", "--out", str(tmp_path / "rubric"), "--judge", "rubric", "--n-boot", "50"))
    recs = [json.loads(x) for x in (tmp_path / "model" / J.VERDICTS).read_text().splitlines()]
    assert len(recs) == 12 and len({r["key"] for r in recs}) == 12
    assert {r["choice"] for r in recs} <= {"A", "B", "tie"}, [r["raw"] for r in recs]  # every verdict parsed
    assert "overall" in tally and "n=   6" in tally and "unparseable" not in tally
    assert len((tmp_path / "rubric" / J.VERDICTS).read_text().splitlines()) == 12


def test_verdict_accuracy_reads_the_reply_not_the_template():
    import torch

    a, b, tie = 7, 8, 9  # the template's "[[A]], [[B]] or [[tie]]" comes before the reply's verdict
    target = torch.tensor([[a, b, tie, 3, b, 4], [-100, -100, -100, -100, tie, 4], [1, 2, 3, 4, 5, 6]])
    mask = M.reply_verdicts(target, torch.tensor([a, b, tie]))
    assert mask.tolist() == [[False, False, False, False, True, False], [False, False, False, False, True, False],
                             [False] * 6]
