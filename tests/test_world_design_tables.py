"""Part IV's design tables (issue 21, items 1, 2, 4, 6), from records written here: what differs between the arms
(from the RL manifests, not the scale), cap hits against 1 %, the commits behind the records, and the power table's
refusal to claim power where nothing varies. The chapter on a generated run of the matched design is
tests/test_rerun.py's world test; the layouts are tests/test_folders.py's."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import pandas as pd

from polyvox.studies.world import design_tables as D
from polyvox.studies.world import layout, power

WORLD = Path(__file__).resolve().parents[1] / "data" / "runs" / "world"
RECIPE = {"arm": "panel", "learning_rate": 5e-4, "lora_rank": 32, "lora_alpha": 64, "group_size": 8,
          "prompts_per_step": 8, "max_completion_length": 1024, "heldout_problems": 100, "heldout_samples": 4,
          "stages": [{"name": "easy", "steps": 100, "problems": 1200}, {"name": "hard", "steps": 100, "problems": 1800}],
          "reward": "default", "tag_coef": 0.2, "out": "x", "init_adapter": None, "seed": 0}


def _write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _lines(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _run(tmp_path, think_changes=None, commits=("aaa", "aaa")):
    """Two seeds of the matched design's records, written by hand: the thinking arm's RL cuts 130 of its 12,800
    training completions (1.02 %), seed 1's panel RL log is from before GRPO counted cut completions (its stage
    record's upper bound: 0 of 200 steps), the climbs start at 58 % (panel) and 85 % (thinking) on the olympiad."""
    root = tmp_path / "run"
    (root / "pilot").mkdir(parents=True)
    _write(root / "manifest.json", {"git_commit": "zzz", "scale": "h200-v2", "settings": {}})
    for k, commit in zip((0, 1), commits):
        for arm in ("panel", "think"):
            cfg = {**RECIPE, "arm": arm, "out": f"seed-{k}/rl-{arm}", "seed": k,
                   **((think_changes or {}) if arm == "think" else {})}
            rl = root / f"seed-{k}/rl-{arm}"
            _write(rl / "manifest.json", {"config": cfg, "git_commit": commit})
            _write(rl / "stage.json",
                   {"git_commit": commit, "stage_caps": {"sampling.max_tokens": 1024, "eval.caps[0]": 1024},
                    "cap_hits": {"steps": 200, "steps_at_cap": 0, "cap_hit_rate_upper_bound": 0.0}})
            legacy = k == 1 and arm == "panel"
            _lines(rl / "train_log.jsonl", [{"step": i + 1, **({} if legacy else
                                             {"cap_hits": int(arm == "think" and i < 130)})} for i in range(200)])
            _lines(rl / "heldout_trajectory.jsonl", [{"step": s, "heldout_mean": 0.5, "per_level": {"1": 0.5},
                                                      "cap_hits": 0} for s in (0, 100, 200)])
            climb = root / f"seed-{k}/hillclimb-{arm}"
            _write(climb / "manifest.json", {"config": {**cfg, "heldout_problems": 100}, "git_commit": commit})
            _write(climb / "stage.json",
                   {"git_commit": commit, "stage_caps": {"sampling.max_tokens": 1024},
                    "cap_hits": {"steps": 100, "steps_at_cap": 0, "cap_hit_rate_upper_bound": 0.0},
                    "band": {"first_draw": 10, "second_draw": 12, "both": 6, "jaccard": 0.375}, "band_problems": 6,
                    "heldout_levels": ["olympiad"], "heldout_levels_dropped": {"3": "panel starts at 96% > 80%"}})
            _lines(climb / "train_log.jsonl", [{"step": i + 1, "cap_hits": 0} for i in range(100)])
            start = 0.58 if arm == "panel" else 0.85
            _lines(climb / "heldout_trajectory.jsonl", [{"step": s, "heldout_mean": start, "cap_hits": 2 if s else 0,
                                                         "per_level": {"olympiad": start}} for s in (0, 20, 40)])
        for arm in ("panel", "think"):
            _write(root / f"seed-{k}/eval/cap-1024/{arm}/manifest.json", {"settings": {"n": 8}})
        _write(root / f"seed-{k}/eval/manifest.json",
               {"git_commit": commit, "cap_hits": {"cap-1024/panel": {"samples": 4800, "cap_hit_rate": 0.0},
                                                   "cap-1024/think": {"samples": 4800, "cap_hit_rate": 18 / 4800}}})
    return root


