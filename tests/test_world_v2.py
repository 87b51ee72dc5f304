"""Part IV redesigned (issue 21): matched arms, caps from a pilot, held-out levels that can move, power.

Fast: what differs between the arms, the cap check, the level choice, the pilot's summary, the job graph
the launcher runs, the power numbers against closed forms. Slow: the smoke scale end to end on CPU
through the launcher (--parallel 2), about two minutes on 2 shared cores."""
from __future__ import annotations

import json

import pytest

from polyvox import metrics
from polyvox.studies.world import arms, pilot
from polyvox.studies.world import pipeline as W


def _summary(p99: dict, acc: dict, cap: int = 2048, hit: float = 0.0) -> dict:
    arms_ = {arm: {"levels": {lv: {"accuracy": acc[arm][lv], "cap_hit_rate": hit,
                                   "lengths": {"p50": v / 2, "p90": v * 0.9, "p99": v, "max": int(v) + 1}}
                              for lv, v in p99[arm].items()}} for arm in p99}
    s = {"cap": cap, "arms": arms_}
    s["derived_cap"] = pilot.derive_cap(s)
    return s


LEVELS = {"1": 0.95, "3": 0.5, "olympiad": 0.05}
SUMMARY = _summary({"panel": {"1": 120, "3": 300, "olympiad": 700.5}, "think": {"1": 150, "3": 420, "olympiad": 901}},
                   {"panel": LEVELS, "think": {"1": 0.99, "3": 0.3, "olympiad": 0.25}})


# ---------------------------------------------------------------- matched arms

@pytest.mark.parametrize("scale", ["smoke", "h200-v2"])
def test_the_arms_differ_only_in_format_and_its_reward(scale):
    diff = arms.arm_differences(W.load_scale(scale))
    assert [d.split(":")[0] for d in diff] == ["format", "format reward"]
    assert "panel vs think" in diff[0] and "tags_valid" in diff[1] and "think_valid" in diff[1]


def test_arm_differences_sees_a_recipe_that_is_not_matched(monkeypatch):
    real = W._rl_config

    def unmatched(out, s, seed, arm, folder, rl_stages, heldout, init=None):
        cfg = real(out, s, seed, arm, folder, rl_stages, heldout, init)
        if arm == "think":
            cfg.learning_rate *= 2
        return cfg

    monkeypatch.setattr(W, "_rl_config", unmatched)
    diff = arms.arm_differences(W.load_scale("smoke"))
    assert any(d.startswith("learning_rate: 0.0002 vs 0.0004") for d in diff), diff


def test_both_arms_start_from_tiny_base_by_one_recipe(tmp_path):
    s = W.load_scale("smoke")
    rl_stages, heldout = W._rl_stages(s)
    cfgs = [W._rl_config(tmp_path, s, 0, arm, tmp_path / arm, rl_stages, heldout) for arm in W.ARMS]
    assert {c.model for c in cfgs} == {str(tmp_path / "models" / "tiny-base")}
    assert {(c.learning_rate, c.lora_rank, c.max_completion_length, c.group_size) for c in cfgs} == \
        {(s["rl"]["lr"], s["rl"]["lora_rank"], s["sampling"]["max_tokens"], s["rl"]["group"])}


# ---------------------------------------------------------------- caps from the pilot

def test_the_cap_is_the_99th_percentile_rounded_up():
    assert SUMMARY["derived_cap"] == 960  # 901 tokens (think, olympiad) → the next multiple of 64
    assert pilot.derive_cap(_summary({"a": {"1": 64.0}}, {"a": {"1": 0.5}})) == 64


def test_a_cap_below_the_pilot_is_refused_in_one_line():
    s = {**W.load_scale("h200-v2"), "sampling": {"max_tokens": 512, "batch_size": 8, "dtype": "float32"}}
    with pytest.raises(ValueError) as e:
        pilot.check_caps(s, SUMMARY)
    msg = str(e.value)
    assert "\n" not in msg and "sampling.max_tokens" in msg and "512" in msg and "960" in msg and "think" in msg
    pilot.check_caps({**s, "sampling": {**s["sampling"], "max_tokens": 1024}}, SUMMARY)  # eval.caps[0] 1024: fine
    cut = _summary({"panel": {"1": 100}}, {"panel": {"1": 0.5}}, cap=128, hit=0.05)
    assert "lower bound" in pilot.cap_problems(s, cut)[-1]


