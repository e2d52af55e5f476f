"""Run the real `dprelease` command and SIGKILL it at the n-th file-system step after the ledger
commit (the window in which a release is stored but its files are being published): in a process
of its own, `release_killed_at` (tests/system/test_release_folder_kills.py forks one per kill),
or from a shell:

    python tests/publish_kill.py N release --spec ... --out ...

Every call of os.mkdir, os.rename, os.fsync, os.chmod and shutil.rmtree after `Ledger.commit`
returns is a step; the process kills itself just before step N. It runs the command to the end
when it has fewer steps (exit status as usual), so a caller raises N until the run completes.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Callable
from typing import Any

from dprelease.ledger import Ledger


def _install(step: int) -> None:
    armed = {"on": False, "count": 0}
    commit = Ledger.commit

    def committed(self: Ledger, *args: Any, **kwargs: Any) -> Any:
        stored = commit(self, *args, **kwargs)
        armed["on"] = True
        return stored

    Ledger.commit = committed  # type: ignore[method-assign]

    def counted(function: Callable[..., Any]) -> Callable[..., Any]:
        def step_of_publishing(*args: Any, **kwargs: Any) -> Any:
            if armed["on"]:
                armed["count"] += 1
                if armed["count"] == step:
                    os.kill(os.getpid(), signal.SIGKILL)
            return function(*args, **kwargs)

        return step_of_publishing

    for name in ("mkdir", "rename", "fsync", "chmod"):
        setattr(os, name, counted(getattr(os, name)))
    shutil.rmtree = counted(shutil.rmtree)  # type: ignore[assignment]


def release_killed_at(step: int, argv: list[str], directory: str, log: str | None = None) -> None:
    """Process entry point: `dprelease *argv` in `directory`, killed just before `step`; its
    output goes to the file `log` if given."""
    os.chdir(directory)
    if log is not None:
        output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(output, 1)
        os.dup2(output, 2)
    _install(step)
    from dprelease.cli import main

    sys.argv = ["dprelease", *argv]
    main()


if __name__ == "__main__":
    release_killed_at(int(sys.argv[1]), sys.argv[2:], os.getcwd())
