"""Texts to tokenize: what LLM tokenizers meet and where they part ways (corpus(): over 300,
the same on every call and in every Python: handwritten ones, then ones built from a seeded
random generator). Plain data and the standard library only: tests/web sends this module into
Pyodide as it is.

    from tests.text.corpus import corpus
    for text in corpus(): ...
"""
from __future__ import annotations

import random

PYTHON = '''def tokenize(text: str) -> list[int]:
    """Tabs, then spaces."""
\tif not text:
\t\treturn []
    for i, c in enumerate(text):   # four spaces
        yield {"i": i, 'c': c} if c != '\\n' else None


class A(B):\r\n    x = [1, 22, 333, 4444, 55555]  # CRLF
'''

JAVASCRIPT = '''const fetchAll = async (urls) => {
  const out = await Promise.all(urls.map((u) => fetch(u).then((r) => r.json())));
  return out.filter(Boolean).reduce((a, b) => ({ ...a, ...b }), {});
};
export default fetchAll; // ES module
'''

C_SOURCE = '''#include <stdio.h>
int main(int argc, char **argv) {
\tfor (int i = 0; i < argc; ++i) printf("%s\\n", argv[i]);
\treturn argc > 1 ? 0 : -1;
}
'''

SHELL = '''#!/usr/bin/env bash
set -euo pipefail
for f in *.gguf; do sha256sum "$f" | cut -d' ' -f1 >> sums.txt; done
echo "done: $(wc -l < sums.txt) files" 2>&1 | tee -a log
'''

JSON = '''{"model": "gemma-3-270m", "vocab_size": 262144, "rope_theta": 1e6,
 "layers": [{"attn": null, "mlp": true}], "tags": ["a", "b\\u00e9", "\\ud83d\\ude00"], "x": -0.5e-3}
'''

