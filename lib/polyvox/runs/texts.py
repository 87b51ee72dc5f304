"""Sampling in memory: the requests :func:`polyvox.runs.sample` makes, answered as the records it writes.

:func:`sample_texts` is for work that samples but must not write a run folder: scoring a validation
set between training steps, a model card's check of what the model writes, the turns of a
collaboration (written as its own trajectory records). Everything that decides a completion is
:func:`~polyvox.runs.sample`'s: the prompt is ``backend.prompt(fmt, problem.text)``, each request's
seed is :func:`~polyvox.runs.sample_seed` of (seed, problem id, sample index), the panel format gets
its stop strings when none are given and its final block closed (:func:`polyvox.formats.finish_panel`),
and each completion comes back as the :class:`~polyvox.records.Sample` record a run folder's
``rollouts.jsonl`` would hold. The same backend therefore gives the same texts here as in a run
folder (``tests/test_runs_texts.py`` compares them), and no pipeline derives seeds of its own.
"""
from __future__ import annotations

from .. import formats
from ..backends.base import BackendSpec, Request, SamplingParams
from ..records import Sample
from .sample import check_sample_args, sample_seed


def sample_texts(backend, fmt: str, problems, params: SamplingParams, seed: int = 0, n: int = 1, *,
                 indices=None, chunk: int | None = None) -> list[Sample]:
    """n completions per problem, sampled as :func:`polyvox.runs.sample` samples them; nothing is written.

    ``problems``: anything with ``id`` and ``text`` (a :class:`~polyvox.records.Problem`, a persona
    prompt, a collaboration's state). The records come back in the order ``runs.sample`` works:
    per problem, sample indices 0 … n-1. ``indices``: instead, one request per problem with this
    sample index (a trajectory's turn number: each turn its own seed). ``chunk``: requests per
    ``backend.generate`` call (default: all in one call). ``backend`` may be a
    :class:`~polyvox.backends.BackendSpec` (loaded here, only when there is something to sample).
    """
    problems = list(problems)
    if indices is None:
        work = [(k, i) for k in range(len(problems)) for i in range(n)]
    else:
        indices = list(indices)
        if n != 1 or len(indices) != len(problems):
            raise ValueError(f"indices: one sample index per problem ({len(problems)}) and n = 1, got "
                             f"{len(indices)} indices and n = {n}")
        work = list(enumerate(indices))
    check_sample_args(fmt, n, params, None, 0, 1, chunk or max(1, len(work)), seed)
    if not work:
        return []
    stop = params.stop or (tuple(formats.PANEL_STOP) if fmt == "panel" else ())
    params = SamplingParams(params.max_tokens, params.temperature, params.top_p, tuple(stop))
    if isinstance(backend, BackendSpec):
        backend = backend.load()
    prompts = [backend.prompt(fmt, p.text) for p in problems]
    out: list[Sample] = []
    step = chunk or len(work)
    for b in range(0, len(work), step):
        batch = work[b:b + step]
        reqs = [Request.of(prompts[k], sample_seed(seed, problems[k].id, i)) for k, i in batch]
        comps = list(backend.generate(reqs, params))
        if len(comps) != len(batch):
            raise RuntimeError(f"backend {getattr(backend, 'name', '?')} returned {len(comps)} completions for "
                               f"{len(batch)} requests")
        for (k, i), req, c in zip(batch, reqs, comps):
            text = formats.finish_panel(c.text, c.finish_reason) if fmt == "panel" else c.text
            out.append(Sample(problems[k].id, i, req.hash(), text, c.prompt_tokens, c.completion_tokens,
                              c.finish_reason, round(c.latency_s, 4)))
    return out
