"""The chat card (PyScript on MicroPython, main thread; app.py calls start(card)). The model runs in the worker:
each message goes there with the whole conversation, and the answer comes back piece by piece
(engine-client.js chat()), so the page stays responsive while it is generated. The worker's
cache keeps the earlier turns, so only the new message is fed to the model.

Interruptions: Stop ends the answer before its next token (pressed while the model downloads, no
answer is generated); New chat drops the conversation, and an answer still arriving for the old
one is not added to the new one."""
import asyncio

import js
from bridge import by_id, error_text, to_js, to_py, without_prefix
from pyscript.ffi import create_proxy


def start(card):
    client, document = card.client, js.document
    # conversation: which one the card shows (New chat counts up); stopped: Stop was pressed
    state = {"history": [], "busy": False, "defaults": None, "conversation": 0, "stopped": False}
    log, box = by_id("chat-log"), by_id("chat-input")

    def bubble(role, text=""):
        div = document.createElement("div")
        div.className = f"msg {role}"
        div.setAttribute("data-testid", f"chat-{role}")
        div.textContent = text
        log.appendChild(div)
        log.scrollTop = log.scrollHeight
        return div

    def set_busy(busy):
        state["busy"] = busy
        by_id("chat-send").disabled = busy
        by_id("chat-stop").disabled = not busy

    def options():
        def number(name, kind, lo, hi, default):
            try:
                return min(max(kind(by_id(name).value), lo), hi)
            except ValueError:
                return default
        return {"temperature": number("chat-temperature", float, 0.0, 2.0, 0.0),
                "max_new_tokens": number("chat-max-tokens", int, 1, 1000, 256)}

    async def load():
        await card.load()                            # loading since the card was opened
        if state["defaults"] is None:
            state["defaults"] = to_py(await client.python("chat_defaults"))
            system = by_id("chat-system")
            if not system.value.strip():
                system.value = state["defaults"]["system"] or ""

    async def send():
        text = box.value.strip()
        if not text or state["busy"]:
            return
        if client.snapshot().status != "ready":
            card.error("the engine is still starting; try again in a moment")
            return
        card.error(None)
        set_busy(True)
        conversation, state["stopped"] = state["conversation"], False
        box.value = ""
        bubble("user", text)
        answer = bubble("assistant")
        answer.classList.add("streaming")
        got = {"first": None, "started": js.performance.now()}

        def on_piece(piece):
            if got["first"] is None:
                got["first"] = js.performance.now()
                by_id("chat-ttft").textContent = f"{got['first'] - got['started']:.0f}"
            answer.textContent += piece
            log.scrollTop = log.scrollHeight

        piece_proxy = create_proxy(on_piece)
        try:
            await load()
            if state["stopped"] or conversation != state["conversation"]:
                answer.classList.add("stopped")      # interrupted while the model loaded: no answer
                return
            system = by_id("chat-system").value.strip()
            turn = {"role": "user", "content": text}
            messages = ([{"role": "system", "content": system}] if system else []) + state["history"] + [turn]
            result = to_py(await client.chat(to_js(messages), to_js(options()), piece_proxy))
        except Exception as e:                   # the worker's error text; the turn is not kept
            answer.remove()
            card.error(without_prefix(error_text(e), "engine.errors."))
            return
        finally:
            if hasattr(piece_proxy, "destroy"):     # Pyodide's proxies are freed by hand
                piece_proxy.destroy()
            answer.classList.remove("streaming")
            set_busy(False)
        if conversation != state["conversation"]:
            return                                   # New chat meanwhile: this answer's conversation is gone
        stats = result["stats"]
        answer.textContent = result["text"]
        if stats.get("stop_reason") == "cancelled":
            answer.classList.add("stopped")
        state["history"] += [turn, {"role": "assistant", "content": result["text"]}]
        if "ttft_s" in stats:
            by_id("chat-ttft").textContent = f"{stats['ttft_s'] * 1e3:.0f}"
        by_id("chat-tps").textContent = f"{stats.get('decode_tok_s', 0):.1f}"
        by_id("chat-tokens").textContent = str(stats.get("new_tokens", 0))
        by_id("chat-backend").textContent = result["device"]
        log.setAttribute("data-heap-bytes", str(result.get("heap_bytes", 0)))
        if result.get("notice"):
            card.error(result["notice"])

    async def stop(event=None):
        if state["busy"]:
            state["stopped"] = True
            await client.stopChat()

    async def new_chat(event=None):
        state["conversation"] += 1                # an answer still arriving is not shown
        state["history"] = []
        log.innerHTML = ""
        card.error(None)
        await stop()
        if state["defaults"] is not None:
            await client.python("chat_reset")

    def on_submit(event):
        event.preventDefault()
        _run(send())

    def on_key(event):
        if event.key == "Enter" and not event.shiftKey and not event.isComposing:
            on_submit(event)

    def _run(coroutine):
        asyncio.create_task(coroutine)

    by_id("chat-form").addEventListener("submit", create_proxy(on_submit))
    box.addEventListener("keydown", create_proxy(on_key))
    by_id("chat-stop").addEventListener("click", create_proxy(lambda e: _run(stop())))
    by_id("chat-new").addEventListener("click", create_proxy(lambda e: _run(new_chat())))
