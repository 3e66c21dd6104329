"""A local call job (the monitor without Slurm): submitit's LocalExecutor, started apart.

submitit starts its local job in the caller's process group, so a Ctrl-C in the terminal of a
foreground controller reached the monitor's submitit process too, which died with a
KeyboardInterrupt traceback in the controller's terminal; the controller stops its monitor
itself. Here the job's process leads a session of its own, as a local phase's supervisor does.

Run with -m, this module is that process: submitit's local job controller with the folder's
%j filled in by its job id (its pid), as Slurm fills it in. submitit's own would create a
folder literally named %j, and leave it empty.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from submitit import LocalExecutor
from submitit.local.local import Controller, LocalJob

from .local_table import CALL_MODULE


class SessionExecutor(LocalExecutor):
    """A LocalExecutor whose one-task job runs in a session of its own; the environment is
    what submitit.local.local.start_controller passes its Controller."""

    def _submit_command(self, command: str) -> LocalJob[Any]:
        env = dict(os.environ, SUBMITIT_LOCAL_NTASKS="1", SUBMITIT_LOCAL_COMMAND=command,
                   SUBMITIT_LOCAL_TIMEOUT_S=str(int(60 * self.parameters.get("timeout_min", 2.0))),
                   SUBMITIT_LOCAL_SIGNAL_DELAY_S=str(int(self.parameters.get("signal_delay_s", 30))),
                   SUBMITIT_LOCAL_NODEID="0", SUBMITIT_LOCAL_JOB_NUM_NODES="1",
                   SUBMITIT_STDERR_TO_STDOUT="", SUBMITIT_EXECUTOR="local", CUDA_VISIBLE_DEVICES="",
                   SUBMITIT_LOCAL_WITH_SHELL="")
        process = subprocess.Popen([sys.executable, "-m", CALL_MODULE, str(self.folder)], env=env,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        return LocalJob(folder=self.folder, job_id=str(process.pid), process=process)


if __name__ == "__main__":
    Controller(Path(sys.argv[1].replace("%j", str(os.getpid())))).run()
