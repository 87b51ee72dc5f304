"""The miniature world: generator, rewards, shipped models, and GRPO for real on CPU."""
import json

import pytest

from polyvox import formats
from polyvox.studies.world import problems as world
from polyvox.train import grpo as rl


def test_generator_is_deterministic_and_checked():
    a = world.generate(20, seed=3)
    b = world.generate(20, seed=3)
    assert [p.text for p in a] == [p.text for p in b]
    assert [p.text for p in a] != [p.text for p in world.generate(20, seed=4)]
    for p in a:
        assert eval(p.expression) == p.answer  # noqa: S307 - our own expression
        value = p.start
        for s in p.steps:
            assert s.before == value and s.after > 0
            value = s.after
        assert value == p.answer


@pytest.mark.parametrize("level,ops", [(1, (1, 1)), (3, (3, 3)), (5, (5, 5)), ("olympiad", (6, 8))])
def test_levels_have_their_number_of_operations(level, ops):
    for p in world.generate(30, seed=0, levels=[level]):
        assert ops[0] <= len(p.steps) <= ops[1]


def test_splits_are_disjoint_and_requested_split_is_honoured():
    train = world.generate(200, seed=1, split="train")
    test = world.generate(50, seed=2, split="test")
    assert all(p.split == "train" for p in train) and all(p.split == "test" for p in test)
    assert not {p.text for p in train} & {p.text for p in test}


def test_solution_styles_carry_the_answer_and_formats():
    p = world.generate(1, seed=0, levels=[4])[0]
    assert world.solution_plain(p).endswith(f"The answer is {p.answer}.")
    assert formats.tags_valid(world.solution_panel(p))
    assert formats.think_valid(world.solution_think(p))
    for doc in world.pretraining_text(world.generate(30, seed=0)):
        assert "Multi-Persona Panel" not in doc  # the base never sees the panel prompt


REWARDS = [
    ("panel", "<mutipersonaDebate> E1: 2+2=4 </mutipersonaDebate> <answer>4</answer>", "4", 1.0),
    ("panel", "<mutipersonaDebate> E1: 2+2=5 </mutipersonaDebate> <answer>5</answer>", "4", 0.0),
    ("panel", "<answer>4</answer>", "4", 0.8),
    ("panel", "<mutipersonaDebate>  </mutipersonaDebate> <answer>4</answer>", "4", 0.8),
    ("panel", "<answer>4</answer> <mutipersonaDebate> x </mutipersonaDebate>", "4", 0.8),
    ("panel", "The answer is 4.", "4", -0.2),
    ("panel", "", "4", -0.2),
    ("think", "<think>2+2=4</think> The answer is \\boxed{4}.", "4", 1.0),
    ("think", "<think>2+2=4</think> The answer is \\boxed{5}.", "4", 0.0),
    ("think", "<think>2+2=4 and so on", "4", -0.2),
    ("think", "The answer is \\boxed{4}.", "4", 0.8),
    ("think", "<think></think> \\boxed{4}", "4", 0.8),
]


@pytest.mark.parametrize("arm,completion,gold,expected", REWARDS)
def test_reward_table(arm, completion, gold, expected):
    assert rl.reward(arm, completion, gold)[0] == pytest.approx(expected)


@pytest.mark.slow
def test_shipped_models_load_and_generate_on_cpu(root):
    from polyvox.backends import Request, SamplingParams
    from polyvox.backends.hf import TransformersBackend

    p = world.generate(1, seed=9, levels=[1], split="test")[0]
    base = TransformersBackend(str(root / "data/models/tiny-base"))
    think = TransformersBackend(str(root / "data/models/tiny-think"))
    # the shipped run's two arms: seed 0's hard-stage LoRA of each, on tiny-base (the matched design)
    adapters = root / "data/runs/world/seed-0"
    panel = TransformersBackend(str(root / "data/models/tiny-base"), adapter=str(adapters / "rl-panel/hard/adapter"))
    think_rl = TransformersBackend(str(root / "data/models/tiny-base"), adapter=str(adapters / "rl-think/hard/adapter"))
    params = SamplingParams(max_tokens=200, temperature=0.0)
    [b] = base.generate([Request(formats.panel_prompt(p.text))], params)
    [t] = think.generate([Request(formats.build_prompt("think", p.text, think.tokenizer).text)], params)
    [pa] = panel.generate([Request(formats.panel_prompt(p.text))], params)
    [tr] = think_rl.generate([Request(formats.build_prompt("think", p.text, think_rl.tokenizer).text)], params)
    assert b.completion_tokens > 0
    assert "</think>" in t.text and rl.reward("think", t.text, str(p.answer))[1]  # a level-1 problem, greedy
    assert formats.tags_valid(pa.text) and rl.reward("panel", pa.text, str(p.answer))[1]
    assert "</think>" in tr.text and rl.reward("think", tr.text, str(p.answer))[1]
    card = json.loads((root / "data/models/tiny-base/card.json").read_text())
    assert card["architecture"] == "Qwen3ForCausalLM" and card["parameters"] < 10_000_000


