"""Text generation on the GGUF chat/base models: ours against wllama in the browser and against
transformers (and llama-cpp-python, when given) natively, per thread count.

    python scripts/bench_llm.py                                 # the whole table (browser, then native)
    python scripts/bench_llm.py --models gemma-3-270m --threads 1 --tokens 8 --rounds 1
    python scripts/bench_llm.py --no-native                     # the browser half only
    python scripts/bench_llm.py --llama-cpp-python /tmp/llcpp-venv/bin/python   # that Python's llama_cpp beside
    python scripts/bench_llm.py --json table.json
    python scripts/bench_llm.py --models Qwen2.5-Coder-1.5B-Instruct --no-native --no-peer --query llm_profile=1
                                                                # ours' time per kernel in the browser

The case (engine.bench.llm.TEXT_PROMPT): ~200 tokens of prose, continued greedy, --tokens new ones
(128), end-of-sequence ignored, prefill and decode tokens/s.

Browser: the built site (--site, default dist/, built with `python build.py --peers`) served by
the dev server (cross-origin isolated: threads work) and opened in headless Chromium, one page per
model: bench.html?llm=<model>&peer=1&threads=1,2 (web/bench.js benchLlmText): ours and wllama on
the same GGUF file of the site, at each thread count, in interleaved rounds; its JSON is read back.

Native: ours (the simd kernels, engine.threads) and transformers on the same GGUF (dequantized to
float32; engine.bench.llm.bench_torch_text on our tokenizer's ids) at the same thread counts
(engine.bench.threads sets both), and with --llama-cpp-python PY llama.cpp's Python binding
installed in PY (another environment: it is not a dependency) on the same file, n_threads the same.
Each one untimed run, then --repeat timed (median). The machine's load (/proc/loadavg) is printed
before and after: a shared machine's numbers hold only within one run; the ratios are what counts.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ["gemma-3-270m", "Qwen2.5-Coder-0.5B-Instruct", "Qwen2.5-Coder-1.5B-Instruct"]
TARGETS = {"prefill": 3.0, "decode": 2.0}          # ours / wllama, at the same thread count


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def checkpoint(name: str) -> Path:
    """The registry model's GGUF as one file (.cache/checkpoints/<sha16>-<file>, as tests/conftest.py
    registry_checkpoint joins it); its parts are joined here when it is not there yet."""
    from engine import registry
    from tests.conftest import registry_checkpoint
    entry = registry.model(name)
    target = ROOT / ".cache" / "checkpoints" / f"{entry.sha256[:16]}-{entry.checkpoint_name}"
    return target if target.is_file() else registry_checkpoint(name)


# --- the browser -----------------------------------------------------------------------------------
def browser(site: Path, models: list[str], threads: list[int], tokens: int, rounds: int, timeout_s: float,
            peer: bool = True, extra: str = "", log=print) -> dict:
    from playwright.sync_api import sync_playwright

    from tests.web.conftest import CHROMIUM, CHROMIUM_ARGS, start_dev_server
    server = start_dev_server(site)
    out = {}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                for model in models:
                    query = (f"repeat=1&gemm=0&ops=0&qlinear=0&effnet=0&minilm=0&llm={model}&peer={int(peer)}"
                             f"&threads={','.join(map(str, threads))}&tokens={tokens}&llm_rounds={rounds}"
                             + (f"&{extra}" if extra else ""))
                    log(f"[browser] {model}: bench.html?{query}  (load {loadavg()})")
                    context = browser.new_context()
                    page = context.new_page()
                    page.on("pageerror", lambda e: log(f"  page error: {e}"))
                    started = time.time()
                    page.goto(server.url + "bench.html?" + query)
                    last = None
                    while page.evaluate("document.body.dataset.done") != "true":
                        if time.time() - started > timeout_s:
                            raise TimeoutError(f"{model}: the bench page did not finish in {timeout_s:.0f} s")
                        now = page.text_content("#llm-status")
                        if now != last:
                            log(f"  {time.time() - started:6.0f} s  {now}")
                            last = now
                        time.sleep(2)
                    results = json.loads(page.text_content("[data-testid=bench-results]"))
                    if "error" in results:
                        raise RuntimeError(f"{model}: the bench page failed: {results['error']}")
                    out[model] = {**results["llm_text"], "table": page.text_content("[data-testid=llm-table]"),
                                  "user_agent": results["user_agent"], "wall_s": round(time.time() - started, 1)}
                    log(out[model]["table"])
                    context.close()
            finally:
                browser.close()
    finally:
        server.stop()
    return out


# --- natively --------------------------------------------------------------------------------------
LLAMA_CPP = r"""
import json, statistics, sys, time
import numpy as np
from llama_cpp import Llama, llama_cpp
path, ids, tokens, threads, repeat = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=1024, n_batch=512,
            n_gpu_layers=0, verbose=False, logits_all=False)
