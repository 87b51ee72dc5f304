"""The bad-input harness: run a ``polyvox`` command in this process and assert it was refused cleanly.

A refusal is: a non-zero exit status, exactly one line on stderr, no traceback, and every file
under the watched folders byte-identical afterwards, with nothing added (no lock, manifest,
scale file or empty folder left behind). Tests in ``test_hostile_*.py`` build a table of cases
and call :func:`refused` on each; the tables together are the library's bad-input table.

In-process (``polyvox.cli.main(argv)``) rather than a subprocess per case: the same code path as
the console script (it is the script's entry point), at a fraction of the start-up cost.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
from pathlib import Path


def snapshot(*roots: Path) -> dict[str, str]:
    """Every file and folder under the roots: path → sha256 (folders → 'dir')."""
    out: dict[str, str] = {}
    for root in roots:
        root = Path(root)
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            d = Path(dirpath)
            out[str(d)] = "dir"
            for name in filenames:
                f = d / name
                out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "special"
    return out


def run_cli(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """polyvox.cli.main(argv) in this process: (exit status, stdout, stderr)."""
    from polyvox.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_env = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main([str(a) for a in argv])
            except SystemExit as exc:  # argparse's usage errors
                rc = exc.code if isinstance(exc.code, int) else 1
    finally:
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rc, out.getvalue(), err.getvalue()


def refused(argv: list[str], watch: list[Path], expect: str | None = None,
            env: dict[str, str] | None = None) -> str:
    """Assert that ``polyvox argv`` is refused cleanly; return its one stderr line.

    ``watch``: folders whose files must be unchanged and gain nothing; ``expect``: a substring
    (case-insensitive) the line must contain, so a case fails for the reason it was written for.
    """
    before = snapshot(*watch)
    rc, _out, err = run_cli(argv, env)
    after = snapshot(*watch)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc != 0, f"polyvox {' '.join(map(str, argv))}: exit 0 (stderr: {err!r})"
    assert "Traceback" not in err, err
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}: {err!r}"
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    assert not (added or removed or changed), f"files changed by a refusal: added {added}, removed {removed}, " \
                                              f"changed {changed}"
    if expect is not None:
        assert expect.lower() in lines[0].lower(), f"{lines[0]!r} does not mention {expect!r}"
    return lines[0]
