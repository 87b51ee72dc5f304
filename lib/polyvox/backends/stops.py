"""Stop strings in polyvox's decode loop: rows whose text contains one are cut on the host.

The device decodes token ids; every ``CHECK_EVERY`` steps the host decodes the running rows'
texts, marks a row that now holds a stop string as finished, and finds the shortest prefix
holding it by bisection over token counts (so the text ends where ``generate(stop_strings=…)``
would end it).
"""
from __future__ import annotations

import torch


def _first_stop(tokens: list[int], lo: int, stops, tokenizer) -> int | None:
    """The length of the shortest prefix (longer than ``lo``) whose text contains a stop string."""
    def has(k):
        text = tokenizer.decode(tokens[:k], skip_special_tokens=True)
        return any(s in text for s in stops)

    hi = len(tokens)
    if hi <= lo or not has(hi):
        return None
    while hi - lo > 1:  # has(lo) is False (or lo is 0), has(hi) is True
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if has(mid) else (mid, hi)
    return hi


def _check_stops(st, cut, checked: int, steps: int, stops, tokenizer, n: int, eos):
    """Rows still running whose text contains a stop string: cut on the host, finished on the device."""
    running = (~st.finished[:n]).cpu().numpy()
    todo = [i for i in range(n) if cut[i] is None and running[i]]
    if not todo:
        return
    tokens = st.out[:n, :steps].cpu().tolist()
    texts = tokenizer.batch_decode([tokens[i] for i in todo], skip_special_tokens=True)
    hit = []
    for i, text in zip(todo, texts):
        if any(s in text for s in stops):
            cut[i] = _first_stop(tokens[i], max(checked - 1, 0), stops, tokenizer)
            hit.append(i)
    if hit:
        st.finished[torch.as_tensor(hit, device=st.finished.device)] = True