eog = [t for t in range(llm.n_vocab()) if llama_cpp.llama_token_is_eog(llm._model.vocab, t)]
def last_logits():                            # the context's own (Llama.scores stays zero here)
    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(llm.n_vocab(),)).copy()
prefill, decode, out = [], [], []
for i in range(repeat + 1):
    llm.reset()
    start = time.perf_counter()
    llm.eval(ids)
    t_prefill = time.perf_counter() - start
    out = []
    start = time.perf_counter()
    for n in range(tokens):
        logits = last_logits()
        logits[eog] = -np.inf                  # end-of-generation ignored, as on the other sides
        token = int(logits.argmax())
        out.append(token)
        if n == 0:
            start = time.perf_counter()       # decode: the tokens after the first
        if n + 1 < tokens:
            llm.eval([token])
    t_decode = time.perf_counter() - start
    if i:
        prefill.append(len(ids) / t_prefill)
        decode.append((tokens - 1) / max(t_decode, 1e-9))
import llama_cpp as pkg
print(json.dumps({"version": pkg.__version__, "threads": threads, "prompt_tokens": len(ids), "new_tokens": tokens,
                  "prefill_tok_s": round(statistics.median(prefill), 3), "decode_tok_s": round(statistics.median(decode), 3),
                  "ids": out, "text": llm.detokenize(out).decode("utf-8", "replace")}))
