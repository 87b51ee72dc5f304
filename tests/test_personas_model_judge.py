"""Part II reads its judge model (issue 22, item 4) beside the rubric: the readers of ``judge-by-model/`` and of the
judge model's ``calibration.json`` (:mod:`polyvox.studies.personas.issue22`), the family computed with both judges
side by side (:mod:`polyvox.studies.personas.verdicts`), ``polyvox judge tally --run DIR --judge model`` and its
one-line refusal, and the chapter's section 7c cell, whose words are computed: one line for a run without a judge
model, "does not judge" or "judges" from the calibration's numbers otherwise.

The fast tests build a small run by hand, in the formats the pipeline writes: the rubric's ``judge/`` by
:func:`polyvox.judge.run`, the judge model's ``judge-by-model/`` by :func:`polyvox.studies.personas.judging._judge_all`
(the stage's own writer, verdicts and ``tallies.json``; the judge model replaced by a program that answers in its
place under a recorded identity), its ``stage.json`` by :class:`polyvox.stages.Stage`, and ``calibration.json`` as
:class:`polyvox.studies.personas.judge_calibration.Calibration` writes it. The slow test reads a real smoke run.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from pathlib import Path

import nbformat
import pandas as pd
import pytest

pytestmark = pytest.mark.slow  # 5 s of the fast suite's test time: in make test, not test-fast (its 60 s)
import yaml

from polyvox import cli, judge, records, stages
from polyvox.records import KIND_JUDGE
from polyvox.studies.personas import analysis as A
from polyvox.studies.personas import issue22 as I
from polyvox.studies.personas import judge_calibration as C
from polyvox.studies.personas import judging, pipeline
from polyvox.studies.personas import verdicts as V
from polyvox.studies.personas import world as pw

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = "ab" * 32
IDENTITY = {"judge": "llm", "backend": "transformers", "model": "model", "weights_sha256": WEIGHTS,
            "weights_hash": "content", "tokenizer_sha256": "cd" * 32, "chat_template_sha256": "ef" * 32,
            "generation_config_sha256": None, "adapter_sha256": None, "sampler": "gumbel-counter-splitmix64-v1",
            "batch_size": 64, "dtype": "auto: bf16 on GPU, fp32 on CPU", "max_tokens": 16,
            "template_sha256": "3c60d19de47e606d"}


class LongerJudge:
    """In place of the judge model: the answer with more words wins (an LLM judge's identity and parser)."""

    name = "llm"

    def identity(self) -> dict:
        return dict(IDENTITY)

    def ask(self, calls, attempt: int = 0) -> list[str]:
        n = lambda t: len(t.split())  # noqa: E731
        return ["[[A]]" if n(c.first) > n(c.second) else "[[B]]" if n(c.first) < n(c.second) else "[[tie]]"
                for c in calls]

    def parse(self, raw: str):
        from polyvox.judge.judges import parse_verdict

        return parse_verdict(raw)


def _texts(i: int, arm: str, gold: str) -> dict[str, str]:
    thorough = f"Step 1: add. Step 2: check it. The answer is {gold}."
    warm = f"Happy to help! The answer is {gold}. You are doing great!"
    t = {"base": f"The answer is {gold}.", "head_warm": warm, "head_impersonal": f"Result: {gold}",
         "head_concise": gold, "head_thorough": thorough, "router_head": warm if i % 3 == 0 else thorough,
         "router_persona": f"Glad you asked! {gold}", "oracle_head": f"Happy to help! Step 1: add. {gold}",
         "oracle_persona": f"{gold}. Keep it up!"}
    if arm == "reverse" and i % 2:
        t["router_head"], t["oracle_head"] = gold, f"Result: {gold if i % 4 == 1 else gold + '1'}"
    return t


def _scale() -> dict:
    s = copy.deepcopy(pipeline.load_scale("smoke"))
    s["judge"]["n_boot"] = 20
    return s


def _systems(run: Path, s: dict) -> None:
    (run / "systems").mkdir(parents=True)
    for arm in s["arms"]["losses"]:
        for seed in s["arms"]["seeds"]:
            rows = []
            for i in range(8):
                pref, gold = pw.TYPES[i % len(pw.TYPES)], str(10 + i)
                pick = pw.TYPES[(i + 1) % len(pw.TYPES)] if i % 5 else "none"
                rows.append({"prompt_id": f"u{i // 2:04d}-{i % 2}", "prompt": f"What is {gold} plus 0?",
                             "preference": pref, "gold": gold, "n_steps": 2, "user": f"u{i // 2:04d}",
                             "router_pick": pick, "pick_size": "none" if pick == "none" else
                             ("two poles" if "+" in pick else "one pole"), "arm": arm, "seed": seed,
                             "responses": _texts(i, arm, gold)})
            (run / "systems" / f"{arm}-s{seed}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _calibration(agree: int, ties: int, flip: int, n: int = 200, weights: str = WEIGHTS) -> C.Calibration:
    """A calibration record of ``n`` held-out pairs (as :func:`.judge_calibration.calibrate` writes it)."""
    r = C.rate
    bins = [C.LengthBin(None, -15, 10, {"A": 2, "B": 5, "tie": 3, "unparseable": 0}, r(2, 7), r(1, 4)),
            C.LengthBin(-15, 0, 20, {"A": 6, "B": 6, "tie": 8, "unparseable": 0}, r(6, 12), r(5, 10))]
    return C.Calibration(
        model="tiny-x/model", weights_sha256="12" * 32, split="test", pairs=n, users=n // 2, calls=2 * n,
        verdicts={"A": n // 2, "B": n // 2, "tie": n - 2, "unparseable": 2}, truth_labels={"A": 70, "B": 70, "tie": 60},
        agreement_rubric=r(agree - 5, n), agreement_truth=r(agree, n), call_agreement_rubric=r(2 * agree - 9, 2 * n),
        call_agreement_truth=r(2 * agree - 3, 2 * n), rubric_agreement_truth=r(n - 10, n), true_tie_share=r(ties, n),
        flip_rate=r(flip, n), first_pick=r(55, 100), longer_pick=r(60, 100), longer_pick_truth=r(50, 100),
        length_bins=bins, held={"split": "test", "judge": {**IDENTITY, "weights_sha256": weights}}, seconds=1.0)


def _write_calibration(run: Path, s: dict, cal: C.Calibration) -> Path:
    model = judging.judge_model_folder(run, s) / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / C.FILE).write_text(cal.to_json())
    return model / C.FILE


def _judge_by_model(run: Path, s: dict) -> None:
    folder = run / judging.MODEL_VERDICTS
    specs, tallies, calls, bad = judging._judge_all(run, s, folder, LongerJudge(), max_attempts=1)
    jm = judging.judge_model_folder(run, s).relative_to(run).as_posix()
    stage = stages.Stage("judge", folder, {}, lambda: None, hosts=KIND_JUDGE)
    stage.write(settings={"inputs": {"judge": "0" * 64, jm: "1" * 64, "systems": "2" * 64}, "scale": s["name"],
                          "verdicts": "judge model"},
                status="complete", calls_made=calls, unparseable=bad, identity=IDENTITY,
                judges={"judge": "rubric", judging.MODEL_VERDICTS: f"tiny-judge smoke, {jm}/model"})


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """``with``: a run with both judges and the judge model's calibration; ``without``: the same run before its
    judge model (no judge-by-model/, no judge-model/)."""
    top = tmp_path_factory.mktemp("model-judge")
    s = _scale()
    run = top / "with"
    _systems(run, s)
    (run / "scale.yaml").write_text(yaml.safe_dump(s, sort_keys=False))
    with pytest.MonkeyPatch.context() as mp:  # provenance (library versions, git commit) read once, not per record
        for module in (records, stages):
            mp.setattr(module, "library_versions", lambda v=records.library_versions(): v)
            mp.setattr(module, "git_commit", lambda c=records.git_commit(): c)
        for _name, a, b in judging.comparisons(s, run / "systems"):  # the rubric's verdicts (no tallies: not read)
            judge.run(a, b, run / "judge", judging.rubric_judge(), chunk=s["judge"]["chunk"])
        without = top / "without"
        shutil.copytree(run, without)
        _judge_by_model(run, s)
    _write_calibration(run, s, _calibration(agree=150, ties=60, flip=10))
    return {"with": run, "without": without, "scale": s}


def _chapter_tables(run: Path, s: dict):
    arms, seeds = s["arms"]["losses"], s["arms"]["seeds"]
    heads = pd.DataFrame([{"arm": a, "seed": sd, "head": p, "trained": True} for a in arms for sd in seeds
                          for p in pw.POLES])
    rows = [json.loads(x) for a in arms for sd in seeds
            for x in (run / "systems" / f"{a}-s{sd}.jsonl").read_text().splitlines()]
    trunc = pd.DataFrame([{"arm": r["arm"], "seed": r["seed"], "prompt_id": r["prompt_id"], "system": sy,
                           "truncated": sy == "head_thorough" or (sy == "router_head" and r["prompt_id"] == "u0001-0")}
                          for r in rows for sy in A.SYSTEMS])
    return heads, trunc


# ---------------------------------------------------------------- the readers

def test_the_judge_models_verdicts_are_read_under_their_recorded_identity(runs):
    run, s = runs["with"], runs["scale"]
    j = I.model_judge(run)
    assert j is not None and j.identity() == IDENTITY and j.verdicts_folder == "judge-by-model"
    assert A.verdicts_folder(j) == "judge-by-model" and A.verdicts_folder(pipeline.rubric_judge()) == "judge"
    with pytest.raises(RuntimeError, match="makes no calls"):
        j.ask([])
    model = {t["name"]: t["overall"] for t in json.loads((run / "judge-by-model" / "tallies.json").read_text())}
    differ = 0
    for name, a, b in pipeline.comparisons(s, run / "systems"):
        a, b = judging._rel(run, a), judging._rel(run, b)
        o = A.outcomes(run, a, b, j)
        assert not (o["outcome"] == "M").any(), name  # every verdict found under the recorded identity
        assert {k: int((o["outcome"] == k).sum()) for k in "WTL"} == {k: model[name][k] for k in "WTL"}, name
        r = A.outcomes(run, a, b, pipeline.rubric_judge())
        assert not (r["outcome"] == "M").any(), name
        differ += list(o["outcome"]) != list(r["outcome"])
    assert differ  # two judges, two sets of verdicts: the folder read is the judge's own
    assert I.model_judge(runs["without"]) is None


def test_a_stage_record_not_complete_or_without_identity_is_no_model_judge(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["with"], run)
    rec = json.loads((run / "judge-by-model" / "stage.json").read_text())
    for bad in ({**rec, "status": "running"}, {k: v for k, v in rec.items() if k != "identity"}):
        (run / "judge-by-model" / "stage.json").write_text(json.dumps(bad))
        assert I.model_judge(run) is None
        assert I.no_model_judge_line(run, runs["scale"]).startswith("This run has no model judge")
    (run / "judge-by-model" / "stage.json").write_text("{torn")
    assert I.model_judge(run) is None


def test_the_judge_models_record_in_words(runs, tmp_path):
    """Calls, unparseable verdicts, seconds and commit from the stage record, the device from the scale."""
    run, s = runs["with"], runs["scale"]
    rec = json.loads((run / "judge-by-model" / "stage.json").read_text())
    line = I.model_judge_record(run, s)
    assert line.startswith(f"{rec['calls_made']:,} calls, {rec['unparseable']:,} of them unparseable, on ")
    assert f"on {judging.judge_settings(s).device} at commit `{str(rec['git_commit'])[:7]}" in line
    assert I.model_judge_record(runs["without"], s) is None
    copy_ = tmp_path / "run"
    shutil.copytree(run, copy_)
    (copy_ / "judge-by-model" / "stage.json").write_text(json.dumps({**rec, "seconds": 405.6}))
    assert I.model_judge_record(copy_, s).startswith(f"{rec['calls_made']:,} calls, {rec['unparseable']:,} of them unparseable, in 406 s on ")
    (copy_ / "judge-by-model" / "stage.json").write_text(json.dumps({**rec, "status": "running"}))
    assert I.model_judge_record(copy_, s) is None


def test_the_calibration_is_the_one_the_verdicts_stage_names(runs, tmp_path):
    run, s = runs["with"], runs["scale"]
    assert I.model_judge_folder(run, s) == judging.judge_model_folder(run, s)
    assert I.model_judge_form(run, s) == {"verdicts": True, "calibration": True, "same model": True}
    assert I.no_model_judge_line(run, s) is None
    cal = I.calibration(run, s)
    assert cal == json.loads(_calibration(agree=150, ties=60, flip=10).to_json())
    t = I.calibration_table(cal)
    assert list(t["measure"]) == [label for _, label in I.CALIBRATION_ROWS]
    row = t.set_index("measure").loc[dict(I.CALIBRATION_ROWS)["flip_rate"]]
    f = cal["flip_rate"]
    assert (row["k"], row["n"], row["rate"]) == (10, 200, 0.05)
    assert row["95% CI (Wilson)"] == f"[{100 * f['low']:.0f}, {100 * f['high']:.0f}]" and row["95% CI (users)"] == ""
    lt = I.length_table(cal)
    assert list(lt["words A − B"]) == ["[−∞, −15)", "[−15, 0)"] and list(lt["calls"]) == [10, 20]
    assert lt["judge: share of A"].iloc[0] == 2 / 7 and lt["A / B / tie / unparseable"].iloc[0] == "2 / 5 / 3 / 0"
    # the stage names its judge model's folder: a scale whose judge_model changed since is not read instead
    other = copy.deepcopy(s)
    other["judge_model"]["steps"] = 3
    assert I.model_judge_folder(run, other) == judging.judge_model_folder(run, s)
    # a calibration of other weights than the verdicts' judge model
    moved = tmp_path / "run"
    shutil.copytree(run, moved)
    _write_calibration(moved, s, _calibration(agree=150, ties=60, flip=10, weights="99" * 32))
    assert I.model_judge_form(moved, s)["same model"] is False
    assert "a calibration of other weights" in I.no_model_judge_line(moved, s)
    (judging.judge_model_folder(moved, s) / "model" / C.FILE).unlink()
    assert I.calibration(moved, s) is None
    line = I.no_model_judge_line(moved, s)
    assert "has the judge model's verdicts" in line and "no calibration" in line


def test_a_run_without_a_judge_model_gets_one_computed_line(runs):
    s = runs["scale"]
    assert I.model_judge_form(runs["without"], s) == {"verdicts": False, "calibration": False, "same model": False}
    line = I.no_model_judge_line(runs["without"], s)
    assert line == ("This run has no model judge: it records no judge-by-model/ (the judge model's verdicts) and no "
                    "judge-model calibration, so every verdict on this page is the rubric judge's.")
    shipped = ROOT / "data" / "runs" / "personas-h200"
    old = pipeline.load_scale(shipped / "scale.yaml")
    assert "no judge_model section" in I.no_model_judge_line(shipped, old)


# ---------------------------------------------------------------- the words, computed

def test_the_judge_model_judges_only_by_the_rule_on_its_calibration():
    good = json.loads(_calibration(agree=150, ties=60, flip=10).to_json())
    ok, why = I.judges(good)
    assert ok and why == []
    line = I.model_judge_line(good)
    assert "**The judge model judges**" in line and "not used" not in line
    assert "75.0% [" in line and "(150 of 200)" in line and "flip rate 5.0% [" in line
    # agreement no better than a judge that always folds to a tie
    ties = json.loads(_calibration(agree=62, ties=60, flip=10).to_json())
    ok, why = I.judges(ties)
    assert not ok and len(why) == 1 and "does not lie above the 30.0% of pairs that are true ties" in why[0]
    line = I.model_judge_line(ties)
    assert "**The judge model does not judge**" in line and "not used for any conclusion" in line
    # position bias: a flip rate whose interval reaches above the threshold
    flips = json.loads(_calibration(agree=150, ties=60, flip=60).to_json())
    ok, why = I.judges(flips)
    assert not ok and len(why) == 1 and "flips when A and B swap on 30.0%" in why[0]
    assert I.judges(flips, flip_max=0.4)[0]  # the threshold is a parameter: at 40% it judges
    assert "at most 40%" in I.model_judge_line(flips, flip_max=0.4)
    # nothing parsed
    empty = json.loads(_calibration(agree=150, ties=60, flip=10).to_json())
    empty["agreement_truth"] = empty["flip_rate"] = dataclasses.asdict(C.rate(0, 0))
    ok, why = I.judges(empty)
    assert not ok and "no held-out pair has both orders' verdicts parsed" in why[0]


# ---------------------------------------------------------------- both judges, side by side

def test_the_family_by_both_judges_side_by_side(runs):
    run, s = runs["with"], runs["scale"]
    arms, seeds = s["arms"]["losses"], s["arms"]["seeds"]
    heads, trunc = _chapter_tables(run, s)
    fams = {name: V.chapter_family(run, heads, trunc, seeds, arms, j, V.MAIN, 50)
            for name, j in (("rubric", pipeline.rubric_judge()), ("judge model", I.model_judge(run)))}
    sbs = V.side_by_side(fams)
    assert list(sbs["comparison"]) == list(fams["rubric"]["comparison"])
    for name, fam in fams.items():
        t = V.family_table(fam)
        assert list(sbs[f"{name}: n"]) == list(t["n"])
        assert sbs[f"{name}: win rate %"].equals(t["win rate %"].rename(f"{name}: win rate %"))
        assert list(sbs[f"{name}: verdict"]) == [V.holm_word(r) for _, r in fam.iterrows()]
    assert list(sbs["same verdict"]) == [a == b for a, b in zip(sbs["rubric: verdict"], sbs["judge model: verdict"])]
    assert not sbs["same verdict"].all()  # these two judges disagree somewhere
    line = V.side_by_side_line(sbs, ["rubric", "judge model"])
    agree = int(sbs["same verdict"].sum())
    assert f"agree on **{agree} of {len(sbs)}** comparisons" in line
    drop = (sbs["rubric: n"] - sbs["judge model: n"]).astype(int)
    assert (f"the judge model scores {drop.min()}–{drop.max()} fewer prompts than the rubric per comparison" in line if drop.any() else
            "the judge model scored as many prompts as the rubric in every comparison" in line)
    first = sbs[~sbs["same verdict"]].iloc[0]
    words = f"rubric: {first['rubric: verdict']}, judge model: {first['judge model: verdict']}"
    assert f"{first['comparison']} ({words})" in line
    with pytest.raises(ValueError, match="comparisons are not"):
        V.side_by_side({"rubric": fams["rubric"], "judge model": fams["judge model"].iloc[1:]})


def test_holm_words():
    row = {"n": 10, "win_rate": 0.8, "rejected": True, "decisive": 5, "MDE": 0.2}
    assert V.holm_word(row) == "above 50%" and V.holm_word({**row, "win_rate": 0.2}) == "below 50%"
    assert V.holm_word({**row, "rejected": False}) == "not rejected"
    assert V.holm_word({**row, "rejected": False, "decisive": 0, "MDE": float("nan")}) == "uninformative"
    assert V.holm_word({**row, "n": 0, "win_rate": None}) == "no prompts"


# ---------------------------------------------------------------- the command

def _overall_lines(text: str) -> dict[str, str]:
    """``polyvox judge tally --run`` output: each comparison's overall line by its name."""
    blocks = text.split("== ")[1:]
    return {b.split("\n", 1)[0]: next(x for x in b.splitlines() if x.strip().startswith("overall")) for b in blocks}


def test_judge_tally_model_reads_the_judge_models_verdicts(runs, capsys):
    assert cli.main(["judge", "tally", "--run", str(runs["with"]), "--judge", "model", "--n-boot", "20"]) == 0
    model = capsys.readouterr().out
    assert model.startswith("# judge: the run's judge model, its recorded verdicts in judge-by-model/\n== ")
    names = [n for n, _, _ in pipeline.comparisons(runs["scale"], runs["with"] / "systems")]
    lines = _overall_lines(model)
    assert list(lines) == names and "missing" not in model
    for t in json.loads((runs["with"] / "judge-by-model" / "tallies.json").read_text()):
        o = t["overall"]
        assert f"W {o['W']:>4}  T {o['T']:>4}  L {o['L']:>4}" in lines[t["name"]], t["name"]


def test_judge_tally_defaults_to_the_rubric(runs, capsys):
    assert cli.main(["judge", "tally", "--run", str(runs["with"]), "--n-boot", "20", "--by", "pick_size"]) == 0
    rubric = capsys.readouterr().out
    assert not rubric.startswith("#") and "missing" not in rubric
    lines, j = _overall_lines(rubric), pipeline.rubric_judge()
    for name, a, b in pipeline.comparisons(runs["scale"], runs["with"] / "systems"):
        o = A.summarize(A.outcomes(runs["with"], judging._rel(runs["with"], a), judging._rel(runs["with"], b), j))
        assert f"W {o['W']:>4}  T {o['T']:>4}  L {o['L']:>4}" in lines[name], name


def test_judge_tally_model_on_a_run_without_it_is_one_line(runs, capsys):
    rc = cli.main(["judge", "tally", "--run", str(runs["without"]), "--judge", "model"])
    out, err = capsys.readouterr()
    assert rc == 1 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("polyvox: judge tally --judge model: ") and "has no complete judge-by-model/" in err
    rc = cli.main(["judge", "plan", "--judge", "model"])
    out, err = capsys.readouterr()
    assert rc == 1 and err.strip() == ("polyvox: judge: --judge model reads a personas run's recorded judge-model "
                                       "verdicts; use it with tally --run DIR")


# ---------------------------------------------------------------- the chapter's cell

def _section_7c():
    nb = nbformat.read(ROOT / "notebooks" / "personas" / "persona_basis.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code" and "MODEL_JUDGE = I.model_judge(run)" in c.source]
    assert len(code) == 1
    return code[0]


def _exec_7c(run: Path, s: dict) -> list[tuple[str, object]]:
    """Run the chapter's section 7c cell on ``run`` with what the cells before it define; what it shows, in order."""
    shown = []
    heads, trunc = _chapter_tables(run, s)
    arms, seeds = s["arms"]["losses"], s["arms"]["seeds"]
    ns = {"I": I, "V": V, "run": run, "s": s, "heads": heads, "trunc": trunc, "arms": arms, "seeds": seeds,
          "MAIN": V.MAIN, "n_boot": 20, "has": {"trained": True}, "RUBRIC": pipeline.rubric_judge(), "md": lambda text: shown.append(("md", text)),
          "show_table": lambda df, name, *a, **k: shown.append(("table", name))}
    ns["fam"] = V.chapter_family(run, heads, trunc, seeds, arms, pipeline.rubric_judge(), V.MAIN, 20)
    exec(_section_7c(), ns)
    return shown


def test_the_chapter_says_in_one_computed_line_that_a_run_has_no_model_judge(runs):
    shown = _exec_7c(runs["without"], runs["scale"])
    assert shown == [("md", I.no_model_judge_line(runs["without"], runs["scale"]))]


def test_the_chapter_computes_whether_the_judge_model_judges(runs, tmp_path):
    s = runs["scale"]
    shown = _exec_7c(runs["with"], s)
    assert [x for k, x in shown if k == "table"] == ["judge model calibration", "judge model by length difference",
                                                    "family by both judges", "judge model on the page's pairs"]
    words = [x for k, x in shown if k == "md"]
    assert "**The judge model judges**" in words[0] and "agree on **" in words[1]
    assert words[2].startswith("On this page's own pairs the judge model's verdict changes when A and B swap")
    assert words[-1].startswith("Section 7b's rule applied to the judge model's verdicts") and "router_head: " in words[-1]
    # the same run, its judge model calibrated no better than an always-tie judge: the page says so
    bad = tmp_path / "run"
    shutil.copytree(runs["with"], bad)
    _write_calibration(bad, s, _calibration(agree=62, ties=60, flip=70))
    words = [x for k, x in _exec_7c(bad, s) if k == "md"]
    assert "**The judge model does not judge**" in words[0] and "not used for any conclusion" in words[0]
    assert "true ties" in words[0] and "flips when A and B swap on 35.0%" in words[0]


# ---------------------------------------------------------------- a real smoke run

def check_smoke_run_model_judge(out, capsys):
    """On a smoke run (the pipeline trains its judge model and records judge-by-model/): the readers, the side
    by side family and the command read the records as the pipeline wrote them. Called by
    tests/test_personas.py's smoke test, which runs the pipeline once for both."""
    s = pipeline.load_scale(out / "scale.yaml")
    assert I.model_judge_form(out, s) == {"verdicts": True, "calibration": True, "same model": True}
    j = I.model_judge(out)
    stage = json.loads((out / "judge-by-model" / "stage.json").read_text())
    for row in stage["side_by_side"]:
        o = A.summarize(A.outcomes(out, row["a"], row["b"], j))
        assert {k: o[k] for k in ("n", "W", "T", "L")} == {k: row["judge-by-model"][k] for k in ("n", "W", "T", "L")}
    cal = I.calibration(out, s)
    assert cal["weights_sha256"] == json.loads((I.model_judge_folder(out, s) / "manifest.json").read_text())[
        "weights_sha256"]
    line = I.model_judge_line(cal)
    assert ("**The judge model judges**" in line) == I.judges(cal)[0]
    arms, seeds = s["arms"]["losses"], s["arms"]["seeds"]
    heads = V.run_heads(out, arms, seeds, I.form(out, arms, seeds), 0.5)
    trunc = A.truncation(out, arms, seeds)
    fams = {n: V.chapter_family(out, heads, trunc, seeds, arms, jj, V.MAIN, 50)
            for n, jj in (("rubric", pipeline.rubric_judge()), ("judge model", j))}
    assert len(V.side_by_side(fams)) == len(fams["rubric"])
    assert cli.main(["judge", "tally", "--run", str(out), "--judge", "model", "--n-boot", "20"]) == 0
    assert "missing" not in capsys.readouterr().out


# ---------------------------------------------------------------- the shipped chapter run

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "runs" / "personas-h200-v3"


def test_the_shipped_judge_model_verdicts_recompute_their_tallies():
    """data/runs/personas-h200-v3/judge-by-model (one H200): one verdict line per call made, and the tallies the
    stage wrote are what the chapter's reader recomputes from those lines under the recorded identity, for the
    comparisons section 7c's family reads first (reverse vs forward, and router heads vs persona prompting)."""
    from polyvox import jsonl

    rec = json.loads((SHIPPED / "judge-by-model" / "stage.json").read_text())
    assert rec["status"] == "complete" and rec["settings"]["verdicts"] == "judge model"
    lines = sum(1 for _ in jsonl.iter_jsonl(SHIPPED / "judge-by-model" / judge.VERDICTS))
    assert lines == rec["calls_made"] > 100_000
    j = I.model_judge(SHIPPED)
    tallies = {t["name"]: t for t in json.loads((SHIPPED / "judge-by-model" / "tallies.json").read_text())}
    names = [n for n in tallies if n.startswith("s0: reverse ")][:2] + \
        [n for n in tallies if n.endswith("router_head vs router_persona")][:1]
    assert len(names) == 3, sorted(tallies)[:5]
    for name in names:
        t = tallies[name]
        o = A.outcomes(SHIPPED, t["a"], t["b"], j)
        assert {k: int((o["outcome"] == k).sum()) for k in "WTL"} == {k: t["overall"][k] for k in "WTL"}, name