def test_the_pipeline_refuses_a_scale_below_its_recorded_pilot_before_any_work(tmp_path):
    s = {**W.load_scale("h200-v2"), "sampling": {"max_tokens": 256, "batch_size": 8, "dtype": "float32"}}
    from polyvox import stages
    from polyvox.records import write_manifest

    write_manifest(tmp_path, kind=stages.KIND_WORLD, scale=s["name"], settings=stages.scale_settings(s))
    (tmp_path / "pilot").mkdir()
    (tmp_path / "pilot" / "summary.json").write_text(json.dumps(SUMMARY))
    with pytest.raises(ValueError, match=r"max_tokens .* = 256 is below the pilot's 99th-percentile"):
        W.check(tmp_path, s, ["rl-panel"])
    W.check(tmp_path, s, ["models", "pilot"])  # the pilot itself may still run


def test_the_pilot_summary_counts_lengths_cap_hits_and_wilson_intervals():
    rows = [{"problem_id": f"w3-{i}", "metadata": {"level": 3}, "correct": i < 3, "completion_tokens": 10 * (i + 1),
             "finish_reason": "length" if i == 9 else "stop",
             "completion": "<think>x</think> \\boxed{1}" if i % 2 else "no"} for i in range(10)]
    got = pilot.summarize_rows(rows, "think")["levels"]["3"]
    assert got["samples"] == 10 and got["correct"] == 3 and got["accuracy"] == 0.3
    assert got["wilson"] == list(metrics.wilson_interval(3, 10))
    assert got["lengths"]["p50"] == 55 and got["lengths"]["max"] == 100 and got["cap_hit_rate"] == 0.1
    assert got["format_valid"] == 0.5


# ---------------------------------------------------------------- held-out levels that can move

def test_held_out_levels_are_those_where_both_arms_start_between_20_and_80_percent():
    chosen, dropped = pilot.pilot_levels(SUMMARY)
    assert chosen == ["3"]
    assert dropped == {"1": "panel starts at 95% > 80%; think starts at 99% > 80%",
                       "olympiad": "panel starts at 5% < 20%"}
    chosen, dropped = pilot.choose_levels({"panel": {"4": 0.5, "5": 0.2}, "think": {"4": 0.81}})
    assert chosen == [] and dropped["5"] == "think: not measured" and dropped["4"] == "think starts at 81% > 80%"


def test_climbs_train_on_the_band_of_both_draws(tmp_path):
    def write(root, arm, bands):
        (tmp_path / root / arm).mkdir(parents=True)
        (tmp_path / root / arm / "per_problem.jsonl").write_text("".join(json.dumps(
            {"uid": u, "source": "level-3", "n_samples": 8, "n_correct": 4 if b else 8,
             "band": "variance_band" if b else "all_one"}) + "\n" for u, b in bands.items()))

    write("bands", "panel", {"a": 1, "b": 1, "c": 1, "d": 0})
    write("bands-redraw", "panel", {"a": 1, "b": 0, "c": 1, "d": 1})
    both, stability = W.stable_band(tmp_path, "panel")
    assert both == ["a", "c"] and stability == {"first_draw": 3, "second_draw": 3, "both": 2, "jaccard": 0.5}


# ---------------------------------------------------------------- the job graph --parallel runs

def test_every_stage_declares_what_it_reads(tmp_path):
    graph = dict(W.pipeline(tmp_path, W.load_scale("smoke")).graph())
    assert graph["pilot"] == ("models",)
    assert graph["seed-1/rl-think"] == ("models", "pilot")  # every seed's RL runs at once after the pilot
    assert set(graph["seed-1/eval"]) == {"models", "pilot", "seed-1/rl-panel", "seed-1/rl-think"}
    assert set(graph["bands-redraw"]) == {"models", "pilot", "seed-0/rl-panel", "seed-0/rl-think"}
    assert set(graph["seed-1/hillclimb-think"]) == {"models", "pilot", "bands", "bands-redraw", "seed-0/rl-think"}