"""


def llama_cpp_python(python: str, path: Path, ids: list[int], tokens: int, threads: int, repeat: int) -> dict:
    r = subprocess.run([python, "-c", LLAMA_CPP, str(path), json.dumps(ids), str(tokens), str(threads), str(repeat)],
                       capture_output=True, text=True, timeout=3600)
    if r.returncode:
        return {"error": (r.stderr or r.stdout).strip().splitlines()[-1] if (r.stderr or r.stdout).strip() else f"exit {r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def native(models: list[str], threads: list[int], tokens: int, repeat: int, llama_python: str | None,
           torch: bool = True, profile: bool = False, log=print) -> dict:
    from engine.bench import threads as at_threads
    from engine.bench.llm import TEXT_PROMPT, bench_text, bench_torch_text, profile_text
    from engine.tasks import pipeline
    out = {}
    for model in models:
        path = checkpoint(model)
        log(f"[native] {model}: {path.name}  (load {loadavg()})")
        pipe = pipeline("text-generation", device="simd", model=model, weights=str(path), capacity=1024)
        rows = out[model] = []
        for n in threads:
            with at_threads(n) as described:
                row = {"threads": n, "described": described}
                ours = bench_text(pipe, TEXT_PROMPT, new_tokens=tokens, repeat=repeat)
                row["ours"] = {k: ours[k] for k in ("prompt_tokens", "new_tokens", "prefill_tok_s", "decode_tok_s", "text")}
                log(f"  {n} thr ours   prefill {ours['prefill_tok_s']:8.1f}  decode {ours['decode_tok_s']:7.1f}")
                if profile:
                    row["profile"] = profile_text(pipe, pipe.tokenizer.encode(TEXT_PROMPT).ids)
                    for what in ("prefill", "decode"):
                        log("\n".join("    " + line for line in row["profile"][what]))
                if torch:
                    try:
                        t = bench_torch_text(path, TEXT_PROMPT, new_tokens=tokens, repeat=repeat)
                        row["torch"] = {k: t[k] for k in ("torch_threads", "prompt_tokens", "prefill_tok_s", "decode_tok_s", "text")}
                        log(f"  {n} thr torch  prefill {t['prefill_tok_s']:8.1f}  decode {t['decode_tok_s']:7.1f}")
                    except Exception as e:           # noqa: BLE001 -- reported in the table
                        row["torch"] = {"error": f"{type(e).__name__}: {e}"}
                        log(f"  torch: {row['torch']['error']}")
            if llama_python:
                ids = pipe.tokenizer.encode(TEXT_PROMPT).ids
                row["llama_cpp"] = llama_cpp_python(llama_python, path, ids, tokens, n, repeat)
                lc = row["llama_cpp"]
                log(f"  {n} thr llama.cpp " + (f"prefill {lc['prefill_tok_s']:8.1f}  decode {lc['decode_tok_s']:7.1f}"
                                               if "error" not in lc else lc["error"]))
            rows.append(row)
        del pipe
    return out


# --- the table -------------------------------------------------------------------------------------
def table(result: dict) -> str:
    """One markdown table: per model and thread count, ours and wllama in the browser with the
    ratios (and the targets), then ours natively against transformers and llama-cpp-python."""
    f = lambda x: "-" if x is None else f"{x:.1f}"                        # noqa: E731
    r = lambda a, b: "-" if a is None or not b else f"{a / b:.2f}×"       # noqa: E731
    lines = ["| model | threads | browser prefill ours / wllama (tok/s) | ratio (target 3×) | "
             "browser decode ours / wllama | ratio (target 2×) | native prefill ours / torch / llama.cpp | "
             "native decode ours / torch / llama.cpp |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for model in result["models"]:
        web = {row["threads"]: row for row in result.get("browser", {}).get(model, {}).get("ratios", [])}
        nat = {row["threads"]: row for row in result.get("native", {}).get(model, [])}
        for n in result["threads"]:
            w, x = web.get(n, {}), nat.get(n, {})
            ours, torch, lc = x.get("ours", {}), x.get("torch", {}), x.get("llama_cpp", {})
            lines.append(
                f"| {model} | {n} | {f(w.get('ours_prefill_tok_s'))} / {f(w.get('peer_prefill_tok_s'))} | "
                f"{r(w.get('ours_prefill_tok_s'), w.get('peer_prefill_tok_s'))} | "
                f"{f(w.get('ours_decode_tok_s'))} / {f(w.get('peer_decode_tok_s'))} | "
                f"{r(w.get('ours_decode_tok_s'), w.get('peer_decode_tok_s'))} | "
                f"{f(ours.get('prefill_tok_s'))} / {f(torch.get('prefill_tok_s'))} / {f(lc.get('prefill_tok_s'))} | "
                f"{f(ours.get('decode_tok_s'))} / {f(torch.get('decode_tok_s'))} / {f(lc.get('decode_tok_s'))} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--site", type=Path, default=ROOT / "dist", help="the built site (python build.py --peers)")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated (default {','.join(MODELS)})")
    ap.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    ap.add_argument("--tokens", type=int, default=128, help="new tokens per run (default 128)")
    ap.add_argument("--rounds", type=int, default=2, help="browser: interleaved rounds per thread count (default 2)")
    ap.add_argument("--repeat", type=int, default=1, help="native: timed runs after the untimed one (default 1)")
    ap.add_argument("--no-browser", dest="browser", action="store_false")
    ap.add_argument("--no-native", dest="native", action="store_false")
    ap.add_argument("--no-torch", dest="torch", action="store_false", help="natively, without transformers")
    ap.add_argument("--llama-cpp-python", metavar="PY", default=None,
                    help="a Python with llama-cpp-python installed: run it natively beside ours")
    ap.add_argument("--profile", action="store_true", help="natively, the time per kernel of ours (prefill, decode)")
    ap.add_argument("--no-peer", dest="peer", action="store_false", help="browser: ours alone, without wllama")
    ap.add_argument("--query", default="", help="browser: more of the bench page's query (e.g. llm_profile=1)")
    ap.add_argument("--timeout", type=float, default=3600, help="browser: seconds per model page (default 3600)")
    ap.add_argument("--json", type=Path, default=None, help="write the whole result here")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    threads = [int(n) for n in args.threads.split(",") if n]
    result = {"models": models, "threads": threads, "tokens": args.tokens, "rounds": args.rounds,
              "machine": os.uname().machine, "cpus": os.cpu_count(), "load_before": loadavg(),
              "date": time.strftime("%Y-%m-%d %H:%M")}
    print(f"load average before: {result['load_before']} ({os.cpu_count()} CPUs)")
    if args.browser:
        result["browser"] = browser(args.site, models, threads, args.tokens, args.rounds, args.timeout,
                                    args.peer, args.query)
        result["load_after_browser"] = loadavg()
    if args.native:
        result["native"] = native(models, threads, args.tokens, args.repeat, args.llama_cpp_python, args.torch,
                                  args.profile)
    result["load_after"] = loadavg()
    print(f"load average after: {result['load_after']}")
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
