#!/usr/bin/env python
"""Recount the answer-projection audit of Part III from a local copy of the study's MATH CL log.

The counts in data/collab/study_audit.json are this project's hand tally of the study's
``evaluation.log`` (repository SJTUFreshman/tmp_x7k9p4r2d8m5c, commit 1bf798bf…, the path in the
JSON's ``provenance``). That repository has no licence, so the log is not shipped and this script
never downloads it: fetch it yourself from

    https://github.com/SJTUFreshman/tmp_x7k9p4r2d8m5c/blob/1bf798bf99c850ec198d84b8f2f76a324dc75082/reproduction/results/MATH/CL/math_specific_sft_rl_20260830/logs/evaluation.log

(the "Raw" button gives the file), then::

    python scripts/recount_collab_audit.py evaluation.log [--audit data/collab/study_audit.json]

Procedure (:mod:`polyvox.studies.collab.audit_count`): every line of the log that is a JSON object
with ``answer_source`` is one problem's row; rows and correct rows (``em == 1``) are tallied per
``answer_source``; the header's ``problems``, ``correct``, ``EM`` and ``F1`` are read. It prints the
counts, then every disagreement with the shipped JSON (and with the log's own header, and duplicate
problem ids). Exit status 0: the hand tally is reproduced; 1: something disagrees; 2: no such log.
"""
import sys

from polyvox.studies.collab.audit_count import main

if __name__ == "__main__":
    sys.exit(main())
