"""The sentences card: sentences ranked by how close their meaning is to a query, and the
similarity of every pair as a heatmap.

After the first ranking, edits re-rank once typing pauses; never two requests at once (an edit
during a ranking is ranked when that one ends).
"""
import asyncio
import html

import js
from bridge import by_id, error_text, to_js, to_py, without_prefix
from pyscript.ffi import create_proxy

MAX_SENTENCES = 64                   # one request; more would make a heatmap nobody can read
RERANK_MS = 250                      # after the first ranking, edits re-rank once typing pauses
DENSE = 12                           # above this many sentences the heatmap cells carry no numbers


def read_sentences():
    """(query, [(line index, sentence), ...]) from the card; ValueError says what to fix."""
    query = by_id("sentences-query").value.strip()
    lines = by_id("sentences-list").value.split("\n")
    sentences = [(i, line.strip()) for i, line in enumerate(lines) if line.strip()]    # blank lines: ignored
    if not query:
        raise ValueError("Type a query: the sentences are ranked by how close they are to it.")
    if not sentences:
        raise ValueError("Add at least one sentence to rank, one per line.")
    if len(sentences) > MAX_SENTENCES:
        raise ValueError(f"{len(sentences)} sentences is too many: at most {MAX_SENTENCES} are compared at once. "
                         f"Remove {len(sentences) - MAX_SENTENCES} of them.")
    return query, sentences


def clear_sentences():
    by_id("sentences-ranking").innerHTML = ""
    by_id("sentences-heatmap").innerHTML = ""
    by_id("sentences-heatmap-box").hidden = True
    by_id("sentences-truncated").hidden = True
    by_id("sentences-time-ms").textContent = "–"


def heat(value):
    """A cell's colours: blue for similar, white for unrelated, red for opposite."""
    v = max(-1.0, min(1.0, value))
    light = 97 - 52 * abs(v)
    return f"background:hsl({218 if v >= 0 else 4} 70% {light:.0f}%);color:{'#fff' if light < 62 else 'inherit'}"


def show_ranking(sentences, result):
    """The sentences ordered by similarity to the query, their heatmap, timing and notes."""
    similarity = to_py(result.similarity)          # (1 + N, 1 + N): the query, then the sentences
    lines = [line for line, _ in sentences]
    texts = [html.escape(text, quote=True) for _, text in sentences]
    scores = similarity[0][1:]
    order = sorted(range(len(sentences)), key=lambda k: -scores[k])
    by_id("sentences-ranking").innerHTML = "".join(
        f'<li data-index="{lines[k]}" data-score="{scores[k]:.6f}" class="{"top" if place == 0 else ""}">'
        f'<span class="num" title="line {lines[k] + 1}">{lines[k] + 1}</span><span class="text" title="{texts[k]}">{texts[k]}</span>'
        f'<span class="bar" style="width:{max(scores[k], 0.0) * 100:.1f}%"></span>'
        f'<span class="pct">{scores[k]:.3f}</span></li>' for place, k in enumerate(order))
    show_heatmap([row[1:] for row in similarity[1:]], lines, texts)
    by_id("sentences-time-ms").textContent = f"{result.ms:.0f}"
    by_id("sentences-backend").textContent = result.device
    show_sentence_notes(result, lines)


def show_heatmap(pairs, lines, texts):
    """(N, N) similarities as a table; rows and columns named by line number (the text in a tooltip)."""
    n = len(pairs)

    def cell(i, j):
        v = pairs[i][j]
        shown = f"{round(v, 2) + 0.0:.2f}" if n <= DENSE else ""         # + 0.0: never "-0.00"
        return (f'<td data-row="{i}" data-col="{j}" data-value="{v:.6f}" style="{heat(v)}" '
                f'title="{lines[i] + 1} · {lines[j] + 1}: {v:.3f}&#10;{texts[i]}&#10;{texts[j]}">{shown}</td>')
    header = "".join(f'<th scope="col" title="{texts[j]}">{lines[j] + 1}</th>' for j in range(n))
    body = "".join(f'<tr><th scope="row" title="{texts[i]}">{lines[i] + 1}</th>'
                   f'{"".join(cell(i, j) for j in range(n))}</tr>' for i in range(n))
    table = by_id("sentences-heatmap")
    table.innerHTML = f"<thead><tr><th></th>{header}</tr></thead><tbody>{body}</tbody>"
    table.classList.toggle("dense", n > DENSE)
    by_id("sentences-heatmap-box").hidden = False


