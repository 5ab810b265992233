"""`python -m engine embed | similarity | tokenize | tasks`: outputs checked against the references."""
import json

import numpy as np
import pytest
from test_cli import run

from tests.helpers import need_import

tokenizers = need_import("tokenizers")


def test_tokenize_json_equals_the_tokenizers_package(minilm_folder):
    texts = ["Hello, wörld!", "東京タワー 🗼", "", "don't [MASK] it"]
    r = run("tokenize", "--model", "all-MiniLM-L6-v2", "--weights", str(minilm_folder), "--json", *texts)
    assert r.returncode == 0, r.stderr
    reference = tokenizers.Tokenizer.from_file(str(minilm_folder / "tokenizer.json"))
    reference.no_padding()
    for text, line in zip(texts, r.stdout.splitlines(), strict=True):
        got, want = json.loads(line), reference.encode(text)
        assert got == {"input": text, "ids": want.ids, "tokens": want.tokens}


def test_embed_json_lines_and_file(minilm_folder, tmp_path):
    import engine
    texts = ["A man is eating food.", "Le chat dort."]
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    r = run("embed", "--weights", str(minilm_folder), "--json", "--file", str(tmp_path / "texts.txt"))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["input"] for x in lines] == texts
    got = np.array([x["embedding"] for x in lines], np.float32)
    want = engine.pipeline("sentence-embedding", weights=minilm_folder)(texts)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_embed_says_when_it_truncates(minilm_folder):
    r = run("embed", "--weights", str(minilm_folder), "short", "word " * 400)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 2
    assert "text 2 is longer than 256 tokens" in r.stderr and "text 1" not in r.stderr


def test_similarity_ranks_the_candidates(minilm_folder):
    r = run("similarity", "--weights", str(minilm_folder), "--json", "A man eats pasta.",
            "A monkey plays drums.", "A man is eating food.")
    assert r.returncode == 0, r.stderr
    ranked = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["text"] for x in ranked] == ["A man is eating food.", "A monkey plays drums."]
    assert ranked[0]["score"] > ranked[1]["score"] and ranked[0]["index"] == 1


@pytest.mark.parametrize("args, needle", [
    (["embed"], "no texts"),
    (["tokenize", "--model", "nope", "x"], "unknown model"),
    (["tokenize", "--model", "mnist_cnn", "x"], "has no tokenizer"),
])
def test_errors_are_one_line(args, needle):
    r = run(*args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_embed_refuses_a_binary_file(tmp_path):
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00bad")
    r = run("embed", "--file", str(tmp_path / "bin"))
    assert r.returncode == 2 and "not UTF-8" in r.stderr and "Traceback" not in r.stderr


def test_tasks_lists_the_registry():
    r = run("tasks")
    assert r.returncode == 0
    rows = [line.split()[:2] for line in r.stdout.splitlines()]
    assert ["sentence-embedding", "all-MiniLM-L6-v2"] in rows and ["feature-extraction", "all-MiniLM-L6-v2"] in rows
