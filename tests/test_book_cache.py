"""The book's cache key (fast: no notebook runs): what it covers."""
import nbformat

from polyvox import book


def _root(tmp_path):
    (tmp_path / "_config.yml").write_text("title: t\n")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/x/ch\n")
    (tmp_path / "notebooks/x").mkdir(parents=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
    nb.metadata["polyvox"] = {"inputs": ["data/**/*.jsonl"]}
    nbformat.write(nb, tmp_path / "notebooks/x/ch.ipynb")
    for sub in ("a", "b"):
        (tmp_path / "data" / sub).mkdir(parents=True)
        (tmp_path / "data" / sub / "records.jsonl").write_text("{}\n")
    (tmp_path / "requirements.lock").write_text("torch==2.13.0\n")
    return tmp_path


def test_key_changes_with_the_lock_file(tmp_path):
    root = _root(tmp_path)
    [ch] = book.chapters(root)
    key = book.cache_key(root, ch, {})
    assert key == book.cache_key(root, ch, {})
    (root / "requirements.lock").write_text("torch==2.13.1\n")
    assert book.cache_key(root, ch, {}) != key


def test_inputs_are_keyed_by_path_so_same_named_files_do_not_collide(tmp_path):
    root = _root(tmp_path)
    [ch] = book.chapters(root)
    key = book.cache_key(root, ch, {})
    # swapping the contents of two files that share a name changes the key
    (root / "data/a/records.jsonl").write_text('{"x": 1}\n')
    swapped_a = book.cache_key(root, ch, {})
    (root / "data/a/records.jsonl").write_text("{}\n")
    (root / "data/b/records.jsonl").write_text('{"x": 1}\n')
    assert len({key, swapped_a, book.cache_key(root, ch, {})}) == 3
    assert book.cache_key(root, ch, {"n": 2}) != book.cache_key(root, ch, {"n": 3})


def test_repo_path_resolves_against_the_root_from_a_subfolder(tmp_path, monkeypatch):
    root = _root(tmp_path)
    monkeypatch.chdir(root / "notebooks/x")
    assert book.repo_path("data") == root.resolve() / "data"
    assert str(book.repo_path("/abs/data")) == "/abs/data"
