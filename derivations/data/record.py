"""Run one ``refattn`` command and keep its JSON result with the command, the commit and the machine.

    python derivations/data/record.py OUT.json refattn COMMAND [OPTIONS...]

For the commands that keep no results file of their own (``rank-collapse``, ``neural-cost``, ``lm``):
the command runs in this process exactly as typed (``refattn.cli.main``, with ``--json``), and ``OUT.json``
gets ``{"command", "commit", "machine", "result"}``, ``command`` the line as typed (``refattn ...``, which a
rerun repeats) and ``result`` what ``--json`` prints. Refused before any work (one line, exit 2) when the
package has local changes (its commit would not say which code ran), when ``OUT.json`` exists (nothing is
overwritten; remove it first) or when the command is not a ``refattn`` one; a command that fails leaves no
file. The results files of ``derivations/data/`` made this way are named in derivation 15, section 10.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import sys
from pathlib import Path


def _refuse(message):
    print(f"record.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) < 3 or argv[1] != "refattn" or "--json" in argv:
        _refuse("usage: python derivations/data/record.py OUT.json refattn COMMAND [OPTIONS...] (without --json)")
    out, command = Path(argv[0]), argv[1:]
    if out.exists():
        _refuse(f"OUT.json: {str(out)!r} exists; it is left as it is (remove it to record again)")
    from refattn.cli import main as refattn  # noqa: PLC0415
    from refattn.studies.helpers import code_commit  # noqa: PLC0415
    from refattn.training.runs import _flat_lists, atomic_write, dumps, machine_info  # noqa: PLC0415

    commit = code_commit()
    if commit is None or commit.endswith("-dirty"):
        _refuse(f"the package is not at a commit without local changes ({commit}); commit first")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = refattn(command[1:] + ["--json"])
    if status != 0:
        _refuse(f"{shlex.join(command)} exited with {status}; nothing recorded")
    record = {"command": shlex.join(command), "commit": commit, "machine": machine_info(),
              "result": json.loads(printed.getvalue())}
    text = (_flat_lists(dumps(record, indent=1)) + "\n").encode("utf-8")
    atomic_write(out, lambda fh: fh.write(text))
    print(f"recorded {shlex.join(command)} in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
