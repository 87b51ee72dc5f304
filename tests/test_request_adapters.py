"""A request's own adapter: the cache keys of requests without one are unchanged, and the backends that
apply one adapter of their own refuse a request naming another (only vllm serves adapters per request)."""
import hashlib
import json

import pytest

from polyvox.backends import Request, SamplingParams
from polyvox.backends.base import refuse_request_adapters
from polyvox.cache import request_key


def test_a_request_without_an_adapter_keeps_the_key_it_had_before_the_field():
    identity, params = {"backend": "transformers", "model": "m"}, SamplingParams(max_tokens=8, temperature=0.0)
    r = Request("What is 2 plus 2?", seed=3, chat=True, template_kwargs={"enable_thinking": False})
    # the key as computed before Request had an adapter field (shipped caches hold such keys)
    before = {"prompt": r.prompt, "seed": 3, "chat": True, "template_kwargs": {"enable_thinking": False}}
    blob = json.dumps({"identity": identity, "request": before, "params": params.__dict__ | {"stop": list(params.stop)}},
                      sort_keys=True, ensure_ascii=False, default=list)
    assert request_key(identity, r, params) == hashlib.sha256(blob.encode()).hexdigest()
    with_adapter = Request(r.prompt, 3, True, {"enable_thinking": False}, adapter="heads/warm")
    assert request_key(identity, with_adapter, params) != request_key(identity, r, params)


@pytest.mark.parametrize("own, asked, refused", [
    (None, None, False), ("a/x", None, False), ("a/x", "a/x", False), ("a/x", "a/./x", False),
    (None, "a/x", True), ("a/x", "a/y", True)])
def test_backends_with_one_adapter_refuse_a_request_naming_another(own, asked, refused):
    reqs = [Request("p", 0), Request("q", 1, adapter=asked)]
    if refused:
        with pytest.raises(ValueError, match="vllm backend for adapters per request"):
            refuse_request_adapters("transformers", reqs, own)
    else:
        refuse_request_adapters("transformers", reqs, own)


def test_the_transformers_backend_refuses_before_sampling(tiny):
    from polyvox.backends import make_backend

    backend = make_backend("transformers", tiny)
    with pytest.raises(ValueError, match="its own adapter \\(none\\)"):
        backend.generate([Request("What is 1 plus 1?", 0, adapter="/elsewhere/adapter")], SamplingParams(4))
