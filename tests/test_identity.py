"""Issue 17 item 11: a model's identity covers every file that changes its outputs.

Weights and config, the generation config ``generate`` falls back on, the tokenizer's files and
the chat template wherever it is kept. A file that changes nothing the model writes (a README,
a card) leaves the identity alone. With a real kill: a sampling run of the tiny model killed
mid-run, its chat template edited, is refused on resume in one line naming the template, with
nothing in the run folder changed; the template put back, the same command resumes.
"""
import json
import shutil
import signal
import subprocess
import sys
import time

import pytest
from _hostile import refused, run_cli

from polyvox.backends import model_identity
from polyvox.records import Sample, read_jsonl, read_manifest


@pytest.fixture
def model(tiny, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(tiny, copy)
    return copy


def _edit_json(path, **changes):
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(changes)
    path.write_text(json.dumps(data, indent=2))


EDITS = {
    # file edited → the identity field that must change
    "chat_template.jinja": (lambda m: m.joinpath("chat_template.jinja").write_text(
        m.joinpath("chat_template.jinja").read_text().replace("assistant", "helper")), "chat_template_sha256"),
    "tokenizer_config.json chat_template": (lambda m: _edit_json(m / "tokenizer_config.json",
                                                                  chat_template="{{ messages }}"),
                                            "chat_template_sha256"),
    "additional_chat_templates/": (lambda m: (m / "additional_chat_templates").mkdir() or
                                   (m / "additional_chat_templates/tool_use.jinja").write_text("{{ x }}"),
                                   "chat_template_sha256"),
    "generation_config.json": (lambda m: _edit_json(m / "generation_config.json", top_k=20), "generation_config_sha256"),
    "tokenizer.json": (lambda m: m.joinpath("tokenizer.json").write_text(
        m.joinpath("tokenizer.json").read_text().replace('"<think>"', '"<thinK>"')), "tokenizer_sha256"),
    "tokenizer_config.json": (lambda m: _edit_json(m / "tokenizer_config.json", model_max_length=128),
                              "tokenizer_sha256"),
    "special_tokens_map.json": (lambda m: _edit_json(m / "special_tokens_map.json", bos_token="<|im_start|>"),
                                "tokenizer_sha256"),
    "config.json": (lambda m: _edit_json(m / "config.json", rope_theta=5000.0), "weights_sha256"),
}


@pytest.mark.parametrize("what", list(EDITS))
def test_each_file_that_changes_outputs_changes_the_identity(what, model):
    edit, field = EDITS[what]
    before = dict(model_identity(str(model)))
    edit(model)
    after = model_identity(str(model))
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert changed == [field], (what, changed)


def test_files_that_change_no_output_leave_the_identity_alone(model, tiny):
    before = dict(model_identity(str(model)))
    assert before == {**model_identity(str(tiny)), "model": "model"}  # the same files in another folder
    (model / "README.md").write_text("# notes\n")
    (model / "card.json").write_text('{"seconds": 3}\n')
    assert model_identity(str(model)) == before


def test_a_template_moved_into_tokenizer_config_is_still_the_template(model):
    """The tokenizer's own settings and its template are told apart wherever the template is kept."""
    template = (model / "chat_template.jinja").read_text()
    (model / "chat_template.jinja").unlink()
    _edit_json(model / "tokenizer_config.json", chat_template=template)
    moved = dict(model_identity(str(model)))
    _edit_json(model / "tokenizer_config.json", chat_template=template + " ")
    edited = model_identity(str(model))
    assert moved["tokenizer_sha256"] == edited["tokenizer_sha256"]
    assert moved["chat_template_sha256"] != edited["chat_template_sha256"]


def _sample_argv(model, out):
    return ["sample", "--task", "gsm8k", "--format", "think", "--model", str(model), "--n", "4", "--limit", "4",
            "--max-tokens", "24", "--chunk", "1", "--batch-size", "1", "--temperature", "1.0", "--out", str(out)]


@pytest.mark.slow  # a subprocess loads torch and the model (~10 s)
def test_a_template_edited_between_a_kill_and_a_resume_refuses_the_resume(model, tmp_path, root):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "polyvox.cli", *_sample_argv(model, out)], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rollouts = out / "rollouts.jsonl"
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None and \
            not (rollouts.exists() and rollouts.read_bytes().count(b"\n") >= 2):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = len(read_jsonl(rollouts, Sample, tolerate_truncated_tail=True))
    assert 0 < done < 16, f"the run was not killed mid-way ({done} records)"
    assert read_manifest(out)["status"] == "running"

    template = model / "chat_template.jinja"
    original = template.read_text()
    template.write_text(original.replace("<|im_start|>assistant", "<|im_start|>assistant (be brief)"))
    line = refused(_sample_argv(model, out), watch=[out], expect="chat_template_sha256")
    assert "other settings" in line

    template.write_text(original)  # the model the run started with: the same command resumes
    rc, _, err = run_cli(_sample_argv(model, out))
    assert rc == 0, err
    records = read_jsonl(rollouts, Sample)
    assert len(records) == 16 == len({r.key for r in records})
    assert read_manifest(out)["status"] == "complete"