def test_matched_arms_differ_in_the_format_alone(tmp_path):
    root = _run(tmp_path)
    assert layout.of(root) == layout.MATCHED
    diffs, matched = D.recipe_differences(root, [0, 1])
    assert matched and diffs.field.tolist() == ["arm", "arm"] and diffs.think.tolist() == ["think", "think"]


@pytest.mark.parametrize("change, field", [({"learning_rate": 1e-3}, "learning_rate"),
                                           ({"max_completion_length": 512}, "max_completion_length"),
                                           ({"stages": [{"name": "easy", "steps": 60, "problems": 1200},
                                                        {"name": "hard", "steps": 100, "problems": 1800}]}, "stages"),
                                           ({"lora_rank": 16}, "lora_rank")])
def test_any_other_difference_unmatches_the_arms(tmp_path, change, field):
    diffs, matched = D.recipe_differences(_run(tmp_path, change), [0, 1])
    assert not matched and field in set(diffs.field) and "arm" in set(diffs.field)


def test_cap_hits_are_read_per_stage_and_checked_against_one_percent(tmp_path):
    hits = D.cap_hits(_run(tmp_path), [0, 1])
    # per seed: rl × 2 and their held-out × 2, hill-climb × 2 and their held-out × 2, eval × 2 arms
    assert len(hits) == 2 * 10
    rl = hits[hits.stage == "rl"].set_index(["seed", "arm"])
    assert rl.loc[(0, "thinking"), "cap-hit rate"] == pytest.approx(130 / 12800) and rl.loc[(0, "thinking"), "of"] == 12800
    assert rl.loc[(1, "panel"), "measured as"].endswith("(an upper bound)")  # the legacy log: the stage record's bound
    over = hits[hits["below 1 %"] == False]  # noqa: E712
    assert set(zip(over.stage, over.arm)) == {("rl", "thinking")}
    held = hits[hits.stage == "hillclimb held-out"]
    assert held["cap-hit rate"].tolist() == pytest.approx([4 / 1200] * 4) and (held["of"] == 1200).all()  # 3 evals × 400
    # the counts beside the rates: a share of 0.000 on the page hides 4 of 1,200
    assert held["cut"].tolist() == [4] * 4 and rl.loc[(0, "thinking"), "cut"] == 130
    assert rl.loc[(1, "panel"), "cut"] == 0  # the legacy log's bound: 0 of its 200 steps reached the cap
    ev = hits[(hits.stage == "eval") & (hits.arm == "thinking")].iloc[0]
    assert ev["cap-hit rate"] == pytest.approx(0.00375) and bool(ev["below 1 %"]) and ev["cap"] == 1024


def test_climb_design_and_commits_come_from_the_records(tmp_path):
    root = _run(tmp_path, commits=("aaa", "bbb-dirty"))
    climbs = D.climb_design(root, [0, 1]).set_index(["arm", "seed"])
    assert climbs["in both"].tolist() == [6] * 4 and climbs["held-out levels"].unique().tolist() == ["olympiad"]
    assert climbs["levels dropped"].iloc[0] == "3: panel starts at 96% > 80%"
    assert climbs.loc[("panel", 0), "held-out at step 0"] == "olympiad: 58%"
    assert climbs.loc[("thinking", 0), "outside [20 %, 80 %] at step 0"] == "olympiad"  # chosen on the pool, not met here
    assert climbs.loc[("panel", 0), "outside [20 %, 80 %] at step 0"] == ""
    made = D.commits(root)
    assert set(made) == {"aaa", "bbb-dirty"} and "seed-0/rl-panel" in made["aaa"] and "seed-1/eval" in made["bbb-dirty"]
    assert "zzz" not in made and D.dirty(made) == ["bbb-dirty"]  # the run folder's manifest is not a stage record


