"""Chat templates in Pyodide, in our page's worker: jinja2 and MarkupSafe are not loaded at start,
and come when asked from the site's own pyodide/ folder (the lock the site ships names the wheels
the build made; nothing from another origin); Qwen2.5's template, with its tools branch and its
default system message, renders there as it does natively; a hostile template stops there within
its time limit, and one that recurses stops before the stack does."""
from __future__ import annotations

import pytest

from buildtools import runtime
from engine.text import ChatTemplate
from tests.text.test_chat_template import CONVERSATIONS, HOSTILE, TOOL_CALLS, TOOLS, file_template

SPECIAL = {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
CASES = [(CONVERSATIONS["one turn"], None), (CONVERSATIONS["system and turns"], None),
         (CONVERSATIONS["unicode"], TOOLS), (TOOL_CALLS, TOOLS)]

PROBE = """
import sys, time
before = "jinja2" in sys.modules
start = time.perf_counter()
await engine.runtime.load_packages(["jinja2"])
loaded_s = time.perf_counter() - start
start = time.perf_counter()
import jinja2, markupsafe
from engine.text import ChatTemplate, template_sandbox
imported_s = time.perf_counter() - start
start = time.perf_counter()
template = ChatTemplate(TEMPLATE, special_tokens=SPECIAL)
texts = [template.render(messages, add_generation_prompt=True, tools=tools) for messages, tools in CASES]
first_s = time.perf_counter() - start
start = time.perf_counter()
template.render(CASES[-1][0], add_generation_prompt=True, tools=CASES[-1][1])
again_s = time.perf_counter() - start
stopped = {}
for name, source in HOSTILE.items():
    start = time.perf_counter()
    try:
        ChatTemplate(source, time_limit_s=0.5).render([{"role": "user", "content": "hi"}])
        stopped[name] = ["rendered", 0]
    except engine.errors.TokenizerError as e:
        stopped[name] = [str(e), time.perf_counter() - start]
{"before": before, "texts": texts, "default_system": template.default_system, "jinja2": jinja2.__version__,
 "escape": markupsafe._escape_inner.__module__, "loaded_s": loaded_s, "imported_s": imported_s, "first_s": first_s,
 "again_s": again_s,
 "stopped": stopped}
"""


@pytest.fixture(scope="module")
def page(page_session):
    return page_session


def test_qwen_template_renders_in_pyodide_as_natively(page, qwen05_gguf):
    template = file_template(qwen05_gguf)
    hostile = {name: HOSTILE[name][0] for name in ("nested loops", "macro recursion", "__class__", "repetition")}
    got = page.run(f"TEMPLATE, SPECIAL, CASES, HOSTILE = {template!r}, {SPECIAL!r}, {CASES!r}, {hostile!r}\n" + PROBE)
    native = ChatTemplate(template, special_tokens=SPECIAL)
    assert got["texts"] == [native.render(m, add_generation_prompt=True, tools=t) for m, t in CASES]
    assert got["default_system"] == native.default_system is not None
    assert got["before"] is False                       # not loaded at the worker's start
    assert got["jinja2"] == runtime.JINJA2[1] and got["escape"] == "markupsafe._native"
    for name, (error, seconds) in got["stopped"].items():
        assert HOSTILE[name][1].replace("0.3 s", "0.5 s") in error and seconds < 3, (name, error, seconds)
    for wheel in runtime.CHAT_WHEELS.values():
        assert f"{page.base_url}pyodide/{wheel}" in page.requests, wheel
    assert not page.foreign_requests() and not page.console_errors
    print(f"\njinja2 + MarkupSafe installed in {got['loaded_s'] * 1e3:.0f} ms, imported (with the sandbox) in "
          f"{got['imported_s'] * 1e3:.0f} ms; compiled and {len(CASES)} conversations rendered in "
          f"{got['first_s'] * 1e3:.0f} ms, one again in {got['again_s'] * 1e3:.1f} ms")
