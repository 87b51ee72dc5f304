"""polyvox's decode loop (polyvox.backends.decode) against transformers' generate, in fp32 on CPU.

The loop replaces generate on CUDA: packed prefill, a per-row packed KV cache, attention over
each row's own tokens with the query heads folded onto their KV head, and the seeded sampler
inside the step. On CPU the same code runs eagerly with the dense attention path, so these
tests check everything but the CUDA kernels (flash, graphs), which the sampling bench compares
on the GPU.
"""
import pytest

pytestmark = pytest.mark.slow  # tiny-model decoding (14 s of the fast suite's 122 s of test time): in make test, not test-fast

from polyvox import formats
from polyvox.backends import Request, SamplingParams


@pytest.fixture(scope="module")
def loaded(tiny):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny).eval(), AutoTokenizer.from_pretrained(tiny)


def _requests(n=7):
    # prompts of different lengths, two sharing a prompt with different seeds
    reqs = [Request(formats.panel_prompt(f"What is {i} plus {3 * i}?") + " ok" * (i % 4), seed=11 * i)
            for i in range(n - 1)]
    return reqs + [Request(reqs[1].prompt, seed=5)]


def _both(loaded, reqs, params, batch_size=3):
    from polyvox.backends.hf import generate_batched

    model, tok = loaded
    eager = generate_batched(model, tok, reqs, params, batch_size, "cpu", static=False)
    loop = generate_batched(model, tok, reqs, params, batch_size, "cpu", static=True)
    return eager, loop


@pytest.mark.parametrize("params", [SamplingParams(max_tokens=24, temperature=1.0),
                                    SamplingParams(max_tokens=24, temperature=0.7, top_p=0.8),
                                    SamplingParams(max_tokens=16, temperature=0.0)],
                         ids=["t1", "t0.7-p0.8", "greedy"])
def test_the_loop_gives_generates_texts_in_fp32(loaded, params):
    eager, loop = _both(loaded, _requests(), params)
    assert [c.text for c in loop] == [c.text for c in eager]
    assert [c.completion_tokens for c in loop] == [c.completion_tokens for c in eager]
    assert [c.finish_reason for c in loop] == [c.finish_reason for c in eager]


@pytest.mark.slow  # moved out of the fast tier (over 1.5 s on 2 cores)
def test_stop_strings_cut_the_same_text(loaded):
    model, tok = loaded
    # a stop string the random model produces: a piece of one row's own unconstrained output
    free = _both(loaded, _requests(), SamplingParams(max_tokens=24, temperature=1.0))[0]
    stop = next(c.text[8:11] for c in free if len(c.text) > 12 and c.text[8:11].strip())
    params = SamplingParams(max_tokens=24, temperature=1.0, stop=(stop,))
    eager, loop = _both(loaded, _requests(), params)
    assert [c.text for c in loop] == [c.text for c in eager]
    assert [c.finish_reason for c in loop] == [c.finish_reason for c in eager]
    assert any(c.finish_reason == "stop" for c in loop)
    for e, c in zip(eager, loop):
        # the loop counts tokens up to the one that completes the stop string; generate's rows run
        # on with padding to the batch's end, which its count includes (the pad is no eos here)
        assert c.completion_tokens == e.completion_tokens if e.finish_reason == "length" \
            else c.completion_tokens <= e.completion_tokens


def test_rows_end_after_their_first_eos(loaded):
    from polyvox.backends.decode import decode_rows
    from polyvox.backends.hf import generate_rows, tokenize_prompts

    model, tok = loaded
    rows = tokenize_prompts(tok, [r.prompt for r in _requests()])
    seeds = list(range(len(rows)))
    params = SamplingParams(max_tokens=20, temperature=1.0)
    free = decode_rows(model, rows, seeds, 20, 1.0, 1.0, tok.pad_token_id, tok.eos_token_id, "cpu")
    eos = free[0][5]  # a token the model does emit, taken as end-of-sequence
    eager = generate_rows(model, rows, seeds, params, tok.pad_token_id, eos, "cpu", static=False)
    loop = decode_rows(model, rows, seeds, 20, 1.0, 1.0, tok.pad_token_id, [eos], "cpu")
    assert loop[0] == free[0][:6]
    for e, got in zip(eager, loop):
        want = e[:e.index(eos) + 1] if eos in e else e
        assert got == want