def test_power_is_not_claimed_where_nothing_varies(monkeypatch, tmp_path):
    root = _run(tmp_path)
    flat = {"tiny-panel accuracy": {"p": 0.0, "samples": 4800, "between_sd": 0.0},
            "tiny-think accuracy": {"p": 0.0, "samples": 4800, "between_sd": 0.0},
            "think − panel": {"values": {0: 0.0, 1: 0.0}, "p": 0.0, "samples": 4800, "problems": 600, "unit_var": 0.0,
                              "between_sd": 0.0},
            "panel climb gain": {"p": 0.0, "samples": 400, "between_sd": 0.0},
            "think climb gain": {"p": 0.0, "samples": 400, "between_sd": 0.0}}
    monkeypatch.setattr(D, "spread", lambda root, seeds, cap: flat)
    table = D.power_table(root, [0, 1], 1024)
    assert table["MDE at the run's size"].isna().all() and table["seeds needed"].isna().all()
    moving = {k: {**v, "p": 0.6, "between_sd": 0.015} for k, v in flat.items()}
    moving["think − panel"] = {**moving["think − panel"], "values": {0: 0.01, 1: 0.03}, "unit_var": 0.02}
    monkeypatch.setattr(D, "spread", lambda root, seeds, cap: moving)
    table = D.power_table(root, [0, 1], 1024).set_index("comparison")
    row = table.loc["think − panel"]
    assert row["samples per problem"] == 8 and row["problems run"] == 600  # 4,800 samples of 8 per problem
    assert row["seeds needed"] >= 5 and 0 < row["MDE at the run's size"] < 1
    assert table.loc["hill-climb gain, panel arm", "problems run"] == 100  # 400 held-out samples of 4
    from polyvox.studies.world import power

    # think − panel as the chapter tests it: paired per seed, the spread of the per-seed differences, S − 1 df
    c = power.paired_difference(0.6, 0.015, samples=8, unit_var=0.02)
    assert row["MDE at the run's size"] == pytest.approx(power.mde(c, 2, 600))
    assert c.df(2) == 1 and c.se(2, 600) == pytest.approx(((0.015 ** 2 + 0.02 / 600) / 2) ** 0.5)
    # the verdicts' formula beside it: (z + z) (t_{k−1} / z) s / √k from the per-seed values
    from scipy import stats

    s_values = stats.tstd([0.01, 0.03])
    want = 2.801585 * stats.t.ppf(0.975, 1) / stats.norm.ppf(0.975) * s_values / 2 ** 0.5
    assert row["MDE, verdicts' formula"] == pytest.approx(min(want, 1.0), rel=1e-5)
    assert row["under-powered"] == (row["power at the run's size"] < 0.8)
    # what two seeds' spread leaves uncertain: the sd's chi-square interval (1 degree of freedom), the MDE over it
    lo, hi = s_values * (1 / stats.chi2.ppf(0.975, 1)) ** 0.5, s_values * (1 / stats.chi2.ppf(0.025, 1)) ** 0.5
    assert (row["sd low"], row["sd high"]) == pytest.approx((lo, hi))
    assert row["MDE, σ's lower limit"] == pytest.approx(min(want * lo / s_values, 1.0), rel=1e-5)
    assert row["MDE, σ's upper limit"] == 1.0  # 2 seeds: at the sd's upper limit nothing short of 100 points shows
    assert row["power, σ's upper limit"] == pytest.approx(power.t_power(hi, 2, 0.05))


def test_matched_is_one_rule_for_every_page(tmp_path, root):
    from polyvox.studies.world import analysis as A

    assert D.matched(_run(tmp_path), [0, 1])
    assert not D.matched(_run(tmp_path / "lr", {"learning_rate": 1e-3}), [0, 1])
    world = root / "data/runs/world"
    if layout.of(world) == layout.PANEL_ONLY:
        assert not D.matched(world, [0, 1, 2])  # the panel-only recording
    else:  # a recording of the matched design: its arms' RL manifests differ in the format and its reward alone
        assert layout.of(world) == layout.MATCHED and D.matched(world, A.seeds(world))