HANDWRITTEN = [
    "",
    "Hello, world!",
    "Hello world",
    " Hello world",
    "  Hello  world  ",
    "Hello\nworld",
    "The quick brown fox jumps over the lazy dog.",
    "I can't believe it's not butter — don't you think? We're sure they've gone; I'm, you'll, he'd.",
    "IT'S DON'T WE'RE THEY'VE I'M YOU'LL HE'D",
    "it'ſ a long s, it'ſt, 'K a Kelvin sign, 'Ⅽ, it’s a curly apostrophe",
    PYTHON, JAVASCRIPT, C_SOURCE, SHELL, JSON,
    "if (a && b) { c[i] = d->e; } else { return x ** 2 // 3 }\n\n\n    ",
    "SELECT * FROM t WHERE id IN (1,2,3);  -- comment\n<div class=\"x\">&amp;</div>",
    "<table><tr><td>cell</td></tr></table> <b>bold</b> <s>struck</s> </s>",
    # languages
    "Le cœur a ses raisons que la raison ne connaît point. Où est l'hôtel ? Ça va, garçon !",
    "Größenwahn: Die Straße führt über die Brücke. ÄÖÜ äöü ß ẞ",
    "中文：你好，世界！北京欢迎你。繁體中文：臺灣、電腦。",
    "日本語：こんにちは世界！カタカナ、ひらがな、漢字。ｶﾀｶﾅ ＡＢＣ１２３",
    "한국어: 안녕하세요, 세계! 조선글 ㄱㄴㄷ",
    "العربية: مرحبا بالعالم! السلام عليكم. ٠١٢٣٤٥٦٧٨٩ مُحَمَّد",
    "עברית: שלום עולם! בְּרֵאשִׁית בָּרָא",
    "हिन्दी: नमस्ते दुनिया! क्षत्रिय ज्ञान ०१२३४५६७८९",
    "ภาษาไทย: สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ ๑๒๓",
    "Русский язык: Привет, мир! Ёлка, йод, ЪЬ. Українська: Ї ї Є є Ґ ґ",
    "Ελληνικά: Καλημέρα κόσμε! ΟΔΟΣ οδός",
    "Tiếng Việt: Xin chào thế giới! Đường phố Hà Nội",
    "ქართული ენა, Հայերեն, አማርኛ, ᏣᎳᎩ, ᠮᠣᠩᠭᠣᠯ",
    # accents composed and decomposed
    "café naïve résumé Åström", "cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030astro\u0308m",
    "e\u0301\u0301\u0301 a\u0300\u0301\u0302\u0303\u0304 Z\u0335\u0321\u034d\u0353a\u0336\u031b\u0317l",
    # emoji: ZWJ sequences, flags, skin tones, keycaps, variation selectors
    "I love it 😍🔥💯 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵🇺🇸 🤷🏽‍♀️ ❤️ ☺︎ 1️⃣ #️⃣ 🥲🫠",
    "👩🏾‍💻👩🏾‍💻👩🏾‍💻 x🧑‍🤝‍🧑y 🏴󠁧󠁢󠁳󠁣󠁴󠁿 👋🏻👋🏼👋🏽👋🏾👋🏿",
    "😀" * 40,
    # whitespace
    " ", "  ", "   ", "\n", "\n\n", "\n\n\n\n\n\n", "\t", "\t\t\t", "\r\n", "\r\n\r\n", " \n ", "\n \n",
    "   leading and trailing   ", "a  b   c    d\t\te\n\nf \n g", "x" + " " * 40 + "y", "line\r\nline\rline\n",
    "x\u00a0y\u3000z\u2028w\u2029v\u2003u\u202ft\u1680s\u0085r\x0b\x0cq",
    "\t\tindented\n\t\t\tmore\n" + " " * 33 + "deep",
    # numbers
    "0", "7", "42", "123", "1234", "12345", "123456", "1234567890", "12345678901234567890",
    "3.14159 2,718 1e-10 0xFF 1_000_000 -0 +1", "½ ² ³ ① Ⅻ ٣ ๓ 〇 ⁴⁵ ₂₃ ¼",
    "In 2024, 1234567890 people; call +1 (555) 123-4567 at 10:30pm.  42  apples, 7\t8\n9",
    "v1.2.3-rc.4+build.5 and 2024-12-31T23:59:59Z",
    # punctuation
    "!!!???...,,,;;;:::", "—–-‐‑‒―", "«»‹›“”„‘’‚", "¿¡¡Hola!!", "...", "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!",
    "(((nested))) [[[list]]] {{{dict}}} <<<angle>>>", "a.b.c.d/e\\f|g~h`i^j", "@#$%^&*()_+=-",
    # URLs and paths
    "https://example.com/path/to/page?query=1&x=%20y#frag",
    "Visit http://a.b.co.uk:8080/~user/index.html or mailto:someone@example.org.",
    "C:\\Users\\name\\Documents\\file.txt /usr/local/bin/python3",
    # special tokens written in text, and near misses
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "a<|endoftext|>b <|im_end|> c<|im_start|><|im_start|>d",
    "<|im_start|x <|im_end |> <|endoftext|",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<bos><eos><pad><unk><mask> x<bos>y", "<bos>", " <bos> ", "<start_of_image> <end_of_image>",
    "<s>[INST] hi [/INST]</s>", "<|user|>\nhello<|end|>\n<|assistant|>",
    "<tool_call>{\"name\": \"f\"}</tool_call>", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
    "<unused0><unused99>[multimodal]", "<0x41><0x0A> <0xE2><0x82><0xAC>", "<0x41",
    # controls and odd code points
    "zero\u200bwidth\u200djoiner\ufeffbom\u0000nul\x07bell\ufffdreplacement\u200c\u2060",
    "\x00", "\x01\x02\x03\x1b[31mred\x1b[0m", "\x7f\x80\x9f", "\ufffd\ufffd",
    "\ue000private\U000f0000use \U0001d400\U0001d7ff \U00020000\U0002a6d6",
    "\U0001f9d1\u200d\U0001f4bb \U000e0041\U000e0042",
    # long words
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "pneumonoultramicroscopicsilicovolcanoconiosis" * 3,
    "a" * 300, "ab" * 150 + " " * 200 + "!" * 100,
    "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft",
    "supercalifragilisticexpialidocious_and_another_identifier_in_snake_case_42",
    "camelCaseIdentifierWithHTTPServerAndXMLParser",
]

