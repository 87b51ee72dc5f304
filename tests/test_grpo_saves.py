"""What a GRPO run leaves on disk: safetensors adapters only (every ``save_every`` steps and at the end of
each stage), never TRL's pickled checkpoints (optimizer, scheduler, RNG state)."""
import pytest

from polyvox.adapters import adapter_config
from polyvox.train import grpo

PICKLE_SUFFIXES = {".pt", ".pth", ".bin", ".pkl", ".pickle"}


@pytest.mark.slow
def test_a_run_saves_safetensors_adapters_and_no_pickles(tiny, tmp_path):
    from polyvox.studies.world import problems as world

    probs = [world.to_problem(p) for p in world.generate(2, seed=0, levels=[1], split="train")]
    out = tmp_path / "rl"
    cfg = grpo.RLConfig(model=str(tiny), arm="panel", out=str(out), stages=[grpo.Stage("one", probs, 3)],
                        lora_rank=2, lora_alpha=4, group_size=2, prompts_per_step=2, max_completion_length=4,
                        learning_rate=1e-3, eval_every=100, save_every=2, seed=0)
    grpo.train(cfg, progress=False)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix in PICKLE_SUFFIXES], "a pickle was written"
    assert not list(out.glob("*/checkpoint-*")), "TRL's checkpoint folders are off"
    # step 2 of 3 is a multiple of save_every; the stage's end is the adapter/ folder, not a step folder
    assert sorted(p.name for p in (out / "one").iterdir() if p.name.startswith("step-")) == ["step-2"]
    for folder in (out / "one" / "step-2", out / "one" / "adapter"):
        assert adapter_config(folder)["r"] == 2
