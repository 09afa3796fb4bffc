"""The learning path in one table: its three parts, each step with its minutes, and the set-up time.

Every time the README, the book's landing page (``docs/index.md``) and the
exercises' index (``exercises/README.md``) give for the learning path is
computed here, from one table:

* a reading step's minutes are written once, in :data:`STEPS`;
* an exercise step's minutes are the sum of its exercises' labels, which
  live in ``refattn/exercises/graders.py`` (:data:`refattn.exercises.EXERCISES`);
* a part's minutes are the sum of its steps; its title is
  :data:`refattn.exercises.PARTS`'s, the title the exercises' statements give;
* the set-up and test times are measured by :func:`measure` into :data:`TIMES`.

Those pages hold the generated text between the lines
``<!-- learning path: NAME -->`` and ``<!-- end of learning path: NAME -->``
(invisible on GitHub and in the book). To change a step, its time or its
words, edit the table here and run, from the repository's root::

    .venv/bin/python docs/learning_path.py

which rewrites those blocks; ``--check`` only says which page differs (exit
1). ``tests/test_learning_path.py`` fails when a page is not what this table
gives. Links are written from the repository's root here and rewritten for
each page (``../`` on the pages of ``docs/``), so that they work on GitHub
and in the book alike.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a clone: this checkout's refattn
    sys.path.insert(0, str(ROOT))

from refattn.exercises import EXERCISES, PARTS  # noqa: E402
from refattn.exercises import exercise as find_exercise  # noqa: E402


@dataclass(frozen=True)
class Step:
    """One step of a part: what to read or do, how long it takes, and what it holds.

    ``page`` is the step as the landing page lists it (markdown, links from the
    repository's root); ``chain`` the same in the README's one-line summary of
    the part; ``minutes`` its time, or ``None`` for an exercise step, whose
    time is the sum of the labels of ``exercises``."""

    page: str
    about: str
    chain: str
    minutes: int | None = None
    exercises: tuple = ()


#: The measured times of the README's second set-up line and of the slow tier, written by
#: ``python docs/learning_path.py --measure`` (:func:`measure`, which says how) with the command and machine.
TIMES = ROOT / "docs" / "test-times.json"

_D01 = "derivations/01-reweighted-softmax.md"
_APPENDIX_A = _D01 + "#appendix-a-numerics-how-the-reference-evaluates-01r1-and-01r4-stably"

#: The steps of each part, in order.
STEPS: dict[int, list[Step]] = {
    1: [
        Step("[The overview](derivations/00-overview.md)",
             "TanhMax's generic form $\\phi(s)_i = g(s_i)/\\sum_k h(s_k)$, the table of nine activations, the one "
             "gradient formula, why a gradient check needs a random cotangent; and how to get the exercises' "
             "starters", "[the overview](derivations/00-overview.md)", 20),
        Step(f"[Derivation 01]({_D01}), sections 1 to 3",
             "every activation as $\\phi = \\rho\\cdot\\mathrm{softmax}(\\ell)$, its Jacobian and its "
             "vector-Jacobian product, derived in numbered steps, each run on the same three scores with both "
             "sides printed", f"[derivation 01]({_D01}), sections 1 to 3 (every step runs on one example)", 75),
        Step("[Notebook 01](notebooks/01_activations_tour.py)",
             "the nine activations drawn, one VJP by hand, the gradient checks, and the one place where the "
             "checks disagree on purpose", "[notebook 01](notebooks/01_activations_tour.py)", 30),
        Step("", "softmax's VJP, the reweighted VJP for every activation, and a wrong VJP that an all-ones "
             "cotangent cannot catch; each starts from a starter file (the overview says where they come from)",
             "", exercises=(1, 3, 5)),
    ],
    2: [
        Step("[Derivation 03](derivations/03-proposition-1.md)",
             "how a score moves while a one-layer model trains (TanhMax's Proposition 1), proved step by step, "
             "and when it holds", "[derivation 03](derivations/03-proposition-1.md)", 45),
        Step("[Notebook 02](notebooks/02_proposition_1.py)",
             "the same steps with numbers, against autograd's exact velocity",
             "[notebook 02](notebooks/02_proposition_1.py)", 30),
        Step("[Derivation 04](derivations/04-score-dynamics-closed-forms.md)",
             "which scores rise and which fall, for every activation; TanhMax's Eq. 7 with its sign corrected",
             "[derivation 04](derivations/04-score-dynamics-closed-forms.md)", 30),
        Step("[Derivation 05](derivations/05-proposition-2.md) and [notebook 05](notebooks/05_proposition_2.py)",
             "what signed weights can represent, and why TanhMax's Proposition 2 is false as printed",
             "[derivation 05](derivations/05-proposition-2.md) → [notebook 05](notebooks/05_proposition_2.py)",
             45),
        Step("", "exercise 7 evaluates $\\log\\cosh$ stably, as section A.1 of [derivation 01's appendix "
             f"A]({_APPENDIX_A}) shows in one line (part 3 reads the whole appendix)", "", exercises=(7, 9)),
    ],
    3: [
        Step(f"[Derivation 01, section 5]({_D01}#5-how-the-gradients-are-checked)",
             "how a gradient is checked three ways (the hand-derived VJP, autograd on the same forward code, "
             "central differences), why in float64, the unit roundoff $u_\\mathrm{r}$ and the norm-wise error",
             f"[derivation 01, section 5]({_D01}#5-how-the-gradients-are-checked)", 20),
        Step(f"[Derivation 01, section 4]({_D01}#4-singular-cases)",
             "where there is no derivative: what each of the three checks sees at signexp's jump, at expressive's "
             "zero and at the kinks of relu and cosformer, and the conventions for a row with no normaliser and "
             "for underflow", f"[section 4]({_D01}#4-singular-cases)", 25),
        Step(f"[Derivation 01, appendix A]({_APPENDIX_A})", "why every activation stays finite for every finite score",
             f"[appendix A]({_APPENDIX_A})", 30),
        Step("[Derivation 22](derivations/22-central-differences.md)",
             "how wrong central differences are, and the tolerance a gradient check can justify",
             "[derivation 22](derivations/22-central-differences.md)", 45),
        Step("[Derivation 02](derivations/02-scores.md)",
             "the score functions and their VJPs, Neural Attention without its $n\\times n\\times 2d'$ tensor",
             "[derivation 02](derivations/02-scores.md)", 45),
        Step("[Derivation 20](derivations/20-speed.md), sections 1 to 7, and [notebook 12](notebooks/12_speed.py)",
             "the fast path: $p$ without a logarithm, the VJP from two cached factors, linear attention by "
             "associativity, blocks and threads, and what each measured",
             "[derivation 20](derivations/20-speed.md) → [notebook 12](notebooks/12_speed.py)", 35),
        Step("[Derivation 23](derivations/23-streaming.md) and [notebook 13](notebooks/13_streaming.py)",
             "attention in $O(n)$ memory for every activation",
             "[derivation 23](derivations/23-streaming.md) → [notebook 13](notebooks/13_streaming.py)", 30),
        Step("", "", "", exercises=(12, 13, 15)),
    ],
}

#: Reading that belongs with a part but is not in its time (landing page and README alike).
ALSO = {2: "[derivation 09](derivations/09-signexp-at-zero.md), signexp's jump at 0 (with exercise 6)",
        3: "[derivation 20, section 8](derivations/20-speed.md#8-the-nt-training-step), the NT training step "
           "(it uses the model of derivations 10, 11 and 15)"}


# --------------------------------------------------------------------------
# What the table gives
# --------------------------------------------------------------------------

def exercise(number: int):
    """The exercise numbered ``number`` of the registry."""
    return find_exercise(str(number))


def minutes(step: Step) -> int:
    """A step's minutes: its own, or the sum of its exercises' labels."""
    return step.minutes if step.minutes is not None else sum(exercise(n).minutes for n in step.exercises)


def part_minutes(part: int) -> int:
    """A part's minutes: the sum of its steps'."""
    return sum(minutes(s) for s in STEPS[part])


def times() -> dict:
    """The measured times (:data:`TIMES`)."""
    return json.loads(TIMES.read_text(encoding="utf-8"))


def setup_minutes() -> tuple[int, int, int, int | None]:
    """The measured set-up time in whole minutes: (install and quick tier, the install, the quick tier,
    the slow tier, None where that part has not been measured)."""
    m = times()
    s = m["readme_line"]["seconds"]
    slow = m["slow_tier"]["seconds"]["slow"] if "slow_tier" in m else None
    return (round((s["install"] + s["quick"]) / 60), round(s["install"] / 60), round(s["quick"] / 60),
            None if slow is None else round(slow / 60))


def _slow_clause(slow) -> str:
    """How long the slow tier took, with its load, where it was measured; else nothing."""
    if slow is None:
        return ""
    s = times()["slow_tier"]
    return (f", {slow} minutes more with every extra installed (load average {s['load_average'][0]} to "
            f"{s['load_average'][1]})")


def _run_timed(command: str, cwd: Path, what: str) -> float:
    """Run ``command`` in bash in ``cwd``, saying so first, its output kept in ``build/measure-*.log`` (which
    a failure names); its wall-clock seconds (it must succeed)."""
    log = ROOT / "build" / f"measure-{what.replace(' ', '-').replace(chr(39), '')}.log"
    log.parent.mkdir(exist_ok=True)
    print(f"measure: {what} ... (output: {log.relative_to(ROOT)})", flush=True)
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        subprocess.run(["bash", "-c", command], cwd=cwd, check=True, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - t0
    print(f"measure: {what}: {seconds / 60:.1f} minutes", flush=True)
    return seconds


#: The tests that read the times being measured, left out of the measured run (they cannot pass before the
#: times exist; a few seconds in all): the page blocks of tests/test_learning_path.py, the README's length.
READS_THE_TIMES = ("every_block_is_what_the_table_gives", "block_edited_by_hand", "set_up_time_was_measured",
                   "readme_is_short")

#: What each part of :func:`measure` runs in its fresh copy, in order: (what, key or None, command).
PARTS_MEASURED = {
    "readme_line": (("the install", "install", 'python3 -m venv .venv && .venv/bin/pip install ".[test]"'),
                    ("the quick tier", "quick", ".venv/bin/python -m pytest")),
    "slow_tier": (("the install", None, "python3 -m venv .venv"),
                  ("every extra's install", "extras", None),
                  ("the slow tier", "slow", 'REFATTN_EXTRAS_REQUIRED=1 .venv/bin/python -m pytest -m "slow or extra" '
                                            f'-k "not ({" or ".join(READS_THE_TIMES)})"')),
}


def measure(parts=tuple(PARTS_MEASURED)) -> dict:
    """Time the README's second set-up line in a clean clone of this commit (as CI runs it): the install
    (``python3 -m venv .venv && .venv/bin/pip install ".[test]"``) and the quick tier (``.venv/bin/python -m
    pytest``), part ``readme_line``; and in another clean clone, with every extra installed, the slow tier and
    the tests that need an extra, as CI's second step runs them, part ``slow_tier``. Per part: the commit,
    wall-clock seconds, the CPU seconds of all its processes, the load average before and after, the
    machine; written to :data:`TIMES` (a part measured alone replaces that part only). Takes as long as it
    measures (about 10 and 30 minutes on a 2-core machine)."""
    import os  # noqa: PLC0415
    import platform  # noqa: PLC0415
    import resource  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    result = times() if TIMES.exists() else {}
    result["command"] = "python docs/learning_path.py --measure"
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    for part in parts:
        load, seconds = [round(os.getloadavg()[0], 1)], {}
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        with tempfile.TemporaryDirectory(prefix="refattn-measure-") as tmp:
            subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), tmp], check=True)  # a clean clone, as CI
            for what, key, command in PARTS_MEASURED[part]:
                command = command or f'.venv/bin/pip install ".[{EVERY_EXTRA}]"'
                took = _run_timed(command, Path(tmp), what)
                if key:
                    seconds[key] = round(took)
        load.append(round(os.getloadavg()[0], 1))
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        result[part] = {"commit": commit, "seconds": seconds,
                        "cpu_seconds": round(cpu.ru_utime + cpu.ru_stime - cpu0.ru_utime - cpu0.ru_stime),
                        "load_average": load,
                        "machine": f"{os.cpu_count()} cores, {model}, Python {platform.python_version()}"}
        TIMES.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


#: The extras the slow tier's measurement installs (CI's second step installs the same).
EVERY_EXTRA = "test,docs,browser,cluster,torch,jax"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _exercise_links(step: Step) -> str:
    return _and([f"[{n}](exercises/{exercise(n).stem}.md)" for n in step.exercises])


def _relative(text: str, prefix: str) -> str:
    """Links from the repository's root, as seen from a page ``prefix`` deep (``../`` for ``docs/``)."""
    return re.sub(r"\]\((?![a-z]+:|#)", "](" + prefix, text) if prefix else text


_UNBROKEN = re.compile(r"!?\[[^\]]*\]\([^)]*\)|\$[^$]+\$")  # a link, inline math


def wrap(text: str, width: int = 100) -> str:
    """Each paragraph and list item of ``text`` (one line each) wrapped at ``width``, never
    inside a link (the link checkers read a page line by line) or inline math, a list item's
    lines indented under its text; table rows, headings and HTML left as they are."""
    out = []
    for line in text.split("\n"):
        item = re.match(r"(\d+\. |\* )", line)
        indent = " " * len(item.group(1)) if item else ""
        kept = _UNBROKEN.sub(lambda m: m.group(0).replace(" ", "\0"), line)
        if item:  # the marker stays with the item's first word
            kept = item.group(1)[:-1] + "\0" + kept[len(item.group(1)):]
        out.append(textwrap.fill(kept, width, subsequent_indent=indent, break_long_words=False,
                                 break_on_hyphens=False).replace("\0", " ")
                   if line.strip() and not line.startswith(("|", "#", "<")) else line)
    return "\n".join(out)


def _title(part: int) -> str:
    return PARTS[part][0].upper() + PARTS[part][1:]


# --------------------------------------------------------------------------
# The generated blocks
# --------------------------------------------------------------------------

def _set_up_took() -> str:
    """How long the README's set-up line took, on which machine and at what load (:data:`TIMES`)."""
    total, install, quick, _ = setup_minutes()
    r = times()["readme_line"]
    return (f"On {r['machine']} (load average {r['load_average'][0]} to {r['load_average'][1]}) the set-up line "
            f"took {total} minutes: {install} to install, {quick} for the quick tier (measured by `python "
            f"docs/learning_path.py --measure`)")


def setup_sentence() -> str:
    """The two tiers of tests, how to run each, and how long each took."""
    slow = setup_minutes()[3]
    return (f"`.venv/bin/python -m pytest` runs the quick tier: every mathematical test of `core/`, `theory/`, "
            f"`fast/` and `training/`, every derivation's step blocks, and one test of each slower family (a "
            f"study end to end, a grader run, an export). `.venv/bin/python -m pytest -m slow` runs the slow tier: "
            f"the studies end to end, the cluster, the book in Chromium, the graders under attack, the "
            f"command-line fuzzers and the checks of the documentation; a test that needs an extra skips, "
            f"saying which, unless it is installed (`.venv/bin/pip install \".[{EVERY_EXTRA}]\"`, and Debian's "
            f"`chromium` for the book). `-m \"\"` runs both tiers, as CI does. {_set_up_took()}"
            f"{'; the slow tier with the tests that need an extra' + _slow_clause(slow) if slow else ''}.")


def setup_times() -> str:
    """The README's short form of :func:`setup_sentence`: how long each tier took, where the tiers are said."""
    slow = setup_minutes()[3]
    return (f"{_set_up_took()}. `.venv/bin/python -m pytest -m slow` runs the slow tier{_slow_clause(slow)}; "
            f"[the book's first page](docs/index.md) says what each tier holds.")


def landing_start() -> str:
    """The landing page's first screen: where to start."""
    first = STEPS[1][0]
    text = (f"**Start here.** Set up once (the next section), then read {first.chain}: it is the first "
            f"step of part 1 of [the learning path](#the-learning-path), {PARTS[1]} ({part_minutes(1)} "
            f"minutes in all, {minutes(first)} of them for the overview).")
    return f'<div class="start-here" markdown>\n\n{_relative(text, "../")}\n\n</div>'


def landing_path() -> str:
    """The landing page's three parts, each step with its minutes."""
    out = []
    for part, steps in STEPS.items():
        out += [f"### Part {part}: {PARTS[part]} ({part_minutes(part)} minutes)", ""]
        for i, step in enumerate(steps, 1):
            if step.exercises:
                labels = " + ".join(str(exercise(n).minutes) for n in step.exercises)
                head = f"Exercises {_exercise_links(step)} ({minutes(step)} minutes: {labels} by their labels)"
            else:
                head = f"{step.page} ({minutes(step)} minutes)"
            out.append(_relative(f"{i}. {head}{': ' + step.about if step.about else ''}.", "../"))
        if part in ALSO:
            out += ["", _relative(f"Also, not counted in the part's time: {ALSO[part]}.", "../")]
        out += ["", f"For a class: [the slides of part {part}](slides/part-{part}.md) "
                    f"([PDF](slides/part-{part}.pdf)) and [its problem set](problems/part-{part}.md) "
                    f"([PDF](problems/part-{part}.pdf)), made when the book is built.", ""]
    return "\n".join(out).rstrip("\n")


def readme_path() -> str:
    """The README's summary of the three parts, each a chain of its steps."""
    out = [f"Three parts, one lecture each: {_and([str(part_minutes(p)) for p in STEPS])} minutes; the "
           "[book's home page](docs/index.md) gives each step with its time.", ""]
    for part, steps in STEPS.items():
        chain = [f"exercises {_exercise_links(s)}" if s.exercises else s.chain for s in steps]
        also = f" Also: {ALSO[part]}." if part in ALSO else ""
        out.append(f"{part}. **{_title(part)}** ({part_minutes(part)} minutes): {' → '.join(chain)}.{also}")
    return "\n".join(out)


def exercises_table() -> str:
    """The exercises' index: each part's exercises, their minutes, and those the path asks."""
    out = ["| part | its exercises | minutes by their labels | on the learning path | minutes |",
           "|---|---|---:|---|---:|"]
    for part in STEPS:
        mine = [ex for ex in EXERCISES if ex.part == part]
        path = [n for s in STEPS[part] for n in s.exercises]
        out.append(f"| {part}: {PARTS[part]} | {_and([str(ex.number) for ex in mine])} | "
                   f"{sum(ex.minutes for ex in mine)} | {_and([str(n) for n in path])} | "
                   f"{sum(exercise(n).minutes for n in path)} |")
    return "\n".join(out)


#: The pages and their blocks: page -> {block name: its text}.
BLOCKS = {
    "README.md": {"setup": setup_times, "path": readme_path},
    "docs/index.md": {"start": landing_start, "setup": setup_sentence, "path": landing_path},
    "exercises/README.md": {"exercises": exercises_table},
}

_BLOCK = re.compile(r"^<!-- learning path: ([\w-]+) -->\n(.*?)^<!-- end of learning path: \1 -->$", re.M | re.S)


def synced(page: str, text: str) -> str:
    """``text`` (of ``page``) with every block replaced by what this table gives; a block of
    :data:`BLOCKS` missing from the page is an error."""
    blocks = BLOCKS[page]
    found = {m.group(1) for m in _BLOCK.finditer(text)}
    if found != set(blocks):
        raise ValueError(f"{page}: expected the blocks {sorted(blocks)}, found {sorted(found)}")
    return _BLOCK.sub(lambda m: f"<!-- learning path: {m.group(1)} -->\n\n{wrap(blocks[m.group(1)]())}\n\n"
                                f"<!-- end of learning path: {m.group(1)} -->", text)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--measure" in argv:
        named = [a for a in argv if a in PARTS_MEASURED]
        measure(tuple(named) or tuple(PARTS_MEASURED))
    check = "--check" in argv
    stale = []
    for page in BLOCKS:
        path = ROOT / page
        text = path.read_text(encoding="utf-8")
        new = synced(page, text)
        if new != text:
            stale.append(page)
            if not check:
                path.write_text(new, encoding="utf-8")
    if stale:
        print(("differs from the table: " if check else "rewritten: ") + ", ".join(stale))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