def test_seeds_make_texts_independent_of_batch(loaded):
    from polyvox.backends.hf import generate_batched

    model, tok = loaded
    reqs = _requests()
    params = SamplingParams(max_tokens=16, temperature=1.0)
    by_size = [generate_batched(model, tok, reqs, params, b, "cpu", static=True) for b in (1, 3, 8)]
    texts = [[c.text for c in out] for out in by_size]
    assert texts[0] == texts[1] == texts[2]
    swapped = generate_batched(model, tok, reqs[::-1], params, 4, "cpu", static=True)
    assert [c.text for c in swapped] == texts[0][::-1]
    assert texts[0][1] != texts[0][-1]  # same prompt, other seed


def test_prefill_in_many_chunks_gives_the_same_tokens(loaded, monkeypatch):
    from polyvox.backends import decode
    from polyvox.backends.hf import tokenize_prompts

    model, tok = loaded
    rows = tokenize_prompts(tok, [r.prompt for r in _requests()])
    args = (model, rows, list(range(len(rows))), 12, 1.0, 1.0, tok.pad_token_id, tok.eos_token_id, "cpu")
    whole = decode.decode_rows(*args)
    monkeypatch.setattr(decode, "DENSE_PREFILL_TOKENS", 1)  # one prompt per chunk
    assert decode.decode_rows(*args) == whole


def test_a_generation_config_processor_sends_the_model_to_generate(tiny):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from polyvox.backends import decode
    from polyvox.backends.hf import generate_batched

    model, tok = AutoModelForCausalLM.from_pretrained(tiny).eval(), AutoTokenizer.from_pretrained(tiny)
    assert decode.unsupported(model) is None
    model.generation_config.repetition_penalty = 1.3
    assert "repetition_penalty" in decode.unsupported(model)
    reqs, params = _requests(3), SamplingParams(max_tokens=10, temperature=1.0)
    loop = generate_batched(model, tok, reqs, params, 2, "cpu", static=True)
    eager = generate_batched(model, tok, reqs, params, 2, "cpu", static=False)
    assert [c.text for c in loop] == [c.text for c in eager]
    assert "_polyvox_engines" not in model.__dict__  # the loop never ran


def test_first_stop_finds_the_shortest_prefix(loaded):
    from polyvox.backends.decode import _first_stop

    _, tok = loaded
    ids = tok("alpha beta </answer> gamma", add_special_tokens=False)["input_ids"]
    k = _first_stop(ids, 0, ("</answer>",), tok)
    assert "</answer>" in tok.decode(ids[:k]) and "</answer>" not in tok.decode(ids[:k - 1])
    assert _first_stop(ids, 0, ("zeta",), tok) is None


@pytest.mark.slow  # ~1 min on 2 cores: inductor compiles the step for the CPU
def test_the_compiled_step_gives_the_eager_steps_tokens_and_compiles_once(loaded):
    from torch._dynamo.utils import counters

    from polyvox.backends import decode
    from polyvox.backends.hf import tokenize_prompts

    model, tok = loaded
    rows = tokenize_prompts(tok, [r.prompt for r in _requests()])

    def run(rs, batch, compile, max_new):
        model.__dict__.pop("_polyvox_engines", None)
        decode.engine_for(model, batch, "cpu").compile = compile
        out = decode.decode_rows(model, rs, list(range(len(rs))), max_new, 1.0, 1.0, tok.pad_token_id,
                                 tok.eos_token_id, "cpu", batch_rows=batch)
        return out, decode.engine_for(model, batch, "cpu").info

    before = counters["stats"]["unique_graphs"]
    eager_a, _ = run(rows[:3], 3, False, 12)
    eager_b, _ = run(rows[1:], 6, False, 300)  # other rows, capacity and step count
    compiled_a, info = run(rows[:3], 3, True, 12)
    assert info["compiled"] and not info["errors"]
    compiled_b, _ = run(rows[1:], 6, True, 300)
    assert (compiled_a, compiled_b) == (eager_a, eager_b)
    assert counters["stats"]["unique_graphs"] - before == 1  # dynamic in rows and capacity