# ---------------------------------------------------------------- power

def _shipped_reads_as_the_run(out, shipped):
    from polyvox import ship
    from polyvox.studies.world import analysis as A
    from polyvox.studies.world import design_tables as D

    r = ship.ship(out, shipped, gzip_over=0)
    assert r["gzip"] and not list(shipped.rglob("*.safetensors")) and not list(shipped.rglob("rollouts.jsonl*"))
    seeds = A.seeds(out)
    a, b = A.tests(out, seeds, 200, 200), A.tests(shipped, seeds, 200, 200)
    assert A.family_table(a["tests"]).equals(A.family_table(b["tests"]))
    assert D.cap_hits(out, seeds).equals(D.cap_hits(shipped, seeds))
    assert D.recipe_differences(out, seeds)[0].equals(D.recipe_differences(shipped, seeds)[0])
    cap = A.common_caps(out, seeds)[0]
    assert D.power_table(out, seeds, cap).equals(D.power_table(shipped, seeds, cap))
    assert A.level_room(out, seeds, cap).equals(A.level_room(shipped, seeds, cap))


@pytest.mark.slow
def test_the_smoke_scale_runs_every_new_stage_through_the_launcher_and_ships(tmp_path):
    """The smoke scale through the launcher (--parallel 2); then polyvox.ship of that run (every JSONL stored gzipped,
    weights and rollouts left out) gives the chapter's analysis and design tables the same numbers."""
    out = W.run(tmp_path / "w", "smoke", parallel=2, gpus=None)
    _shipped_reads_as_the_run(out, tmp_path / "shipped")
    s = W.load_scale("smoke")
    summary = json.loads((out / "pilot" / "summary.json").read_text())
    assert summary["cap"] == max(s["eval"]["caps"]) and set(summary["arms"]) == {"panel", "think"}
    assert set(summary["arms"]["think"]["levels"]) == {"1", "2", "3", "4", "5", "olympiad"}
    for k in s["seeds"]:
        for arm in W.ARMS:
            rec = json.loads((out / f"seed-{k}/rl-{arm}/stage.json").read_text())
            assert rec["status"] == "complete" and "steps_at_cap" in rec["cap_hits"]
            # the stage record counts what the cap cut (GRPO's logged cap_hits), as the chapter's table does
            per_step = s["rl"]["prompts"] * s["rl"]["group"]
            assert rec["cap_hits"]["completions"] == per_step * sum(s["rl"]["stage_steps"])
            assert rec["cap_hits"]["cap_hit_rate"] == pilot.logged_cap_hits(
                out / f"seed-{k}/rl-{arm}/train_log.jsonl", per_step)[0]
            climb = json.loads((out / f"seed-{k}/hillclimb-{arm}/stage.json").read_text())
            assert climb["heldout_levels"] and "both" in climb["band"]
            assert json.loads((out / f"seed-{k}/rl-{arm}/manifest.json").read_text())["config"]["model"].endswith(
                "models/tiny-base")
        ev = json.loads((out / f"seed-{k}/eval/manifest.json").read_text())
        assert {f"cap-{s['eval']['caps'][0]}/{a}" for a in W.ARMS} <= set(ev["cap_hits"])
    assert json.loads((out / "manifest.json").read_text())["status"] == "stages complete"


