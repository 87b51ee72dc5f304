"""LoRA adapters: checks, and exact mixing by rank concatenation.

A LoRA adapter i adds ``ΔWᵢ = sᵢ·BᵢAᵢ`` to each adapted weight (``sᵢ = αᵢ/rᵢ``). A weighted
mix ``Σ wᵢ·ΔWᵢ`` is itself a LoRA of rank ``Σ rᵢ``: stack the ``Aᵢ`` (rows) and the ``Bᵢ``
(columns) and put each weight and scale on one factor. PEFT's
``add_weighted_adapter(..., combination_type="cat")`` does exactly this — it multiplies
``Aᵢ`` by ``wᵢ·sᵢ`` and gives the new adapter ``r = α = Σ rᵢ`` (scale 1) — so the mixed
adapter's ΔW equals ``Σ wᵢ·sᵢ·BᵢAᵢ`` to float rounding (:func:`delta_weights` and
:func:`expected_delta` let a test check it module by module). Seed 002 built the same
product as a rank-128, α-256 adapter with each ``Bᵢ`` scaled by ``wᵢ``: the same ΔW, since
its heads all had scale 64/32 = 2.

PEFT pitfalls refused here (:func:`mix`):

- ``add_weighted_adapter`` *returns silently* when the new adapter's name already exists,
  keeping the old mix: a second mix under the same name would be the first one.
- ``cat`` is not exact for rsLoRA (the copied config keeps ``use_rslora``, so the new scale
  is ``Σr/√Σr``, not 1) nor for DoRA (magnitude vectors are not combined).
- adapters of different bases or target sets; weights that are not finite.

Adapters load from safetensors only (``adapter_model.safetensors``).
"""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

from .records import portable_path


def portable_config(adapter: str | Path) -> None:
    """PEFT writes the base model's path as given (often absolute): keep it portable (see :func:`make_portable`)."""
    make_portable(adapter)


_CARD_BASE = re.compile(r"(base_model:(?:adapter:)?\s*)(/[^\s'\"]*)")


def make_portable(folder: str | Path) -> Path:
    """Rewrite what PEFT saved in an adapter folder so that it names no absolute machine path.

    PEFT records the base model as it was given — often an absolute path — in
    ``adapter_config.json`` (``base_model_name_or_path``) and in the model card it writes
    beside it (``README.md``: ``base_model:`` and the ``base_model:adapter:…`` tag). Both become
    :func:`polyvox.records.portable_path` (relative to the working folder when inside it, else
    the path's last two parts), in the folder and in any adapter subfolder (``save_pretrained``
    with several adapters writes one folder per adapter). Files are rewritten only when they
    change. Returns the folder.
    """
    folder = Path(folder)
    renamed: dict[str, str] = {}
    for cfg_path in sorted(folder.rglob("adapter_config.json")):
        cfg = json.loads(cfg_path.read_text())
        base = cfg.get("base_model_name_or_path")
        new = portable_path(base) if base else base
        if new != base:
            cfg["base_model_name_or_path"] = new
            cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
            for form in (str(base), str(base).rstrip("/"), Path(base).as_posix()):
                renamed[form] = new
    for card in sorted(folder.rglob("README.md")):
        text = card.read_text(encoding="utf-8")
        fixed = text
        for form in sorted(renamed, key=len, reverse=True):
            fixed = fixed.replace(form, renamed[form])
        # a card written beside a config made portable earlier still names the base as it was given
        fixed = _CARD_BASE.sub(lambda m: m.group(1) + (portable_path(m.group(2)) or ""), fixed)
        if fixed != text:
            card.write_text(fixed, encoding="utf-8")
    return folder


def save_adapter(model, out: str | Path, **kwargs) -> Path:
    """``model.save_pretrained(out)`` as safetensors, then :func:`make_portable`: the one way polyvox saves
    an adapter, so no adapter folder it writes names this machine's paths."""
    model.save_pretrained(str(out), safe_serialization=True, **kwargs)
    return make_portable(out)


class AdapterError(ValueError):
    pass


def adapter_config(path: str | Path) -> dict:
    path = Path(path)
    cfg_path = path / "adapter_config.json"
    if not cfg_path.exists():
        raise AdapterError(f"{path}: no adapter_config.json (not a PEFT adapter folder)")
    if not (path / "adapter_model.safetensors").exists():
        raise AdapterError(f"{path}: no adapter_model.safetensors (polyvox loads safetensors only)")
    return json.loads(cfg_path.read_text())