def test_a_damaged_record_is_one_line_naming_it(tmp_path):
    root = _run(tmp_path)
    (root / "seed-1/rl-think/manifest.json").write_text('{"config": {"arm": "think", "arm": "panel"}}')
    with pytest.raises(ValueError) as e:
        D.recipe_differences(root, [0, 1])
    assert "seed-1/rl-think/manifest.json" in str(e.value) and "\n" not in str(e.value)


def test_the_arms_sampling_settings_are_diffed_from_the_evaluation_manifests(tmp_path):
    root = _run(tmp_path)
    base = {"n": 8, "problems_sha256": "abc", "sampling": {"max_tokens": 1024, "temperature": 1.0, "stop": []}}
    for k in (0, 1):
        for arm, extra in (("panel", {"format": "panel", "adapter_sha256": f"p{k}", "sampling": {**base["sampling"], "stop": ["</answer>"]}}),
                           ("think", {"format": "think", "adapter_sha256": f"t{k}"})):
            _write(root / f"seed-{k}/eval/cap-1024/{arm}/manifest.json",
                   {"settings": {**base, **extra}, "grading": {"grader": "integer", "options": {}}})
    d = D.sampling_differences(root, [0, 1], 1024).set_index("setting")
    assert set(d.index) == {"adapter_sha256", "format", "sampling.stop"} and (d.seeds == 2).all()
    assert d.loc["sampling.stop", "panel"] == "['</answer>']" and d.loc["sampling.stop", "thinking"] == "[]"
    assert d.loc["adapter_sha256", "panel"] == "each seed's own"  # a value of its own in every seed
    _write(root / "seed-1/eval/cap-1024/think/manifest.json",
           {"settings": {**base, "format": "think", "adapter_sha256": "t1", "sampling": {**base["sampling"], "temperature": 0.7}},
            "grading": {"grader": "integer", "options": {}}})
    d = D.sampling_differences(root, [0, 1], 1024).set_index("setting")
    assert d.loc["sampling.temperature", "seeds"] == 1 and d.loc["sampling.temperature", "thinking"] == "0.7"


@pytest.mark.slow  # reads the shipped evaluations (3 s)
def test_the_power_on_the_levels_with_room(root):
    """think − panel on the shipped run's levels with room alone: the per-seed values are the per-problem differences
    on those levels, and its minimum detectable effect the verdicts' formula on them."""
    from polyvox.studies.world import analysis as A

    world = root / "data/runs/world"
    seeds = A.seeds(world)
    cap = A.common_caps(world, seeds)[0]
    room = A.level_room(world, seeds, cap).drop(index="all")
    movable = list(room.index[room["can move"]]) or list(room.index[:1])
    lp = D.level_power(world, seeds, cap, movable)
    want = [A.problem_differences(*(df[df.level.isin(movable)] for df in A.load_eval(world, k, cap).values())).mean()
            for k in seeds]
    assert list(lp["values"].values()) == pytest.approx(want)
    assert lp["MDE"] == pytest.approx(D.verdicts_mde(want)) and lp["power"] == pytest.approx(
        power.t_power(float(pd.Series(want).std(ddof=1)), len(seeds), 0.05))
    whole = D.power_table(world, seeds, cap).set_index("comparison").loc["think − panel", "MDE, verdicts' formula"]
    assert lp["MDE"] > whole  # fewer problems, and the differences show where there is room


