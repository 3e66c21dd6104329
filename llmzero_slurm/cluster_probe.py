"""The compute-node side of `llmzero-start --check --on-cluster`.

A short batch job runs this after the phases' own `slurm.setup` lines, with the interpreter the
phases use, to answer what the login node cannot: does the trainer import there (verl, and
which version), does that node's verl accept each kind of phase the search renders, can that
node read the model, data and reward files, and does the monitor's partition reach the LLM
endpoint. Each answer is one `LLMZ-CHECK {"check", "ok", "detail"}` line on stdout; the login
node reads them back (controller/cluster_check.py).

The standard library only at the top: the job's Python may lack this package's dependencies.
verl's checks import Hydra and verl when they run, as main_ppo would.

    python -m llmzero_slurm.cluster_probe PLAN.json
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import platform
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Sequence

from .agents.route import address, proxy_for   # standard library only, like this module
from .errors import LLMZeroError
from .paths import cache_dir as cache_folder   # standard library only, like this module

PREFIX = "LLMZ-CHECK "
END = "LLMZ-CHECK-END"
VERL_VERSION = "0.9.1"          # the version the phases' overrides are written for
# What each backend's phases import: where they run, these must be found.
TRAINER_PACKAGES = {"cpu": ("torch", "transformers", "peft", "pyarrow"), "verl": ("verl",)}
HEAD_BYTES = 4096


class Failed(Exception):
    """A check's finding, worded for the user."""


def emit(check: str, ok: bool, detail: str) -> None:
    print(PREFIX + json.dumps({"check": check, "ok": ok, "detail": detail}), flush=True)


def run(check: str, fn: Callable[[], str]) -> bool:
    """One check, one line; whatever it raises is its finding (a probe never stops early)."""
    try:
        emit(check, True, fn())
        return True
    except (Failed, LLMZeroError) as exc:
        emit(check, False, str(exc))
    except Exception as exc:  # an unexpected error is a finding too
        emit(check, False, f"{type(exc).__name__}: {exc}")
    return False


def where() -> str:
    """This node, job and interpreter, as the first line says."""
    job = os.environ.get("SLURM_JOB_ID", "none")
    partition = os.environ.get("SLURM_JOB_PARTITION", "?")
    return (f"job {job} on {socket.gethostname()} (partition {partition}), Python "
            f"{platform.python_version()} at {sys.executable}")


def package(name: str) -> str:
    """Import a package as the phases will; its version and where it came from."""
    started = time.monotonic()
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # an import can fail in any way
        raise Failed(f"cannot import {name} with {sys.executable}: {type(exc).__name__}: "
                     f"{exc} (does slurm.setup activate the environment that has it?)") from None
    version = str(getattr(module, "__version__", "unknown version"))
    origin = Path(getattr(module, "__file__", None) or "?").parent
    note = ""
    if name == "verl" and version != VERL_VERSION:
        note = f"; the phases' overrides are written for verl {VERL_VERSION}"
    return f"{version} from {origin} ({time.monotonic() - started:.1f} s to import){note}"


def installed(name: str) -> str:
    """The rollout engine is found, not imported: importing it may need a GPU."""
    if importlib.util.find_spec(name) is None:
        raise Failed(f"{name} (trainer.rollout_engine) is not installed for {sys.executable}")
    return f"{name} is installed (not imported here: it may need a GPU)"


def verl_phase(overrides: Sequence[str]) -> str:
    """Compose the phase's overrides with this node's verl config, then run verl's own
    validation on the result, as main_ppo does before it starts Ray."""
    from .backends.verl.schema import compose, verl_config_dir
    cfg = compose(overrides)
    try:
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
    except Exception as exc:
        raise Failed(f"composes with {verl_config_dir()}, but verl's validate_config cannot be "
                     f"imported: {type(exc).__name__}: {exc}") from None
    try:
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg),
                        use_critic=need_critic(cfg))
    except Exception as exc:  # verl raises AssertionError and ValueError
        raise Failed(f"composes, but verl's validate_config refuses it: {type(exc).__name__}: "
                     f"{exc}") from None
    return (f"{len(overrides)} overrides compose with {verl_config_dir()} and pass verl's "
            "validate_config")


def read_head(path: str) -> int:
    """Open and read the start of a file as a job would; its size."""
    try:
        with open(path, "rb") as fh:
            fh.read(HEAD_BYTES)
        return os.stat(path).st_size
    except FileNotFoundError:
        raise Failed(f"{path} does not exist on {socket.gethostname()}") from None
    except IsADirectoryError:
        raise Failed(f"{path} is a directory, not a file") from None
    except OSError as exc:
        raise Failed(f"{path} cannot be read on {socket.gethostname()}: {exc.strerror}") from None


def data_files(files: Sequence[str], builtin: str | None) -> str:
    if builtin:
        return f"builtin task {builtin}: no files to read"
    problems, size = [], 0
    for path in files:
        try:
            size += read_head(path)
        except Failed as exc:
            problems.append(str(exc))
    if problems:
        raise Failed("; ".join(problems))
    return f"{len(files)} files readable ({size / 1e6:.1f} MB)"


