"""`llmzero-start --check --on-cluster`: the checks a compute node answers, as real jobs on the
local Slurm cluster (bin/llmzero-local-slurm). verl cannot be imported in CI (it is installed
--no-deps, without Ray and its GPU stack): the verl tests that pass run the CPU stand-in of
tests/verl_stubs.py (verl's real Hydra config, stand-ins for `import verl` and validate_config),
and one test shows what the real, incomplete install reports."""
from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from llmzero_slurm.backends.verl.schema import unavailable_reason, verl_config_dir
from llmzero_slurm.cluster_probe import PREFIX
from llmzero_slurm.errors import ConfigError
from llmzero_slurm.job_settings import CheckJob
from llmzero_slurm.paths import ROOT
from llmzero_slurm.render import render_check_job
from llmzero_slurm.schedulers import SlurmScheduler
from llmzero_slurm.schedulers.job_env import new_job_environment
from llmzero_slurm.search.tree import Status
from llmzero_slurm.tasks import reward_path
from llmzero_slurm.tasks.dataset import materialize

from conftest import finish, verl_task_files
from test_render import SHELL_CREDENTIALS, env_dump, shellcheck
from verl_stubs import stub_verl_environment

needs_verl_config = pytest.mark.skipif(unavailable_reason() is not None,
                                       reason=f"verl's config is not installed: {unavailable_reason()}")
KEY = "sk-test-preflight-0123456789abcdef"


def start_check(tmp_path: Path, config: dict[str, Any], *extra: str, env: dict[str, str] | None = None,
                prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """bin/llmzero-start CONFIG --check --on-cluster, as a user runs it (no API key unless given)."""
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config))
    base = {k: v for k, v in os.environ.items()
            if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY") and not k.lower().endswith("_proxy")}
    cmd = [*prefix, str(ROOT / "bin" / "llmzero-start"), str(path), "--check", "--on-cluster",
           "--run-dir", str(tmp_path / "run"), "--cluster-timeout", "300", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**base, "LLMZERO_PYTHON": sys.executable, **(env or {})})


def line(done: subprocess.CompletedProcess, start: str) -> str:
    found = [ln for ln in done.stdout.splitlines() if ln.startswith(start)]
    assert len(found) == 1, f"no single line starting {start!r} in:\n{done.stdout}\n{done.stderr}"
    return found[0]


def files_config(tmp_path: Path, **top: Any) -> dict[str, Any]:
    """The cpu backend on parquet files and a reward file, as a user's own task is given."""
    files = materialize("addition", tmp_path / "data")
    config: dict[str, Any] = {
        "name": "pf", "backend": "cpu", "scheduler": "slurm",
        "task": {"train_files": [str(files["train"])], "val_files": [str(files["val"])],
                 "test_files": [str(files["test"])], "reward_path": str(reward_path("addition"))},
        "slurm": {"cpus_per_task": 1, "mem": "1G", "setup": []},
        "controller": {"mem": "1G"}, "agents": {"backend": "heuristic"}}
    config.update(top)
    return config


@pytest.fixture
def llm_server() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP endpoint that answers 401 like an LLM API asked without a key; the paths
    it was asked for."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the http.server interface
            asked.append(self.path)
            self.send_response(401)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", asked
    server.shutdown()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers a byte."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


# -- without a cluster ------------------------------------------------------------------------

