"""The chat card (PyScript on MicroPython, main thread; app.py calls start(card)). The model runs in the worker:
each message goes there with the whole conversation, and the answer comes back piece by piece
(engine-client.js chat()), so the page stays responsive while it is generated. The worker's
cache keeps the earlier turns, so only the new message is fed to the model.

Models: the picker lists the site's text-generation models (its registry.json) with their size
(their manifest's) and licence, and the decode speed each reached in this page. Choosing one
loads it in the worker, which drops the one before (engine-client.js loadTask); the first
model of the registry (SmolLM2) is the one that loads with the card. "Open" reads a GGUF's
header at a URL (the worker's inspect_model: size, architecture, chat template) and loads it
only when the model code can run it. A base model (no chat template in its file) turns the card
into a completion box: the prompt in, its continuation streamed out (engine-client.js complete()).

Interruptions: Stop ends the answer before its next token (pressed while the model downloads, no
answer is generated); New chat drops the conversation, and an answer still arriving for the old
one is not added to the new one.

JSON and Tools (chat models): the answer goes through OpenAI's chat.completions in the worker
(engine.api, engine-client.js chat.completions), streamed. JSON constrains it to the schema in
the box (empty: any JSON object); Tools offers a calculator and the clock: each call the model
makes shows as its own bubble, runs here in the page, its result shows as a bubble and goes back
to the model (role "tool") for the answer, two rounds of calls at most."""
import asyncio
import json

import js
from bridge import by_id, error_text, to_js, to_py, without_prefix
from pyscript.ffi import create_proxy


def size_text(n):
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


TOOLS = [
    {"type": "function", "function": {
        "name": "calculator", "description": "Compute a op b for two numbers a and b",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "op": {"enum": ["+", "-", "*", "/"]},
                                                        "b": {"type": "number"}}, "required": ["a", "op", "b"]}}},
    {"type": "function", "function": {
        "name": "current_time", "description": "The current date and time on this computer",
        "parameters": {"type": "object", "properties": {}}}},
]


def run_tool(name, arguments):
    """A tool call of the demo, run in the page: its result as text."""
    args = json.loads(arguments)
    if name == "calculator":
        a, op, b = args["a"], args["op"], args["b"]
        if op == "/":
            return "error: division by zero" if b == 0 else str(a / b)
        return str(a + b if op == "+" else a - b if op == "-" else a * b)
    if name == "current_time":
        return str(js.Date().toString())
    return "error: no tool named " + name