@pytest.mark.slow
def test_h200_v2_caps_fit_tiny_base_positions(root):
    """Every prompt h200-v2 samples (pilot and evaluation at the largest cap, pool and held-out sets at the sampling
    cap), in both formats, plus its cap stays within tiny-base's positions: the backend refuses past them, and a
    refusal found on the GPU costs device time."""
    from transformers import AutoTokenizer

    from polyvox import formats
    from polyvox.tasks import load as load_task

    s = W.load_scale("h200-v2")
    tok = AutoTokenizer.from_pretrained(root / "data/models/tiny-base")
    positions = json.loads((root / "data/models/tiny-base/config.json").read_text())["max_position_embeddings"]
    big, cap = max(s["eval"]["caps"]), s["sampling"]["max_tokens"]
    sets = [("pilot", W.EVAL_LEVELS, s["eval"]["per_level"], "test", big),
            ("eval", W.EVAL_LEVELS, s["eval"]["per_level"], "test", big),
            ("pool", W.POOL_LEVELS, s["bands"]["pool_per_level"], "train", cap),
            ("climb-heldout", W.POOL_LEVELS, s["rl"]["heldout_per_level"], "test", cap),
            ("rl-heldout", (1, 2, 3, 4, 5), s["rl"]["rl_heldout_per_level"], "test", cap)]
    longest = {}
    for name, levels, per_level, split, c in sets:
        texts = [p.text for p in load_task("world", **W.problem_set(s, name, levels, per_level, split))]
        for fmt in W.ARMS:
            n = max(len(tok(formats.build_prompt(fmt, t, tok).text)["input_ids"]) for t in texts)
            longest[(name, fmt)] = n
            assert n + c <= positions, f"{name} {fmt}: {n} prompt tokens + cap {c} > {positions}"
    assert max(longest.values()) + big <= positions


# ---------------------------------------------------------------- the climbs' own recipe (scale section climb)

def _with_climb(s: dict, **climb) -> dict:
    return {**s, "climb": climb}


def test_a_climb_section_sets_the_climbs_recipe_alone(tmp_path):
    s = W.load_scale("smoke")
    c = _with_climb(s, lr=1.0e-5, prompts=3, eval_every=2, seeds=[0, 1, 7], endpoint_evals=3)
    assert W.climb_recipe(s) == {"steps": s["rl"]["climb_steps"], "lr": s["rl"]["lr"], "prompts": s["rl"]["prompts"],
                                 "eval_every": s["rl"]["eval_every"], "seeds": s["seeds"], "endpoint_evals": 1}
    rl_stages, heldout = W._rl_stages(c)
    climb = W._rl_config(tmp_path, c, 7, "think", tmp_path / "x", rl_stages, heldout, climb=True)
    assert (climb.learning_rate, climb.prompts_per_step, climb.eval_every) == (1.0e-5, 3, 2)
    for arm in W.ARMS:  # the matched RL keeps the rl section's recipe
        cfg = W._rl_config(tmp_path, c, 0, arm, tmp_path / arm, rl_stages, heldout)
        assert (cfg.learning_rate, cfg.prompts_per_step, cfg.eval_every) == \
            (s["rl"]["lr"], s["rl"]["prompts"], s["rl"]["eval_every"])
    # only the climbs' settings hold the section: a recorded RL, evaluation or band stays valid under it
    plain, climbed = W.pipeline(tmp_path, s), W.pipeline(tmp_path, c)

    def at(p, st):
        return p.stage_at(W.stage_folder(tmp_path, st, 0).relative_to(tmp_path).as_posix()).settings
    for st in ("models", "pilot", "rl-panel", "rl-think", "eval", "bands", "bands-redraw"):
        assert at(plain, st) == at(climbed, st), st
    assert at(climbed, "hillclimb-panel")["climb"]["lr"] == 1.0e-5
    assert "climb" not in at(plain, "hillclimb-panel")


def test_climb_seeds_beyond_the_rl_seeds_run_climbs_alone(tmp_path):
    s = _with_climb(W.load_scale("smoke"), seeds=[1, 7])
    order = [(st.name, st.folder.relative_to(tmp_path / "w").as_posix()) for st in W.pipeline(tmp_path / "w", s).stages]
    names = [n for n, _ in order]
    assert ("hillclimb-think", "seed-7/hillclimb-think") in order and "seed-7/rl-panel" not in dict(order).values()
    assert names.count("hillclimb-panel") == 2 and names.count("rl-panel") == 2  # climbs on seeds 1, 7; RL on 0, 1
    assert names.count("bands") == 1
    assert [f for n, f in order if n == "hillclimb-panel"] == ["seed-1/hillclimb-panel", "seed-7/hillclimb-panel"]
    only = [st.folder.relative_to(tmp_path / "w").as_posix() for st in W.pipeline(tmp_path / "w", s, seeds=[7]).stages]
    assert only == ["models", "pilot", "seed-7/hillclimb-panel", "seed-7/hillclimb-think"]
    with pytest.raises(ValueError, match=r"seed\(s\) \[9\] are not in the scale's seeds \[0, 1\] or its climb seeds \[1, 7\]"):
        W.pipeline(tmp_path / "w", s, seeds=[9])


