"""Streaming decoding: text out as generated ids come in, one at a time.

    stream = tok.decode_stream()
    for i in generated_ids:
        print(stream.step(i), end="")       # "" while a character is still incomplete
    print(stream.flush())                   # what is left when generation stops

A byte-level token can end inside a multi-byte character (an emoji is often two or three
tokens); decoding it alone would show U+FFFD. The algorithm is the reference's DecodeStream
(`tokenizers`, tokenizer/mod.rs step_decode_stream): decode the ids since the last text given out
together with the ones before them (their decoded text, the prefix, is known), and give out what
follows the prefix only when the result is longer and does not end in U+FFFD; then keep only the
latest ids as the next prefix. Keeping a little context is what makes it right for decoders
whose output depends on the previous token too (WordPiece's spaces, Metaspace's leading space).
So the pieces given out join to `tok.decode(all ids)`, and no piece ends with a replacement
character that later ids complete. A U+FFFD that stays (an invalid byte sequence, or a
generation that stops inside a character) comes out when later text follows, or from flush().

One departure: SentencePiece's byte fallback decodes a run of byte tokens all or nothing (one
invalid byte turns the whole run into U+FFFDs, decoders.py), so a stray byte after a complete
character can rewrite text already given out. The reference's stream raises there; this one
gives out the held-back ids decoded on their own and goes on, so a generation never stops on
it (the pieces then no longer join to `tok.decode(all ids)`, which has the U+FFFDs).
"""
from __future__ import annotations


class StreamDecoder:
    """skip_special_tokens as in decode; False by default, as the reference's DecodeStream and
    transformers' decode (Tokenizer.decode's default, like the `tokenizers` package's, is True)."""

    def __init__(self, tokenizer, skip_special_tokens: bool = False):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        # the window: ids[:prefix_index] were given out last time and decode to prefix; the ids
        # after them are held back
        self._ids: list[int] = []
        self._prefix = ""
        self._prefix_index = 0

    def step(self, token_id) -> str:
        """Add one id (or a list or array of ids); the text they complete ("" if none yet)."""
        if isinstance(token_id, (list, tuple)) or getattr(token_id, "ndim", 0):
            self._ids += list(token_id)
        else:
            self._ids.append(token_id)
        text = self.tokenizer.decode(self._ids, self.skip_special_tokens)
        if len(text) <= len(self._prefix) or text.endswith("\ufffd"):
            return ""
        if text.startswith(self._prefix):
            new_text = text[len(self._prefix):]
        else:                               # the decoder rewrote what was given out: the rest on its own
            new_text = self.tokenizer.decode(self._ids[self._prefix_index:], self.skip_special_tokens)
        next_index = len(self._ids) - self._prefix_index
        self._ids = self._ids[self._prefix_index:]
        self._prefix = self.tokenizer.decode(self._ids, self.skip_special_tokens)
        self._prefix_index = next_index
        return new_text

    def flush(self) -> str:
        """The text still held back (incomplete characters as U+FFFD, as decode gives them); the
        stream then starts afresh."""
        text = self.tokenizer.decode(self._ids, self.skip_special_tokens) if self._ids else ""
        if text.startswith(self._prefix):
            rest = text[len(self._prefix):]
        else:
            rest = self.tokenizer.decode(self._ids[self._prefix_index:], self.skip_special_tokens)
        self._ids, self._prefix, self._prefix_index = [], "", 0
        return rest

