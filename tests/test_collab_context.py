"""Part III's context lengths: no training row cut silently, no evaluation past the trained positions.

The recorded collab models were trained on rows cut at ``models.seq_len`` = 192 tokens (``chat_rows`` cut
``prompt + answer`` silently) yet declare 1,024 positions; their evaluation reached 352. A scale with
``models.truncate: refuse`` (h200-ordered) cuts nothing — a row past seq_len is one line naming the longest —
and builds models with ``max_position_embeddings = seq_len``, so the backend refuses a request past it
(:func:`polyvox.backends.hf.check_positions`). Without the field (h200, cpu, smoke) nothing changes.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from polyvox.backends.hf import check_positions
from polyvox.config import ConfigError
from polyvox.studies.collab import models, pipeline
from polyvox.studies.collab.traces import sft_examples
from polyvox.train.pretrain import train_tokenizer

# with test_collab_split and test_collab_splits: one worker draws h200-ordered's problem sets for the three
pytestmark = pytest.mark.xdist_group("collab-ordered")

ROOT = Path(__file__).resolve().parents[1]
RECORDED_CL = [ROOT / "data/runs/collab-h200/eval" / x for x in ("cl", "cl-base", "cl-pd", "homo")]


def old_chat_rows(tok, pairs, seq_len):
    """chat_rows as it stood before models.truncate (commit 72fade0), kept here as the reference."""
    rows = []
    for user, answer in pairs:
        prompt = tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=True)
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        f_ids = tok(prompt + answer + "<|im_end|>", add_special_tokens=False)["input_ids"][:seq_len]
        rows.append((f_ids, len(p_ids)))
    return rows


def stage_tokenizer(s, train):
    """The tokenizer as the models stage builds it (pipeline.stage_models), in memory."""
    pairs = models.solo_pairs(train)
    texts = [u + " " + a for u, a in pairs] + [u + " " + a for ex in sft_examples(train[:400]).values()
                                                for u, a in ex]
    return train_tokenizer(texts, None, s["models"]["vocab"])


@pytest.fixture(scope="module")
def smoke():
    s = pipeline.load_scale("smoke")
    train = pipeline.problems(s, "train")
    ex = sft_examples(train, seed=s["data"]["seed"], slip=s["pd"]["slip"])
    pairs = models.solo_pairs(train) + [p for a in pipeline.AGENTS for p in ex[a]]
    return s, stage_tokenizer(s, train), pairs


# ---------------------------------------------------------------- 1. the recorded behaviour, unchanged

@pytest.mark.slow
def test_without_the_field_rows_are_as_before(smoke):
    s, tok, pairs = smoke
    seq_len = s["models"]["seq_len"]
    assert "truncate" not in s["models"] and models.truncate_mode(s) is None
    rows = models.chat_rows(tok, pairs, seq_len)
    assert rows == old_chat_rows(tok, pairs, seq_len)
    # the old cut is kept as it was: some PD rows of the smoke scale are longer than its 160 tokens
    full = models.chat_rows(tok, pairs, 10 ** 9)
    assert any(len(a) > seq_len for a, _ in full) and max(len(a) for a, _ in rows) == seq_len


@pytest.mark.parametrize("scale", ["smoke", "cpu", "h200"])
def test_recorded_scales_keep_their_settings_and_positions(scale):
    s = pipeline.load_scale(scale)
    assert "truncate" not in s["models"]
    assert "truncate" not in pipeline._settings(s, "models")["models"]  # their stage records are unchanged
    assert models.positions(s["models"]["seq_len"], models.truncate_mode(s)) == 1024


# ---------------------------------------------------------------- 2. models.truncate: refuse

@pytest.mark.slow  # builds a tokenizer (seconds)
def test_refuse_names_the_longest_example(smoke):
    s, tok, pairs = smoke
    lengths = [len(a) for a, _ in models.chat_rows(tok, pairs, 10 ** 9)]
    longest, seq_len = max(lengths), sorted(lengths)[len(lengths) // 2]
    with pytest.raises(ValueError) as err:
        models.chat_rows(tok, pairs, seq_len, "refuse")
    line = str(err.value)
    assert "\n" not in line
    n_over = sum(x > seq_len for x in lengths)
    assert re.match(rf"chat_rows: {n_over} of {len(pairs)} examples pass seq_len {seq_len}; the longest is "
                    rf"{longest} tokens \(example {lengths.index(longest)}, '.+'\) — models\.truncate: refuse "
                    rf"cuts none: raise models\.seq_len to at least {longest}$", line), line


def test_refuse_within_seq_len_cuts_nothing(smoke):
    s, tok, pairs = smoke
    longest = max(len(a) for a, _ in models.chat_rows(tok, pairs, 10 ** 9))
    assert models.chat_rows(tok, pairs, longest, "refuse") == old_chat_rows(tok, pairs, longest)
    with pytest.raises(ValueError, match="truncate 'cut'"):
        models.chat_rows(tok, pairs, longest, "cut")


@pytest.mark.slow
def test_a_model_built_under_refuse_declares_seq_len_positions(smoke):
    s, tok, _ = smoke
    spec = {k: v for k, v in s["models"]["sizes"]["small"].items() if k != "steps"}
    old = models.build_base(spec, tok, 160)
    new = models.build_base(spec, tok, 160, "refuse")
    assert old.config.max_position_embeddings == 1024 and new.config.max_position_embeddings == 160
    # so the backend's check refuses a request past the trained positions, and only those
    check_positions(new, [[1] * 100], 60)
    with pytest.raises(ValueError, match="100 prompt tokens \\+ max_tokens 61 = 161 pass the model's 160 positions"):
        check_positions(new, [[1] * 100], 61)
    check_positions(old, [[1] * 100], 61)


def test_the_field_is_typed(tmp_path):
    d = yaml.safe_load((ROOT / "configs/collab/h200-ordered.yaml").read_text())
    d["models"]["truncate"] = "cut"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(d))
    with pytest.raises((ConfigError, ValueError), match="truncate: expected one of 'refuse'"):
        pipeline.load_scale(tmp_path / "bad.yaml")


@pytest.mark.slow  # builds a tokenizer (seconds)
def test_the_models_stage_refuses_before_training(tmp_path, monkeypatch):
    """Under refuse, a PD row past seq_len stops the models stage before any model trains."""
    d = yaml.safe_load((ROOT / "configs/collab/smoke.yaml").read_text())
    d["models"].update(truncate="refuse", seq_len=128)  # the smoke scale's PD rows reach past 128
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(d))
    s = pipeline.load_scale(tmp_path / "s.yaml")
    trained = []
    monkeypatch.setattr(models, "train_base", lambda *a, **k: trained.append(a))
    with pytest.raises(ValueError, match=r"^chat_rows: \d+ of \d+ examples pass seq_len 128; the longest is"):
        pipeline.stage_models(tmp_path / "models", s)
    assert trained == []


@pytest.mark.slow
def test_train_base_under_refuse_saves_seq_len_positions(smoke, tmp_path):
    import json

    s, tok, pairs = smoke
    spec = {k: v for k, v in s["models"]["sizes"]["small"].items() if k != "steps"}
    longest = max(len(a) for a, _ in models.chat_rows(tok, pairs[:20], 10 ** 9))
    card = models.train_base(tmp_path, "small", spec, tok, pairs[:20], longest, 4, 1, 1e-3, 0, truncate="refuse")
    cfg = json.loads((tmp_path / "small" / "config.json").read_text())
    assert cfg["max_position_embeddings"] == longest == card["max_position_embeddings"] == card["seq_len"]
    assert card["truncate"] == "refuse" and card["longest_example"] == longest


# ---------------------------------------------------------------- 3. h200-ordered's seq_len covers what it meets

@pytest.mark.slow
def test_h200_ordered_seq_len_covers_training_and_evaluation():
    s = pipeline.load_scale("h200-ordered")
    m = s["models"]
    assert m["truncate"] == "refuse"
    train, test = pipeline.problems(s, "train"), pipeline.problems(s, "test")
    tok = stage_tokenizer(s, train)
    windows = models.recorded_windows(RECORDED_CL)
    assert len(windows) > 1000  # the recorded CL runs' full 4-turn windows
    lengths = models.context_lengths(s, tok, train, test, windows)
    assert set(lengths) == {"base", "pd small", "pd mid", "pd big", "pd homo", "rl", "eval solo", "eval cl"}
    longest = max(max(v) for v in lengths.values())
    # every training row and evaluation context fits, and seq_len is that rounded up to a multiple of 64
    assert m["seq_len"] % 64 == 0 and m["seq_len"] - 64 < longest <= m["seq_len"], (longest, m["seq_len"])
    for name, v in lengths.items():
        assert models.length_summary(v, m["seq_len"])["past_seq_len"] == 0, name
    # under the recorded 192 the PD rows were cut: most of big's, and every CL context at the last turn passes it
    assert models.length_summary(lengths["pd big"], 192)["past_seq_len"] > 0.5
    assert models.length_summary(lengths["eval cl"], 192)["past_seq_len"] == 1
    # nothing the models stage trains on is refused at this seq_len: its rows are the base and PD rows measured
    # above (past_seq_len 0 each, the refuse rule); the longest pair of each, found by those lengths, is that long
    # and passes refuse (rather than tokenizing all 3,300 + PD pairs again: seconds)
    ex = sft_examples(train, seed=s["data"]["seed"], slip=s["pd"]["slip"])
    for name, pairs in [("base", models.solo_pairs(train)), *((f"pd {a}", ex[a]) for a in pipeline.AGENTS)]:
        assert len(pairs) == len(lengths[name]), name
        i = max(range(len(pairs)), key=lengths[name].__getitem__)
        (ids, _), = models.chat_rows(tok, [pairs[i]], m["seq_len"], "refuse")
        assert len(ids) == lengths[name][i], name
    # the budgets still rise with size (tokens = steps × batch × seq_len, one seq_len for all)
    assert models.check_budgets(s) is None
