"""The chat's memory in headless Chromium: a model picked in the chat card of the built site
(dist/), the worker's WebAssembly heap and the renderer process's resident memory after it loads
and after it generates N tokens (greedy, one answer).

    .venv/bin/python scripts/chat_memory.py --model Qwen2.5-Coder-1.5B-Instruct --tokens 1000 --threads 1

The renderer's RSS counts the page, the inference worker and the kernel pool's helper workers
(Chromium runs a page's dedicated workers in its renderer process); the heap is Pyodide's linear
memory (the weights, the KV cache, the activations). A measurement, reported, never asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPT = "Count from 1 to 1000, one number per line, with nothing else."


def renderer_rss(browser_pid: int) -> int:
    """Resident bytes of the browser's renderer processes (children of `browser_pid`, any depth)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, stack = 0, [browser_pid]
    while stack:
        pid = stack.pop()
        stack += children.get(pid, [])
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"--type=renderer" in cmdline:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="Qwen2.5-Coder-1.5B-Instruct")
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    from tests.web.conftest import BASE_ARGS, CHROMIUM, start_dev_server
    served = start_dev_server(args.dist)
    picker = "[data-testid=chat-model]"
    result = {"model": args.model, "threads": args.threads, "tokens_asked": args.tokens}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=BASE_ARGS)
            page = browser.new_page()
            page.goto(f"{served.url}index.html?threads={args.threads}#chat")
            page.wait_for_selector(f"{picker}:not([disabled])[data-loaded]", state="attached", timeout=300_000)
            t0 = time.perf_counter()
            page.select_option(picker, args.model)
            page.wait_for_selector(f"{picker}:not([disabled])[data-loaded='{args.model}']", state="attached",
                                   timeout=1_800_000)
            result["load_s"] = round(time.perf_counter() - t0, 1)
            browser_pid = _browser_pid()
            heap = page.evaluate("window.engine.run('from engine.tasks import state\\nstate.heap_bytes()')")
            result["after_load"] = {"heap_bytes": int(json.loads(heap) if isinstance(heap, str) else heap),
                                    "renderer_rss_bytes": renderer_rss(browser_pid)}
            page.click(".chat-settings summary")
            page.fill("[data-testid=chat-max-tokens]", str(args.tokens))
            page.fill("[data-testid=chat-input]", PROMPT)
            page.press("[data-testid=chat-input]", "Enter")
            page.wait_for_function("document.querySelector('[data-testid=chat-send]').disabled", timeout=30_000)
            page.wait_for_function("!document.querySelector('[data-testid=chat-send]').disabled",
                                   timeout=3_600_000, polling=1000)
            result["tokens"] = int(page.text_content("[data-testid=chat-tokens]"))
            result["decode_tok_s"] = float(page.text_content("[data-testid=chat-tps]"))
            result["after_answer"] = {"heap_bytes": int(page.get_attribute("[data-testid=chat-log]", "data-heap-bytes")),
                                      "renderer_rss_bytes": renderer_rss(browser_pid)}
            result["error"] = page.text_content("[data-testid=chat-error]") if page.is_visible(
                "[data-testid=chat-error]") else None
            browser.close()
    finally:
        served.stop()
    print(json.dumps(result, indent=1))


def _browser_pid() -> int:
    """The chromium browser process this script started (the newest /usr/bin/chromium without --type)."""
    best = None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline and cmdline[0].endswith(b"chromium") and not any(a.startswith(b"--type=") for a in cmdline):
            if best is None or int(entry) > best:
                best = int(entry)
    if best is None:
        raise SystemExit("no chromium browser process found")
    return best


if __name__ == "__main__":
    main()
