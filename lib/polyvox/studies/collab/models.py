"""The miniature pool: one tokenizer, four tiny Qwen3 models, protocol-distillation adapters.

- Tokenizer: :func:`polyvox.train.pretrain.train_tokenizer` on solo solutions and traces
  of both tasks (byte-level BPE, digits one token each, the Qwen-style chat template).
- Base models (``small``, ``mid``, ``big`` and the single ``large`` reference), Qwen3
  architecture trained from scratch, sizes chosen in the scale file so their parameter
  counts stand roughly as the study's 1.7 : 4 : 8 : 14. Each is trained on chat-formatted
  solo solutions (:func:`.traces.solo`), loss on the assistant turn only — the stand-in
  for an instruction-tuned Qwen3 that has never seen the protocol.
- Protocol distillation (PD): SFT of each agent on its turns of the coordination traces
  (:func:`.traces.sft_examples`), loss on the turn only. The base models never saw the protocol's tokens
  (``<action>``'s pieces, ``stop``, the letters of ``handoff`` and the notes, ``Agents``, ``Turn`` …): with tied
  embeddings, training collapses every absent token's row onto one direction, so a full fine-tune first
  re-initialises those rows (:func:`dead_tokens`, :func:`revive_embeddings`; without it the recorded
  h200-ordered PD left > 90 % of the turns without a valid action). A LoRA adapter (``mode: lora``,
  all linear layers) or a full fine-tune (``mode: full``; the recorded cpu run, because a
  rank-8 LoRA plateaued at a loss near 2.2 and never learned the action tag in its first
  attempt); ``homo``: ``mid`` trained on all three roles' turns (the prompt names the
  role), for the homogeneous pool.
Training: :func:`polyvox.train.pretrain.train_loop` (AdamW, warm-up then cosine), seeded.
Saved with ``save_pretrained`` (safetensors; base models in bf16) with a ``card.json``.

Skill must rise with size (issue 23: the recorded run trained larger models fewer steps, and
``large`` scored below ``small``):

- :func:`budget_problems` / :func:`check_budgets`: in a scale, each larger model (by estimated
  parameter count, :func:`estimated_parameters`) trains at least as many steps and tokens
  (steps × batch × seq_len) as the next smaller one; one line names the first breach.
- :func:`validation_problems`: a validation split the size of the test set, drawn at
  ``data.seed`` + :data:`VALIDATION_SEED_OFFSET`, sharing no underlying problem with the test set
  (:func:`underlying`: a world problem's start and calculations, a QA question's chain of facts).
  QA questions come from the QA task's own ``validation`` split, whose chains are in neither train nor
  test (:func:`.tasks.qa_splits`); world problems outside the training set come first, but level-1
  arithmetic has few calculations, so their overlap with training is recorded (:func:`overlap`), not
  avoided — in the recorded scales. A scale with ``data.split_by: underlying`` (h200-ordered) draws it
  from its own partition instead (:func:`held_out`), disjoint from train and test by construction.
- :func:`validation_check`: each base model alone on it (greedy, as the eval stage runs solo),
  scored as the chapter scores, then :func:`.analysis.ordering_check`; written to
  ``validation.json`` and returned for the models stage's record; a failure raises one line.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

from ...adapters import save_adapter
from ...train.pretrain import save, sft_batches, train_loop, train_tokenizer
from .tasks import underlying  # noqa: F401 - re-exported: models.underlying
from .traces import solo

MODELS = ("small", "mid", "big", "large")
VALIDATION_SEED_OFFSET = 200  # from data.seed (the test questions take + 100, pipeline.TEST_SEED_OFFSET)
REFUSE = "refuse"  # models.truncate: an example past seq_len is an error, not cut
OLD_POSITIONS = 1024  # max_position_embeddings of the models built without models.truncate (the recorded runs)


def chat_rows(tok, pairs: list[tuple[str, str]], seq_len: int,
              truncate: str | None = None) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) rows of chat-formatted (user, assistant) pairs, at most ``seq_len`` tokens.

    ``truncate`` absent (the recorded scales): a longer example is cut at ``seq_len``, silently (its end —
    the answer, the action — is then never taught). ``truncate="refuse"`` (``models.truncate: refuse``):
    nothing is cut; any example past ``seq_len`` is a ValueError of one line naming the longest."""
    rows, texts = [], []
    for user, answer in pairs:
        prompt = tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=True)
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        f_ids = tok(prompt + answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
        if truncate is None:
            f_ids = f_ids[:seq_len]
        rows.append((f_ids, len(p_ids)))
        texts.append(user)
    if truncate is not None:
        if truncate != REFUSE:
            raise ValueError(f"chat_rows: truncate {truncate!r}: expected {REFUSE!r} or None")
        over = [i for i, (ids, _) in enumerate(rows) if len(ids) > seq_len]
        if over:
            i = max(over, key=lambda k: len(rows[k][0]))
            raise ValueError(f"chat_rows: {len(over)} of {len(rows)} examples pass seq_len {seq_len}; the longest is "
                             f"{len(rows[i][0])} tokens (example {i}, {' '.join(texts[i].split())[:60]!r}) — "
                             f"models.truncate: refuse cuts none: raise models.seq_len to at least {len(rows[i][0])}")
    return rows


def truncate_mode(s: dict) -> str | None:
    """The scale's ``models.truncate`` (``refuse``), or None: the recorded scales' silent cut at seq_len."""
    return s["models"].get("truncate")


def positions(seq_len: int, truncate: str | None) -> int:
    """``max_position_embeddings`` of a base model: ``seq_len`` under ``models.truncate: refuse`` (so the
    backend's check, :func:`polyvox.backends.hf.check_positions`, refuses any request past the positions the
    scale trains), else :data:`OLD_POSITIONS` (the recorded models, which declare more than they trained)."""
    return seq_len if truncate == REFUSE else OLD_POSITIONS


def batcher(rows, batch: int, pad_id: int, seed: int):
    """Reply-only-loss SFT batches over (ids, prompt length) rows (:func:`polyvox.train.pretrain.sft_batches`)."""
    import torch

    return sft_batches(rows, batch, pad_id, torch.Generator().manual_seed(seed))


def kv_heads(hidden: int) -> int:
    """Key/value heads: at most hidden // 64, and a divisor of the query heads (hidden // 32)."""
    heads = max(1, hidden // 32)
    return max(d for d in range(1, heads + 1) if heads % d == 0 and d <= max(1, hidden // 64))


def build_tokenizer(out: Path, texts: list[str], vocab: int):
    """Train the tokenizer, or load the one an interrupted run of this stage already saved."""
    if (out / "tokenizer" / "tokenizer.json").exists():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(out / "tokenizer")
    return train_tokenizer(texts, out / "tokenizer", vocab, eos="<|im_end|>")


def device() -> str:
    """Where the pool trains: the GPU when there is one (bf16 autocast in ``train_loop``), else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def build_base(spec: dict, tok, seq_len: int, truncate: str | None = None):
    """An untrained base model of ``spec`` (hidden, layers, intermediate) for ``tok`` (:func:`positions`)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    h = spec["hidden"]
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=h, intermediate_size=spec["intermediate"],
                      num_hidden_layers=spec["layers"], num_attention_heads=max(1, h // 32),
                      num_key_value_heads=kv_heads(h), head_dim=32,
                      max_position_embeddings=positions(seq_len, truncate),
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=None, rope_theta=10000.0)
    return Qwen3ForCausalLM(cfg)


def train_base(out: Path, name: str, spec: dict, tok, pairs, seq_len: int, batch: int, steps: int, lr: float,
               seed: int, progress: bool = False, truncate: str | None = None) -> dict:
    import torch

    done = out / name / "card.json"
    if done.exists():  # an interrupted models stage keeps the models it finished (same spec and steps)
        card = json.loads(done.read_text())
        if all(card.get(k) == v for k, v in spec.items()) and card.get("steps") == steps and card.get("lr") == lr:
            return card
    torch.manual_seed(seed)
    dev = device()
    model = build_base(spec, tok, seq_len, truncate).to(dev)
    log: list = []
    t0 = time.time()
    rows = chat_rows(tok, pairs, seq_len, truncate)
    train_loop(model, batcher(rows, batch, tok.pad_token_id, seed), steps, lr, dev, log, name, progress)
    save(model, tok, out / name)
    n = sum(p.numel() for p in model.parameters())
    card = {"name": name, "parameters": n, **spec, "vocab": len(tok), "steps": steps, "batch": batch, "lr": lr,
            "examples": len(rows), "seed": seed, "device": dev, "seconds": round(time.time() - t0, 1),
            "final_loss": log[-1]["loss"], "loss_log": log,
            "stage": "trained from scratch on chat-formatted solo solutions (assistant turn only)"}
    if truncate is not None:  # new runs only: the recorded cards keep their fields
        card.update(truncate=truncate, seq_len=seq_len, longest_example=max(len(ids) for ids, _ in rows),
                    max_position_embeddings=model.config.max_position_embeddings)
    (out / name / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    return card


def trained_tokens(tok, pairs, seq_len: int = 10 ** 9) -> set[int]:
    """Token ids the base models train on: every id of their chat-formatted rows (:func:`chat_rows` of the
    solo ``pairs``), prompt and reply. An id outside this set never reaches a base model's input."""
    return {i for ids, _ in chat_rows(tok, pairs, seq_len) for i in ids}


def dead_tokens(rows, trained: set[int]) -> list[int]:
    """Ids of ``rows`` ((ids, prompt length), PD's) that the base models never trained on (:func:`trained_tokens`).

    With tied embeddings such a token's row is moved by the output softmax alone — every step pushes each
    absent token's row down along the same direction — so after base training all of them point one way
    (measured: mean pairwise cosine 0.999 against 0.13 among trained tokens, norms 2.4 against 1.0) and the
    model cannot tell them apart in its input. Protocol distillation's own vocabulary is among them
    (``Ġ<``, ``action``, ``>``, ``stop``, ``</``, the letters of ``handoff`` and of the notes, ``Agents``,
    ``Turn`` …: a quarter of PD's target tokens), so a PD'd model wrote ``<actionactionaction>``."""
    return sorted({i for ids, _ in rows for i in ids} - trained)


def scheduler_words() -> str:
    """A state only the evaluation's scheduler writes (an earlier turn that broke the protocol: ``answered
    nothing; violation``), never a PD row: its tokens are revived with PD's (:func:`dead_tokens`)."""
    from .protocol import state_prompt

    return state_prompt("", ("small", "mid"), "mid", [{"agent": "small", "answer": None, "action": None, "note": ""}])


def revive_embeddings(model, dead: list[int], trained: set[int], seed: int) -> None:
    """Re-initialise the embedding rows ``dead`` as new tokens of a trained model are initialised: the mean of the
    ``trained`` rows plus Gaussian noise of their per-dimension spread, each row its own draw (with tied
    embeddings the output rows too). Distinct rows the fine-tune can then separate (:func:`dead_tokens`)."""
    import torch

    if not dead:
        return
    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        # drawn on the CPU (its generator), so a GPU run revives the same rows as a CPU one; the rows then move
        ref = emb[sorted(trained)].float().cpu()
        g = torch.Generator().manual_seed(seed)
        noise = torch.randn((len(dead), emb.shape[1]), generator=g)
        emb[dead] = (ref.mean(0) + noise * ref.std(0)).to(emb.dtype).to(emb.device)
        out = model.get_output_embeddings()
        if out is not None and out.weight.data_ptr() != emb.data_ptr():  # untied: the output rows alike
            out.weight[dead] = (ref.mean(0) + torch.randn((len(dead), emb.shape[1]), generator=g) * ref.std(0)
                                ).to(out.weight.dtype).to(out.weight.device)


def train_pd(base_dir: Path, out_dir: Path, pairs, seq_len: int, batch: int, steps: int, lr: float, rank: int,
             seed: int, progress: bool = False, mode: str = "lora", truncate: str | None = None,
             base_pairs=None) -> dict:
    """SFT of one agent on its trace turns: a LoRA adapter (``mode="lora"``) or a full fine-tune
    (``mode="full"``, saved as a model folder in bf16); writes a card.

    ``base_pairs`` (the base models' solo pairs, :func:`solo_pairs`): in a full fine-tune, the embedding rows of
    the tokens PD's rows use but the base never trained on are re-initialised first (:func:`dead_tokens`,
    :func:`revive_embeddings`) and the card lists them; without it (or with a LoRA adapter, which cannot carry
    the embeddings) they stay collapsed — the recorded runs, whose PD did not teach the protocol."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    done = out_dir / "card.json"
    if done.exists():  # a pd stage stopped by its validity check (or killed) keeps the agents it finished
        card = json.loads(done.read_text())
        same = {"base": base_dir.name, "mode": mode, "steps": steps, "batch": batch, "lr": lr,
                "examples": len(pairs), "seed": seed, "revived": base_pairs is not None and mode == "full"}
        if all(card.get(k) == v for k, v in same.items()):
            return card
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(base_dir)
    dev = device()
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).to(dev)
    if mode == "lora":
        model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    log: list = []
    t0 = time.time()
    rows = chat_rows(tok, pairs, seq_len, truncate)
    revived: list[int] | None = None
    if base_pairs is not None and mode == "full":
        trained = trained_tokens(tok, base_pairs)
        revived = dead_tokens(rows + [(tok(scheduler_words(), add_special_tokens=False)["input_ids"], 0)], trained)
        revive_embeddings(model, revived, trained, seed)
    random.Random(seed).shuffle(rows)
    train_loop(model, batcher(rows, batch, tok.pad_token_id, seed), steps, lr, dev, log, out_dir.name, progress)
    if mode == "lora":
        save_adapter(model, out_dir)
    else:
        save(model, tok, out_dir)
    card = {"base": base_dir.name, "mode": mode, "rank": rank if mode == "lora" else None, "steps": steps, "batch": batch, "lr": lr, "examples": len(rows),
            "device": dev, "seconds": round(time.time() - t0, 1), "final_loss": log[-1]["loss"], "loss_log": log,
            "stage": f"protocol distillation: {'LoRA SFT' if mode == 'lora' else 'full fine-tune'} on this agent's "
                     "coordination-trace turns"}
    if truncate is not None:  # new runs only
        card.update(truncate=truncate, seq_len=seq_len, longest_example=max(len(ids) for ids, _ in rows))
    card.update(seed=seed, revived=revived is not None)  # new runs only (a rerun of the stage skips this card)
    if revived is not None:
        card["revived_tokens"] = tok.convert_ids_to_tokens(revived)
    (out_dir / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    return card


def solo_pairs(problems) -> list[tuple[str, str]]:
    return [(p.text, solo(p)) for p in problems]


# --- context lengths: what a scale trains on and what its evaluation asks of the models ---

def prompt_length(tok, user: str) -> int:
    """Tokens of a user message as the models see it (chat template, generation prompt, thinking on)."""
    prompt = tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                     add_generation_prompt=True, enable_thinking=True)
    return len(tok(prompt, add_special_tokens=False)["input_ids"])


def recorded_windows(folders, size: int = 4) -> list[list[dict]]:
    """Every full history window (``size`` consecutive turns before some turn) of the recorded collaboration
    trajectories in ``folders`` (``trajectories.jsonl`` each): the states the scheduler actually showed."""
    out = []
    for folder in folders:
        with open(Path(folder) / "trajectories.jsonl") as f:
            for line in f:
                turns = json.loads(line)["turns"]
                out += [turns[k - size:k] for k in range(size, len(turns) + 1)]
    return out


def context_lengths(s: dict, tok, train: list, test: list, windows: list[list[dict]]) -> dict[str, list[int]]:
    """Token lengths (``tok``) of what the scale ``s`` trains on and evaluates, untruncated:

    - ``base``: the base models' rows (a training question's solo solution, :func:`chat_rows` without a cut);
    - ``pd small`` / ``pd mid`` / ``pd big`` / ``pd homo``: protocol distillation's rows (:func:`.traces.sft_examples`
      at ``data.seed`` and ``pd.slip``; ``homo`` all three roles');
    - ``rl``: a trace state's prompt + ``rl.max_tokens`` (GRPO's states are those prompts);
    - ``eval solo``: a test question's prompt + ``eval.max_tokens``;
    - ``eval cl``: a test question's state prompt at the last allowed turn (``eval.t_max``: the scheduler shows the
      last ``min(4, t_max - 1)`` turns, :class:`.scheduler.Scheduler`'s window) holding the longest of ``windows``
      (by its tokens; e.g. :func:`recorded_windows`), for the speaker whose prompt is longest, + ``eval.max_tokens``.
    """
    import inspect

    from .protocol import state_prompt
    from .scheduler import Scheduler
    from .traces import sft_examples

    agents = ("small", "mid", "big")
    ex = sft_examples(train, seed=s["data"]["seed"], slip=s["pd"]["slip"])
    ex["homo"] = [pair for a in agents for pair in ex[a]]
    out = {"base": [len(ids) for ids, _ in chat_rows(tok, solo_pairs(train), 10 ** 9)]}
    # each pair's row once: homo's pairs are the three roles' pairs in order, and rl reads homo's rows (chat_rows
    # renders and tokenizes every pair on its own, so the rows of a concatenation are the concatenated rows)
    rows = {a: chat_rows(tok, ex[a], 10 ** 9) for a in agents}
    rows["homo"] = [row for a in agents for row in rows[a]]
    for a in ex:
        out[f"pd {a}"] = [len(ids) for ids, _ in rows[a]]
    out["rl"] = [n + s["rl"]["max_tokens"] for ids, n in rows["homo"]]
    e = s["eval"]
    out["eval solo"] = [prompt_length(tok, p.text) + e["max_tokens"] for p in test]
    shown = min(inspect.signature(Scheduler).parameters["history_window"].default, e["t_max"] - 1)
    probe = test[0].text if test else ""
    bare = prompt_length(tok, state_prompt(probe, agents, "small", []))
    longest = max((w[-shown:] if shown else [] for w in windows),
                  key=lambda w: prompt_length(tok, state_prompt(probe, agents, "small", w)) - bare, default=[])
    out["eval cl"] = [max(prompt_length(tok, state_prompt(p.text, agents, a, longest)) for a in agents)
                      + e["max_tokens"] for p in test]
    return out


def length_summary(lengths: list[int], seq_len: int) -> dict:
    """p50, p99 (nearest rank, rounded up), max and the share past ``seq_len``."""
    import math

    xs = sorted(lengths)
    rank = lambda q: xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]  # noqa: E731
    return {"n": len(xs), "p50": rank(0.5), "p99": rank(0.99), "max": xs[-1],
            "past_seq_len": sum(x > seq_len for x in xs) / len(xs)}


# --- issue 23: budgets under which skill can rise with size, and the validation check ---

def estimated_parameters(spec: dict, vocab: int) -> int:
    """A size's parameters as :func:`train_base` builds it (tied embeddings, 32-wide heads, norms left out)."""
    h, kv = spec["hidden"], kv_heads(spec["hidden"]) * 32
    return vocab * h + spec["layers"] * (2 * h * h + 2 * h * kv + 3 * h * spec["intermediate"])


def budget_problems(models: dict) -> list[str]:
    """Breaches of "a larger model never trains fewer steps or tokens" in a scale's ``models`` section, in
    size order (``small`` … ``large``, which must also grow in estimated parameters)."""
    sizes, out = models["sizes"], []
    tokens = {m: sizes[m]["steps"] * sizes[m].get("batch", models["batch"]) * models["seq_len"] for m in MODELS}
    params = {m: estimated_parameters(sizes[m], models["vocab"]) for m in MODELS}
    for a, b in zip(MODELS, MODELS[1:]):
        if params[b] <= params[a]:
            out.append(f"{b} (≈{params[b]:,} parameters) is not larger than {a} (≈{params[a]:,})")
        if sizes[b]["steps"] < sizes[a]["steps"]:
            out.append(f"{b} trains {sizes[b]['steps']} steps, fewer than {a}'s {sizes[a]['steps']}")
        elif tokens[b] < tokens[a]:
            out.append(f"{b} trains {tokens[b]:,} tokens, fewer than {a}'s {tokens[a]:,}")
    return out


def check_budgets(s: dict, strict: bool = True) -> str | None:
    """One line when the scale ``s`` gives a larger model fewer steps or tokens (None when it does not);
    ``strict``: raise it as a ValueError (a scale about to train), else return it (a scale read for a record)."""
    if "sizes" not in s.get("models", {}):  # a served scale: its models were trained elsewhere
        return None
    bad = budget_problems(s["models"])
    if not bad:
        return None
    line = (f"scale {s.get('name', '?')}: training budgets do not rise with size — {'; '.join(bad)} "
            "(a larger model must train at least the steps and tokens of a smaller one)")
    if strict:
        raise ValueError(line)
    return line


def validation_problems(s: dict, test: list, train: list | None = None) -> list:
    """``eval.world_per_level`` world problems per level and ``eval.qa_n`` QA questions, drawn at
    ``data.seed`` + :data:`VALIDATION_SEED_OFFSET`, none sharing an underlying problem with ``test``: QA
    from the task's ``validation`` split (chains of neither train nor test; checked against ``test`` all
    the same), world problems off ``test``'s calculations, those outside ``train`` too first (level-1
    arithmetic has few calculations: training holds most). Too few candidates: a ValueError naming the task.

    A scale with ``data.split_by: underlying`` (:func:`split_by_underlying`) draws instead from the
    ``validation`` partition (:func:`.tasks.underlying_split`), each underlying problem once, as its test
    set is drawn (:func:`polyvox.studies.collab.pipeline.problems`): disjoint from train and test by
    construction, which is checked here all the same (a ValueError on any shared underlying problem)."""
    from .tasks import collab_qa, collab_world

    e, d = s["eval"], s["data"]
    seed = d["seed"] + VALIDATION_SEED_OFFSET
    if split_by_underlying(s):
        val = held_out(s, "validation", seed)
        for name, other in (("test", test), ("training", train or ())):
            if overlap(val, other):
                raise ValueError(f"validation split: {overlap(val, other)} questions share an underlying problem "
                                 f"with the {name} set (data.split_by: underlying promises none)")
        return val
    avoid, seen_train = {underlying(p) for p in test}, {underlying(p) for p in (train or ())}
    out = []
    for level in d["world_levels"]:
        seen: set = set()
        got = [p for p in collab_world(levels=[level], per_level=8 * e["world_per_level"], seed=seed, split="train")
               if underlying(p) not in avoid and not (underlying(p) in seen or seen.add(underlying(p)))]
        if len(got) < e["world_per_level"]:
            raise ValueError(f"validation split: only {len(got)} world problems of level {level} off the test "
                             f"set's calculations, {e['world_per_level']} wanted")
        out += sorted(got, key=lambda p: underlying(p) in seen_train)[:e["world_per_level"]]
    qa = [p for p in collab_qa(n=e["qa_n"], seed=seed + 1, split="validation") if underlying(p) not in avoid]
    if len(qa) < e["qa_n"]:
        raise ValueError(f"validation split: only {len(qa)} QA questions off the test set's chains, {e['qa_n']} wanted")
    return out + qa[:e["qa_n"]]


def split_by_underlying(s: dict) -> bool:
    """Whether the scale ``s`` splits by the underlying problem (``data.split_by: underlying``; absent: the
    old draws — the world's own split by expression, QA's by person — which the recorded scales keep)."""
    return s["data"].get("split_by") == "underlying"


def held_out(s: dict, split: str, seed: int) -> list:
    """A held-out set (``test`` or ``validation``) of a scale that splits by the underlying problem: up to
    ``eval.world_per_level`` world problems per level and ``eval.qa_n`` QA questions, each underlying problem
    of the ``split`` partition once (:func:`.tasks.world_by_underlying`, :func:`.tasks.make_qa_once`); a level
    or task whose partition holds fewer contributes all it holds. World at ``seed``, QA at ``seed`` + 1."""
    from .tasks import collab_qa, collab_world

    e, d = s["eval"], s["data"]
    return (collab_world(levels=d["world_levels"], per_level=e["world_per_level"], seed=seed, split=split,
                         split_by="underlying", once=True)
            + collab_qa(n=e["qa_n"], seed=seed + 1, split=split, once=True))


def overlap(problems: list, others: list) -> int:
    """How many of ``problems`` share an underlying problem with ``others``."""
    keys = {underlying(p) for p in others}
    return sum(underlying(p) in keys for p in problems)


def validation_check(out: Path, s: dict, problems: list, backend_for, train: list | None = None,
                     stop: bool = True) -> dict:
    """Each base model alone on the validation ``problems`` (greedy, ``eval.max_tokens``; ``backend_for(m)``
    gives model m's backend), each run a resumable solo record in ``out/validation/<m>/``, scored by
    :func:`.analysis.score` (``final``); :func:`.analysis.ordering_check` of the four. Writes
    ``out/validation.json`` and returns it (the models stage's record); raises one line when it fails
    (``stop=False``: records the failure only — the smoke scale, whose numbers mean nothing)."""
    from ...backends import SamplingParams
    from . import analysis
    from . import scheduler as sched

    params = SamplingParams(s["eval"]["max_tokens"], 0.0)
    settings = {"scale": s.get("name"), "split": "validation", "seed_offset": VALIDATION_SEED_OFFSET}
    results = {}
    for m in MODELS:
        sched.run_solo(out / "validation" / m, problems, m, backend_for(m), params, settings)
        df = analysis.score(sched.load(out / "validation" / m), {m: 1.0}, "final")
        results[m] = {"correct": int(df.correct.sum()), "n": len(df), "accuracy": float(df.correct.mean())}
    ok, reason = analysis.ordering_check(results)
    record = {"ordering_ok": ok, "ordering": reason, "questions": len(problems), "solo": results,
              "seed": s["data"]["seed"] + VALIDATION_SEED_OFFSET,
              "sharing an underlying problem with training": overlap(problems, train) if train is not None else None}
    (out / "validation.json").write_text(json.dumps(record, indent=1) + "\n")
    if not ok and stop:
        raise ValueError(f"models stage: {reason} (validation split, {out / 'validation.json'})")
    return record
