"""LaMP's token-state cache: what a training batch reads equals the frozen encoder's states, and the cache's
memory does not grow with the corpus (token ids over the embeddings alone, a memory-mapped file otherwise)."""

from __future__ import annotations

import numpy as np
import torch
from xtag.training.deep.encoder import TextEncoder, load_tokenizer
from xtag.training.lamp.net import LampNet, first_layers
from xtag.training.lamp.states import StateCache

TEXTS = ["shooter weapons arena frag multiplayer", "python module", "email smtp imap mailbox inbox http server", "a"]


def net_of(tiny_bert, layers: int) -> LampNet:
    transformer = first_layers(TextEncoder.from_pretrained(tiny_bert, "mean").transformer, layers)
    return LampNet(transformer, 5, 16, 1, 2, 1, 0.1)


def direct_states(net, tokenizer, idx):
    ids, mask = tokenizer([TEXTS[i] for i in idx])
    net.eval()
    with torch.no_grad():
        return net.states(torch.from_numpy(ids), torch.from_numpy(mask)).numpy(), mask


def test_cache_batches_are_the_encoders_states_and_keep_ids_over_the_embeddings_alone(tiny_bert, tmp_path):
    tokenizer = load_tokenizer(tiny_bert, 32)
    for layers in (0, 1):
        net = net_of(tiny_bert, layers)
        cache = StateCache.build(net, tokenizer, TEXTS, 2, False, tmp_path / f"states{layers}.npy")
        net.train()  # training mode: the cached states stay the eval ones (no dropout)
        idx = np.array([2, 0, 3])
        states, mask = cache.batch(idx)
        want, want_mask = direct_states(net, tokenizer, idx)
        assert mask.numpy().tolist() == want_mask.tolist()
        real = want_mask.astype(bool)
        assert np.abs(states.numpy()[real] - want[real]).max() < 1e-2  # float16 rows over layers
        tokens = int(want_mask.sum()) + int(tokenizer([TEXTS[1]])[1].sum())
        if layers == 0:  # 4 bytes a token, whatever the encoder's width; no file
            assert cache.nbytes == 4 * tokens and not (tmp_path / "states0.npy").exists()
        else:  # float16 rows on disk, memory-mapped, removed when training ends
            assert isinstance(cache.data, np.memmap) and cache.nbytes == 2 * tokens * net.hidden
            cache.close()
            assert not (tmp_path / "states1.npy").exists()
        means = cache.means() if layers == 0 else None
        if means is not None:
            pooled = (want * want_mask[..., None]).sum(1) / want_mask.sum(1, keepdims=True)
            assert np.abs(means[idx] - pooled).max() < 1e-5


def test_text_init_starts_a_label_with_text_from_it_and_one_without_as_pifa(tiny_bert, tmp_path):
    """lamp.init=text: labels 0 and 1 share their training texts, so PIFA starts them alike; with a text, label 0
    starts from it instead (and so does label 2, which has no training text); label 1 has none and keeps PIFA."""
    import scipy.sparse as sp
    from xtag.training.lamp.states import label_init

    tokenizer = load_tokenizer(tiny_bert, 32)
    net = net_of(tiny_bert, 0)
    cache = StateCache.build(net, tokenizer, TEXTS, 2, False, tmp_path / "states.npy")
    Y = sp.csr_matrix(np.array([[1, 1, 0], [1, 1, 0], [0, 0, 0], [0, 0, 0]], dtype=np.float32))
    names, texts = ["a", "b", "c"], ["python module pip", None, "email smtp inbox"]
    pifa, from_name, from_text = label_init(net, tokenizer, cache, Y, names, "pifa", 2)
    assert np.allclose(pifa[0], pifa[1]) and (from_name, from_text) == (1, 0)
    text, from_name, from_text = label_init(net, tokenizer, cache, Y, names, "text", 2, texts)
    assert (from_name, from_text) == (0, 2)
    assert np.allclose(text[1], pifa[1]) and not np.allclose(text[0], text[1])
    assert not np.allclose(text[2], pifa[2])  # no training text: its text, not its name
    assert np.allclose(np.linalg.norm(text, axis=1), 1.0, atol=1e-5)  # unit rows, as PIFA's and the names'
