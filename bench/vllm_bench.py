"""vLLM against polyvox's transformers fast path on the same requests, and one engine for many adapters.

Part 1, the two engines (arms interleaved over --rounds rounds, the order rotated each round):
tiny-base with Part IV's seed-0 panel LoRA (data/runs/world/seed-0/panel-rl/hard/adapter), world
task levels 3-5 (test split, the evaluation's problem seed), --per-level problems each, --n samples
per problem, --max-tokens tokens, temperature 1, panel format. Both arms get the same requests (the
same prompts and per-request seeds: ``runs.sample`` with seed 0 into a fresh folder per arm and
round, in one chunk), then ``runs.grade`` grades them with the world task's grader. Arms:
- ``vllm``: ``polyvox.backends.vllm.VLLMBackend`` (bf16, the adapter as a LoRARequest);
- ``transformers``: ``polyvox.backends.hf.TransformersBackend`` (bf16 on CUDA: its decode loop,
  --hf-batch-size rows a batch).
Each arm in each round loads its engine (``load_s``; vLLM's first load in a fresh machine compiles
cold, later ones read vLLM's compile cache: ``compile_cache_before`` says whether the cache folder
held files before that load), then runs an untimed warm-up on other problems (``warmup_s``: the
transformers loop's compilation and graph capture), then the timed sampling (``sample_s``,
``tokens_per_s`` = generated tokens ÷ sample_s), then grading (accuracy). Per round: vLLM ÷
transformers tok/s and Fisher's exact test on the two arms' correct counts (scipy; two-sided).

Part 2, per-request adapters (--systems K systems; once, after part 1): Part II's persona systems
on tiny-chat (data/runs/personas-h200/heads/forward-s0: the four heads, rank 4, then the four mixes,
rank 16), Part II's sampling (personas task, test split, greedy, 72 tokens) through
- ``one_engine``: one VLLMBackend given every adapter (``adapters=``), each request carrying its own
  (``Request.adapter``, one LoRARequest per folder), all systems in one generate call;
- ``engine_per_system``: one VLLMBackend per system (its adapter only), loaded, sampled, shut down
  in turn, as Part II's pipeline does today.
Recorded: wall time including loads, each load, generated tokens/s over the wall time, and the
fraction of texts equal between the two (greedy: equal up to vLLM's batch nondeterminism; a wrong
adapter routing would show as wholesale differences). Should tiny-chat fail under vLLM, the error
is kept and the same is measured on tiny-base with the panel LoRA copied into K folders (the same
weights under K names: ``systems_source`` says which ran).

The JSON is rewritten after every arm, so a run cut short keeps what it measured. Part 1 loads an
engine 2 × --rounds times and part 2 K + 1 times (vLLM: about a minute each on the H200 when cold):
where one command may not run that long, run the parts apart into the same file (--parts 1, then
--parts 2, which adds its result to the file part 1 wrote).

Usage (GPU; vLLM spawns its engine process, hence the __main__ guard; the backend itself sets
VLLM_USE_FLASHINFER_SAMPLER=0 unless it is set):
  python bench/vllm_bench.py --out bench/results/vllm-h200.json
  python bench/vllm_bench.py --quick --out /tmp/vllm-quick.json       # plumbing, tiny sizes
  python bench/vllm_bench.py --quick --arms transformers --systems 0  # the same without vLLM (CPU)
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

BASE = "data/models/tiny-base"
PANEL_ADAPTER = "data/runs/world/seed-0/panel-rl/hard/adapter"
CHAT = "data/models/tiny-chat"
PERSONA_HEADS = "data/runs/personas-h200/heads/forward-s0"
PERSONA_SYSTEMS = ("thorough/adapter", "concise/adapter", "warm/adapter", "impersonal/adapter",
                   "mix_warm+concise", "mix_impersonal+thorough", "mix_warm+thorough", "mix_impersonal+concise")
EVAL_PROBLEM_SEED = 20  # Part IV's evaluation problems: problems_seed 0 + SEED_OFFSETS["eval"]
ARMS = ("vllm", "transformers")

T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f} s] {msg}", flush=True)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench/results/vllm-h200.json"), help="the JSON written")
    ap.add_argument("--rounds", type=int, help="rounds of part 1, each loading both engines (default 2; --quick: 1)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: checks the plumbing")
    ap.add_argument("--arms", default=",".join(ARMS), help="part 1's arms (vllm,transformers)")
    ap.add_argument("--per-level", type=int, default=64)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--hf-batch-size", type=int, default=512)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.35,
                    help="each vLLM engine's share (low: engines follow each other in one process)")
    ap.add_argument("--systems", type=int, default=4, help="part 2's systems (0: skip part 2)")
    ap.add_argument("--persona-users", type=int, default=128, help="part 2's prompts: users × 4 per user")
    ap.add_argument("--runs-dir", help="where the run folders go (default: a temporary folder)")
    ap.add_argument("--parts", default="1,2", help="1: the two engines; 2: per-request adapters. Part 2 alone "
                    "adds its result to an existing --out (two commands, one JSON)")
    args = ap.parse_args(argv)
    if args.quick:
        args.per_level, args.n, args.max_tokens = 4, 2, 32
        args.rounds = 1 if args.rounds is None else args.rounds
        args.hf_batch_size, args.systems, args.persona_users = 8, min(args.systems, 2), 4
    args.rounds = 2 if args.rounds is None else args.rounds
    args.arms = [a for a in args.arms.split(",") if a]
    args.parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if not args.parts or args.parts - {"1", "2"}:
        ap.error("--parts takes 1, 2 or 1,2")
    bad = [a for a in args.arms if a not in ARMS]
    if bad:
        ap.error(f"unknown arm(s) {bad}; arms: {', '.join(ARMS)}")
    return args


def machine_free(value):
    """The result with no path of this machine: the home folder as ``~``, another absolute path as
    :func:`polyvox.records.portable_path` writes it (its last two parts)."""
    from polyvox.records import portable_path

    if isinstance(value, dict):
        return {k: machine_free(v) for k, v in value.items()}
    if isinstance(value, list):
        return [machine_free(v) for v in value]
    if isinstance(value, str) and value.startswith("/"):
        home = str(Path.home())
        return "~" + value[len(home):] if value.startswith(home + "/") else portable_path(value)
    return value


def compile_cache_state() -> dict:
    root = Path(os.environ.get("VLLM_CACHE_ROOT", Path.home() / ".cache" / "vllm")) / "torch_compile_cache"
    files = sum(1 for f in root.rglob("*") if f.is_file()) if root.is_dir() else 0
    return {"folder": str(root), "files": files}


def load_backend(arm: str, model: str, adapter: str | None, args, **extra):
    if arm == "vllm":
        from polyvox.backends.vllm import VLLMBackend

        return VLLMBackend(model, adapter, gpu_memory_utilization=args.gpu_memory_utilization, **extra)
    from polyvox.backends.hf import TransformersBackend

    return TransformersBackend(model, adapter, batch_size=args.hf_batch_size)


def release(backend) -> None:
    import gc

    import torch

    if hasattr(backend, "close"):
        backend.close()
    del backend
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def world_options(args, seed=EVAL_PROBLEM_SEED) -> dict:
    return {"levels": [3, 4, 5], "per_level": args.per_level, "seed": seed, "split": "test"}


def run_arm(arm: str, r: int, args, runs_dir: Path) -> dict:
    """Load, warm up (untimed, other problems), sample the timed requests into a run folder, grade."""
    from polyvox import runs, tasks
    from polyvox.backends import Request, SamplingParams

    params = SamplingParams(args.max_tokens, 1.0)
    rec = {"round": r, "arm": arm}
    if arm == "vllm":
        rec["compile_cache_before"] = compile_cache_state()
    t = time.perf_counter()
    backend = load_backend(arm, str(ROOT / BASE), str(ROOT / PANEL_ADAPTER), args)
    rec["load_s"] = round(time.perf_counter() - t, 2)
    log(f"round {r} {arm}: loaded in {rec['load_s']} s")
    warm = tasks.load("world", **world_options(args, seed=EVAL_PROBLEM_SEED + 1000))
    warm_reqs = [Request.of(backend.prompt("panel", p.text), 10_000 + i) for i, p in enumerate(warm)]
    warm_reqs = (warm_reqs * (1 + args.hf_batch_size // max(1, len(warm_reqs))))[:max(args.hf_batch_size, 8)]
    t = time.perf_counter()
    backend.generate(warm_reqs, SamplingParams(args.max_tokens, 1.0, stop=("</answer>",)))
    rec["warmup_s"] = round(time.perf_counter() - t, 2)
    folder = runs_dir / f"round-{r}" / arm
    n_requests = 3 * args.per_level * args.n
    t = time.perf_counter()
    runs.sample(folder, "world", "panel", backend, args.n, params, seed=0, task_options=world_options(args),
                chunk=n_requests, progress=False)
    rec["sample_s"] = round(time.perf_counter() - t, 3)
    release(backend)
    rows = [json.loads(line) for line in (folder / "rollouts.jsonl").read_text().splitlines()]
    tokens = sum(x["completion_tokens"] for x in rows)
    runs.grade(folder)
    graded = [json.loads(line) for line in (folder / "graded.jsonl").read_text().splitlines()]
    correct = sum(bool(g["correct"]) for g in graded)
    rec.update({"samples": len(rows), "tokens": tokens, "tokens_per_s": round(tokens / rec["sample_s"], 1),
                "prompt_tokens": sum(x["prompt_tokens"] for x in rows),
                "finish_length": sum(x["finish_reason"] == "length" for x in rows),
                "correct": correct, "accuracy": round(correct / len(graded), 4), "run": str(folder)})
    log(f"round {r} {arm}: {rec['tokens_per_s']:,.0f} tok/s ({tokens} tokens in {rec['sample_s']} s), "
        f"accuracy {rec['accuracy']:.3f}, warm-up {rec['warmup_s']} s")
    return rec


def texts_of(folder: Path) -> dict:
    rows = [json.loads(line) for line in (folder / "rollouts.jsonl").read_text().splitlines()]
    return {(x["problem_id"], x["sample_index"]): x["completion"] for x in rows}


def compare_round(recs: dict) -> dict:
    from scipy.stats import fisher_exact

    v, h = recs["vllm"], recs["transformers"]
    table = [[v["correct"], v["samples"] - v["correct"]], [h["correct"], h["samples"] - h["correct"]]]
    odds, p = fisher_exact(table)
    return {"round": v["round"], "tok_s_ratio_vllm_over_transformers": round(v["tokens_per_s"] / h["tokens_per_s"], 3),
            "fisher_table": table, "fisher_p": round(float(p), 4), "odds_ratio": round(float(odds), 4),
            "accuracy_vllm": v["accuracy"], "accuracy_transformers": h["accuracy"]}


# ---------------------------------------------------------------- part 2: many adapters, one engine

def persona_systems(args, runs_dir: Path):
    from polyvox import tasks
    from polyvox.studies.personas import router as R

    adapters = [str(ROOT / PERSONA_HEADS / s) for s in PERSONA_SYSTEMS[:args.systems]]
    problems = tasks.load("personas", split="test", n_users=args.persona_users, per_user=4, seed=0)
    return "personas: tiny-chat, forward-s0 heads and mixes", str(ROOT / CHAT), adapters, \
        lambda tok: [R.chat_prompt(tok, p.text) for p in problems], 72


def world_systems(args, runs_dir: Path):
    from polyvox import formats, tasks

    adapters = []
    for k in range(args.systems):  # the same weights in K folders: K names for vLLM
        dst = runs_dir / "adapters" / f"panel-copy-{k}"
        if not dst.exists():
            shutil.copytree(ROOT / PANEL_ADAPTER, dst)
        adapters.append(str(dst))
    problems = tasks.load("world", **world_options(args))
    return "world: tiny-base, the seed-0 panel LoRA copied into K folders (same weights)", str(ROOT / BASE), \
        adapters, lambda tok: [formats.panel_prompt(p.text) for p in problems], args.max_tokens


def system_name(adapter: str) -> str:
    p = Path(adapter)
    return p.parent.name if p.name == "adapter" else p.name


def adapters_part(args, source, runs_dir: Path) -> dict:
    from polyvox.backends import Request, SamplingParams

    name, model, adapters, prompts_of, max_tokens = source(args, runs_dir)
    params = SamplingParams(max_tokens, 0.0)
    res = {"systems_source": name, "model": Path(model).name, "systems": [str(Path(a).relative_to(ROOT))
           if Path(a).is_relative_to(ROOT) else Path(a).name for a in adapters], "max_tokens": max_tokens}
    texts = {}
    # one engine per system first (its first load compiles cold; the one engine's config compiles once too)
    t_all, loads, tokens, per = time.perf_counter(), [], 0, {}
    for a in adapters:
        t = time.perf_counter()
        be = load_backend("vllm", model, a, args)
        loads.append(round(time.perf_counter() - t, 2))
        prompts = prompts_of(be.tokenizer)
        outs = be.generate([Request(p, i) for i, p in enumerate(prompts)], params)
        release(be)
        tokens += sum(c.completion_tokens for c in outs)
        per[a] = [c.text for c in outs]
        log(f"engine per system: {system_name(a)} loaded in {loads[-1]} s")
    wall = time.perf_counter() - t_all
    res["engine_per_system"] = {"wall_s": round(wall, 2), "load_s": loads, "tokens": tokens,
                                "tokens_per_s_wall": round(tokens / wall, 1),
                                "wall_minus_loads_s": round(wall - sum(loads), 2)}
    t_all = time.perf_counter()
    be = load_backend("vllm", model, None, args, adapters=adapters)
    load = round(time.perf_counter() - t_all, 2)
    prompts = prompts_of(be.tokenizer)
    reqs = [Request(p, i, adapter=a) for a in adapters for i, p in enumerate(prompts)]
    t = time.perf_counter()
    outs = be.generate(reqs, params)
    gen = time.perf_counter() - t
    res["lora_ids"] = {system_name(k): v for k, v in be.loras.ids.items()}
    res["engine_kwargs"] = {k: v for k, v in be.engine_kwargs.items() if k != "model"}
    release(be)
    wall = time.perf_counter() - t_all
    tok = sum(c.completion_tokens for c in outs)
    res["one_engine"] = {"wall_s": round(wall, 2), "load_s": load, "generate_s": round(gen, 3), "tokens": tok,
                         "tokens_per_s_wall": round(tok / wall, 1), "tokens_per_s_generate": round(tok / gen, 1)}
    k = 0
    equal = total = 0
    for a in adapters:
        for i in range(len(per[a])):
            equal += outs[k].text == per[a][i]
            total += 1
            k += 1
    res["texts_equal_fraction"] = round(equal / max(total, 1), 4)
    res["requests_per_system"] = len(prompts)
    res["wall_ratio_per_system_over_one"] = round(res["engine_per_system"]["wall_s"] / wall, 3)
    log(f"one engine: {wall:.1f} s wall (load {load} s) vs {res['engine_per_system']['wall_s']} s for one "
        f"engine per system; texts equal {res['texts_equal_fraction']:.3f}")
    return res


def main(argv=None):
    args = parse_args(argv)
    import torch

    from polyvox.backends.vllm import apply_vllm_env

    env_set = apply_vllm_env()
    runs_dir = Path(args.runs_dir or tempfile.mkdtemp(prefix="vllm-bench-"))
    runs_dir.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for mod in ("vllm", "transformers", "peft", "scipy"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal (--arms transformers on CPU)
            versions[mod] = f"unavailable: {type(exc).__name__}"
    result = {"bench": "vllm_bench.py", "argv": sys.argv[1:], "versions": versions,
              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
              "env_set_by_backend": env_set, "env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_")},
              "settings": {"model": BASE, "adapter": PANEL_ADAPTER, "task_options": world_options(args), "n": args.n,
                           "max_tokens": args.max_tokens, "temperature": 1.0, "format": "panel",
                           "hf_batch_size": args.hf_batch_size, "rounds": args.rounds,
                           "gpu_memory_utilization": args.gpu_memory_utilization},
              "runs_dir": str(runs_dir), "rounds": [], "comparisons": []}

    if "1" not in args.parts and out.exists():  # part 2 alone: added to part 1's file
        kept = json.loads(out.read_text())
        result.update({k: kept[k] for k in ("rounds", "comparisons", "summary", "same_texts_round0_vs_round1",
                                               "argv", "settings", "runs_dir") if k in kept})
        result["argv_part2"] = sys.argv[1:]

    def save():
        result["elapsed_s"] = round(time.perf_counter() - T0, 1)
        out.write_text(json.dumps(machine_free(result), indent=1) + "\n")

    for r in range(args.rounds if "1" in args.parts else 0):
        order = args.arms[r % len(args.arms):] + args.arms[:r % len(args.arms)]
        recs = {}
        for arm in order:
            recs[arm] = run_arm(arm, r, args, runs_dir)
            result["rounds"].append(recs[arm])
            save()
        if set(recs) == set(ARMS):
            result["comparisons"].append(compare_round(recs))
            log(f"round {r}: {result['comparisons'][-1]}")
    for arm in args.arms if "1" in args.parts else ():  # same seeds every round: the same texts again?
        folders = [Path(x["run"]) for x in result["rounds"] if x["arm"] == arm]
        if len(folders) > 1:
            a, b = texts_of(folders[0]), texts_of(folders[1])
            result.setdefault("same_texts_round0_vs_round1", {})[arm] = \
                round(sum(a[k] == b.get(k) for k in a) / len(a), 4)
    by_arm = {a: [x for x in result["rounds"] if x["arm"] == a] for a in args.arms}
    if "1" in args.parts:
        result["summary"] = {a: {"median_tokens_per_s": statistics.median(x["tokens_per_s"] for x in xs),
                                 "load_s": [x["load_s"] for x in xs], "accuracy": [x["accuracy"] for x in xs]}
                             for a, xs in by_arm.items() if xs}
    if "1" in args.parts and result["comparisons"]:
        result["summary"]["median_tok_s_ratio_vllm_over_transformers"] = statistics.median(
            c["tok_s_ratio_vllm_over_transformers"] for c in result["comparisons"])
    save()
    if "2" in args.parts and args.systems > 0 and "vllm" in args.arms:
        errors = []
        for source in (persona_systems, world_systems):
            try:
                result["adapters"] = adapters_part(args, source, runs_dir)
                break
            except Exception as exc:  # noqa: BLE001 - kept in the JSON; the fallback source runs next
                errors.append(f"{source.__name__}: {type(exc).__name__}: {str(exc)[:2000]}")
                log(f"part 2 with {source.__name__} failed: {errors[-1][:300]}")
        if errors:
            result["adapters_errors"] = errors
    save()
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
