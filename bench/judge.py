"""LLM judge throughput: verdicts per second of ``judge.run`` with an :class:`LLMJudge` against a real
local ``transformers serve``, at several client concurrencies, arms interleaved over rounds.

One server (``transformers serve MODEL --host 127.0.0.1 --port <free> --device cpu``, the way
tests/test_judge.py starts it; its own process group, stopped at the end even on error) serves
the judge model (default data/models/tiny-chat). No API key: the server has no auth and the
backend is built with ``api_key_env=None``. Each arm is one --concurrency level (the
OpenAIBackend's thread pool). Every round of every arm judges the same --pairs pairs in both
orders (2 × pairs calls, none identical, so none free) into a FRESH verdict folder, so no
call is served from the judge's cache (checked with ``judge.plan`` before each round);
--max-tokens new tokens, greedy, ``max_attempts=1`` so one verdict is one HTTP request
(the judge's default retries unparseable verdicts, which would multiply requests for a
model that never answers in the format). Before the rounds one untimed pass over
--warmup-pairs other pairs at the highest concurrency (first-touch costs) is kept as
``warmup_s``. Rounds: --rounds per arm, the arms' order rotated each round so no arm is
always first; every round is kept with the 1-minute load average
before it (the CPU is shared). Reported: median verdicts/s per concurrency and the ratios
of each median to concurrency 1's, all from this one run, and how many replies parsed as a
verdict — unparseable replies are counted as such, never as ties.

Usage: .venv/bin/python bench/judge.py [--concurrency 1 4 8] [--pairs 8] [--rounds 3]
       [--max-tokens 16] [--model data/models/tiny-chat] [--out bench/results/judge-cpu.json]
"""
import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from polyvox import judge as J  # noqa: E402
from polyvox.backends.openai import OpenAIBackend  # noqa: E402
from polyvox.records import read_jsonl  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve(model: Path, log: Path, wait_s: float = 180):
    """One ``transformers serve`` of the model on 127.0.0.1; yields (url, argv). SIGTERM, then SIGKILL after 20 s."""
    exe = Path(sys.executable).parent / "transformers"
    port = free_port()
    argv = [str(exe), "serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    url = f"http://127.0.0.1:{port}"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                                start_new_session=True)
    try:
        deadline = time.time() + wait_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError(f"transformers serve at {url} did not come up in {wait_s:.0f} s:\n"
                                       f"{log.read_text()[-2000:]}") from None
                time.sleep(0.5)
        yield url, argv
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        print(f"server stopped (exit {proc.returncode})", flush=True)


def systems_file(path: Path, n: int, offset: int = 0) -> Path:
    """n prompts, two different answers each (a terse one and a worked one): 2n judge calls, none free."""
    rows = []
    for i in range(offset, offset + n):
        a, b = 3 + 7 * i, 11 + 5 * i
        rows.append({"prompt_id": f"p{i}", "prompt": f"What is {a} plus {b}?",
                     "preference": "concise" if i % 2 == 0 else "thorough", "gold": str(a + b),
                     "responses": {"x": f"The answer is {a + b}.",
                                   "y": f"Let's add: {a} + {b}. Units first, then tens, so {a} + {b} = {a + b}."}})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def one_round(spec_a, spec_b, url, model, concurrency, max_tokens, expected_calls, keep_raw=0):
    out = Path(tempfile.mkdtemp(prefix="judge-bench-"))
    try:
        judge = J.LLMJudge(OpenAIBackend(model, base_url=url, api_key_env=None, concurrency=concurrency),
                           max_tokens=max_tokens)
        plan = J.plan(spec_a, spec_b, out, judge)
        if plan["cached"] != 0 or plan["to_make"] != expected_calls:
            raise RuntimeError(f"a round must start with an empty cache and {expected_calls} calls: {plan}")
        stats = J.run(spec_a, spec_b, out, judge, max_attempts=1)
        recs = read_jsonl(out / J.VERDICTS)
        choices = Counter(r["choice"] for r in recs)
        if stats["calls_made"] != expected_calls or len(recs) != expected_calls:
            raise RuntimeError(f"expected {expected_calls} calls, made {stats['calls_made']}, recorded {len(recs)}")
        unparseable = choices.get("unparseable", 0)
        assert unparseable == stats["unparseable"]
        row = {"concurrency": concurrency, "calls": stats["calls_made"], "seconds": stats["seconds"],
               "verdicts_per_s": stats["calls_made"] / stats["seconds"],
               "parseable": expected_calls - unparseable, "unparseable": unparseable,
               "choices": {k: choices.get(k, 0) for k in ("A", "B", "tie", "unparseable")},
               # the judge's recorded latency_s: each chunk's time ÷ its calls (not one request's latency)
               "mean_call_latency_s": statistics.mean(r["latency_s"] for r in recs)}
        return row, [r["raw"] for r in recs[:keep_raw]]
    finally:
        shutil.rmtree(out, ignore_errors=True)


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "fastapi", "uvicorn", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--pairs", type=int, default=8, help="pairs per round; each is judged in both orders")
    ap.add_argument("--warmup-pairs", type=int, default=4, help="pairs of the untimed warm-up pass (other prompts)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per concurrency level (at least 3)")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--model", default=str(ROOT / "data/models/tiny-chat"))
    ap.add_argument("--out", default=str(ROOT / "bench/results/judge-cpu.json"))
    args = ap.parse_args()
    if args.rounds < 3:
        ap.error("--rounds must be at least 3")
    base = args.concurrency[0]
    # SIGTERM ends the bench through the finally clauses (server stopped, temp folders removed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t_start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="judge-bench-work-"))
    model = Path(args.model).resolve()
    try:
        s = systems_file(work / "systems.jsonl", args.pairs)
        spec_a, spec_b = f"{s}:x", f"{s}:y"
        calls = 2 * args.pairs
        t0 = time.perf_counter()
        with serve(model, work / "server.log") as (url, argv):
            startup_s = time.perf_counter() - t0
            print(f"server up at {url} in {startup_s:.1f} s", flush=True)
            t0 = time.perf_counter()
            w = systems_file(work / "warmup.jsonl", args.warmup_pairs, offset=1000)
            warm, samples = one_round(f"{w}:x", f"{w}:y", url, str(model), max(args.concurrency), args.max_tokens,
                                      2 * args.warmup_pairs, keep_raw=4)
            warmup_s = time.perf_counter() - t0
            print(f"warm-up (untimed, c{warm['concurrency']}): {warmup_s:.1f} s; sample replies: {samples}", flush=True)
            rounds = []
            levels = list(args.concurrency)
            for r in range(args.rounds):
                order = levels[r % len(levels):] + levels[:r % len(levels)]
                for c in order:
                    load = os.getloadavg()[0]
                    row, _ = one_round(spec_a, spec_b, url, str(model), c, args.max_tokens, calls)
                    rounds.append({"round": r, "position": order.index(c), "loadavg_1min_before": load, **row})
                    print(f"round {r} c{c:<3d} {row['calls']} calls {row['seconds']:7.2f} s "
                          f"{row['verdicts_per_s']:6.2f} verdicts/s  parseable {row['parseable']}/{row['calls']}  "
                          f"load {load:.1f}  [{time.perf_counter() - t_start:.0f} s elapsed]", flush=True)
            server_log_tail = (work / "server.log").read_text(errors="replace")[-1500:]
        median = {str(c): statistics.median(x["verdicts_per_s"] for x in rounds if x["concurrency"] == c)
                  for c in levels}
        ratios = {f"c{c}_over_c{base}": median[str(c)] / median[str(base)] for c in levels if c != base}
        total = Counter()
        for x in rounds:
            total.update(x["choices"])
        shown_argv = ["transformers", "serve", os.path.relpath(model, ROOT) if model.is_relative_to(ROOT) else str(model),
                      *argv[3:]]
        shown_argv[shown_argv.index("--port") + 1] = "<free port>"
        result = {
            "command": "bench/judge.py " + " ".join(sys.argv[1:]),
            "git_commit": git_commit(),
            "machine": {"nproc": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
                        "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                        "note": "cores shared with other jobs: see each round's load average"},
            "versions": versions(),
            "model": {"path": shown_argv[2], "card": json.loads((model / "card.json").read_text()).get("parameters")
                      if (model / "card.json").exists() else None},
            "server": {"command": " ".join(shown_argv), "continuous_batching": False, "auth": "none",
                       "startup_s": round(startup_s, 2)},
            "setup": {"pairs": args.pairs, "warmup_pairs": args.warmup_pairs, "calls_per_round": calls,
                      "orders": "both", "max_tokens": args.max_tokens,
                      "temperature": 0.0, "max_attempts": 1, "chunk": 32, "rounds_per_level": args.rounds,
                      "concurrency_levels": levels, "cache": "fresh verdict folder per round (plan: 0 cached)",
                      "order": "levels rotated each round"},
            "warmup_s": round(warmup_s, 3), "warmup_round": warm, "sample_replies": samples,
            "median_verdicts_per_s": median, "ratios": ratios,
            "replies": {"parseable": sum(x["parseable"] for x in rounds),
                        "unparseable": sum(x["unparseable"] for x in rounds),
                        "choices": {k: total.get(k, 0) for k in ("A", "B", "tie", "unparseable")},
                        "note": "unparseable replies are recorded as unparseable, never as ties"},
            "wall_s": None,
            "rounds": rounds,
        }
        result["wall_s"] = round(time.perf_counter() - t_start, 1)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps({k: result[k] for k in ("median_verdicts_per_s", "ratios", "replies", "warmup_s", "wall_s")},
                         indent=2))
        print(f"server log tail:\n{server_log_tail}" if "Traceback" in server_log_tail else "", end="")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
