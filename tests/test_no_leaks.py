"""Shipped records name no machine's absolute paths (the published panel records are a source, kept as they came)."""
import re

LEAK = re.compile(r"(?<![\w.])/(tmp|root|home|work|Users)/")


def test_no_absolute_machine_paths_in_shipped_data(root):
    leaks = []
    for p in (root / "data").rglob("*"):
        if p.is_file() and p.suffix in (".json", ".jsonl", ".md", ".yaml", ".yml", ".txt", ".log") \
                and "multipersona" not in p.parts:
            text = p.read_text(errors="ignore")
            if LEAK.search(text):
                leaks.append(str(p.relative_to(root)))
    assert not leaks, leaks[:10]