def test_the_climb_section_is_checked_in_one_line(tmp_path):
    text = (W.stages.CONFIG_DIR / "world" / "smoke.yaml").read_text()
    for extra, said in (("climb: {lr: 1.0e-4, steps: 3}\n", "climb"), ("climb: {seeds: [1, 1]}\n", "seeds"),
                        ("climb: {lr: -1}\n", "lr")):
        path = tmp_path / "bad.yaml"
        path.write_text(text + extra)
        with pytest.raises(ValueError) as e:
            W.load_scale(path)
        assert str(path) in str(e.value) and said in str(e.value) and "\n" not in str(e.value).strip()
    path.write_text(text + "climb: {lr: 1.0e-4, seeds: [0, 5], endpoint_evals: 3}\n")
    assert W.load_scale(path)["climb"] == {"lr": 1.0e-4, "seeds": [0, 5], "endpoint_evals": 3}


def test_a_recorded_run_takes_a_climb_section_but_no_other_change(root, tmp_path):
    """The root manifest of a run recorded without a climb section accepts the scale with one (only the climbs read
    it, and each climb's own settings are checked); a change to the RL recipe is refused as before."""
    s = W.load_scale("h200-v2")
    seed = (root / "data/models", root / "data/runs/world/models")
    out = tmp_path / "w"
    W.pipeline(out, s, models_from=seed).run(["models"])
    W.check(out, _with_climb(s, lr=1.0e-4, seeds=list(range(12))), ["models"], models_from=seed)
    with pytest.raises(ValueError, match=r"differs in rl\.lr; use a new --out"):
        W.check(out, {**s, "rl": {**s["rl"], "lr": 1.0e-4}}, ["models"], models_from=seed)


# ---------------------------------------------------------------- models seeded from the shipped ones

def test_the_shipped_models_seed_h200_v2_but_no_other_models_settings(root, tmp_path):
    s = W.load_scale("h200-v2")
    models, record = root / "data/models", root / "data/runs/world/models"
    assert W.models_source_problems(s, models, record) == []  # h200-v2 keeps the recorded models settings
    smoke = W.load_scale("smoke")
    said = W.models_source_problems(smoke, models, record)
    assert len(said) == 1 and "other models settings" in said[0] and "hidden" in said[0]
    other = {**s, "models": {**s["models"], "think_steps": 61}}
    assert "think_steps" in W.models_source_problems(other, models, record)[0]
    with pytest.raises(ValueError, match="other models settings"):  # before any stage runs
        W.check(tmp_path / "w", smoke, ["models"], models_from=(models, record))
    W.check(tmp_path / "w", s, ["models"], models_from=(models, record))


def test_seeded_models_are_the_models_stage_of_the_run(root, tmp_path):
    """The models stage of a scale whose models settings the record shares, done by copying (smoke scale with the
    shipped record's models section, so that the copy is the only work); the record says where they came from: the
    commit that trained them, through the shipped record, itself a copy (seeded_from) of the run that trained them."""
    s = {**W.load_scale("smoke"), "models": dict(W.load_scale("h200-v2")["models"])}
    out = tmp_path / "w"
    W.pipeline(out, s, models_from=(root / "data/models", root / "data/runs/world/models")).run(["models"])
    rec = json.loads((out / "models/manifest.json").read_text())
    assert rec["status"] == "complete" and rec["settings"]["models"] == s["models"]
    assert rec["seeded_from"]["git_commit"].startswith("e02ae25") and rec["seeded_from"]["record"].endswith("world/models")
    for m in W.MODELS:
        assert (out / "models" / m / "model.safetensors").read_bytes() == (root / "data/models" / m / "model.safetensors").read_bytes()
    assert W.pipeline(out, s).state(W.pipeline(out, s).stage_at("models")) == "done"  # a later run skips it
