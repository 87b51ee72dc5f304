"""Grade completions against gold answers: graders by name in a registry.

``GRADERS`` maps a name to a function ``(completion, gold, *, options=None) -> Grade``;
a task in :mod:`polyvox.tasks` names its grader, and may give :class:`GradeOptions`
(math-verify's comparison options; graders that have none ignore them).
Registered graders:

- ``math``: math-verify (HF Math-Verify 0.9) parses gold and answer and checks
  equivalence; the answer is chosen by the rule below. math-verify times out with
  ``signal.alarm``, which works only in a process's main thread, so batched
  grading runs in a *process* pool (``pebble``); an item that still hangs or kills its
  worker gets ``status="timeout"``/``"ungradable"`` instead of a dead run.
- ``integer`` (also registered as ``aime``, the panel study's AIME rule): the last
  integer in ``<answer>``, else in the last ``\\boxed{}``, compared as integers;
  the miniature world's problems use it.
- ``gsm8k`` / ``gsmhard``: the final number after an answer marker
  (``####``, "The answer is"), else in ``<answer>`` or the last ``\\boxed{}``,
  else the last number; ``$`` and a trailing period stripped; GSM-Hard's float
  golds compared with a relative tolerance.
- ``qa``: SQuAD-style normalised exact match and token F1, max over aliases
  (gold may be a string or a list of aliases); ``correct`` = exact match.

Answer selection (``math``) is :mod:`polyvox.answers`'s rule: the completion's last
final-answer statement (a closed box, or "final answer … is"), several boxes of one
statement forming one set, no tail window.

The panel study's fallback is kept: when the chosen answer does not verify and
the completion has an ``<answer>…</answer>`` body (an unclosed final block
counts), the body is tried too (wrapped in ``$…$`` unless it has ``$`` or a box),
and either one verifying is correct. So in a panel completion without a box or
a final-answer phrase, a correct number in the debate counts, as the study graded.

Departures from math-verify run on the whole completion, and why:

1. *A later statement beats an earlier box.* math-verify ranks patterns before
   position: "final answer ... is" ties with a box and position decides, but a
   box anywhere outranks "Final answer: …" and any plain math after it.
   polyvox ranks by position among statements only, so a self-corrected answer
   is graded as the corrected one, whichever form the correction takes. (The
   previous polyvox rule, the last box, graded a box followed by a corrected
   "final answer is …" as the box; and without a box it read only the last
   1,500 characters, missing a final answer further up.)
2. *Any number of boxes in one statement.* math-verify joins at most six, and
   only when they sit in ``$…$`` or similar environments; here ``\\boxed{-2}
   and \\boxed{1}`` is the set {-2, 1} however it is written.
3. *Identical strings first.* The chosen box (or the text after a final-answer
   phrase) equal to the gold once spacing, ``\\left``/``\\right``, ``\\dfrac`` and
   ``$`` are removed is correct with no parsing, which is faster and grades
   answers math-verify cannot parse (a 10,000-digit number exceeds Python's
   integer-string limit) by what they are.
4. *Unicode math is rewritten as LaTeX first* (:func:`normalize_unicode_math`):
   ``½`` → ``\\frac{1}{2}``, ``2√3`` → ``2\\sqrt{3}``, ``x²`` → ``x^{2}``,
   ``≤``/``∈``/``π`` → ``\\le``/``\\in``/``\\pi``, full-width digits → ASCII,
   zero-width characters removed, non-breaking spaces → spaces. math-verify
   reads none of these.
5. *The gold is parsed once per distinct (gold, options)* and wrapped in
   ``$…$`` unless it has an unescaped ``$`` or a box (``gold_as="latex"``, the
   default: LaTeX golds such as MATH's, where ``\\$36`` is a price), or
   parsed as a plain expression (``gold_as="expr"``, math-verify's reading of a
   plain string, where ``1,22`` is the decimal 1.22). With ``gold_as="expr"`` the
   chosen answer's text is also read as an expression, so ``\\boxed{1,22}`` is
   1.22 there and the set {1, 22} otherwise.
6. *Options*: ``float_rounding`` (``None`` keeps math-verify's 6 places) and
   ``allow_set_relation_comp`` (``-2 \\le x \\le 7`` equals ``x \\in [-2, 7]``)
   go to ``math_verify.verify`` unchanged.

Time-outs are read from math-verify's own API: every parse and comparison runs with
``raise_on_error=True``, its ``TimeoutException`` is caught and counted, and a verdict
that is wrong after one of its parses or comparisons timed out has ``status="timeout"``.
Any other exception inside math-verify keeps math-verify's documented default (a parse
that fails is no answer, a comparison that fails is no match). math-verify's log
records are kept off stderr (its warnings repeat the whole input, tens of kilobytes
per pathological item), and nothing is read from them.

Errors are not verdicts: a grader that raises (anything but a time-out) stops
:func:`grade_many` with :class:`GradingError`, naming the item. Grading workers die
with the process that started them (``PR_SET_PDEATHSIG`` on Linux, a watchdog
thread elsewhere), so a killed ``polyvox grade`` leaves no worker behind.

Numbers for the ``integer`` and ``gsm*`` graders: see :mod:`polyvox.answers`.
Statuses are :class:`polyvox.statuses.GradeStatus` members (strings: ``ok``,
``no_answer``, ``ungradable``, ``timeout``).

Modules: :mod:`~polyvox.grading.graders` (the registry, :class:`GradeOptions`,
:class:`Grade`, the graders that need no worker), :mod:`~polyvox.grading.mathverify`
(``math``), :mod:`~polyvox.grading.pool` (:func:`grade_many`, the workers and their
deadlines). Their public names are re-exported here.
"""
from __future__ import annotations

# the answer-selection rule and number reading live in polyvox.answers; re-exported here for callers
from ..answers import (PHRASE_WINDOW_CHARS, Statement, _last_integer_string, _numbers, _phrase_text,  # noqa: F401
                       _to_float, _unclosed_boxes_dropped, answer_body, boxes, final_statements, integer_string,
                       last_boxed, last_integer, normalize_unicode_math, normalize_unicode_plain)
from ..statuses import GRADE_STATUSES, GradeStatus  # noqa: F401
from .graders import (DEFAULT_OPTIONS, GRADERS, GSMHARD_RTOL, Grade, GradeOptions, grade, grade_gsm,  # noqa: F401
                      grade_gsmhard, grade_integer, grade_qa, grader, gsm_final_number, register_grader)
from .mathverify import MV_TIMEOUT_S, _math_verify, grade_math  # noqa: F401
from .pool import (CHUNK, CHUNK_GRACE_S, ITEM_TIMEOUT_S, MAX_WORKERS, GradingError, chunk_deadline,  # noqa: F401
                   grade_many)
