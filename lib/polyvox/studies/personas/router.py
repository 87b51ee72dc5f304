"""The router: an MLP on the base model's final-layer hidden state at the last prompt token.

As seed 002's router v1: input = the base model's last hidden state (after the final norm,
``hidden_states[-1]``) at the last token of the chat-formatted user prompt (the generation
prompt included), standardised with a stored mean and standard deviation; MLP
hidden → h → h → 4 (ReLU), one sigmoid per pole (warm, impersonal, concise, thorough),
trained with binary cross-entropy on the true poles of the training users' prompts (Adam,
full batch, weight decay; the epoch with the best validation exact-pick accuracy is kept).
Pick rule: a pole is on at p > 0.5; when both poles of an axis are on, the larger wins —
so a pick is zero, one or two poles, at most one per axis.

Saved as ``router.safetensors`` (weights, mean, sd) + ``router.json`` (sizes, poles,
threshold, training record) — never a pickle (the study shipped ``torch.load(...,
weights_only=False)``).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .world import AXES, POLES, poles_of, type_of


def chat_prompt(tokenizer, user: str, system: str | None = None) -> str:
    """The chat-formatted prompt tiny-chat was trained on (no thinking switch), with an optional system card."""
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def features(model_dir: str | Path, texts: list[str], batch: int = 64, device: str = "cpu") -> np.ndarray:
    """Final-layer hidden state at the last token of each chat-formatted prompt (base model, no card)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=False)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, trust_remote_code=False,
                                                 use_safetensors=True).to(device).eval()
    tok.padding_side = "left"
    out = []
    for b in range(0, len(texts), batch):
        enc = tok([chat_prompt(tok, t) for t in texts[b:b + batch]], return_tensors="pt", padding=True,
                  add_special_tokens=False).to(device)
        with torch.no_grad():
            hs = model(**enc, output_hidden_states=True).hidden_states[-1]
        out.append(hs[:, -1, :].float().cpu().numpy())  # left padding: the last position is the last prompt token
    return np.concatenate(out)


def labels(types: list[str]) -> np.ndarray:
    return np.array([[float(p in poles_of(t)) for p in POLES] for t in types], dtype=np.float32)


def pick(probs, threshold: float = 0.5) -> tuple[str, ...]:
    """Poles on at p > threshold, the larger pole winning per axis; tone first."""
    chosen = []
    p = dict(zip(POLES, map(float, probs)))
    for axis in AXES.values():
        on = [x for x in axis if p[x] > threshold]
        if on:
            chosen.append(max(on, key=lambda x: p[x]))
    return tuple(chosen)


class Router:
    def __init__(self, hidden: int, h: int, mean: np.ndarray, sd: np.ndarray, seed: int = 0):
        import torch

        torch.manual_seed(seed)
        self.hidden, self.h = hidden, h
        self.mean, self.sd = np.asarray(mean, np.float32), np.asarray(sd, np.float32)
        self.net = torch.nn.Sequential(torch.nn.Linear(hidden, h), torch.nn.ReLU(), torch.nn.Linear(h, h),
                                       torch.nn.ReLU(), torch.nn.Linear(h, len(POLES)))
        self.record: dict = {}

    def probs(self, x: np.ndarray) -> np.ndarray:
        import torch

        z = (np.asarray(x, np.float32) - self.mean) / self.sd
        with torch.no_grad():
            return torch.sigmoid(self.net(torch.from_numpy(z))).numpy()

    def picks(self, x: np.ndarray) -> list[tuple[str, ...]]:
        return [pick(p) for p in self.probs(x)]

    def save(self, folder: str | Path) -> Path:
        import torch
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {f"net.{k}": v.contiguous() for k, v in self.net.state_dict().items()}
        tensors["mean"], tensors["sd"] = torch.from_numpy(self.mean), torch.from_numpy(self.sd)
        save_file(tensors, str(folder / "router.safetensors"))
        meta = {"hidden": self.hidden, "h": self.h, "poles": list(POLES), "threshold": 0.5,
                "rule": "pole on at p > 0.5; the larger pole wins per axis", "record": self.record}
        (folder / "router.json").write_text(json.dumps(meta, indent=2) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "Router":
        from safetensors.torch import load_file

        folder = Path(folder)
        meta = json.loads((folder / "router.json").read_text())
        if meta["poles"] != list(POLES):
            raise ValueError(f"{folder}: router poles {meta['poles']} differ from {list(POLES)}")
        t = load_file(str(folder / "router.safetensors"))
        r = cls(meta["hidden"], meta["h"], t["mean"].numpy(), t["sd"].numpy())
        r.net.load_state_dict({k[len("net."):]: v for k, v in t.items() if k.startswith("net.")})
        r.record = meta.get("record", {})
        return r


def train(x_train, y_train, x_val, y_val, h: int = 64, epochs: int = 300, lr: float = 3e-3,
          weight_decay: float = 1e-3, seed: int = 0) -> Router:
    """Full-batch Adam with BCE; keeps the epoch with the best validation exact-pick accuracy."""
    import copy

    import torch

    mean, sd = x_train.mean(0), x_train.std(0) + 1e-6
    r = Router(x_train.shape[1], h, mean, sd, seed)
    opt = torch.optim.Adam(r.net.parameters(), lr=lr, weight_decay=weight_decay)
    xt = torch.from_numpy(((x_train - mean) / sd).astype(np.float32))
    yt = torch.from_numpy(y_train.astype(np.float32))
    val_types = [type_of([p for p, on in zip(POLES, row) if on]) for row in y_val]
    best, best_state, log = -1.0, None, []
    for epoch in range(1, epochs + 1):
        r.net.train()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(r.net(xt), yt)
        loss.backward()
        opt.step()
        opt.zero_grad()
        r.net.eval()
        if epoch % 10 == 0 or epoch == epochs:
            acc = float(np.mean([type_of(p) == t for p, t in zip(r.picks(x_val), val_types)]))
            log.append({"epoch": epoch, "loss": round(loss.item(), 5), "val_exact": round(acc, 4)})
            if acc > best:
                best, best_state = acc, copy.deepcopy(r.net.state_dict())
    r.net.load_state_dict(best_state)
    r.record = {"epochs": epochs, "lr": lr, "weight_decay": weight_decay, "seed": seed, "train": len(x_train),
                "validation": len(x_val), "best_val_exact": best, "log": log}
    return r


def evaluate(picks: list[tuple[str, ...]], true_types: list[str]) -> dict:
    """Per-axis accuracy (the axis' pole or none) and exact accuracy; confusion of picks vs true types."""
    out = {}
    for axis, poles in AXES.items():
        got = [next((p for p in pk if p in poles), "none") for pk in picks]
        want = [next((p for p in poles_of(t) if p in poles), "none") for t in true_types]
        out[f"{axis}_accuracy"] = float(np.mean([g == w for g, w in zip(got, want)]))
    out["exact_accuracy"] = float(np.mean([type_of(p) == t for p, t in zip(picks, true_types)]))
    confusion: dict = {}
    for p, t in zip(picks, true_types):
        confusion.setdefault(t, {}).setdefault(type_of(p) or "none", 0)
        confusion[t][type_of(p) or "none"] += 1
    out["confusion"] = confusion
    out["n"] = len(picks)
    return out