@pytest.mark.slow  # builds and loads an adapter
def test_the_loop_runs_a_peft_adapter_like_generate(tiny, lora):
    from polyvox.backends.hf import TransformersBackend

    reqs, params = _requests(4), SamplingParams(max_tokens=12, temperature=1.0)
    loop = TransformersBackend(str(tiny), adapter=str(lora), static_cache=True).generate(reqs, params)
    eager = TransformersBackend(str(tiny), adapter=str(lora), static_cache=False).generate(reqs, params)
    assert [c.text for c in loop] == [c.text for c in eager]


def test_the_loop_runs_in_the_models_dtype_inside_a_bf16_autocast(loaded):
    """GRPO's held-out evaluation samples the training model (fp32 weights) inside bf16 autocast: the
    loop's KV cache is in the weights' dtype, and autocast's bf16 keys once failed to be written to it
    (found on the H200 by the grid bench: every hill-climb died at its first held-out evaluation)."""
    import torch

    from polyvox.backends.hf import generate_batched

    model, tok = loaded
    params = SamplingParams(max_tokens=12, temperature=1.0)
    plain = generate_batched(model, tok, _requests(4), params, 4, "cpu", static=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = generate_batched(model, tok, _requests(4), params, 4, "cpu", static=True)
    assert [c.text for c in autocast] == [c.text for c in plain]  # autocast is off inside the loop


def test_grpo_held_out_sampling_of_a_model_prepared_for_bf16_by_accelerate(loaded):
    """accelerate's ``prepare`` under bf16 wraps ``forward`` in an autocast of its own, which
    ``unwrap_model`` keeps: GRPO's held-out evaluation takes that wrapper off while it samples (the
    H200 grid bench's every hill-climb died there), and puts it back for training."""
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from polyvox.backends.hf import generate_batched
    from polyvox.train.grpo import plain_forward

    model, tok = loaded
    params = SamplingParams(max_tokens=12, temperature=1.0)
    plain = generate_batched(model, tok, _requests(4), params, 4, "cpu", static=True)
    # accelerate keeps one state per process: a GRPO run earlier in this worker (TRL's Trainer) set it without
    # bf16, and Accelerator refuses to change it; start from a clean state, and leave one for what follows
    AcceleratorState._reset_state(reset_partial_state=True)
    prepared = Accelerator(mixed_precision="bf16", cpu=True).prepare(model)
    try:
        with pytest.raises(RuntimeError, match="dtype"):  # what the wrapper does to the loop's fp32 cache
            generate_batched(prepared, tok, _requests(4), params, 4, "cpu", static=True)
        wrapper = prepared.forward
        with plain_forward(prepared):
            assert [c.text for c in generate_batched(prepared, tok, _requests(4), params, 4, "cpu",
                                                     static=True)] == [c.text for c in plain]
        assert prepared.forward is wrapper  # training keeps its autocast
        with torch.no_grad():
            ids = tok("What is 2 plus 2?", return_tensors="pt").input_ids
            assert prepared(ids).logits.dtype == torch.float32  # convert_outputs_to_fp32 still on
    finally:
        prepared.forward = prepared.__dict__.pop("_original_forward")
        AcceleratorState._reset_state(reset_partial_state=True)
