"""What the page's UI code (app.py, cards/*.py) needs between MicroPython and JavaScript.

The page runs on PyScript's MicroPython (`type="mpy"`), not on a second Pyodide: the engine
has its own full CPython in the worker, and the UI only moves values between the DOM and the
worker. MicroPython's FFI differs from Pyodide's, so the few conversions live here, written
once: JSON carries values across (no `to_py`, no `dict_converter`), and a JS error caught in
Python (`JsException(jsobj, name, message)`) is shown by its message.
"""
import json

import js


def to_js(value):
    """A JSON-able Python value as a plain JS value (objects, arrays, numbers, strings)."""
    return js.JSON.parse(json.dumps(value))


def to_py(value):
    """A JS value made of plain objects, arrays, numbers and strings, as Python."""
    return json.loads(js.JSON.stringify(value))


def items(collection):
    """The items of a DOM collection (NodeList, HTMLOptionsCollection) as a list."""
    return [collection.item(i) for i in range(collection.length)]


def without_prefix(text, *prefixes):
    """`text` with each of `prefixes` removed in turn where it starts with it."""
    for prefix in prefixes:
        if text.startswith(prefix):
            text = text[len(prefix):]
    return text


def error_text(error):
    """What an exception says: a worker's error (a rejected JS promise) by its message; a Python
    one by str(). (Pyodide's str() of a JS error began with "Error: "; MicroPython gives the parts.)"""
    args = getattr(error, "args", ())
    if type(error).__name__ == "JsException" and len(args) == 3:
        return str(args[2])
    return without_prefix(str(error), "Error: ")


def by_id(name):
    """The page's element with this id (None if there is none)."""
    return js.document.getElementById(name)


def take_files(input_id, zone_id, take):
    """take(file, name) with the file chosen in the file input `input_id` or dropped on the
    element `zone_id`, which has the class "over" while a drag hovers it."""
    from pyscript.ffi import create_proxy
    zone = by_id(zone_id)

    def first(files):
        if files.length:
            take(files.item(0), files.item(0).name)

    def on_file(event):
        first(event.target.files)
        event.target.value = ""                      # choosing the same file again fires change

    def on_drop(event):
        event.preventDefault()
        zone.classList.remove("over")
        first(event.dataTransfer.files)

    def on_drag(event):
        event.preventDefault()
        zone.classList.toggle("over", event.type == "dragover")

    by_id(input_id).addEventListener("change", create_proxy(on_file))
    for kind in ("dragover", "dragleave"):
        zone.addEventListener(kind, create_proxy(on_drag))
    zone.addEventListener("drop", create_proxy(on_drop))


async def sample_buttons(index_url, box_id, testid, take):
    """The site's samples (`index_url`: a samples.json of [{"file", "title", "credit"}]) as
    buttons in the element `box_id` that call take(file, title); nothing when the site was built
    without them."""
    from pyscript.ffi import create_proxy
    try:
        samples = to_py(await (await js.fetch(index_url)).json())
    except Exception:
        return
    box = by_id(box_id)
    box.textContent = "Try a sample: "
    for sample in samples:
        button = js.document.createElement("button")
        button.type = "button"
        button.dataset.sample = sample["file"]
        button.setAttribute("data-testid", testid)
        button.title = sample.get("credit", "")
        button.textContent = sample["title"]
        button.addEventListener("click", create_proxy(
            lambda e, file=sample["file"], title=sample["title"]: take(file, title)))
        box.appendChild(button)
