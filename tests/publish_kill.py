"""Run the real `dprelease` command and SIGKILL it at the n-th file-system step after the ledger
commit (the window in which a release is stored but its files are being published).

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


if __name__ == "__main__":
    _install(int(sys.argv[1]))
    from dprelease.cli import main

    sys.argv = ["dprelease", *sys.argv[2:]]
    main()
