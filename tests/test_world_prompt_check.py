"""Part IV's prompt check: every sampled folder of the shipped world run against the prompt its arm was trained on
(real records, the run's own tokenizer), and the verdict sentence computed from the table."""
import pandas as pd
import pytest

from polyvox.studies.world import prompt_check as P



@pytest.mark.slow  # 144,000 records re-rendered (about 17 s)
def test_every_sampled_folder_of_the_shipped_run_is_checked(root):
    table = P.prompt_check(root / "data/runs/world", root / "data")
    assert set(table.stage) >= {"pilot", "eval", "bands", "bands-redraw"} and set(table.arm) == {"panel", "thinking"}
    assert (table.checked > 0).all()
    panel, think = table[table.arm == "panel"], table[table.arm == "thinking"]
    assert (panel.mismatched == 0).all()  # the panel prompt has no template: it cannot be doubled
    # the thinking arm's folders were sampled by one code: all of them on the training prompt, or none
    assert (think.mismatched == think.checked).all() or (think.mismatched == 0).all()
    ok, said = P.prompt_verdict(table)
    assert ok == (table.mismatched.sum() == 0)
    if not ok:  # the recording of 2026-12-02/03: its thinking arm read its template twice (42 tokens, not 32)
        assert said.startswith("**The thinking arm did not read its training prompt in sampling:**")
        assert f"{int(think.mismatched.sum()):,} of {int(table.checked.sum()):,}" in said


def test_the_verdict_follows_the_table():
    row = dict(stage="eval", seed=0, cap=1024, recorded=None, expected=None, note="")
    good = pd.DataFrame([{**row, "arm": "panel", "checked": 10, "mismatched": 0},
                         {**row, "arm": "thinking", "checked": 10, "mismatched": 0},
                         {**row, "stage": "bands", "arm": "panel", "checked": 0, "mismatched": 0,
                          "note": "records not shipped (counts only)"}])
    ok, said = P.prompt_verdict(good)
    assert ok and "all 20 sampled records" in said and "The bands folders keep no per-sample records" in said
    bad = good.copy()
    bad.loc[1, ["mismatched", "recorded", "expected"]] = [4, "prompt_tokens 42", "prompt_tokens 32"]
    ok, said = P.prompt_verdict(bad)
    assert not ok and "**The thinking arm did not read its training prompt" in said and "4 of 20" in said
    assert "prompt_tokens 42 where the training prompt has 32" in said