def test_on_cluster_needs_slurm_and_goes_with_check(tmp_path):
    done = start_check(tmp_path, files_config(tmp_path, scheduler="local"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--on-cluster needs a Slurm cluster" in line(done, "[FAIL] cluster:")
    alone = subprocess.run([str(ROOT / "bin" / "llmzero-start"), str(tmp_path / "exp.yaml"),
                            "--on-cluster"], capture_output=True, text=True, timeout=120)
    assert alone.returncode == 2 and "--on-cluster goes with --check" in alone.stderr
    assert not (tmp_path / "run").exists()


def test_check_job_script_runs_setup_then_the_checks_where_the_controller_runs(tmp_path):
    job = CheckJob("environment", "controller", "/opt/verl-env/bin/python", "cpu", "proj", "workflow",
                   2, "3G", "00:10:00", ["--reservation=maint"], ["module load cuda", "echo 'a b'"])
    text = render_check_job("exp", tmp_path, job, "check-environment-1", tmp_path / "plan.json")
    for directive in ("--partition=cpu", "--account=proj", "--qos=workflow", "--cpus-per-task=2",
                      "--mem=3G", "--time=00:10:00", "--no-requeue", "--reservation=maint",
                      f"--output={tmp_path}/environment-%j.out",
                      "--comment=llmz:check,run=exp,token=check-environment-1"):
        assert f"#SBATCH {directive}\n" in text
    body = text.split("set -e +u +o pipefail\n", 1)[1]
    assert body.index("module load cuda") < body.index("set +e -u -o pipefail") < body.index(
        f"exec /opt/verl-env/bin/python -m llmzero_slurm.cluster_probe {tmp_path}/plan.json")
    script = tmp_path / "check.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    shellcheck(script)
    bad = CheckJob("environment", "controller", "python3", partition="gpu --wrap=x")
    with pytest.raises(ConfigError, match="controller.partition"):
        render_check_job("exp", tmp_path, bad, "t", tmp_path / "plan.json")


def test_an_installs_check_job_reports_the_phases_pythons_own_packages(tmp_path, monkeypatch):
    """Packaging walkthrough: the check job put llmzero-slurm's folder first on PYTHONPATH. In
    a pip install that folder is the login venv's whole site-packages, so the phases' Python (a
    verl environment's) imported the login venv's packages, and the check reported them."""
    from llmzero_slurm import render
    site = tmp_path / "site-packages"            # an install's ROOT: the package among others
    (site / "pyarrow").mkdir(parents=True)
    (site / "pyarrow" / "__init__.py").write_text("__version__ = 'the login venv s'\n")
    (site / "llmzero_slurm").symlink_to(ROOT / "llmzero_slurm")
    monkeypatch.setattr(render, "ROOT", site)
    monkeypatch.setattr(render, "ROOT_FIRST", False)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"mode": "environment", "backend": "cpu", "builtin": "addition"}))
    script = tmp_path / "check.sbatch"
    script.write_text(render_check_job("exp", tmp_path, CheckJob("environment", "controller",
                                                                 sys.executable), "t", plan))
    done = subprocess.run(["bash", str(script)], env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    found = {c["check"]: c for c in map(json.loads, (line.removeprefix(PREFIX) for line in
                                                     done.stdout.splitlines()
                                                     if line.startswith(PREFIX)))}
    import pyarrow
    assert found["pyarrow"]["ok"] and found["pyarrow"]["detail"].startswith(
        f"{pyarrow.__version__} from {Path(pyarrow.__file__).parent} "), done.stdout + done.stderr


def test_a_check_job_submitted_by_hand_drops_every_credential_first(tmp_path):
    """`sbatch preflight/environment.sbatch` from the user's shell unset only
    ANTHROPIC_API_KEY and OPENAI_API_KEY: the key under agents.api_key_env, a gateway's token
    or a copy of a key reached the setup lines and the checks."""
    job = CheckJob("environment", "controller", env_dump(tmp_path),
                   setup=[f"env >{tmp_path}/setup-env.txt"])
    script = tmp_path / "check.sbatch"
    script.write_text(render_check_job("exp", tmp_path, job, "t", tmp_path / "plan.json",
                                       ["MY_LLM_CRED"]))
    shell = {"PATH": "/usr/bin:/bin", "LLMZ_NODE_DIR": str(tmp_path), **SHELL_CREDENTIALS}
    done = subprocess.run(["bash", str(script)], env=shell, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    kept = set(new_job_environment(shell, names=["MY_LLM_CRED"]))
    checks = json.loads((tmp_path / "env.json").read_text())
    assert {n for n in shell if n in checks} == kept == {"PATH", "LLMZ_NODE_DIR", "HF_TOKEN", "SHORT"}
    setup = dict(line.split("=", 1) for line in (tmp_path / "setup-env.txt").read_text().splitlines())
    assert {n for n in shell if n in setup} == kept


# -- on the local cluster ---------------------------------------------------------------------

@pytest.mark.slurm
def test_a_cpu_config_passes_and_its_jobs_never_see_the_key(tmp_path, llm_server):
    url, asked = llm_server
    config = files_config(tmp_path, agents={"backend": "openai", "base_url": url,
                                            "api_key_env": "MY_LLM_KEY"})
    config["slurm"]["setup"] = [f"env > {tmp_path}/env-$SLURM_JOB_ID.txt"]
    done = start_check(tmp_path, config, env={"MY_LLM_KEY": KEY, "ANTHROPIC_API_KEY": KEY + "x",
                                              "NO_PROXY": "127.0.0.1,localhost"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^cluster check: the environment check is job \d+ \(partition \(default\)\)",
                     done.stdout, re.M)
    for name in ("torch", "transformers", "peft", "pyarrow"):
        assert " from " in line(done, f"[ok] cluster {name}: ")
    assert "3 files readable" in line(done, "[ok] cluster data files:")
    assert "imports with Python" in line(done, f"[ok] cluster reward: {reward_path('addition')}")
    assert f"{url} answered HTTP 401 directly" in line(done, "[ok] monitor LLM endpoint:")
    assert asked == ["/v1"]
    dumps = list(tmp_path.glob("env-*.txt"))
    assert len(dumps) == 2                         # both jobs ran the setup lines
    for dump in dumps:
        text = dump.read_text()
        assert KEY not in text and "MY_LLM_KEY" not in text and "ANTHROPIC_API_KEY" not in text
    assert len(list((tmp_path / "run" / "preflight").glob("*-*.out"))) == 2


@pytest.mark.slurm
def test_a_data_file_the_compute_node_cannot_see_fails_naming_it(tmp_path):
    """The login node reads it (a private mount, as a login node's own filesystem), the
    compute node does not: the login checks pass and the cluster check names the file."""
    if not shutil.which("unshare") or subprocess.run(
            ["unshare", "--mount", "true"], capture_output=True).returncode:
        pytest.skip("needs unshare --mount (root) to give the login side a private filesystem")
    config = files_config(tmp_path)
    private = tmp_path / "login-only"
    private.mkdir()
    source = Path(config["task"]["val_files"][0])
    config["task"]["val_files"] = [str(private / source.name)]
    mount = 'mount -t tmpfs llmz-login-only "$1" && cp "$2" "$1"/ && shift 2 && exec "$@"'
    done = start_check(tmp_path, config, prefix=("unshare", "--mount", "--propagation", "private",
                                                 "sh", "-c", mount, "sh", str(private), str(source)))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "[ok] data and reward: 3 files" in done.stdout          # read on the login side
    failed = line(done, "[FAIL] cluster data files:")
    assert f"{private / source.name} does not exist on " in failed and "train" not in failed
    assert "[ok] cluster reward:" in done.stdout


def verl_config(tmp_path: Path, setup: list[str], **slurm: Any) -> dict[str, Any]:
    files = verl_task_files(tmp_path / "data")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"note": "a stand-in model folder"}')
    config = yaml.safe_load((ROOT / "examples" / "verl-qwen3-lora.yaml").read_text())
    config["task"].update(train_files=[str(files["train"])], val_files=[str(files["val"])],
                          test_files=[str(files["test"])], reward_path=str(reward_path("addition")))
    # The example's node (8 GPUs, 64 CPUs, 480G) cut to the local cluster's, as a user fits it
    # to theirs: --check asks sbatch --test-only whether a phase job would run.
    config["slurm"].update({"partition": None, "gpus_per_node": 4, "cpus_per_task": 8,
                            "mem": "4G", "setup": setup, **slurm})
    config.update(model_path=str(tmp_path / "model"), controller={"mem": "1G"},
                  agents={"backend": "heuristic"})
    config["trainer"].update(python=sys.executable, test_data_sources=["addition_test"])
    return config


def stand_in_setup(tmp_path: Path) -> list[str]:
    stub = stub_verl_environment(tmp_path / "stand-in", verl_config_dir())
    return [f"export PYTHONPATH={stub}${{PYTHONPATH:+:$PYTHONPATH}}",
            f"export VERL_STANDIN_LOG={tmp_path}/validate.jsonl"]


@pytest.mark.slurm
@needs_verl_config
def test_verl_phases_are_validated_on_the_compute_node_with_the_cpu_stand_in(tmp_path):
    done = start_check(tmp_path, verl_config(tmp_path, stand_in_setup(tmp_path)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert line(done, "[ok] cluster verl: ").startswith(
        f"[ok] cluster verl: 0.9.1 from {tmp_path}/stand-in/verl ")
    for kind in ("scratch", "evolve", "debug"):
        assert re.search(rf"^\[ok\] cluster verl config \({kind}\): \d+ overrides compose with "
                         rf"{tmp_path}/stand-in/verl/trainer/config and pass verl's validate_config$",
                         done.stdout, re.M), done.stdout
    calls = [json.loads(ln) for ln in (tmp_path / "validate.jsonl").read_text().splitlines()]
    assert [c["lora_adapter_path"] is not None for c in calls] == [False, True, True]
    assert all(c["n_gpus"] == 4 and c["use_reference_policy"] and not c["use_critic"] for c in calls)
    assert f"{tmp_path}/model: config.json readable" in line(done, "[ok] cluster model:")
    assert "3 files readable" in line(done, "[ok] cluster data files:")


@pytest.mark.slurm
@needs_verl_config
def test_a_phase_verl_refuses_is_named_by_kind_with_verls_reason(tmp_path):
    """Both log-prob micro-batch settings (one a raw override): the login node's composition
    takes them, verl's validate_config refuses them. (A batch that does not split over the
    GPUs is refused on the login node already.)"""
    config = verl_config(tmp_path, stand_in_setup(tmp_path))
    config["trainer"]["overrides"].append("actor_rollout_ref.rollout.log_prob_micro_batch_size=16")
    done = start_check(tmp_path, config)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "[FAIL]" not in done.stdout.split("cluster check:")[0]      # the login checks passed
    for kind in ("scratch", "evolve", "debug"):
        assert "validate_config refuses it: ValueError: [actor_rollout_ref.rollout] You have set " \
               "both 'log_prob_micro_batch_size' AND 'log_prob_micro_batch_size_per_gpu'." in line(
                   done, f"[FAIL] cluster verl config ({kind}):")


@pytest.mark.slurm
@needs_verl_config
def test_the_ci_verl_install_without_its_gpu_stack_fails_to_import(tmp_path):
    """The real verl of this environment (no Ray): what a user with an incomplete environment sees."""
    probe = subprocess.run([sys.executable, "-c", "import verl"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("verl imports here: this test is for an install without its dependencies")
    done = start_check(tmp_path, verl_config(tmp_path, []))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"cannot import verl with {sys.executable}: ModuleNotFoundError" in line(
        done, "[FAIL] cluster verl:")
    assert "validate_config cannot be imported" in line(done, "[FAIL] cluster verl config (evolve):")


@pytest.mark.slurm
def test_an_endpoint_that_does_not_answer_fails_within_seconds_through_the_proxy(tmp_path,
                                                                               silent_port):
    """The site's proxy variable reaches the monitor's partition; a proxy that never answers
    costs the 5-second limit, not minutes of retries."""
    config = files_config(tmp_path, agents={"backend": "openai",
                                            "base_url": "http://llm.example.invalid/v1"})
    done = start_check(tmp_path, config, env={"http_proxy": f"http://127.0.0.1:{silent_port}"})
    assert done.returncode == 2, done.stdout + done.stderr
    failed = line(done, "[FAIL] monitor LLM endpoint:")
    assert (f"http://llm.example.invalid/v1 did not answer through the proxy 127.0.0.1:{silent_port} "
            "within 5 s") in failed
    assert float(re.search(r"gave up after ([\d.]+) s", failed).group(1)) < 8
    assert "[FAIL] cluster" not in done.stdout


@pytest.mark.slurm
def test_failing_setup_lines_are_reported_with_their_error(tmp_path):
    config = files_config(tmp_path)
    config["slurm"]["setup"] = ["source /nonexistent/llmz-env/bin/activate"]
    done = start_check(tmp_path, config)
    assert done.returncode == 2, done.stdout + done.stderr
    failed = line(done, "[FAIL] cluster job:")
    assert re.search(r"job \d+ ended FAILED \(exit 1\) in the slurm.setup lines; its output ends: "
                     r".*/nonexistent/llmz-env/bin/activate: No such file or directory", failed)


@pytest.mark.slurm
def test_a_job_still_running_at_the_timeout_is_cancelled(tmp_path):
    config = files_config(tmp_path)
    config["slurm"]["setup"] = ["sleep 120"]
    done = start_check(tmp_path, config, "--cluster-timeout", "4")
    assert done.returncode == 2, done.stdout + done.stderr
    failed = line(done, "[FAIL] cluster job:")
    match = re.search(r"job (\d+) was still (PENDING|RUNNING).* after 4 s and was cancelled", failed)
    assert match, failed
    assert finish(SlurmScheduler(min_poll_s=0), match.group(1)).status == Status.CANCELLED


@pytest.mark.slurm
def test_a_partition_sbatch_refuses_is_a_batch_system_error(tmp_path):
    config = files_config(tmp_path, controller={"partition": "no-such-partition"})
    done = start_check(tmp_path, config)
    assert done.returncode == 5, done.stdout + done.stderr
    assert "sbatch failed" in done.stderr and "partition" in done.stderr.lower()


@pytest.mark.parametrize("end", [True, False])
def test_a_check_line_cut_short_is_a_failed_finding_naming_it(tmp_path, monkeypatch, end):
    """A check job's output cut short by a full disk (`LLMZ-CHECK {"check": "x"`) raised a
    JSONDecodeError traceback out of the preflight. Now that line is a failed finding naming
    it, beside the findings that were read."""
    from llmzero_slurm.cluster_probe import END, PREFIX
    from llmzero_slurm.controller import cluster_check
    from llmzero_slurm.render import CHECK_SETUP_DONE
    from llmzero_slurm.schedulers.base import JobState
    monkeypatch.setattr(cluster_check, "OUTPUT_GRACE_S", 0.0)
    cut = PREFIX + '{"check": "x"'
    good = PREFIX + json.dumps({"check": "python", "ok": True, "detail": "3.11"})
    output = tmp_path / "environment-7.out"
    output.write_text("\n".join([CHECK_SETUP_DONE, good, cut, *([END] if end else [])]) + "\n")
    checks = cluster_check.results("7", CheckJob("environment", "controller", "python"),
                                   JobState("7", "COMPLETED", Status.COMPLETED, 0), output, 60)
    assert ("cluster python", True) in [(c.name, c.ok) for c in checks]
    [unread] = [c for c in checks if cut in c.detail]
    assert not unread.ok and str(output) in unread.detail
    assert any(c.name == "cluster job" and not c.ok for c in checks) == (not end)


def test_the_node_imports_the_reward_file_as_the_phases_will(tmp_path):
    """The node's check only compiled the reward file, and the login node no longer refuses a
    verl reward whose packages it lacks (ray for verl.utils.reward_score): a package missing
    in the phases' environment too was first met by the first phase, after its queue wait."""
    from llmzero_slurm import cluster_probe
    reward = tmp_path / "reward.py"
    reward.write_text("import llmz_not_here_pkg\n")
    with pytest.raises(cluster_probe.Failed, match=re.escape(
            f"{reward} cannot be imported with Python {sys.version.split()[0]} on "
            f"{socket.gethostname()}: ModuleNotFoundError: No module named 'llmz_not_here_pkg'")):
        cluster_probe.reward(str(reward))
    reward.write_text("import json\n")
    assert cluster_probe.reward(str(reward)).endswith("imports with Python "
                                                      f"{sys.version.split()[0]}")


def test_a_waiting_check_job_says_how_long_it_has_waited_of_its_limit(monkeypatch):
    """A probe job queued behind others said only `PENDING (Priority)` every 30 s: the user
    could not tell how long it had waited, nor when --cluster-timeout would give it up."""
    from llmzero_slurm.controller import cluster_check
    from llmzero_slurm.schedulers.base import job_state
    clock = [1000.0]
    monkeypatch.setattr(cluster_check.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(cluster_check.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    polls = iter([*[job_state("7", "PENDING", reason="Priority")] * 16, job_state("7", "COMPLETED", 0)])

    class Scheduler:
        def states(self, ids):
            return {"7": next(polls)}

    said: list[str] = []
    cluster_check.wait(Scheduler(), {"7": CheckJob("environment", "controller", "python")},  # type: ignore[arg-type]
                       300.0, said.append)
    assert said == ["cluster check: job 7 (environment) PENDING (Priority), waited 0:00 of 5:00",
                    "cluster check: job 7 (environment) PENDING (Priority), waited 0:30 of 5:00",
                    "cluster check: job 7 (environment) COMPLETED, waited 0:32 of 5:00"]
