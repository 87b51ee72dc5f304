"""A chat request (the user message, as a chat endpoint takes it) reaches a local model through the
tokenizer's chat template, as an OpenAI-compatible server renders it; a completion request as it is."""
import pytest
from transformers import AutoTokenizer

from polyvox.backends import SamplingParams, make_backend
from polyvox.backends.base import Request, local_prompt


def test_local_prompt_renders_chat_requests_only(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    plain = Request("2 + 2 =", seed=1)
    chat = Request("What is 2 + 2?", seed=1, chat=True)
    assert local_prompt(tok, plain) == "2 + 2 ="
    rendered = local_prompt(tok, chat)
    assert rendered == tok.apply_chat_template([{"role": "user", "content": "What is 2 + 2?"}], tokenize=False,
                                               add_generation_prompt=True)
    assert rendered != chat.prompt and "What is 2 + 2?" in rendered
    tok.chat_template = None
    with pytest.raises(ValueError, match="chat template"):
        local_prompt(tok, chat)


@pytest.mark.slow
def test_the_transformers_backend_answers_a_chat_request_as_its_rendered_prompt(tiny):
    be = make_backend("transformers", str(tiny), batch_size=4)
    params = SamplingParams(6, 1.0)
    chat = [Request(f"What is {i} + {i}?", seed=i, chat=True) for i in range(3)]
    rendered = [Request(local_prompt(be.tokenizer, r), seed=r.seed) for r in chat]
    got, want = be.generate(chat, params), be.generate(rendered, params)
    assert [c.text for c in got] == [c.text for c in want]
    assert [c.prompt_tokens for c in got] == [c.prompt_tokens for c in want]
    raw = be.generate([Request(r.prompt, seed=r.seed) for r in chat], params)  # the message without the template
    assert [c.prompt_tokens for c in raw] != [c.prompt_tokens for c in got]


@pytest.mark.parametrize("fmt", ["think", "plain", "panel"])
def test_a_local_backends_format_prompt_is_templated_once_and_is_what_the_trainer_reads(fmt):
    """A local backend's ``prompt(fmt, text)`` (what runs.sample, the bands and evaluations send) reaches the model
    exactly as GRPO's trainer builds it: one user turn, one assistant header. Regression: the think prompt came back
    templated but marked as a chat request, so local_prompt templated it again — a user turn inside a user turn, 10
    tokens longer, without enable_thinking — and Part IV's thinking arm was evaluated on a prompt it was never trained
    on (a shipped model's real tokenizer and template here, since the template decides the text)."""
    from pathlib import Path

    from polyvox.backends.base import LocalBackend
    from polyvox.train import grpo

    tok = AutoTokenizer.from_pretrained(Path(__file__).resolve().parents[1] / "data/models/tiny-base")
    backend = LocalBackend()
    backend.tokenizer = tok
    text = "Tom has 3 apples and buys 4 more. How many apples does he have?"
    sent = local_prompt(tok, Request.of(backend.prompt(fmt, text), seed=0))
    if fmt != "plain":
        assert sent == grpo.prompt_for(fmt, text, tok)
    if fmt != "panel":
        assert sent.count("<|im_start|>user") == 1 and sent.count("<|im_start|>assistant") == 1
        assert sent == tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                               add_generation_prompt=True, enable_thinking=fmt == "think")
    assert sent.count(text) == 1