def check_mixable(configs: dict[str, dict]) -> None:
    """Refuse adapters whose rank-concatenated mix would not be exact."""
    for name, cfg in configs.items():
        if cfg.get("peft_type", "LORA") != "LORA":
            raise AdapterError(f"adapter {name!r} is {cfg.get('peft_type')}, not LoRA: cannot mix by rank concatenation")
        if cfg.get("use_rslora"):
            raise AdapterError(f"adapter {name!r} uses rsLoRA: PEFT's 'cat' mix keeps use_rslora and rescales by "
                               "sqrt(total rank), so the mix would not equal the weighted sum; refusing")
        if cfg.get("use_dora"):
            raise AdapterError(f"adapter {name!r} uses DoRA: PEFT's 'cat' mix does not combine magnitude vectors; "
                               "refusing")
    bases = {cfg.get("base_model_name_or_path") for cfg in configs.values()}
    if len(bases) > 1:
        raise AdapterError(f"adapters were trained on different bases: {sorted(map(str, bases))}")


def load_adapters(base_model, adapters: dict[str, str | Path]):
    """A PeftModel holding each adapter under its name (safetensors only)."""
    from peft import PeftModel

    configs = {n: adapter_config(p) for n, p in adapters.items()}
    check_mixable(configs)
    names = list(adapters)
    model = PeftModel.from_pretrained(base_model, str(adapters[names[0]]), adapter_name=names[0],
                                      use_safetensors=True)
    for n in names[1:]:
        model.load_adapter(str(adapters[n]), adapter_name=n, use_safetensors=True)
    return model


def mix(model, weights: dict[str, float], name: str):
    """Add the exact mix Σ wᵢ·ΔWᵢ of the loaded adapters as adapter ``name`` and make it active."""
    if name in model.peft_config:
        raise AdapterError(f"an adapter named {name!r} already exists; PEFT would silently keep it instead of "
                           "mixing: use a new name")
    missing = [n for n in weights if n not in model.peft_config]
    if missing:
        raise AdapterError(f"adapters not loaded: {', '.join(missing)}")
    if not all(math.isfinite(float(w)) for w in weights.values()):
        raise AdapterError(f"mix {name!r}: weights must be finite, got {weights}")
    check_mixable({n: model.peft_config[n].to_dict() for n in weights})
    model.add_weighted_adapter(list(weights), [float(w) for w in weights.values()], name, combination_type="cat")
    model.set_adapter(name)
    return model


def save_mix(base_model_path: str | Path, adapters: dict[str, str | Path], weights: dict[str, float],
             out: str | Path) -> Path:
    """Build the mix from adapter folders on CPU and save it alone as a PEFT adapter folder at ``out``."""
    import torch
    from transformers import AutoModelForCausalLM

    out = Path(out)
    base = AutoModelForCausalLM.from_pretrained(str(base_model_path), dtype=torch.float32, trust_remote_code=False,
                                                use_safetensors=True)
    model = mix(load_adapters(base, {n: adapters[n] for n in weights}), weights, "mix")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_adapter(model, tmp, selected_adapters=["mix"])
    src = tmp / "mix" if (tmp / "mix").exists() else tmp
    shutil.rmtree(out, ignore_errors=True)
    shutil.move(str(src), str(out))
    shutil.rmtree(tmp, ignore_errors=True)
    meta = {"weights": {k: float(v) for k, v in weights.items()},
            "sources": {k: portable_path(adapters[k]) for k in weights},
            "combination": "cat (rank concatenation)"}
    (out / "mix.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def delta_weights(model, adapter: str) -> dict:
    """ΔW = scale·B·A of one adapter, for every module it adapts (module name → tensor)."""
    from peft.tuners.lora import LoraLayer

    out = {}
    for key, module in model.named_modules():
        if isinstance(module, LoraLayer) and adapter in module.lora_A:
            a, b = module.lora_A[adapter].weight, module.lora_B[adapter].weight
            out[key] = (b @ a) * module.scaling[adapter]
    return out


def expected_delta(model, weights: dict[str, float]) -> dict:
    """Σ wᵢ·sᵢ·BᵢAᵢ for every module any of the adapters adapts."""
    total: dict = {}
    for n, w in weights.items():
        for key, d in delta_weights(model, n).items():
            total[key] = total.get(key, 0) + w * d
    return total


def merged_copy(base_model, deltas: dict):
    """A deep copy of a plain model with ΔW added to each named module's weight (keys as PEFT names them)."""
    import copy

    import torch

    merged = copy.deepcopy(base_model)
    params = dict(merged.named_modules())
    with torch.no_grad():
        for key, d in deltas.items():
            name = key.replace("base_model.model.", "", 1)
            params[name].weight += d.to(params[name].weight.dtype)
    return merged
