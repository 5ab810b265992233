"""models/bert.py against transformers' BertModel: a tiny random config on every backend."""
import numpy as np
import pytest

import engine
from models import bert
from tests.helpers import need_import

torch = need_import("torch")
transformers = need_import("transformers")

TINY = bert.Config(vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=80, max_position_embeddings=40, type_vocab_size=2, layer_norm_eps=1e-12)


@pytest.fixture(scope="module")
def reference():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(**{k: getattr(TINY, k) for k in TINY.__dataclass_fields__},
                                  add_pooling_layer=False)
    model = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    with torch.no_grad():                       # LayerNorms away from 1/0, so they are tested
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    return model


def _state(model) -> dict:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _batch(rng, lengths, vocab):
    n, length = len(lengths), max(lengths)
    ids = np.zeros((n, length), np.int64)
    mask = np.zeros((n, length), np.int64)
    for i, m in enumerate(lengths):
        ids[i, :m] = rng.integers(1, vocab, m)
        mask[i, :m] = 1
    types = (rng.random((n, length)) < 0.3).astype(np.int64) * mask
    return ids, mask, types


@pytest.mark.parametrize("device", engine.available_devices())
def test_tiny_bert_matches_transformers(reference, device):
    rng = np.random.default_rng(7)
    ids, mask, types = _batch(rng, [17, 5, 11], TINY.vocab_size)
    with torch.no_grad():
        want = reference(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                         token_type_ids=torch.from_numpy(types)).last_hidden_state.numpy()
    model = bert.load(_state(reference), device=device, config=TINY)
    got = model(ids, mask, types).numpy()
    valid = mask.astype(bool)                   # padded positions are not compared (both are garbage)
    np.testing.assert_allclose(got[valid], want[valid], rtol=1e-4, atol=2e-5)


def test_mean_pooling_ignores_padding(reference):
    rng = np.random.default_rng(3)
    ids, mask, types = _batch(rng, [9, 4], TINY.vocab_size)
    model = bert.load(_state(reference), config=TINY)
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    both = bert.embed(model, batch)
    alone = bert.embed(model, {k: v[1:, :4] for k, v in batch.items()})
    np.testing.assert_allclose(both[1], alone[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(both, axis=1), 1.0, rtol=1e-6)


def test_config_from_json():
    c = bert.Config.from_json('{"hidden_size": 64, "num_attention_heads": 4, "model_type": "bert"}')
    assert (c.hidden_size, c.num_attention_heads, c.num_hidden_layers) == (64, 4, 6)


def test_import_engine_alone_reaches_nn_functional_and_text():
    """As with torch: engine.nn, engine.nn.functional and engine.text after a bare `import engine`."""
    import subprocess
    import sys
    code = ("import engine; print(engine.nn.functional.gelu.__name__, engine.nn.Linear.__name__, "
            "engine.text.Tokenizer.__name__, 'models' in __import__('sys').modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["gelu", "Linear", "Tokenizer", "False"]     # the model package: on first use only
