"""Write engine/text/unicode_tables.py: the character classes of the `tokenizers` crate's BERT
normalizer and pre-tokenizer and of its regex engine (\\p{L}, \\p{N}, \\s in the byte-level BPE
split patterns; \\p{M} and the letter subclasses \\p{Lu} ... in newer ones), read off the reference
itself, one code point at a time.

    .venv/bin/python tests/text/make_unicode_tables.py        # ~60 s; needs the `tokenizers` package

Why not `unicodedata`: the crate takes categories from its `unicode_categories` dependency, whose
tables are Unicode 8.0, while Python 3.11 carries Unicode 14 and Pyodide's 3.12 Unicode 15. Python
would call ~100 newer characters punctuation, ~380 newer ones non-spacing marks and 13 newer ones
format controls that the reference does not. Its regexes (Oniguruma, through the `onig` crate)
carry a newer Unicode than Python 3.11: their \\p{L} holds ~9,000 letters (CJK extensions, new
scripts) that Python's unicodedata does not know. Tables read off the reference agree with it on
every code point under every Python (tests/text/test_unicode_tables.py checks them all).
"""
from __future__ import annotations

import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parents[2] / "engine" / "text" / "unicode_tables.py"


def _ranges(code_points: list[int]) -> str:
    spans: list[list[int]] = []
    for c in code_points:
        if spans and spans[-1][1] == c - 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    words = [f"{a:04X}" if a == b else f"{a:04X}-{b:04X}" for a, b in spans]
    lines, line = [], ""
    for w in words:
        if len(line) + len(w) + 1 > 92:
            lines.append(line)
            line = ""
        line = f"{line} {w}" if line else w
    lines.append(line)
    return "\n".join(lines)


# the regex classes the split patterns of newer vocabularies use (Qwen 3.5's, Tekken's, GPT-4o's)
REGEX_CATEGORIES = {"MARK": "M", "UPPERCASE_LETTER": "Lu", "LOWERCASE_LETTER": "Ll", "TITLECASE_LETTER": "Lt",
                    "MODIFIER_LETTER": "Lm", "OTHER_LETTER": "Lo"}


def regex_class(pre_tokenizers, regex, category: str, every: list[int]) -> list[int]:
    """The code points the reference's regex \\p{category} matches: a Split that removes them
    leaves the others, with their (character) offsets."""
    split = pre_tokenizers.Split(regex(f"\\p{{{category}}}"), behavior="removed")
    members, chunk = [], 1 << 16
    for start in range(0, len(every), chunk):
        points = every[start:start + chunk]
        kept = bytearray(len(points))
        for _, (a, b) in split.pre_tokenize_str("".join(map(chr, points))):
            kept[a:b] = b"\x01" * (b - a)
        members += [c for c, k in zip(points, kept) if not k]
    return members


def main() -> None:
    import tokenizers
    from tokenizers import normalizers, pre_tokenizers

    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                       strip_accents=False, lowercase=False)
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                       strip_accents=True, lowercase=False)
    cjk = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True,
                                     strip_accents=False, lowercase=False)
    split = pre_tokenizers.BertPreTokenizer()
    # GPT-2's split regex: 's|'t|...| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    digits = pre_tokenizers.Digits(individual_digits=True)
    tables: dict[str, list[int]] = {k: [] for k in
                                    ("CONTROL", "SPACE", "SPLIT_SPACE", "PUNCTUATION", "NONSPACING_MARK", "CJK",
                                     "LETTER", "NUMBER", "REGEX_SPACE", "NUMERIC")}
    every = [i for i in range(0x110000) if not 0xD800 <= i < 0xE000]
    for name, category in REGEX_CATEGORIES.items():
        tables[name] = regex_class(pre_tokenizers, tokenizers.Regex, category, every)
    for i in range(0x110000):
        if 0xD800 <= i < 0xE000:          # surrogates: no Python str can hold one alone
            continue
        c = chr(i)
        cleaned = clean.normalize_str(c)
        if cleaned == "":
            tables["CONTROL"].append(i)
        elif cleaned == " ":
            tables["SPACE"].append(i)
        words = [w for w, _ in split.pre_tokenize_str(f"a{c}b")]
        if words == ["a", c, "b"]:
            tables["PUNCTUATION"].append(i)
        elif words == ["a", "b"]:
            tables["SPLIT_SPACE"].append(i)
        if strip.normalize_str(c) == "":
            tables["NONSPACING_MARK"].append(i)
        if cjk.normalize_str(c) == f" {c} ":
            tables["CJK"].append(i)
        if len(byte_level.pre_tokenize_str(f"a{c}")) == 1:          # " ?\p{L}+" took both
            tables["LETTER"].append(i)
        elif len(byte_level.pre_tokenize_str(f"1{c}")) == 1:        # " ?\p{N}+" took both
            tables["NUMBER"].append(i)
        elif len(byte_level.pre_tokenize_str(f"!{c}")) == 2:        # not in " ?[^\s\p{L}\p{N}]+"
            tables["REGEX_SPACE"].append(i)
        if len(digits.pre_tokenize_str(f"a{c}a")) == 3:
            tables["NUMERIC"].append(i)

    doc = {
        "CONTROL": "dropped by clean_text: \\0, U+FFFD and the crate's Cc/Cf/Co except \\t \\n \\r",
        "SPACE": "turned into ' ' by clean_text (\\t \\n \\r and White_Space, less what CONTROL drops)",
        "SPLIT_SPACE": "what BertPreTokenizer splits on and drops (Rust char::is_whitespace: White_Space)",
        "PUNCTUATION": "what BertPreTokenizer isolates: ASCII punctuation and the crate's P* (Unicode 8.0)",
        "NONSPACING_MARK": "dropped by strip_accents after NFD: the crate's Mn (Unicode 8.0)",
        "CJK": "spaced by handle_chinese_chars: the CJK ideograph blocks",
        "LETTER": "the reference's regex \\p{L} (Oniguruma's tables, a newer Unicode than Python 3.11's)",
        "NUMBER": "the reference's regex \\p{N}",
        "REGEX_SPACE": "the reference's regex \\s (White_Space)",
        "NUMERIC": "what the Digits pre-tokenizer splits off (Rust char::is_numeric: Nd, Nl, No)",
    }
    doc.update((name, f"the reference's regex \\p{{{category}}}") for name, category in REGEX_CATEGORIES.items())
    out = [f'"""Character classes of the BERT normalizer, the pre-tokenizers and the split regexes, as the',
           "`tokenizers` crate has them.",
           "",
           f"Generated by tests/text/make_unicode_tables.py from tokenizers {tokenizers.__version__}; do not edit.",
           "Each table is code point ranges (hex, inclusive). See that script for why these are not read",
           'from `unicodedata`."""', ""]
    for name, points in tables.items():
        out += [f"# {doc[name]}", f'{name} = """', _ranges(points), '"""', ""]
    TARGET.write_text("\n".join(out))
    print(f"wrote {TARGET} ({', '.join(f'{k}: {len(v)} code points' for k, v in tables.items())})", file=sys.stderr)


if __name__ == "__main__":
    main()
