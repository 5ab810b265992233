"""The speech card (PyScript on MicroPython, main thread; app.py calls start(card)): record with the
microphone, or choose or drop an audio file, and read the transcript as Whisper decodes it.

What touches audio is JavaScript (audio-capture.js, window.audioCapture): a WAV file goes to the
worker as its bytes (read there by the engine's WAV reader, as natively), any other file is
decoded by the browser, and the microphone is recorded with an AudioWorklet; those two go as
float32 samples with their rate. The worker (engine/tasks/speech_recognition.py) sends each
segment as it is decoded, so the transcript grows while the rest is computed. Cancel ends it after
the segment being decoded; what came by then stays. "Skip pauses" transcribes a file's speech only
(vad=True); "Word timings" gives each word's time (word_timestamps=True), and the words light up
as the player below the transcript plays the audio.

Recording is live dictation: the microphone at 16 kHz goes to the worker as it comes; each
utterance's text appears as soon as a pause ends it (a draft), and each pack of utterances (up to
29 s) is then transcribed whole, its final text replacing the drafts. Stop ends the last pack: the
transcript is the one the recording gives as a file with "Skip pauses". The delay from the end of
each utterance's speech to its text is shown (its median).
"""
import asyncio
import json

import js
from bridge import by_id, error_text, items, sample_buttons, take_files, to_js, to_py, without_prefix
from pyscript.ffi import create_proxy


