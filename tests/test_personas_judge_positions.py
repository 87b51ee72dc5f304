"""The judge model's positions hold the judge prompts it is asked (issue 22, item 4): the transformers backend
refuses a request whose prompt + max_tokens passes max_position_embeddings, so the pipeline refuses such a run
before any stage runs (judging.modelled_refusal), and the judge stage before it loads the model (exact_refusal)."""
from __future__ import annotations

import dataclasses

import pytest

from polyvox.studies.personas import judge_model as M
from polyvox.studies.personas import judging as J
from polyvox.studies.personas import pipeline as P


@pytest.fixture(scope="module", autouse=True)
def once_per_process():
    """The h200-v2 world's modelled judge calls (1,792 prompts, each answer tokenized; seconds) and a judge
    tokenizer (trained from its settings; seconds) are made once per settings in this module, not once per test:
    the same functions, memoised, so the fixture and the checks (``modelled_refusal``, the pipeline's ``check``)
    read what each would compute. Keyed by the whole scale and the whole judge settings: a test that changes a
    setting (the small max_positions below) gets its own."""
    import json

    calls, toks = {}, {}
    real_calls, real_tok = J.modelled_calls, M.tokenizer_for

    def modelled_calls(s):
        key = json.dumps(s, sort_keys=True, default=str)
        if key not in calls:
            calls[key] = real_calls(s)
        return list(calls[key])  # Calls are frozen; a new list each time, as the function gives

    def tokenizer_for(settings):
        if settings not in toks:
            toks[settings] = real_tok(settings)
        return toks[settings]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(J, "modelled_calls", modelled_calls)
        mp.setattr(M, "tokenizer_for", tokenizer_for)
        yield


@pytest.fixture(scope="module")
def v2():
    return P.load_scale("h200-v2")


@pytest.fixture(scope="module")
def v2_longest(v2, tmp_path_factory):
    """The longest modelled judge prompt of the h200-v2 run, in the h200 preset's judge tokens (computed)."""
    out = tmp_path_factory.mktemp("v2")
    return max(J.judge_prompt_tokens(J.judge_tokenizer(out, v2), J.modelled_calls(v2)))


def test_a_prompt_that_fits_is_not_refused():
    assert J.positions_refusal(100, 100 + J.JUDGE_MAX_TOKENS, "x") is None


def test_a_too_small_max_positions_is_refused_in_one_line_naming_the_numbers():
    line = J.positions_refusal(400, 256, "scale 'x'")
    assert "\n" not in line
    for n in ("400", str(J.JUDGE_MAX_TOKENS), str(400 + J.JUDGE_MAX_TOKENS), "256", "448"):
        assert n in line


@pytest.mark.slow
def test_modelled_answers_run_to_the_scale_cap(v2):
    from transformers import AutoTokenizer

    from polyvox.studies.personas.steps import _model

    calls = J.modelled_calls(v2)
    ctok = AutoTokenizer.from_pretrained(_model(v2))
    assert len(calls) == 1792  # the h200-v2 world's 448 test users × 4 prompts
    n = {len(ctok(c.first, add_special_tokens=False)["input_ids"]) for c in calls[:50]}
    assert max(n) >= v2["generate"]["max_tokens"] - 2 and max(n) <= v2["generate"]["max_tokens"] + 2


@pytest.mark.slow
def test_h200_v2_judge_prompts_fit_the_judge_models_positions(v2, v2_longest):
    positions = J.judge_settings(v2).max_positions
    assert v2_longest + J.JUDGE_MAX_TOKENS <= positions, (v2_longest, positions)
    assert J.modelled_refusal(P.Path("/nonexistent-run"), v2) is None


@pytest.mark.slow
def test_the_pipeline_refuses_a_too_small_max_positions_before_any_stage(v2, v2_longest, tmp_path, monkeypatch):
    small = v2_longest + J.JUDGE_MAX_TOKENS - 1
    monkeypatch.setitem(M.SIZES, "h200", dataclasses.replace(M.SIZES["h200"], max_positions=small))
    out = tmp_path / "run"
    with pytest.raises(ValueError) as e:
        P.check(out, v2, ["judge-model", "judge"])
    msg = str(e.value)
    assert "\n" not in msg and f"max_positions {small}" in msg and str(v2_longest + J.JUDGE_MAX_TOKENS) in msg
    assert not out.exists()  # read-only


@pytest.mark.parametrize("device,batch", [(None, 64), ("cpu", 64), ("cuda", 512), ("cuda:1", 512)])
def test_the_judge_model_batch_follows_the_device(device, batch):
    assert J.judge_batch(device) == batch


def test_h200_v2_batches_are_the_gpu_s():
    s = P.load_scale("h200-v2")
    assert s["judge"]["chunk"] >= J.judge_batch("cuda")  # a cached chunk fills at least one GPU batch
    assert s["generate"]["batch_size"] >= 1024
