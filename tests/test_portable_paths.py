"""Issue 17 item 13: nothing the library writes names an absolute path of this machine.

- an adapter saved by polyvox (``adapters.save_adapter``): PEFT's ``adapter_config.json``
  (``base_model_name_or_path``) and the ``README.md`` model card it writes beside it;
- every place in the library that saves an adapter goes through ``save_adapter``;
- ``polyvox run`` with ``--out`` outside the book and an absolute path as a parameter: the
  manifest, the executed notebook (injected parameters, outputs, papermill's metadata) and the
  kernel log.

Each test searches every file written for the absolute temporary path, as text and as bytes.
"""
import ast
import json
import re
from pathlib import Path

import nbformat
import pytest
from _hostile import run_cli

from polyvox.adapters import make_portable, save_adapter

LIB = Path(__file__).resolve().parents[1] / "lib" / "polyvox"


def leaks(folder: Path, *needles: str) -> list[str]:
    """Files under folder whose bytes hold any of the needles."""
    found = []
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            found += [f"{p.relative_to(folder)}: {n}" for n in needles if n.encode() in data]
    return found


def test_a_saved_adapter_names_no_absolute_path(tiny, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = tmp_path / "base"
    base.symlink_to(tiny, target_is_directory=True)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(base)),
                           LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    out = save_adapter(model, tmp_path / "adapter")
    assert (out / "adapter_model.safetensors").exists() and (out / "README.md").exists()
    assert not leaks(tmp_path / "adapter", str(tmp_path), str(tiny))
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == f"{tmp_path.name}/base"
    assert f"base_model: {tmp_path.name}/base" in (out / "README.md").read_text()


def test_make_portable_fixes_a_card_left_beside_a_config_fixed_earlier(tmp_path):
    """Adapters saved before the card was fixed: the config is portable already, the README not."""
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "models/base"}))
    (folder / "README.md").write_text(f"---\nbase_model: {tmp_path}/models/base\ntags:\n"
                                      f"- base_model:adapter:{tmp_path}/models/base\n---\n")
    make_portable(folder)
    make_portable(folder)  # idempotent
    assert not leaks(folder, str(tmp_path))
    assert "base_model: models/base" in (folder / "README.md").read_text()


def test_every_adapter_save_in_the_library_goes_through_save_adapter():
    """``save_pretrained`` is called in adapters.py (save_adapter) and on whole models and tokenizers only."""
    whole_models = {"train/pretrain.py", "testing.py"}  # base models and tokenizers: no PEFT card or config
    calls = []
    for f in sorted(LIB.rglob("*.py")):
        rel = f.relative_to(LIB).as_posix()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "save_pretrained":
                calls.append((rel, node.lineno))
    stray = [f"{rel}:{line}" for rel, line in calls if rel not in whole_models | {"adapters.py"}]
    assert not stray, f"adapters saved without adapters.save_adapter: {stray}"
    assert [rel for rel, _ in calls].count("adapters.py") == 1


def _book(root: Path) -> Path:
    root.mkdir()
    (root / "_config.yml").write_text("title: t\nexecute:\n  execute_notebooks: 'off'\n")
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/x/ch\n")
    (root / "book").mkdir()
    (root / "book/intro.md").write_text("# intro\n")
    (root / "notebooks/x").mkdir(parents=True)
    params = nbformat.v4.new_code_cell('run_dir = "runs/x"\ndata_dir = "data"')
    params.metadata["tags"] = ["parameters"]
    code = ("import os, pathlib, sys, warnings\n"
            "pathlib.Path(run_dir, 'written.txt').write_text('ok')\n"
            "print('run folder', os.path.abspath(run_dir))\n"
            "print('data', os.path.abspath(data_dir), 'root', os.getcwd())\n"
            "print('notebook folder', os.path.abspath('notebooks/x'), file=sys.stderr)")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# ch"), params,
                                         nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "notebooks/x/ch.ipynb")
    return root


@pytest.mark.slow  # runs a chapter (papermill)
def test_polyvox_run_writes_no_absolute_path(tmp_path, monkeypatch):
    root = _book(tmp_path / "book")
    data = tmp_path / "shared" / "data"
    data.mkdir(parents=True)
    out = tmp_path / "runs" / "first"
    monkeypatch.chdir(root)
    rc, stdout, err = run_cli(["run", "x/ch", "-p", f"data_dir={data}", "--out", str(out)])
    assert rc == 0, err
    assert (out / "ch.ipynb").exists() and (out / "manifest.json").exists()
    assert not leaks(out, str(tmp_path)), leaks(out, str(tmp_path))
    assert not re.search(r"(?<![\w.])/(tmp|root|home|work|Users)/", (out / "manifest.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"] == {"data_dir": "shared/data", "run_dir": "runs/first"}
    text = (out / "ch.ipynb").read_text()
    assert "run folder runs/first" in text and "data shared/data root ." in text
    assert (out / "written.txt").exists()  # the chapter itself ran with the real paths