def reward(path: str | None) -> str:
    if not path:
        return "no reward file (a builtin task scores itself)"
    read_head(path)
    try:
        compile(Path(path).read_bytes(), path, "exec")   # bytes: its own coding, as python reads it
    except SyntaxError as exc:
        raise Failed(f"{path} does not compile with Python {platform.python_version()}: "
                     f"{exc.msg} (line {exc.lineno})") from None
    # Imported as verl imports it: the login node may lack the packages it needs (ray, for
    # verl.utils.reward_score) and so leaves this to the phases' own Python.
    spec = importlib.util.spec_from_file_location("llmzero_probe_reward", path)
    try:
        if spec is None or spec.loader is None:
            raise ImportError("not a Python file")
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except (Exception, SystemExit) as exc:  # the user's file: any import failure, by name
        raise Failed(f"{path} cannot be imported with Python {platform.python_version()} on "
                     f"{socket.gethostname()}: {type(exc).__name__}: {exc}") from None
    return f"{path} is readable and imports with Python {platform.python_version()}"


def model(path: str | None) -> str:
    """An HF model directory, or a hub id that must sit in this node's HF cache."""
    if not path:
        return "no model_path (the cpu trainer builds its own base model)"
    if os.path.isabs(path) or os.path.exists(path):
        if not os.path.isdir(path):
            raise Failed(f"{path} is not a directory on {socket.gethostname()}")
        read_head(os.path.join(path, "config.json"))
        return f"{path}: config.json readable ({len(os.listdir(path))} entries)"
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        raise Failed(f"{path} is no directory here, and huggingface_hub is not installed to "
                     "look it up as a hub id") from None
    found = try_to_load_from_cache(path, "config.json")
    if isinstance(found, str):
        return f"hub id {path}: in this node's HF cache ({Path(found).parent})"
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        raise Failed(f"hub id {path} is not in this node's HF cache and HF_HUB_OFFLINE is set")
    return f"hub id {path} is not in this node's HF cache: each phase will try to download it"


def cache_dir(path: str | None) -> str:
    """The cpu trainer keeps its base models here; the phases must be able to write it."""
    folder = cache_folder(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".llmz-check-"):
            pass
    except OSError as exc:
        raise Failed(f"{folder} is not writable on {socket.gethostname()}: {exc.strerror}") from None
    return f"{folder} is writable"


def endpoint(url: str, timeout_s: float) -> str:
    """Any HTTP answer (401 included: the job holds no key) means the monitor can reach the
    LLM; the proxy variables apply as they do to the SDKs. Bounded in wall time, name
    resolution included."""
    proxy = proxy_for(url)                    # the route the monitor's own probe takes
    host, port = address(proxy) if proxy else (None, 0)
    via = f" through the proxy {host}:{port}" if proxy else " directly"   # no password shown
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(
        {urllib.parse.urlsplit(url).scheme: proxy} if proxy else {}))
    answer: dict[str, Any] = {}

    def ask() -> None:
        request = urllib.request.Request(url, headers={"User-Agent": "llmzero-slurm-check"})
        try:
            with opener.open(request, timeout=timeout_s) as resp:
                answer["status"] = resp.status
        except urllib.error.HTTPError as exc:
            answer["status"] = exc.code
        except Exception as exc:  # URLError, timeouts, TLS errors
            answer["error"] = getattr(exc, "reason", None) or exc

    started = time.monotonic()
    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(timeout_s + 1.0)
    took = time.monotonic() - started
    if "status" in answer:
        return f"{url} answered HTTP {answer['status']}{via} in {took:.1f} s"
    reason = answer.get("error", "no answer at all (name resolution or the connection hung)")
    raise Failed(f"{url} did not answer{via} within {timeout_s:.0f} s (gave up after "
                 f"{took:.1f} s): {reason}; the monitor would judge with the offline stopper")


def environment(plan: dict[str, Any]) -> None:
    run("compute node", where)
    for name in TRAINER_PACKAGES[plan["backend"]]:
        run(name, functools.partial(package, name))
    if plan["backend"] == "verl":
        if plan.get("rollout_engine"):
            run("rollout engine", lambda: installed(plan["rollout_engine"]))
        for kind, overrides in plan.get("phases", []):
            run(f"verl config ({kind})", functools.partial(verl_phase, overrides))
    else:
        run("base-model cache", lambda: cache_dir(plan.get("cache_dir")))
    run("model", lambda: model(plan.get("model_path")))
    run("data files", lambda: data_files(plan.get("data_files", []), plan.get("builtin")))
    run("reward", lambda: reward(plan.get("reward_path")))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        plan = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    except (IndexError, OSError, ValueError) as exc:
        emit("run directory", False, f"the check's plan {args[:1]} cannot be read on "
             f"{socket.gethostname()} ({exc}): the run directory must be on a filesystem the "
             "compute nodes share")
        print(END, flush=True)
        return 0
    if plan.get("mode") == "endpoint":
        run("compute node", where)
        run("LLM endpoint", lambda: endpoint(plan["url"], float(plan.get("timeout_s", 5.0))))
    else:
        environment(plan)
    print(END, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