def start(card):
    client, document = card.client, js.document
    # conversation: which one the card shows (New chat counts up); stopped: Stop was pressed;
    # loaded: the model the card is set up for (a registry name or a URL); chat: it has a chat template
    state = {"history": [], "busy": False, "defaults": None, "conversation": 0, "stopped": False,
             "loaded": None, "chat": True, "listed": False}
    models = {}                                  # name or URL -> {"title", "size", "license", "speed"}
    log, box, picker = by_id("chat-log"), by_id("chat-input"), by_id("chat-model")

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
        picker.disabled = busy
        by_id("chat-url-open").disabled = busy

    def shape():
        """response_format and tools from the JSON and Tools toggles ({}: plain chat); a schema box
        that is not JSON raises ValueError."""
        request = {}
        if by_id("chat-json").checked:
            text = by_id("chat-schema").value.strip()
            request["response_format"] = ({"type": "json_schema", "json_schema": {"name": "answer",
                                                                                 "schema": json.loads(text)}}
                                          if text else {"type": "json_object"})
        if by_id("chat-tools").checked:
            request["tools"] = TOOLS
        return request

    async def completion(messages, request, on_piece):
        """One answer through chat.completions in the worker, streamed (content to on_piece):
        (the tool calls it made, the run's {"stats", "device", "heap_bytes"})."""
        calls = []

        def on_chunk(text):
            for choice in json.loads(text).get("choices", []):
                delta = choice.get("delta", {})
                if delta.get("content"):
                    on_piece(delta["content"])
                for call in delta.get("tool_calls") or []:
                    calls.append({"id": call["id"], "type": "function", "function": call["function"]})
        body = {"messages": messages, "stream": True}
        for key in request:
            body[key] = request[key]
        limits = options()
        body["temperature"], body["max_tokens"] = limits["temperature"], limits["max_new_tokens"]
        proxy = create_proxy(on_chunk)
        try:
            reply = to_py(await client.call("chat_completion", to_js({"args": [json.dumps(body)], "stream": True}),
                                            to_js([]), proxy))
        finally:
            if hasattr(proxy, "destroy"):
                proxy.destroy()
        return calls, reply["engine"]

    async def answer_with_tools(messages, request, target, on_piece):
        """The answer, with the tool calls the model makes run here in between; (its text, the
        run's info, the turns the calls and results added)."""
        turns = []
        for round_ in range(3):
            calls, info = await completion(messages + turns, request, on_piece)
            if not calls:
                return target["el"].textContent, info, turns
            said = target["el"].textContent
            if not said:
                target["el"].remove()
            turns.append({"role": "assistant", "content": said or None, "tool_calls": calls})
            for call in calls:
                function = call["function"]
                bubble("tool-call", f"{function['name']}({function['arguments']})")
                result = run_tool(function["name"], function["arguments"])
                bubble("tool", result)
                turns.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            request["tool_choice"] = "none" if round_ >= 1 else "auto"
            target["el"] = bubble("assistant")
            target["el"].classList.add("streaming")
        return target["el"].textContent, info, turns

    def options():
        def number(name, kind, lo, hi, default):
            try:
                return min(max(kind(by_id(name).value), lo), hi)
            except ValueError:
                return default
        return {"temperature": number("chat-temperature", float, 0.0, 2.0, 0.0),
                "max_new_tokens": number("chat-max-tokens", int, 1, 1000, 256)}

    # --- the picker ------------------------------------------------------------------------------
    def option_text(key):
        m = models[key]
        parts = [m["title"]]
        if m.get("size"):
            parts.append(size_text(m["size"]))
        if m.get("license"):
            parts.append(m["license"])
        if m.get("speed"):
            parts.append(f"{m['speed']:.1f} tokens/s")
        return " · ".join(parts)

    def show_option(key):
        option = None
        for i in range(picker.options.length):
            if picker.options.item(i).value == key:
                option = picker.options.item(i)
        if option is None:
            option = document.createElement("option")
            option.value = key
            picker.appendChild(option)
        option.textContent = option_text(key)
        option.dataset.speed = str(models[key].get("speed") or "")

    async def list_models():
        """The site's text-generation models (registry.json), then each one's size (its manifest)."""
        if state["listed"]:
            return
        state["listed"] = True
        try:
            listed = to_py(await (await js.fetch("registry.json")).json())
        except Exception:
            info = client.snapshot().info
            listed = to_py(info.registry) if info else []
        names = [m["name"] for m in listed if card.task in m["tasks"]]
        for m in listed:
            if m["name"] in names:
                models[m["name"]] = {"title": m["title"].split(" · ", 1)[-1], "license": m.get("license", ""),
                                     "size": None, "speed": None}
                show_option(m["name"])
        picker.value = state["loaded"] or (names[0] if names else "")
        for name in names:
            try:
                manifest = await (await js.fetch(f"models/{name}/manifest.json")).json()
                models[name]["size"] = int(manifest.total_bytes)
            except Exception:
                continue                          # the size stays unknown; the model still loads
            show_option(name)

    def loaded(info):
        """The card follows the model the worker now serves: picker, title, heap, mode."""
        key = getattr(info, "url", None) or info.model
        if key not in models:
            models[key] = {"title": info.model, "license": "", "size": None, "speed": None}
            show_option(key)
        picker.value = key
        picker.dataset.loaded = key
        card.section.querySelector("[data-model]").textContent = models[key]["title"]
        heap = getattr(info, "heap_bytes", None)
        if heap:
            log.setAttribute("data-heap-bytes", str(heap))
            card.section.dataset.loadHeapBytes = str(heap)
        by_id("chat-model-info").textContent = f"worker memory after loading: {heap / 2**20:.0f} MiB" if heap else ""

    async def load():
        """The card's model, loaded (since the card was opened, or as last chosen), and the card set up for it."""
        info = await card.load()
        key = getattr(info, "url", None) or info.model
        if state["defaults"] is None or state["loaded"] != key:
            defaults = to_py(await client.python("chat_defaults"))
            previous = state["defaults"]["system"] if state["defaults"] else None
            state["defaults"], state["loaded"] = defaults, key
            system = by_id("chat-system")
            if not system.value.strip() or system.value.strip() == (previous or "").strip():
                system.value = defaults["system"] or ""
            set_mode(defaults.get("chat", True), info.model)
            loaded(info)
            await apply_context()
        return info

    def context_tokens():
        try:
            tokens = int(float(by_id("chat-context").value))
        except ValueError:
            tokens = 4096
        limit = state["defaults"]["max_capacity"] if state["defaults"] else 32768
        return min(max(tokens, 256), limit)

    async def apply_context():
        """The context length of the Settings, given to the loaded model (a new, empty cache)."""
        tokens = context_tokens()
        if tokens != state["defaults"]["capacity"]:
            state["defaults"]["capacity"] = to_py(await client.python("chat_context", tokens))["capacity"]
        by_id("chat-context").value = str(state["defaults"]["capacity"])
        by_id("chat-capacity").textContent = str(state["defaults"]["capacity"])

    async def set_context(event=None):
        if state["defaults"] is None:
            return                                   # applied when the model loads
        await new_chat()
        try:
            await apply_context()
        except Exception as e:
            card.error(without_prefix(error_text(e), "engine.errors."))

    def set_mode(chat, name):
        """A chat model: the conversation; a base model: a completion box, and the card says why."""
        state["chat"] = chat
        log.hidden = not chat
        by_id("chat-completion").hidden = chat
        mode = by_id("chat-mode")
        mode.hidden = chat
        mode.textContent = ("" if chat else f"{name} is a base model: its file has no chat template "
                            "(tokenizer.chat_template), so it does not chat. Type the start of a text: "
                            "the model continues it.")
        box.placeholder = ("Ask something… (Enter sends, Shift+Enter: new line)" if chat else
                           "The start of a text… (Enter completes it)")
        by_id("chat-send").textContent = "Send" if chat else "Complete"
        by_id("chat-new").textContent = "New chat" if chat else "Clear"

    async def use_model(key):
        """Load another model (a registry name or a GGUF's URL); the conversation starts afresh."""
        if state["busy"]:
            picker.value = state["loaded"] or ""
            return
        card.error(None)
        set_busy(True)
        try:
            await clear()
            await client.loadTask(card.task, key)
            await load()
        except Exception as e:
            card.error("The model could not be loaded: " + without_prefix(error_text(e), "engine.errors."))
            picker.value = state["loaded"] or ""
            state["loaded"] = None                # the worker dropped it: the registry's first loads again
            set_busy(False)
            _run(follow_load())
            return
        set_busy(False)

    async def open_url(event=None):
        """A GGUF by URL: its header first (size, architecture), then its weights if it can run."""
        url = by_id("chat-url").value.strip()
        if not url or state["busy"]:
            return
        note = by_id("chat-url-info")
        card.error(None)
        note.hidden = False
        note.textContent = f"Reading the header of {url}…"
        set_busy(True)
        try:
            info = to_py(await client.python("inspect_model", card.task, url))
        except Exception as e:
            note.textContent = ""
            note.hidden = True
            card.error("Could not read that GGUF: " + without_prefix(error_text(e), "engine.errors."))
            set_busy(False)
            return
        types = ", ".join(f"{k} ×{v}" for k, v in info["tensor_types"].items())
        template = "a chat template" if info["chat_template"] else "no chat template (a base model: completion only)"
        note.textContent = (f"{info['file']}: {size_text(info['size'])}, architecture "
                            f"{info['architecture'] or 'not given'}, {info['tensors']} tensors ({types}), {template}")
        note.dataset.architecture = info["architecture"] or ""
        note.dataset.size = str(info["size"])
        if info["refused"]:
            note.dataset.refused = "true"
            card.error("Refused before downloading its weights: " + info["refused"])
            set_busy(False)
            return
        note.dataset.refused = "false"
        models[url] = {"title": info["name"] or info["file"], "license": "from a URL", "size": info["size"],
                       "speed": None}
        show_option(url)
        picker.value = url
        set_busy(False)
        await use_model(url)

    # --- talking to the model ----------------------------------------------------------------------
    async def send():
        text = box.value.strip() if state["chat"] else box.value
        if not text.strip() or state["busy"]:
            return
        if client.snapshot().status != "ready":
            card.error("the engine is still starting; try again in a moment")
            return
        card.error(None)
        set_busy(True)
        conversation, state["stopped"] = state["conversation"], False
        try:
            request = shape() if state["chat"] else {}
        except ValueError as e:
            card.error(f"The schema is not JSON: {e}")
            set_busy(False)
            return
        box.value = ""
        if state["chat"]:
            bubble("user", text)
            answer = bubble("assistant")
        else:
            by_id("chat-prompt").textContent = text
            answer = by_id("chat-continuation")
            answer.textContent = ""
        answer.classList.add("streaming")
        got = {"first": None, "started": js.performance.now()}
        target, turns = {"el": answer}, []

        def on_piece(piece):
            if got["first"] is None:
                got["first"] = js.performance.now()
                by_id("chat-ttft").textContent = f"{got['first'] - got['started']:.0f}"
            target["el"].textContent += piece
            log.scrollTop = log.scrollHeight

        piece_proxy = create_proxy(on_piece)
        try:
            await load()
            if state["stopped"] or conversation != state["conversation"]:
                answer.classList.add("stopped")      # interrupted while the model loaded: no answer
                return
            if not state["chat"]:                    # the model chosen meanwhile may be a base model
                result = to_py(await client.complete(text, to_js(options()), piece_proxy))
            else:
                system = by_id("chat-system").value.strip()
                turn = {"role": "user", "content": text}
                messages = ([{"role": "system", "content": system}] if system else []) + state["history"] + [turn]
                if request:
                    said, info, turns = await answer_with_tools(messages, request, target, on_piece)
                    result = dict(info)              # MicroPython: no {**info}
                    result["text"] = said
                else:
                    result = to_py(await client.chat(to_js(messages), to_js(options()), piece_proxy))
        except Exception as e:                   # the worker's error text; the turn is not kept
            if state["chat"]:
                target["el"].remove()
            card.error(without_prefix(error_text(e), "engine.errors."))
            return
        finally:
            if hasattr(piece_proxy, "destroy"):     # Pyodide's proxies are freed by hand
                piece_proxy.destroy()
            target["el"].classList.remove("streaming")
            set_busy(False)
        answer = target["el"]
        if conversation != state["conversation"]:
            return                                   # New chat meanwhile: this answer's conversation is gone
        stats = result["stats"]
        answer.textContent = result["text"]
        if stats.get("stop_reason") == "cancelled":
            answer.classList.add("stopped")
        if state["chat"]:
            state["history"] += [turn] + turns + [{"role": "assistant", "content": result["text"]}]
        if "ttft_s" in stats:
            by_id("chat-ttft").textContent = f"{stats['ttft_s'] * 1e3:.0f}"
        by_id("chat-tps").textContent = f"{stats.get('decode_tok_s', 0):.1f}"
        by_id("chat-tokens").textContent = str(stats.get("new_tokens", 0))
        by_id("chat-backend").textContent = result["device"]
        log.setAttribute("data-heap-bytes", str(result.get("heap_bytes", 0)))
        if state["loaded"] in models and stats.get("decode_tok_s"):
            models[state["loaded"]]["speed"] = stats["decode_tok_s"]
            show_option(state["loaded"])
        if result.get("notice"):
            card.error(result["notice"])

    async def stop(event=None):
        if state["busy"]:
            state["stopped"] = True
            await client.stopChat()

    async def clear():
        """Forget the conversation (or the completion) on the page."""
        state["conversation"] += 1                # an answer still arriving is not shown
        state["history"] = []
        log.innerHTML = ""
        by_id("chat-prompt").textContent = ""
        by_id("chat-continuation").textContent = ""

    async def new_chat(event=None):
        await clear()
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

    def on_url(event):
        event.preventDefault()
        _run(open_url())

    def on_open():
        _run(list_models())
        _run(follow_load())

    async def follow_load():
        """Once the card's model is in, the card is set up for it (base model or chat)."""
        try:
            await load()
        except Exception:
            pass                                  # app.py's preload says why in the card

    def _run(coroutine):
        asyncio.create_task(coroutine)

    card.on("open", on_open)
    by_id("chat-form").addEventListener("submit", create_proxy(on_submit))
    by_id("chat-url-form").addEventListener("submit", create_proxy(on_url))
    box.addEventListener("keydown", create_proxy(on_key))
    picker.addEventListener("change", create_proxy(lambda e: _run(use_model(picker.value))))
    by_id("chat-stop").addEventListener("click", create_proxy(lambda e: _run(stop())))
    by_id("chat-new").addEventListener("click", create_proxy(lambda e: _run(new_chat())))
    by_id("chat-context").addEventListener("change", create_proxy(lambda e: _run(set_context())))

    def show_schema(event=None):
        by_id("chat-schema").hidden = not by_id("chat-json").checked
    by_id("chat-json").addEventListener("change", create_proxy(show_schema))