# pieces the random texts are made of: letters, digits, other numbers, spaces of all kinds,
# punctuation, contractions, multi-byte characters, marks, special tokens, byte-token spellings
PIECES = (list("abcXYZ019") + [
    "'s", "'T", "'ll", "'ſ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "½", "٣", "²",
    "é", "e\u0301", "ß", "中", "日本", "ｶ", "한", "ก", "\u0e31", "क्ष", "😀", "👍🏽", "🇫🇷", "\u200d",
    "\u0301", "!", "...", "—", "<|im_end|>", "<|im_start", "<start_of_turn>", "<bos>", "<eos", "Ġ", "Ċ",
    "▁", "▁▁", "<0x41>", "\x00", "\x85", "\ufffd", "\U0001d400", "\U000e0041", "http://", ".com", "🫠",
])


def random_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 30))) for _ in range(count)]


def generated() -> list[str]:
    """Texts made by rule: numbers of every length, runs of each kind of whitespace, mixed
    scripts, code-like lines."""
    out = []
    out += ["9" * n for n in range(1, 25)]
    out += [" ".join(str(10 ** n + n) for n in range(k)) for k in (3, 8, 15)]
    out += [c * n for c in (" ", "\n", "\t") for n in (1, 2, 3, 5, 8, 17, 31, 32, 33)]
    out += [f"x{c * n}y" for c in (" ", "\n", "\t", "\u3000") for n in (1, 2, 4)]
    out += [f"{a} {b}" for a, b in (("hello", "мир"), ("世界", "world"), ("😀", "smile"), ("é", "e"))]
    out += [f"{kw} {name}({arg}):" for kw in ("def", "class") for name in ("f", "Foo") for arg in ("", "x, y=2")]
    return out


def corpus() -> list[str]:
    """The handwritten texts, the generated ones, then 200 random ones."""
    return HANDWRITTEN + generated() + random_texts(200, seed=262144)


# --- comparing a tokenizer with transformers' on texts ---------------------------------------------
FIELDS = ("ids", "tokens", "offsets", "word_ids", "type_ids", "attention_mask", "special_tokens_mask")


def failures(rows: list, what: str) -> str:
    """The failing (text, ours, theirs) rows, for an assertion message."""
    shown = "\n".join(f"  {text!r:.120}: ours {ours!r:.200}, transformers {theirs!r:.200}"
                      for text, ours, theirs in rows[:12])
    return f"{len(rows)} texts whose {what} differ:\n{shown}"


def id_mismatches(ours, theirs, texts) -> list:
    """(text, our ids, transformers' ids) where they differ, with and without special tokens."""
    rows = []
    for text in texts:
        for add in (True, False):
            mine, expected = ours.encode(text, add_special_tokens=add).ids, theirs(text, add_special_tokens=add)["input_ids"]
            if mine != expected:
                rows.append((f"{text} (add_special_tokens={add})", mine, expected))
    return rows


def encoding_mismatches(ours, backend, text) -> list:
    """[(text and the FIELDS that differ, ours, the backend's first differing field)], or []."""
    mine, expected = ours.encode(text), backend.encode(text)
    wrong = [field for field in FIELDS if getattr(mine, field) != getattr(expected, field)]
    return [(f"{text} ({', '.join(wrong)})", getattr(mine, wrong[0]), getattr(expected, wrong[0]))] if wrong else []