@pytest.mark.slow  # 2-4 s here: in make test, out of the 60-s fast tier
def test_the_power_table_as_shown_fits_ranges_in_one_column_each():
    root = Path(__file__).resolve().parents[1] / "data" / "runs" / "world"
    from polyvox.studies.world import analysis as W

    table = D.power_table(root, W.seeds(root), 1024)
    shown = D.power_display(table)
    assert len(shown.columns) == len(table.columns) - 7  # 9 dropped, 2 ranges added, MDE renamed
    assert {"σ between seeds", "sd low", "MDE, σ's upper limit", "under-powered"}.isdisjoint(shown.columns)
    for (_, row), (_, t) in zip(shown.iterrows(), table.iterrows()):
        lo, hi = (float(x) for x in row["sd 95% range (points)"].split("–"))
        assert (lo, hi) == (round(100 * t["sd low"], 1), round(100 * t["sd high"], 1)) and lo <= 100 * t["sd of per-seed values"] <= hi
        lo, hi = (float(x) for x in row["MDE range (points)"].split("–"))
        assert lo <= 100 * row["MDE (80% power)"] <= hi
    # a run whose spread is missing or undefined (a smoke run): no range, no error
    blank = table.copy()
    blank.loc[0, ["sd low", "sd high"]] = [None, None]
    blank.loc[1, ["MDE, σ's lower limit"]] = [float("nan")]
    shown = D.power_display(blank)
    assert shown.loc[0, "sd 95% range (points)"] == "—" and shown.loc[1, "MDE range (points)"] == "—"


def test_the_replaced_climbs_step0_reproduce_across_commits(tmp_path):
    """The shipped climbs were recorded at a later commit than the rest of the run: their step-0 evaluations equal the
    replaced climbs' (kept whole in replaced-climbs/: same adapter, problems and sampling seeds), and a changed
    record is caught."""
    t = D.replaced_step0(WORLD)
    assert len(t) == 10 and t.identical.all() and (t["fields compared"] == 4).all()  # no per-problem counts then
    assert set(t["replaced at"]) == {"7fd2b14"} and set(t["now at"]) == {"02ca956"}
    run = tmp_path / "run"
    for k in (0, 1):
        shutil.copytree(WORLD / f"seed-{k}" / "hillclimb-panel", run / f"seed-{k}" / "hillclimb-panel")
        shutil.copytree(WORLD / D.REPLACED / f"seed-{k}" / "hillclimb-panel", run / D.REPLACED / f"seed-{k}" / "hillclimb-panel")
    f = run / D.REPLACED / "seed-1" / "hillclimb-panel" / "heldout_trajectory.jsonl"
    lines = f.read_text().splitlines()
    first = json.loads(lines[0])
    first["heldout_mean"] += 0.0025  # one more correct sample of 400 at the other commit
    f.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert D.replaced_step0(run).set_index("seed").identical.to_dict() == {0: True, 1: False}
    assert D.replaced_step0(tmp_path) is None


def test_climb_cap_hits_and_commit_spans():
    ch = D.climb_cap_hits(sorted(WORLD.glob("seed-*/hillclimb-*")))
    assert (ch["climbs"], ch["training of"], ch["held-out of"], ch["cap"]) == (10, 10 * 100 * 64, 10 * 11 * 400, 1024)
    assert ch["training cut"] == ch["held-out cut"] == 0 and ch["longest"] == 1004
    pilot = D.climb_cap_hits(sorted(WORLD.glob("climb-pilot/*/seed-*/hillclimb-*")))
    assert pilot["climbs"] == 12 and 0 < pilot["training cut"] + pilot["held-out cut"] < 0.01 * pilot["training of"]
    spans = D.commit_spans(WORLD, [0, 1, 2, 3, 4])
    assert all(len(c) == 1 for c in spans.values()) and set(spans) >= {"rl-panel", "eval", "bands", "hillclimb-think"}
    assert spans["hillclimb-panel"][0].startswith("02ca956") and spans["rl-think"][0].startswith("7fd2b14")


def test_the_power_table_holds_the_gap_between_the_climbs():
    pw = D.power_table(WORLD, [0, 1, 2, 3, 4], 1024).set_index("comparison")
    gap = pw.loc["think − panel hill-climb gain"]
    # the fourth comparison of the family: its MDE (the verdicts' formula) is the chapter's 11.1 points, above 10
    assert gap["MDE, verdicts' formula"] == pytest.approx(0.1106, abs=5e-4) and bool(gap["under-powered"])
    assert not pw.loc[["think − panel", "hill-climb gain, panel arm", "hill-climb gain, thinking arm"], "under-powered"].any()
