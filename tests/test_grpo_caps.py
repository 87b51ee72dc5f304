"""What the cap cut, counted where GRPO trains and where it evaluates (the issue asks for cap-hit rates
per stage below 1 %: they must be in the records first)."""
import json

import pytest

from polyvox.train import grpo

EOS = 2


@pytest.mark.parametrize("ids,cap,cut", [
    ([], 4, False),                 # nothing generated: not cut (len < cap)
    ([5, 6], 4, False),             # stopped early
    ([5, 6, 7, EOS], 4, False),     # closed by the end token exactly at the cap
    ([5, 6, 7, 8], 4, True),        # as long as the cap, no end token
    ([5, 6, 7, 8, 9], 4, True),     # longer than the cap (a backend that overshoots) is cut too
    ([EOS, 6, 7, 8], 4, True),      # an end token inside does not close it: TRL's ids stop at the first one
    ([5, EOS], 2, False),
    ([EOS], 1, False),
    ([5], 1, True),
])
def test_cut_by_cap(ids, cap, cut):
    assert grpo.cut_by_cap(ids, cap, EOS) is cut


@pytest.mark.slow
def test_train_log_and_heldout_count_what_the_cap_cut(tiny, tmp_path):
    from polyvox.studies.world import problems as world

    probs = [world.to_problem(p) for p in world.generate(2, seed=0, levels=[1], split="train")]
    held = [world.to_problem(p) for p in world.generate(2, seed=1, levels=[1], split="test")]
    cfg = grpo.RLConfig(model=str(tiny), arm="panel", out=str(tmp_path / "rl"), stages=[grpo.Stage("one", probs, 1)],
                        lora_rank=2, lora_alpha=4, group_size=2, prompts_per_step=2, max_completion_length=6,
                        learning_rate=1e-3, eval_every=1, save_every=1, heldout=held, heldout_samples=2)
    grpo.train(cfg, progress=False)
    log = [json.loads(x) for x in (tmp_path / "rl/train_log.jsonl").read_text().splitlines() if '"step"' in x]
    for r in log:
        assert 0 <= r["cap_hits"] <= 4 and r["cap_hit_rate"] == r["cap_hits"] / 4
        if r["completion_tokens_max"] < 6:
            assert r["cap_hits"] == 0
        if r["completion_tokens_mean"] == 6 and r["cap_hits"] < 4:  # all at the cap: each one closed by EOS
            pytest.fail(f"{r}: every completion is as long as the cap, yet fewer were counted as cut")
    held_rows = [json.loads(x) for x in (tmp_path / "rl/heldout_trajectory.jsonl").read_text().splitlines()]
    for r in held_rows:
        assert 0 <= r["cap_hits"] <= 4 and r["cap_hit_rate"] == r["cap_hits"] / 4
        if r["cap_hits"] == 4:  # every sample cut: every one as long as the cap
            assert r["mean_completion_tokens"] == 6
    # the untrained tiny model rarely stops within 6 tokens: something was cut at some point
    assert sum(r["cap_hits"] for r in log + held_rows) > 0
