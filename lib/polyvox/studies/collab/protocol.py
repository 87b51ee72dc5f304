"""The collaboration turn: what an agent sees and what it must write.

An agent sees one user message (the shared task state) and writes one turn::

    <think>reasoning</think> <answer>tentative answer</answer> <action>handoff big | note</action>
    <think>reasoning</think> <answer>tentative answer</answer> <action>stop</action>

``handoff NAME | NOTE`` passes the state to the named agent (its own name continues the
thread); ``stop`` confirms the tentative answer and ends the question. The state shows
the question, the pool, who is speaking and, for each earlier turn, its agent, tentative
answer, action and note — not the earlier reasoning (the study passes a task state, not
transcripts; short prompts also keep the miniature models inside their context).

Parsing is strict: a turn without exactly one well-formed ``<action>``, or one that hands
off to an agent outside the pool, is a *protocol violation*; a ``stop`` with an empty or
missing answer is an *empty stop*. The scheduler treats both alike (retry, then forced
hand-off). The answer tags are the ``integer`` grader's, so a turn is gradable as it stands.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_ACTION = re.compile(r"<action>(.*?)</action>", re.S)
_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_HANDOFF = re.compile(r"^handoff\s+([A-Za-z0-9_-]+)\s*(?:\|\s*(.*))?$", re.S)


@dataclass(frozen=True)
class Turn:
    reasoning: str
    answer: str | None  # tentative answer (None: missing or empty)
    action: str | None  # "stop" | "handoff" | None (violation)
    target: str | None
    note: str
    violation: str | None  # None, or why the turn breaks the protocol


def parse_turn(text: str, agents: tuple[str, ...]) -> Turn:
    think = _THINK.search(text)
    answers = _ANSWER.findall(text)
    answer = answers[-1].strip() if answers and answers[-1].strip() else None
    actions = _ACTION.findall(text)
    reasoning = think.group(1).strip() if think else ""
    if len(actions) != 1:
        return Turn(reasoning, answer, None, None, "", "no action" if not actions else "several actions")
    body = actions[0].strip()
    if body == "stop":
        return Turn(reasoning, answer, "stop", None, "", None if answer else "empty stop")
    m = _HANDOFF.match(body)
    if not m:
        return Turn(reasoning, answer, None, None, "", f"malformed action {body[:40]!r}")
    target, note = m.group(1), (m.group(2) or "").strip()
    if target not in agents:
        return Turn(reasoning, answer, None, target, note, f"unknown agent {target!r}")
    return Turn(reasoning, answer, "handoff", target, note, None)


def format_turn(reasoning: str, answer: str | None, action: str, target: str | None = None, note: str = "") -> str:
    """The turn text a well-behaved agent writes (traces and scripted agents use it)."""
    act = "stop" if action == "stop" else f"handoff {target}" + (f" | {note}" if note else "")
    return f"<think>{reasoning}</think> <answer>{answer or ''}</answer> <action>{act}</action>"


def state_prompt(question: str, agents: tuple[str, ...], speaker: str, history: list[dict]) -> str:
    """The user message an agent receives: question, pool, speaker and the earlier turns' state."""
    lines = [f"Question: {question}", f"Agents: {', '.join(agents)}. You are {speaker}."]
    for i, h in enumerate(history, 1):
        act = h.get("action") or "violation"
        if act == "handoff":
            act = f"handoff {h.get('target')}"
        lines.append(f"Turn {i}: {h['agent']} answered {h.get('answer') or 'nothing'}; {act}"
                     + (f"; note: {h['note']}" if h.get("note") else "") + ".")
    return "\n".join(lines)
