"""engine/text/unicode_tables.py against the reference, on every code point: what BertNormalizer
drops, turns into spaces, spaces around and strips, and what BertPreTokenizer splits on."""
import pytest

from engine.text import normalizers, patterns, pre_tokenizers

# every code point a Python str can hold, each between two "a"s
EVERY = "a" + "a".join(chr(i) for i in range(0x110000) if not 0xD800 <= i < 0xE000) + "a"


def differences(ours, theirs) -> list[str]:
    """The code points where two per-character functions disagree (only run to explain a failure)."""
    out = []
    for c in EVERY[1::2]:
        if ours(c) != theirs(c):
            out.append(f"U+{ord(c):04X}: ours {ours(c)!r}, reference {theirs(c)!r}")
    return out[:20]


@pytest.fixture(scope="module")
def bert_normalizer(reference):
    def make(**flags):
        options = dict(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=False)
        return reference.normalizers.BertNormalizer(**{**options, **flags})
    return make


def test_clean_text(bert_normalizer):
    theirs = bert_normalizer(clean_text=True).normalize_str
    ours = lambda s: normalizers.clean_text(s, 0)[0]      # noqa: E731
    assert ours(EVERY) == theirs(EVERY), differences(ours, theirs)


def test_chinese_characters(bert_normalizer):
    theirs = bert_normalizer(handle_chinese_chars=True).normalize_str
    ours = lambda s: normalizers.space_cjk(s, 0)[0]       # noqa: E731
    assert ours(EVERY) == theirs(EVERY), differences(ours, theirs)


def test_nonspacing_marks(bert_normalizer, reference):
    # the marks table alone: on the reference's own NFD, since Python's may differ (see normalizers.py)
    theirs = bert_normalizer(strip_accents=True).normalize_str
    nfd = reference.normalizers.NFD().normalize_str
    ours = lambda s: normalizers.delete(nfd(s), 0, normalizers._MARKS)[0]     # noqa: E731
    assert ours(EVERY) == theirs(EVERY), differences(ours, theirs)


def test_punctuation_and_whitespace(reference):
    theirs = reference.pre_tokenizers.BertPreTokenizer().pre_tokenize_str
    ours = lambda s: [(w, (o, o + len(w))) for w, o in pre_tokenizers.BertPreTokenizer().split(s, 0)]  # noqa: E731
    chunk = 1 << 16         # the reference's time grows with words x length: ask it in pieces
    for start in range(0, len(EVERY), chunk):
        piece = EVERY[start:start + chunk]
        assert ours(piece) == theirs(piece), differences(ours, theirs)


# --- the classes of the reference's regexes (byte-level BPE) and of its Digits pre-tokenizer ---------

@pytest.mark.slow
@pytest.mark.parametrize("glue", ["a", "1", "!"])
def test_letters_numbers_and_spaces_of_the_split_regex(reference, glue):
    """GPT-2's split regex on every code point between `glue`s: a letter joins the "a"s' word, a
    number the "1"s', a space parts the "!"s (\\p{L}, \\p{N}, \\s as Oniguruma has them). The
    reference's pieces come with their character offsets, which our regex's spans must equal."""
    theirs = reference.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True).pre_tokenize_str
    ours = lambda s: [m.span() for m in pre_tokenizers.gpt2_split().finditer(s)]     # noqa: E731
    glued = glue.join(EVERY[1::2])
    chunk = 1 << 16
    for start in range(0, len(glued), chunk):
        piece = glued[start:start + chunk]
        if ours(piece) != [span for _, span in theirs(piece)]:
            pieces = lambda split: lambda c: len(split(glue + c))                 # noqa: E731
            assert False, differences(pieces(ours), pieces(theirs))


def test_numeric_characters_of_digits(reference):
    theirs = reference.pre_tokenizers.Digits(individual_digits=True).pre_tokenize_str
    ours = lambda s: [(w, (o, o + len(w))) for w, o in pre_tokenizers.Digits(True).split(s, 0)]  # noqa: E731
    chunk = 1 << 16
    for start in range(0, len(EVERY), chunk):
        piece = EVERY[start:start + chunk]
        assert ours(piece) == theirs(piece), differences(ours, theirs)


@pytest.mark.parametrize("category", ["M", "Lu", "Ll", "Lt", "Lm", "Lo"])
def test_regex_classes(reference, category):
    """\\p{M} and the letter subclasses (the split patterns of Qwen 3.5, Tekken, GPT-4o),
    on every code point: the runs our translated regex removes are the reference's."""
    pattern = rf"\p{{{category}}}+"
    theirs = reference.pre_tokenizers.Split(reference.Regex(pattern), behavior="removed").pre_tokenize_str
    ours = patterns.compile_regex(pattern)
    chunk = 1 << 16
    for start in range(0, len(EVERY), chunk):
        piece = EVERY[start:start + chunk]
        kept, last = [], 0
        for m in ours.finditer(piece):
            if m.start() > last:
                kept.append((last, m.start()))
            last = m.end()
        if last < len(piece):
            kept.append((last, len(piece)))
        if kept != [span for _, span in theirs(piece)]:
            split = lambda c: bool(ours.fullmatch(c))                                   # noqa: E731
            reference_split = lambda c: theirs(c) == []                                 # noqa: E731
            assert False, differences(split, reference_split)