def show_sentence_notes(result, lines):
    """Which texts were cut to the model's length, and how much of the word-embedding table is here."""
    cut = [f"sentence {lines[k - 1] + 1}" if k else "the query" for k in to_py(result.truncated)]
    note = by_id("sentences-truncated")
    note.hidden = not cut
    if cut:
        names = cut[0] if len(cut) == 1 else ", ".join(cut[:-1]) + " and " + cut[-1]
        note.textContent = (f"{names} {'is' if len(cut) == 1 else 'are'} longer than {result.max_length} tokens; "
                            f"only {'its' if len(cut) == 1 else 'their'} start was used")
    tables = to_py(result.rows).values()
    fetched, total = sum(t["fetched_rows"] for t in tables), sum(t["rows"] for t in tables)
    by_id("sentences-rows").textContent = f"{fetched:,} of {total:,} word vectors downloaded" if total else ""


def start(card):
    client = card.client
    ranking = {"timer": None, "running": False, "dirty": False, "ranked": False}

    def schedule_ranking(delay=RERANK_MS):
        """Rank after `delay` ms of quiet (each edit restarts the wait); never two requests at once:
        an edit during a ranking is ranked when that one ends."""
        ranking["dirty"] = True
        if ranking["timer"] is not None:
            js.clearTimeout(ranking["timer"])
            ranking["timer"] = None
        if not ranking["running"]:
            ranking["timer"] = js.setTimeout(start_ranking_proxy, delay)

    def start_ranking():
        ranking["timer"] = None
        asyncio.create_task(rank())

    async def rank():
        ranking["running"], ranking["dirty"] = True, False
        try:
            await rank_once()
        finally:
            ranking["running"] = False
        if ranking["dirty"]:
            schedule_ranking()

    async def rank_once():
        if not card.ready:
            card.error("the engine is still starting; try again in a moment")
            return
        try:
            query, sentences = read_sentences()
        except ValueError as e:
            clear_sentences()
            card.error(str(e))
            return
        card.error(None)
        by_id("sentences-time-ms").textContent = "…"
        doing = "The model could not be loaded: "
        try:
            await card.load()                            # loading since the card was opened
            doing = ""
            result = await client.python("embed_texts", to_js([query] + [text for _, text in sentences]))
        except Exception as e:                          # the worker's errors arrive as JS Errors
            clear_sentences()
            card.error(doing + without_prefix(error_text(e), "engine.errors."))
            return
        ranking["ranked"] = True
        card.follow_device(result)
        card.storage_note(result)
        show_ranking(sentences, result)

    def on_query_key(event):
        if event.key == "Enter" and not event.isComposing:      # not the Enter that ends an IME composition
            event.preventDefault()
            schedule_ranking(0)

    def on_sentences_edit(event):
        if ranking["ranked"] or ranking["running"]:             # an edit during the first ranking counts too
            schedule_ranking()

    def on_backend():
        if ranking["ranked"]:
            schedule_ranking(0)

    start_ranking_proxy = create_proxy(start_ranking)
    by_id("sentences-rank").addEventListener("click", create_proxy(lambda e: schedule_ranking(0)))
    by_id("sentences-query").addEventListener("keydown", create_proxy(on_query_key))
    for box in ("sentences-query", "sentences-list"):
        by_id(box).addEventListener("input", create_proxy(on_sentences_edit))
    card.on("backend", on_backend)