@pytest.mark.slow
def test_two_grpo_steps_on_cpu_write_logs_and_an_adapter(tiny, tmp_path):
    model = tiny
    probs = [world.to_problem(p) for p in world.generate(4, seed=0, levels=[1], split="train")]
    held = [world.to_problem(p) for p in world.generate(1, seed=1, levels=[1], split="test")]
    cfg = rl.RLConfig(model=str(model), arm="panel", out=str(tmp_path / "rl"), stages=[rl.Stage("easy", probs, 2)],
                      lora_rank=4, lora_alpha=8, group_size=2, prompts_per_step=2, max_completion_length=8,
                      eval_every=1, heldout=held, heldout_samples=1)
    adapter = rl.train(cfg, progress=False)
    assert (adapter / "adapter_model.safetensors").exists()
    log = [json.loads(l) for l in (tmp_path / "rl/train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2]
    assert {"reward_mean", "reward_std", "accuracy", "format_valid", "completion_tokens_mean"} <= set(log[0])
    traj = [json.loads(l) for l in (tmp_path / "rl/heldout_trajectory.jsonl").read_text().splitlines()]
    assert [r["step"] for r in traj] == [0, 1, 2]
    assert json.loads((tmp_path / "rl/manifest.json").read_text())["status"] == "complete"


def test_world_rl_config_loads(root):
    cfg = rl.load_config(root / "configs/rl/world-panel.yaml", data_dir=str(root / "data"))
    assert [s.name for s in cfg.stages] == ["easy", "hard"] and cfg.stages[0].grading == "integer"
    assert all(s.problems for s in cfg.stages) and cfg.heldout and cfg.lora_rank == 32


@pytest.mark.parametrize("name", ["qwen3-30b-a3b-panel.yaml", "qwen3-4b-panel.yaml"])
def test_full_scale_configs_need_the_math_training_split(root, tmp_path, name):
    with pytest.raises(ValueError, match="math_train needs .*not shipped"):
        rl.load_config(root / "configs/rl" / name, data_dir=str(root / "data"))
    data = tmp_path / "data"
    import shutil
    shutil.copytree(root / "data/benchmarks", data / "benchmarks")
    (data / "benchmarks/math_train").mkdir()
    (data / "benchmarks/math_train/train.jsonl").write_text(json.dumps(
        {"problem": "1+1?", "answer": "2", "level": 1, "subject": "x", "unique_id": "t/1"}) + "\n")
    cfg = rl.load_config(root / "configs/rl" / name, data_dir=str(data))
    assert [s.grading for s in cfg.stages] == ["gsm8k", "math"] and cfg.use_vllm and cfg.lora_rank == 32


def test_rl_config_rejects_unknown_keys(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: m\narm: panel\nout: o\nlora_rnak: 4\nstages: []\n")
    with pytest.raises(ValueError, match="unknown keys lora_rnak"):
        rl.load_config(bad)


def test_held_out_sets_are_arithmetic_disjoint_from_every_training_set():
    """No held-out expression (operands and operators) occurs in any training, pretraining or SFT set."""
    from polyvox.studies.world import models, pipeline

    scale = pipeline.load_scale("smoke")
    n = 200
    _, docs = models.corpus(n, seed=0)  # pretraining documents and tiny-think's SFT problems (split "train")
    sft_and_pretrain = models.corpus(n, seed=0)[0]
    train_sets = sft_and_pretrain + world.generate(n // 10, seed=10, levels=(1, 2), split="train") \
        + world.generate(n // 10, seed=30, levels=pipeline.POOL_LEVELS, split="train")
    held = world.generate(25, seed=12, levels=(1, 2, 3, 4, 5), split="test") \
        + world.generate(scale["eval"]["per_level"] * 10, seed=20, split="test") \
        + world.generate(25, seed=40, levels=pipeline.POOL_LEVELS, split="test") \
        + world.generate(scale["eval"]["per_level"] * 10, seed=pipeline.SEED_OFFSETS["pilot"], split="test")
    train_exprs = {p.expression for p in train_sets}
    assert not {p.expression for p in held} & train_exprs
    # the same calculation in other words is in the same split
    p = held[0]
    same = [q for q in world.generate(400, seed=99, levels=[p.level]) if q.expression == p.expression]
    assert all(q.split == "test" for q in same)
    # and the pretraining text never states a held-out problem
    assert not any(h.text in d for h in held[:50] for d in docs)


def test_the_refreshed_inference_copy_gives_the_policys_logits(tiny, lora):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from polyvox.train.fastgen import refresh

    policy = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny), str(lora))
    copy = AutoModelForCausalLM.from_pretrained(tiny)
    ids = torch.tensor([[5, 17, 42, 99, 7, 3]])
    with torch.no_grad():
        before = copy(ids).logits
        assert refresh(policy, copy) > 0
        want, got = policy(ids).logits, copy(ids).logits
    assert not torch.allclose(before, want, atol=1e-3)  # the adapter changes the model
    assert torch.allclose(got, want, atol=1e-5)
    with torch.no_grad():  # a training step later: the copy follows after the next refresh
        for name, p in policy.named_parameters():
            if "lora_A" in name:
                p.add_(0.05)
        refresh(policy, copy)
        assert torch.allclose(copy(ids).logits, policy(ids).logits, atol=1e-5)


@pytest.mark.slow
def test_grpo_steps_with_fast_generation_on_cpu(tiny, tmp_path):
    probs = [world.to_problem(p) for p in world.generate(4, seed=0, levels=[1], split="train")]
    cfg = rl.RLConfig(model=str(tiny), arm="panel", out=str(tmp_path / "rl"), stages=[rl.Stage("easy", probs, 2)],
                      lora_rank=4, lora_alpha=8, group_size=2, prompts_per_step=2, max_completion_length=8,
                      eval_every=10, fast_generation=True)
    rl.train(cfg, progress=False)
    log = [json.loads(l) for l in (tmp_path / "rl/train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2]
    assert log[-1]["fastgen_calls"] == 2 and log[-1]["fastgen_tokens"] > 0
    assert 0 < log[-1]["completion_tokens_mean"] <= 8


@pytest.mark.slow
def test_an_interrupted_rl_run_starts_over_and_keeps_the_old_logs(tiny, tmp_path):
    """grpo.train does not resume mid-way: a rerun renames the earlier attempt's logs and writes fresh ones."""
    out = tmp_path / "rl"
    out.mkdir()
    (out / "train_log.jsonl").write_text('{"stage": "easy", "step": 1}\n')
    (out / "heldout_trajectory.jsonl").write_text('{"step": 0, "heldout_mean": 0.5}\n')
    probs = [world.to_problem(p) for p in world.generate(2, seed=0, levels=[1], split="train")]
    cfg = rl.RLConfig(model=str(tiny), arm="panel", out=str(out), stages=[rl.Stage("easy", probs, 1)],
                      lora_rank=2, lora_alpha=4, group_size=2, prompts_per_step=2, max_completion_length=4,
                      eval_every=10, fast_generation=False)
    rl.train(cfg, progress=False)
    assert (out / "train_log.attempt-1.jsonl").read_text() == '{"stage": "easy", "step": 1}\n'
    assert [json.loads(x)["step"] for x in (out / "train_log.jsonl").read_text().splitlines()] == [1]
    assert json.loads((out / "manifest.json").read_text())["earlier_attempts"] == 1


def test_sft_batches_mask_the_prompt_and_the_padding():
    import torch

    from polyvox.train.pretrain import sft_batches

    x, y = sft_batches([([1, 2, 3, 4], 2), ([5, 6], 1)], 4, 0, torch.Generator().manual_seed(0))(0)
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        if row_x[0] == 1:
            assert row_x == [1, 2, 3, 4] and row_y == [-100, -100, 3, 4]
        else:
            assert row_x == [5, 6, 0, 0] and row_y == [-100, 6, -100, -100]