def clock(seconds):
    """mm:ss.xx"""
    minutes = int(seconds // 60)
    return f"{minutes:02d}:{seconds - 60 * minutes:05.2f}"


def message(e):
    return without_prefix(error_text(e), "engine.errors.", "AudioError: ", "InputError: ")


def start(card):
    client, document = card.client, js.document
    # run: counts transcriptions up, so that a cancelled one's late segments are not shown
    state = {"busy": False, "recorder": None, "run": 0, "model": None, "models": [], "titles": {},
             "cancelled": False, "samples_shown": False, "stem": "transcript", "download": None, "latencies": []}
    segments = by_id("speech-segments")

    def capture():
        return js.window.audioCapture            # audio-capture.js, loaded as a module with the page

    def set_busy(busy):
        state["busy"] = busy
        by_id("speech-cancel").disabled = not busy
        by_id("speech-record").disabled = busy or state["recorder"] is not None
        by_id("speech-input").disabled = busy
        by_id("speech-model").disabled = busy

    def options():
        english_only = (state["model"] or "").endswith(".en")
        language = by_id("speech-language-select").value
        return {"task": "transcribe" if english_only else by_id("speech-task").value,
                "language": None if english_only else (language or None)}

    def add_segment(segment, pack=None, draft=False):
        li = document.createElement("li")
        if pack is not None:
            li.dataset.pack = str(pack)
        if draft:
            li.classList.add("draft")
        li.setAttribute("data-testid", "speech-segment")
        li.dataset.start = str(segment["start"])
        li.dataset.end = str(segment["end"])
        stamp = document.createElement("span")
        stamp.className = "stamp"
        stamp.textContent = f"[{clock(segment['start'])} → {clock(segment['end'])}]"
        text = document.createElement("span")
        text.className = "text"
        words = segment.get("words") or []
        if words:                                    # each word its own span, timed, for the player's highlight
            for i, w in enumerate(words):
                span = document.createElement("span")
                span.className = "word"
                span.dataset.start = str(w["start"])
                span.dataset.end = str(w["end"])
                span.textContent = w["word"].strip() if i == 0 else w["word"]
                text.appendChild(span)
        else:
            text.textContent = segment["text"].strip()
        li.appendChild(stamp)
        li.appendChild(text)
        segments.appendChild(li)
        return li

    def play(audio):
        """The transcribed audio in the player; its words (Word timings) light up as it plays."""
        player = by_id("speech-player")
        if state.get("player_url"):
            js.URL.revokeObjectURL(state["player_url"])
        state["player_url"] = capture().playable(audio)
        player.src = state["player_url"]
        player.hidden = False
        if state.get("highlight") is None:
            state["highlight"] = capture().highlightWords(player, segments)

    def clear_result():
        by_id("speech-player").pause()
        segments.innerHTML = ""
        segments.removeAttribute("data-text")
        segments.classList.remove("stopped")
        for name in ("language", "time", "duration", "rtf", "backend"):
            by_id(f"speech-{name}").textContent = "–"

    def show_progress(loaded, total):
        row = by_id("speech-progress")
        row.hidden = not total or loaded >= total
        row.querySelector("progress").value = loaded / total if total else 0
        row.querySelector(".bytes").textContent = f"{loaded / 1e6:.1f} MB / {total / 1e6:.1f} MB" if total else ""

    def model_changed(name):
        """The card follows the model the worker now serves: its title, the select, the options."""
        state["model"] = name
        by_id("speech-model").value = name
        title = state["titles"].get(name)
        if title:                                     # the page names the task's last model otherwise
            card.section.querySelector("[data-model]").textContent = title
        english_only = name.endswith(".en")
        by_id("speech-task").disabled = english_only
        by_id("speech-language-select").disabled = english_only

    async def load():
        info = await card.load()                     # the registry's first model, loading since the card opened
        if state["model"] is None:
            model_changed(info.model)
        wanted = by_id("speech-model").value
        if state["models"] and wanted and wanted != state["model"]:
            await use_model(wanted)

    async def use_model(name):
        """Another model for the task (the worker keeps one): its weights come cache-first, with progress."""
        def on_progress(text):
            p = json.loads(text)
            show_progress(p["loaded"], p["total"])
        proxy = create_proxy(on_progress)
        try:
            await client.call("speech_model", to_js({"args": [name], "stream": True}), to_js([]), proxy)
        finally:
            if hasattr(proxy, "destroy"):
                proxy.destroy()
            by_id("speech-progress").hidden = True
        model_changed(name)

    def begin(source):
        """A transcription starts (called in the event's own handler, so the card is busy from the
        click or drop on): False when one is running or the microphone records."""
        if state["busy"] or state["recorder"] is not None:
            return False
        card.error(None)
        clear_result()
        state["run"] += 1
        state["cancelled"] = False
        by_id("speech-source").textContent = source
        state["stem"] = source.rsplit(".", 1)[0] if "." in source[-5:] else source
        segments.dataset.state = "working"
        set_busy(True)
        downloads(False)
        return True

    def downloads(enabled):
        for button in items(document.querySelectorAll(".speech-downloads button")):
            button.disabled = not enabled

    async def download(event):
        """The last transcript as a file (the worker writes it as the command line does)."""
        fmt = event.target.dataset.format
        try:
            reply = to_py(await client.python("speech_transcript", fmt))
        except Exception as e:
            card.error(message(e))
            return
        kinds = {"txt": "text/plain", "srt": "application/x-subrip", "vtt": "text/vtt"}
        blob = js.Blob.new(to_js([reply["text"]]), to_js({"type": kinds[fmt] + ";charset=utf-8"}))
        if state["download"] is not None:
            js.URL.revokeObjectURL(state["download"])
        state["download"] = js.URL.createObjectURL(blob)
        link = document.createElement("a")
        link.href = state["download"]
        link.download = f"{state['stem']}.{fmt}"
        document.body.appendChild(link)
        link.click()
        link.remove()

    def end(outcome, error=None):
        """It ended: "done" (a transcript, or cancelled) or "error" (the card's error says why)."""
        if error is not None:
            card.error(error)
        segments.classList.remove("streaming")
        set_busy(False)
        segments.dataset.state = outcome

    async def transcribe(audio):
        """Transcribe what begin() announced: the audio from audio-capture.js."""
        if client.snapshot().status != "ready":
            end("error", "the engine is still starting; try again in a moment")
            return
        run = state["run"]
        segments.classList.add("streaming")
        seconds = capture().duration(audio)
        by_id("speech-duration").textContent = f"{seconds:.2f}" if seconds else "…"

        def on_segment(text):
            if run == state["run"]:
                add_segment(json.loads(text))

        proxy = create_proxy(on_segment)
        try:
            await load()
            if state["cancelled"]:
                segments.classList.add("stopped")       # cancelled while the model loaded
                end("done")
                return
            wanted = options()
            wanted["vad"] = bool(by_id("speech-vad").checked)
            wanted["word_timestamps"] = bool(by_id("speech-words").checked)
            reply = await capture().transcribe(client, audio, json.dumps(wanted), proxy)
            result = to_py(reply)
        except Exception as e:
            end("error", message(e))
            return
        finally:
            if hasattr(proxy, "destroy"):
                proxy.destroy()
        segments.innerHTML = ""                          # the final segments, as the worker kept them
        for segment in result["segments"]:
            add_segment(segment)
        segments.setAttribute("data-text", result["text"])
        if result.get("cancelled"):
            segments.classList.add("stopped")
        by_id("speech-language").textContent = result.get("language") or "–"
        by_id("speech-time").textContent = f"{result['seconds']:.2f}"
        by_id("speech-duration").textContent = f"{result['duration']:.2f}"
        by_id("speech-rtf").textContent = f"{result['rtf']:.3f}"
        by_id("speech-backend").textContent = result["device"]
        card.follow_device(reply)
        end("done", result.get("notice"))
        downloads(True)
        play(audio)

    async def from_file(file, name):
        """A chosen, dropped or fetched file (a Blob) and its name, once begin() has run."""
        try:
            audio = await capture().readFile(file, name)
        except Exception as e:
            end("error", message(e))
            return
        await transcribe(audio)

    def take_file(file, name):
        if begin(name):
            _run(from_file(file, name))

    async def record(event=None):
        if state["busy"] or state["recorder"] is not None:
            return
        card.error(None)
        by_id("speech-record").disabled = True
        by_id("speech-input").disabled = True
        clear_result()
        state["latencies"] = []
        by_id("speech-latency").textContent = "–"
        proxy = create_proxy(on_events)
        try:
            await load()
            wanted = options()
            wanted["word_timestamps"] = bool(by_id("speech-words").checked)
            state["recorder"] = await capture().dictate(client, by_id("speech-level"), by_id("speech-recorded"),
                                                        json.dumps(wanted), proxy)
        except Exception as e:
            if hasattr(proxy, "destroy"):
                proxy.destroy()
            by_id("speech-record").disabled = by_id("speech-input").disabled = False
            card.error(message(e))
            return
        state["events"] = proxy
        by_id("speech-source").textContent = "recording…"
        by_id("speech-record").classList.add("recording")
        by_id("speech-stop-recording").disabled = False
        segments.classList.add("streaming")

    def on_events(reply, recorded):
        """The worker's dictation events: an utterance's draft text (and its delay: the seconds
        recorded since its speech ended), or a pack's final text replacing its drafts."""
        for event in to_py(reply)["events"]:
            if event["type"] == "utterance":
                latency = float(recorded) - event["speech_end"]
                state["latencies"].append(latency)
                for segment in event["segments"]:
                    li = add_segment(segment, event["pack"], draft=True)
                    li.dataset.latency = f"{latency:.3f}"
                    li.dataset.seconds = f"{event['seconds']:.3f}"       # of it, the transcription's
                ordered = sorted(state["latencies"])
                by_id("speech-latency").textContent = f"{ordered[len(ordered) // 2]:.2f}"
            else:
                for li in items(segments.querySelectorAll(f"li.draft[data-pack='{event['pack']}']")):
                    li.remove()
                for segment in event["segments"]:
                    add_segment(segment, event["pack"])

    async def finish_dictation(dictation):
        try:
            done = await dictation.finish()
            reply = to_py(done.reply)
        except Exception as e:
            end("error", message(e))
            return
        finally:
            proxy = state.pop("events", None)
            if proxy is not None and hasattr(proxy, "destroy"):
                proxy.destroy()
        seconds = float(dictation.seconds)
        segments.innerHTML = ""                      # the final transcript, as the worker kept it
        for segment in reply["segments"]:
            add_segment(segment)
        segments.setAttribute("data-text", reply["text"])
        by_id("speech-source").textContent = f"the recording ({seconds:.1f} s)"
        by_id("speech-language").textContent = reply.get("language") or "–"
        by_id("speech-duration").textContent = f"{seconds:.2f}"
        end("done")
        downloads(True)
        play(done.audio)

    def stop_recording(event=None):
        dictation = state["recorder"]
        if dictation is None:
            return
        state["recorder"] = None
        by_id("speech-stop-recording").disabled = True
        by_id("speech-record").classList.remove("recording")
        state["stem"] = "recording"
        segments.dataset.state = "working"
        set_busy(True)
        _run(finish_dictation(dictation))

    async def cancel(event=None):
        if state["busy"]:
            state["cancelled"] = True
            await client.python("transcribe_stop")

    def show_models():
        """A model choice when the site serves more than one model for speech."""
        info = client.snapshot().info
        models = [m for m in to_py(info.registry) if card.task in m["tasks"]] if info else []
        state["models"] = [m["name"] for m in models]
        state["titles"] = {m["name"]: m["title"].split(" · ", 1)[-1] for m in models}
        select = by_id("speech-model")
        select.innerHTML = ""
        for m in models:
            option = document.createElement("option")
            option.value = m["name"]
            option.textContent = state["titles"][m["name"]]
            select.appendChild(option)
        by_id("speech-model-choice").hidden = len(models) < 2
        if state["model"] is not None:
            model_changed(state["model"])
        elif models:
            card.section.querySelector("[data-model]").textContent = state["titles"][models[0]["name"]]

    def on_model(event):
        if state["busy"]:
            return

        async def switch():
            try:
                await card.load()
                await use_model(by_id("speech-model").value)
                card.error(None)
            except Exception as e:
                card.error("The model could not be loaded: " + message(e))
            finally:
                set_busy(False)
        set_busy(True)                               # at once: the select is busy from the change on
        asyncio.create_task(switch())

    async def from_sample(file, title):
        try:
            response = await js.fetch(f"samples/speech/{file}")
            if not response.ok:
                raise ValueError(f"{file}: HTTP {response.status}")
            blob = await response.blob()
        except Exception as e:
            end("error", message(e))
            return
        await from_file(blob, title)

    def on_sample(file, title):
        if begin(title):
            state["stem"] = file.rsplit(".", 1)[0]
            _run(from_sample(file, title))

    def on_open():
        if not state["samples_shown"]:
            state["samples_shown"] = True
            _run(sample_buttons("samples/speech/samples.json", "speech-samples", "speech-sample", on_sample))

    def _run(coroutine):
        asyncio.create_task(coroutine)

    take_files("speech-input", "speech-drop", take_file)
    by_id("speech-record").addEventListener("click", create_proxy(lambda e: _run(record())))
    by_id("speech-stop-recording").addEventListener("click", create_proxy(stop_recording))
    by_id("speech-cancel").addEventListener("click", create_proxy(lambda e: _run(cancel())))
    by_id("speech-model").addEventListener("change", create_proxy(on_model))
    for button in items(document.querySelectorAll(".speech-downloads button")):
        button.addEventListener("click", create_proxy(lambda e: _run(download(e))))
    card.on("ready", show_models)
    card.on("open", on_open)
