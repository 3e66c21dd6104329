"""Rendering phase scripts: what the directives say, and that no value can run as code."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from llmzero_slurm.config import SlurmConfig, TaskConfig, parse_config
from llmzero_slurm.errors import ConfigError
from llmzero_slurm.paths import ROOT
from llmzero_slurm.render import PhaseSpec, render, write_phase_script
from llmzero_slurm.schedulers.base import parse_time
from llmzero_slurm.schedulers.job_env import new_job_environment
from llmzero_slurm.schedulers.directives import read_directives
from llmzero_slurm.search.tree import Kind, Node, Resume

from conftest import files_of

# A stand-in interpreter that records the argv it was given, to see exactly what ran.
ARGV_DUMP = f"""#!{sys.executable}
import json, os, sys
assert "ANTHROPIC_API_KEY" not in os.environ, "an API key reached the trainer"
with open(os.path.join(os.environ["LLMZ_NODE_DIR"], "argv.json"), "w") as fh:
    json.dump(sys.argv[1:], fh)
"""


def spec(tmp_path: Path, **changes) -> PhaseSpec:
    base = PhaseSpec("exp1", 7, "evolve", tmp_path / "nodes" / "0007", "tok-abc",
                     {"lr": 1e-5, "use_kl_loss": True, "total_training_steps": 20},
                     task=TaskConfig(builtin="addition"))
    return replace(base, **changes)


def directives(text: str) -> dict[str, str]:
    return read_directives(text)


def test_directives_come_from_the_config(tmp_path):
    slurm = SlurmConfig(partition="gpu", account="proj-1", qos="high", constraint="a100&ib",
                        nodes=2, gpus_per_node=4, gpu_type="a100", cpus_per_task=16, mem="200G",
                        time="1-12:00:00", exclusive=True,
                        extra_directives=["--reservation=llm", "--mail-type=END"],
                        setup=["module load cuda/12.4", "source ~/venvs/verl/bin/activate"])
    text = render(spec(tmp_path, slurm=slurm))
    d = directives(text)
    assert d["job-name"] == "llmz-exp1-0007-evolve"
    assert d["comment"] == "llmz:node=0007,token=tok-abc"
    assert d["output"] == f"{tmp_path}/nodes/0007/slurm-%j.out"
    assert (d["partition"], d["account"], d["qos"], d["constraint"]) == ("gpu", "proj-1", "high", "a100&ib")
    assert (d["nodes"], d["cpus-per-task"], d["mem"], d["time"]) == ("2", "16", "200G", "1-12:00:00")
    assert d["gpus-per-node"] == "a100:4" and "gres" not in d
    assert "exclusive" in d and "requeue" in d and d["reservation"] == "llm"
    assert d["signal"].startswith("B:USR1@")
    assert text.index("module load cuda/12.4") < text.index("source ~/venvs") < text.index("llmz_run ")


def test_every_bad_directive_of_the_slurm_section_is_named_at_once(tmp_path):
    """The script named its first bad #SBATCH value only: five typos in `slurm:` took five
    rounds of --check."""
    slurm = SlurmConfig(partition="a b", constraint="x y", nodes=0, gpus_per_node=1,
                        gpu_type="a 100", mem="lots", time="abc",
                        extra_directives=["--output=x", "--reservation=llm"])
    with pytest.raises(ConfigError) as err:
        render(spec(tmp_path, slurm=slurm))
    assert [e.key for e in err.value.errors] == [
        "slurm.partition", "slurm.constraint", "slurm.nodes", "slurm.gpu_type", "slurm.mem",
        "slurm.time", "slurm.extra_directives[0]"]
    assert str(err.value).startswith("7 problems found in the phase script's #SBATCH lines:")


def test_gres_spelling_no_gpus_and_no_requeue(tmp_path):
    d = directives(render(spec(tmp_path, slurm=SlurmConfig(gpus_per_node=2, gpu_directive="gres"))))
    assert d["gres"] == "gpu:2" and "gpus-per-node" not in d
    d = directives(render(spec(tmp_path, slurm=SlurmConfig(requeue=False))))
    assert "gres" not in d and "gpus-per-node" not in d and "no-requeue" in d and "requeue" not in d


def test_cpu_trainer_command_follows_its_contract(tmp_path):
    parent = tmp_path / "nodes" / "0003"
    s = spec(tmp_path, resume_dir=parent, resume_step=40,
             trainer={"cache_dir": "/scratch/cache", "max_memory_mb": 900})
    run_line = next(line for line in render(s).splitlines() if line.startswith("llmz_run "))
    argv = run_line.split()[1:]
    assert argv[0] == sys.executable and argv[1].endswith("jobs/cpu_grpo.py")
    # The node's outputs follow $LLMZ_NODE_DIR: a rerun by hand may send them elsewhere.
    assert '"--output-dir=${LLMZ_NODE_DIR}"' in argv and "--task=addition" in argv
    assert str(s.node_dir) not in run_line
    assert f"--init-adapter={parent}/ckpt/global_step_40" in argv and "--step-offset=40" in argv
    assert "--cache-dir=/scratch/cache" in argv and "--max-memory-mb=900" in argv
    assert argv[-3:] == ["lr=1e-05", "total_training_steps=20", "use_kl_loss=true"]
    run_line = next(line for line in render(spec(tmp_path, task=files_task())).splitlines()
                    if line.startswith("llmz_run "))
    assert ("--train-files=/d/train.parquet --val-files=/d/val.parquet "
            "--test-files=/d/test.parquet --reward-path=/d/reward.py") in run_line
    assert "--reward-name" not in run_line
    assert "--reward-path=/d/reward.py --reward-name=lenient " in render(
        spec(tmp_path, task=files_task(reward_name="lenient")))
    with pytest.raises(ConfigError, match="task.train_files"):
        render(spec(tmp_path, task=files_task(train_files=["/d/a.parquet", "/d/b.parquet"])))
    with pytest.raises(ConfigError, match="task.reward_path"):
        render(spec(tmp_path, task=files_task(reward_path=None)))


def test_cpu_warm_start_settings_reach_the_trainer(tmp_path):
    cfg = parse_config({"name": "demo", "task": {
        "train_files": ["/d/train.parquet"], "val_files": ["/d/val.parquet"],
        "test_files": ["/d/test.parquet"], "reward_path": "/d/reward.py",
        "warm_start": {"band": [0.3, 0.5], "max_steps": 900}}})
    text = render(spec(tmp_path, task=cfg.task))
    assert "--warm-start-band=0.3:0.5 --warm-start-max-steps=900" in text
    assert "--warm-start-steps" not in text
    none = replace(cfg.task, warm_start=replace(cfg.task.warm_start, band=None, max_steps=None,
                                                  steps=0))
    assert "--warm-start-steps=0" in render(spec(tmp_path, task=none))
    assert "--warm-start" not in render(spec(tmp_path))   # a built-in task brings its own band
    with pytest.raises(ConfigError, match="task.warm_start.band"):
        parse_config({"name": "demo", "task": {"builtin": "sort", "warm_start": {"band": [0.5]}}})
    with pytest.raises(ConfigError, match="task.warm_start"):
        parse_config({"name": "demo", "backend": "verl", "model_path": "m",
                      "task": {"warm_start": {"steps": 10}}})


def test_cpu_script_fixes_what_its_numbers_depend_on(tmp_path, monkeypatch):
    """Threads and MKL's mode are literal in the script, not taken from the shell that runs it;
    a numeric path the controller was started with is carried over."""
    monkeypatch.delenv("MKL_CBWR", raising=False)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    text = render(spec(tmp_path, slurm=SlurmConfig(cpus_per_task=3)))
    for line in ("export OMP_NUM_THREADS=3", "export MKL_NUM_THREADS=3",
                 "export MKL_CBWR=AUTO,STRICT", "export ATEN_CPU_CAPABILITY=avx2"):
        assert line in text.splitlines()
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    text = render(spec(tmp_path))
    assert "export MKL_CBWR=COMPATIBLE" in text and "ATEN_CPU_CAPABILITY" not in text


def files_task(**changes) -> TaskConfig:
    return replace(TaskConfig(train_files=["/d/train.parquet"], val_files=["/d/val.parquet"],
                              test_files=["/d/test.parquet"], reward_path="/d/reward.py"), **changes)


def test_for_node_takes_everything_from_config_and_node(tmp_path):
    cfg = parse_config({"name": "demo", "hparams": {"lr": 1e-3}, "task": {"builtin": "addition"},
                        "slurm": {"partition": "cpu", "time": "00:30:00"}})
    node = Node(id=12, parent=3, kind=Kind.EVOLVE, hparams={"lr": 2e-3}, resume=Resume(3, 60))
    s = PhaseSpec.for_node(cfg, node, tmp_path / "0012", "tok-x", resume_dir=tmp_path / "0003")
    assert s.secret_names == ("ANTHROPIC_API_KEY",)      # agents.api_key_env, as configured
    d = directives(render(s))
    assert d["job-name"] == "llmz-demo-0012-evolve" and d["partition"] == "cpu"
    assert "--step-offset=60" in render(s)
    with pytest.raises(ConfigError, match="resume"):
        PhaseSpec.for_node(cfg, node, tmp_path / "0012", "tok-x")


def test_rendered_script_is_valid_bash_and_shellcheck_clean(tmp_path):
    slurm = SlurmConfig(gpus_per_node=1, setup=["export FOO=bar"])
    umask = os.umask(0o002)     # a group's: the script was chmod'ed 0755 whatever the umask
    try:
        path = write_phase_script(spec(tmp_path, slurm=slurm))
    finally:
        os.umask(umask)
    assert path == tmp_path / "nodes" / "0007" / "phase.sbatch"
    assert path.stat().st_mode & 0o777 == 0o775
    subprocess.run(["bash", "-n", str(path)], check=True)
    shellcheck(path)


def test_the_local_cluster_script_is_shellcheck_clean():
    shellcheck(ROOT / "bin" / "llmzero-local-slurm")


def shellcheck(path: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (make slurm-up installs it)")
    proc = subprocess.run(["shellcheck", "--severity=warning", "--shell=bash", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("changes, key", [
    ({"hparams": {"lr": "1e-5; rm -rf ~"}}, "lr"),
    ({"hparams": {"target_modules": "$(curl x)"}}, "target_modules"),
    ({"hparams": {"target_modules": "all-linear\nrm -rf ~"}}, "target_modules"),
    ({"hparams": {"target_modules": "q" * 10000}}, "target_modules"),
    ({"hparams": {"lr_typo": 1e-3}}, "lr_typo"),
    ({"hparams": {"gpu_memory_utilization": 0.5}}, "gpu_memory_utilization"),   # verl-only
    ({"experiment": "x; reboot"}, "experiment"),
    ({"experiment": "e" * 5000}, "experiment"),
    ({"token": "$(id)"}, "token"),
    ({"kind": "scratch`id`"}, "kind"),
    ({"node_dir": Path("/runs/with space/0007")}, "node_dir"),
    ({"node_dir": Path("/runs/100%/0007")}, "node_dir"),
    ({"node_dir": Path("/runs/x\n#SBATCH --wrap=id/0007")}, "node_dir"),
    ({"trainer": {"evil": "$(id)"}}, "trainer.evil"),
    ({"trainer": {"max_memory_mb": "900; id"}}, "trainer.max_memory_mb"),
    ({"task": files_task(train_files=["/d/a\n/d/b"])}, "command["),
    ({"task": files_task(train_files=["/d/" + "a" * 5000])}, "command["),
    ({"slurm": SlurmConfig(partition="gpu;id")}, "slurm.partition"),
    ({"slurm": SlurmConfig(account="a b")}, "slurm.account"),
    ({"slurm": SlurmConfig(constraint="a100 --wrap=id")}, "slurm.constraint"),
    ({"slurm": SlurmConfig(mem="16G\n#SBATCH --uid=0")}, "slurm.mem"),
    ({"slurm": SlurmConfig(time="forever")}, "slurm.time"),
    ({"slurm": SlurmConfig(gpus_per_node=1, gpu_type="a100$(id)")}, "slurm.gpu_type"),
    ({"slurm": SlurmConfig(nodes=0)}, "slurm.nodes"),
    ({"slurm": SlurmConfig(extra_directives=["--reservation=x y"])}, "slurm.extra_directives[0]"),
    ({"slurm": SlurmConfig(extra_directives=["--output=/tmp/elsewhere"])}, "slurm.extra_directives[0]"),
    ({"slurm": SlurmConfig(extra_directives=["--mail-user=$(id)"])}, "slurm.extra_directives[0]"),
    # Issue 14.4: every later squeue/sacct/scancel would have asked the wrong cluster.
    ({"slurm": SlurmConfig(extra_directives=["--clusters=gpu2"])}, "slurm.extra_directives[0]"),
    # squeue and sacct list an array's tasks as 123_0, 123_1: the recorded 123 is never found.
    ({"slurm": SlurmConfig(extra_directives=["--array=0-3"])}, "slurm.extra_directives[0]"),
    # The script's own --signal=B:USR1@120 is how it learns that its time limit is near.
    ({"slurm": SlurmConfig(extra_directives=["--signal=TERM@60"])}, "slurm.extra_directives[0]"),
    ({"slurm": SlurmConfig(setup=["module load a", "echo ok\nrm -rf ~"])}, "slurm.setup[1]"),
])
def test_hostile_values_are_refused_naming_the_key(tmp_path, changes, key):
    with pytest.raises(ConfigError) as err:
        render(spec(tmp_path, **changes))
    assert f"'{key}" in str(err.value)


@pytest.mark.parametrize("limit", [0, -512])
def test_a_memory_limit_below_one_mb_is_refused(tmp_path, limit):
    """0 meant no limit without a word; a negative one failed inside the job."""
    with pytest.raises(ConfigError) as err:
        render(spec(tmp_path, trainer={"max_memory_mb": limit}))
    assert err.value.key == "trainer.max_memory_mb" and "at least 1" in err.value.problem


@pytest.mark.parametrize("line, said", [
    # sbatch takes any unambiguous prefix of a long option's name (getopt_long).
    ("--job-n=mine", "--job-n stands for --job-name"),
    ("--out=/tmp/elsewhere", "--out stands for --output"),
    ("--sig=TERM@60", "--sig stands for --signal"),
    ("--open=truncate", "--open stands for --open-mode"),
    ("--arr=0-3", "--arr stands for --array"),
    ("--ti=9:00:00", "--ti stands for --time"),
    ("--n=2", "--n is ambiguous (--no-requeue, --nodes, --ntasks"),
    # What the script sets from the config, which a second directive would change behind it.
    ("--nodes=4", "--nodes is already in the script, from slurm.nodes"),
    ("--ntasks-per-node=8", "from slurm.nodes (one task per node"),
    ("--cpus-per-task=32", "from slurm.cpus_per_task"),
    ("--gpus=8", "from slurm.gpus_per_node"),
    ("--gres=gpu:a100:4", "from slurm.gpus_per_node"),
    ("--mem-per-cpu=4G", "from slurm.mem"),
    ("--time=9:00:00", "from slurm.time"),
])
def test_an_extra_directive_cannot_replace_what_the_script_sets(tmp_path, line, said):
    """--out=, --job-n=, --sig= passed the check of option names (sbatch reads them as
    --output, --job-name, --signal), and --nodes, --mem or --time were taken although the
    script sets them from the config: the later line won, behind the config's back."""
    with pytest.raises(ConfigError) as err:
        render(spec(tmp_path, slurm=SlurmConfig(gpus_per_node=1, mem="16G",
                                                extra_directives=[line])))
    assert "'slurm.extra_directives[0]'" in str(err.value) and said in str(err.value)
    fine = ["--reservation=llm", "--gres-flags=enforce-binding", "--mem-bind=local",
            "--time-min=1:00:00", "--wait-all-nodes=1", "--mail-type=END"]
    assert "#SBATCH --time-min=1:00:00" in render(spec(tmp_path, slurm=SlurmConfig(
        extra_directives=fine)))
    with pytest.raises(ConfigError, match=r"--cpus-per-task is already in the script, from "
                                          r"controller\.cpus"):
        controller_job(tmp_path, extra_directives=["--cpus-per-task=4"])


@pytest.mark.parametrize("line", ["--tres-per-task=gres/gpu:2", "--tres-per-task=gres/gpu:a100:1",
                                  "--tres-per-task=cpu:4,gres/gpu=1", "--tres-per=gres/GPU:2"])
def test_an_extra_directive_cannot_ask_for_gpus_through_tres_per_task(tmp_path, line):
    """--gpus, --gpus-per-task and --gres=gpu:N were refused in slurm.extra_directives, but
    --tres-per-task=gres/gpu:N (what sbatch makes of --gpus-per-task=N) was taken: the phase
    asked for GPUs the config's GPU count, and every check of it, never saw. It is refused,
    CPU phase or GPU phase, naming the key to set; other trackable resources stay the user's."""
    for gpus in (0, 1):
        with pytest.raises(ConfigError) as err:
            render(spec(tmp_path, slurm=SlurmConfig(gpus_per_node=gpus, extra_directives=[line])))
        assert "'slurm.extra_directives[0]'" in str(err.value)
        assert "a gpu entry of --tres-per-task asks for GPUs" in str(err.value)
        assert "from slurm.gpus_per_node (with slurm.gpu_type" in str(err.value)
    d = directives(render(spec(tmp_path, slurm=SlurmConfig(
        gpus_per_node=1, extra_directives=["--tres-per-task=license/matlab:1,gres/nvme:1",
                                           "--tres-bind=gres/gpu:single:1"]))))
    assert d["tres-per-task"] == "license/matlab:1,gres/nvme:1"
    with pytest.raises(ConfigError, match=r"--tres is ambiguous \(--tres-bind, --tres-per-task\)"):
        render(spec(tmp_path, slurm=SlurmConfig(extra_directives=["--tres=gres/gpu:1"])))


@pytest.mark.parametrize("line", ["--gres=gpu:1", "--gres=nvme:1,gpu:a100:2", "--gres=gres/gpu:1",
                                  "--gres=shard:2", "--gres=mps:50",
                                  "--tres-per-task=gres/shard:1", "--tres-per-task=gres/mps:25"])
def test_an_extra_directive_cannot_ask_for_gpus_or_gpu_shares_through_gres(tmp_path, line):
    """A CPU phase (no GPUs in the script) took --gres=gpu:1, which holds a GPU the phase never
    uses for its whole run, and every phase took gres/shard or gres/mps (slices of a GPU), which
    the config's GPU count and its checks never saw. Each is refused naming the key to set; a
    --gres for another node resource stays the user's, beside --gpus-per-node GPUs too."""
    for gpus in (0, 1):
        with pytest.raises(ConfigError) as err:
            render(spec(tmp_path, slurm=SlurmConfig(gpus_per_node=gpus, extra_directives=[line])))
        assert "'slurm.extra_directives[0]'" in str(err.value)
        option, entry = line[2:].split("=", 1)
        kind = entry.split(",")[-1].split(":")[0].split("/")[-1]
        assert f"a {kind} entry of --{option} asks for GPUs" in str(err.value)
        assert "slurm.gpus_per_node" in str(err.value)
    d = directives(render(spec(tmp_path, slurm=SlurmConfig(
        gpus_per_node=2, extra_directives=["--gres=nvme:1"]))))
    assert d["gres"] == "nvme:1" and d["gpus-per-node"] == "2"
    with pytest.raises(ConfigError, match="--gres is already in the script"):
        render(spec(tmp_path, slurm=SlurmConfig(gpus_per_node=2, gpu_directive="gres",
                                                extra_directives=["--gres=nvme:1"])))


@pytest.mark.parametrize("line, said", [
    ("--partition=other", "set slurm.partition instead"),
    ("--part=other", "--part stands for --partition"),
    ("--acc=other", "set slurm.account instead"),
    ("--account=other", "set slurm.account instead"),
    ("--qos=high", "set slurm.qos instead"),
    ("--q=high", "--q stands for --qos"),
    ("--constraint=v100", "set slurm.constraint instead"),
    ("--const=v100", "--const stands for --constraint"),
    ("-p=other", "must be one long option"),
    ("-A=other", "must be one long option"),
])
def test_an_extra_directive_cannot_place_the_phases_elsewhere(tmp_path, line, said):
    """Review: --partition, --account, --qos and --constraint (abbreviated too) were taken in
    slurm.extra_directives, and the later #SBATCH line won: phases ran elsewhere than
    slurm.partition, while the monitor and the cluster checks used slurm.partition. They are
    refused, naming the key to set, whether that key is set or not; so is a controller job's
    second --partition (its --constraint, which no key sets, is its own)."""
    for slurm in (SlurmConfig(partition="gpu", extra_directives=[line]),
                  SlurmConfig(extra_directives=[line])):
        with pytest.raises(ConfigError) as err:
            render(spec(tmp_path, slurm=slurm))
        assert "'slurm.extra_directives[0]'" in str(err.value) and said in str(err.value)
    with pytest.raises(ConfigError, match="set controller.partition instead"):
        controller_job(tmp_path, extra_directives=["--partition=other"])
    assert "#SBATCH --constraint=skylake\n" in controller_job(
        tmp_path, extra_directives=["--constraint=skylake"]).read_text()


@pytest.mark.parametrize("line", ["--export=NONE", "--export=ALL,FOO=1"])
def test_an_extra_export_directive_is_refused_saying_why(tmp_path, line):
    """Review: extra_directives: ['--export=NONE'] was accepted and did nothing: every job is
    submitted with --export=ALL,LLMZ_SCHEDULED=1 on sbatch's command line, which wins over an
    #SBATCH line. It is refused, saying why and what to do instead."""
    for render_job in (lambda: render(spec(tmp_path, slurm=SlurmConfig(extra_directives=[line]))),
                       lambda: controller_job(tmp_path, extra_directives=[line])):
        with pytest.raises(ConfigError) as err:
            render_job()
        assert "extra_directives[0]" in str(err.value)
        assert "the submitting environment, less its credentials" in str(err.value)
        assert "slurm.setup" in str(err.value)


@pytest.mark.parametrize("line, said", [
    ("--wait", "sbatch would answer only when the job ends"),
    ("--test-only", "submits no job"),
    ("--test", "--test stands for --test-only"),
    ("--hold", "held until someone releases it"),
    ("--hol", "--hol stands for --hold"),
    ("--export-file=/home/me/env", "past the credential filter"),
    ("--wai", "--wai is ambiguous (--wait, --wait-all-nodes)"),
    ("--exp=NONE", "--exp is ambiguous (--export, --export-file)"),
    ("--reservation=ab#cd", "reads a #SBATCH line only up to a '#'"),
    ("--mail-user=me#x@site.org", "reads a #SBATCH line only up to a '#'"),
])
def test_an_extra_directive_that_breaks_submission_is_refused_saying_why(tmp_path, line, said):
    """Review: --wait kept sbatch --parsable from answering until the phase ended, --test-only
    submitted nothing ("not a job id"), --hold queued every phase for ever, --export-file put
    a file's variables past the credential filter; and sbatch cut --job-name=ab#cd to ab."""
    for render_job in (lambda: render(spec(tmp_path, slurm=SlurmConfig(extra_directives=[line]))),
                       lambda: controller_job(tmp_path, extra_directives=[line])):
        with pytest.raises(ConfigError) as err:
            render_job()
        assert "extra_directives[0]" in str(err.value) and said in str(err.value)


def test_extra_directives_may_size_what_the_script_leaves_unset(tmp_path):
    """Without slurm.mem the script asks for no memory, and without GPUs for no --gres: a
    per-CPU memory size or a node resource like nvme is the user's own to ask for."""
    d = directives(render(spec(tmp_path, slurm=SlurmConfig(
        gpus_per_node=0, extra_directives=["--mem-per-cpu=4G", "--gres=nvme:1"]))))
    assert d["mem-per-cpu"] == "4G" and d["gres"] == "nvme:1" and "mem" not in d
    with pytest.raises(ConfigError, match="from slurm.mem"):
        render(spec(tmp_path, slurm=SlurmConfig(mem="64G", extra_directives=["--mem-per-cpu=4G"])))



HOSTILE = ["$(touch PWNED)", "`touch PWNED`", "a b; touch PWNED", "x' ; touch PWNED; '",
           '"$HOME" && touch PWNED', "!!", "*", "~", "a\\tb", "-n", "--task=$(id)"]


def argv_dump(tmp_path: Path) -> str:
    dump = tmp_path / "argv-dump"
    dump.write_text(ARGV_DUMP)
    dump.chmod(0o755)
    return str(dump)


def run_by_hand(tmp_path: Path, s: PhaseSpec) -> list[str]:
    s = replace(s, trainer={**s.trainer, "python": argv_dump(tmp_path)})
    path = write_phase_script(s)
    proc = subprocess.run(["bash", str(path)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": "sk-x"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((s.node_dir / "status.json").read_text())["state"] == "completed"
    return json.loads((s.node_dir / "argv.json").read_text())


# The environment the trainer started with, as JSON in its node folder.
ENV_DUMP = f"""#!{sys.executable}
import json, os
with open(os.path.join(os.environ["LLMZ_NODE_DIR"], "env.json"), "w") as fh:
    json.dump(dict(os.environ), fh)
"""
# A shell's credentials: the usual names, a site's, a copy of one under a plain name, and
# variables that are no credential (HF_TOKEN downloads models).
SHELL_CREDENTIALS = {"ANTHROPIC_API_KEY": "sk-ant-test-0001112223",
                     "OPENAI_API_KEY": "sk-test-4445556667", "MY_LLM_CRED": "cred-8889990001",
                     "site_auth_token": "tok-1234567890", "COPY_OF_IT": "sk-ant-test-0001112223",
                     "HF_TOKEN": "hf-0001112223", "SHORT": "sk"}


def env_dump(tmp_path: Path) -> str:
    dump = tmp_path / "env-dump"
    dump.write_text(ENV_DUMP)
    dump.chmod(0o755)
    return str(dump)


def test_a_rerun_by_hand_drops_what_the_controller_withholds_from_its_jobs(tmp_path):
    """A rerun by hand (bash or sbatch phase.sbatch from the user's shell) unset only
    ANTHROPIC_API_KEY and OPENAI_API_KEY: a key under agents.api_key_env, a gateway's token or
    a copy of a key reached the trainer and the user's reward code, which the controller's own
    submissions never let through."""
    s = spec(tmp_path, trainer={"python": env_dump(tmp_path)}, secret_names=("MY_LLM_CRED",))
    shell = {"PATH": "/usr/bin:/bin", **SHELL_CREDENTIALS}
    done = subprocess.run(["bash", str(write_phase_script(s))], cwd=tmp_path, env=shell,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    trainer = json.loads((s.node_dir / "env.json").read_text())
    withheld = new_job_environment(shell, names=["MY_LLM_CRED"])
    assert {n for n in shell if n in trainer} == set(withheld) == {"PATH", "HF_TOKEN", "SHORT"}


def test_a_failed_status_write_keeps_the_last_good_record(tmp_path):
    """Issue 14.8: the end record cannot be written (here: its temp file is /dev/full)."""
    full_disk = tmp_path / "full-disk-trainer"
    full_disk.write_text(f"""#!{sys.executable}
import os
node = os.environ["LLMZ_NODE_DIR"]
os.symlink("/dev/full", os.path.join(node, f"status.json.tmp.{{os.getppid()}}"))
""")
    full_disk.chmod(0o755)
    s = spec(tmp_path, trainer={"python": str(full_disk)})
    proc = subprocess.run(["bash", str(write_phase_script(s))], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr   # the trainer's own exit code
    record = s.node_dir / "status.json"
    assert not record.is_symlink(), "the temp file was renamed over the record"
    assert json.loads(record.read_text())["state"] == "running"
    assert "could not write" in proc.stderr
    assert not list(s.node_dir.glob("status.json.tmp.*"))


def comma_locale(tmp_path: Path) -> dict[str, str]:
    """The environment of a shell whose locale writes numbers with a decimal comma (de_DE,
    compiled into tmp_path); skips where none can be made."""
    env = {"PATH": "/usr/bin:/bin", "LOCPATH": str(tmp_path / "locales"), "LC_ALL": "de_DE.UTF-8"}
    if shutil.which("localedef"):
        (tmp_path / "locales").mkdir()
        subprocess.run(["localedef", "-i", "de_DE", "-f", "UTF-8", f"{env['LOCPATH']}/de_DE.UTF-8"],
                       capture_output=True, timeout=60)
    shown = subprocess.run(["bash", "-c", "echo $EPOCHREALTIME"], env=env, capture_output=True,
                           text=True).stdout
    if "," not in shown:
        pytest.skip("no locale with a decimal comma can be made here (localedef, de_DE)")
    return env


def test_status_json_stays_json_under_a_decimal_comma_locale(tmp_path):
    """sbatch --export=ALL passes the user's LANG=de_DE.UTF-8 on: bash wrote $EPOCHREALTIME as
    1795701806,660015, status.json was no JSON, and a requeue's awk lost the earlier run's
    time (earlier_s 0)."""
    env = comma_locale(tmp_path)
    s = spec(tmp_path, trainer={"python": argv_dump(tmp_path)})
    script = write_phase_script(s)
    for restart in ("0", "1"):      # the run, then its requeue under the same job id
        done = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60,
                              env={**env, "SLURM_JOB_ID": "41", "SLURM_RESTART_COUNT": restart})
        assert done.returncode == 0, done.stderr
        status = json.loads((s.node_dir / "status.json").read_text())
        assert status["finished_at"] > status["started_at"] > 1e9
    assert status["earlier_s"] > 0


def test_a_cancel_during_the_setup_lines_is_recorded_as_a_cancel(tmp_path):
    """The setup lines run with errexit, still on in the TERM trap: finding no "CANCELLED AT"
    notice in the output failed a pipeline there, and the job exited 1 mid-trap, recorded as
    "failed ... exited with code 1 during setup"."""
    s = spec(tmp_path, trainer={"python": argv_dump(tmp_path)},
             slurm=SlurmConfig(setup=["sleep 2"]))
    job = subprocess.Popen(["bash", str(write_phase_script(s))], cwd=tmp_path, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "555"})
    time.sleep(0.8)
    job.send_signal(signal.SIGTERM)
    _, err = job.communicate(timeout=60)
    assert job.returncode == 143, err
    status = json.loads((s.node_dir / "status.json").read_text())
    assert (status["state"], status["exit_code"]) == ("cancelled", 143)
    assert status["reason"] == "signal (SIGTERM during setup)"
    assert not (s.node_dir / "argv.json").exists()


def test_a_second_scheduled_job_for_a_node_exits_before_touching_it(tmp_path):
    """Issue 14.3: a resubmitted node ran two jobs, the second overwriting status.json."""
    s = spec(tmp_path, trainer={"python": argv_dump(tmp_path)})
    script = write_phase_script(s)

    def job(job_id: str, scheduled: bool = True) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": job_id}
        return subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, env={**env, "LLMZ_SCHEDULED": "1"} if scheduled else env)
    assert job("41").returncode == 0
    first = (s.node_dir / "status.json").read_text()
    assert (s.node_dir / "job.claim").read_text().strip() == "41"
    (s.node_dir / "argv.json").unlink()
    duplicate = job("42")
    assert duplicate.returncode == 3 and "job 41 already runs this node" in duplicate.stderr
    assert (s.node_dir / "status.json").read_text() == first
    assert not (s.node_dir / "argv.json").exists()
    assert job("41").returncode == 0                 # a requeue keeps its job id
    assert job("43", scheduled=False).returncode == 0   # a rerun by hand is the user's call
    assert json.loads((s.node_dir / "status.json").read_text())["job_id"] == "43"


def test_a_claim_a_full_disk_cuts_short_is_not_left_to_turn_away_the_requeue(tmp_path):
    """On a full disk the claim file was made but its job id not written: the job said "job
    already runs this node" naming nobody, and the empty claim turned away every later job
    of the node, its own requeue once there was space included (here the disk is /dev/full)."""
    s = spec(tmp_path, trainer={"python": argv_dump(tmp_path)})
    script = write_phase_script(s)
    s.node_dir.mkdir(parents=True, exist_ok=True)
    (s.node_dir / "job.claim").symlink_to("/dev/full")

    def job() -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "41", "LLMZ_SCHEDULED": "1"}
        return subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, env=env)
    full = job()
    assert full.returncode == 1 and f"could not write {s.node_dir}/job.claim (No space left on " \
        "device); job 41 exits: free space, then requeue it" in full.stderr, full.stderr
    assert "already runs" not in full.stderr and not (s.node_dir / "job.claim").exists()
    assert not (s.node_dir / "argv.json").exists()        # the trainer never started
    assert job().returncode == 0                            # the requeue, with space
    assert (s.node_dir / "job.claim").read_text().strip() == "41"


@pytest.mark.parametrize("gone", ["install", "program"])
def test_a_phase_whose_install_is_gone_says_so_and_records_it(tmp_path, gone):
    """A requeue (or a rerun by hand) after the install was moved or removed died with a bare
    "No such file or directory", exit 127, and "the trainer exited with code 127" on record."""
    program = argv_dump(tmp_path)
    script = write_phase_script(spec(tmp_path, trainer={"python": program}))
    moved = tmp_path / "old-install"
    if gone == "install":     # the script as rendered from an install since moved away
        script.write_text(script.read_text().replace(str(ROOT), str(moved)))
    else:
        Path(program).unlink()
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "41"})
    named = f"the llmzero install this phase was rendered from ({moved})" if gone == "install" \
        else f"the trainer's program ({program})"
    assert done.returncode == 127 and f"llmzero: {named} is gone" in done.stderr, done.stderr
    assert "llmzero-start" in done.stderr
    status = json.loads((script.parent / "status.json").read_text())
    assert (status["state"], status["exit_code"]) == ("failed", 127)
    assert status["reason"].startswith(f"{named} is gone")
    assert not (script.parent / "argv.json").exists()


def test_a_rerun_elsewhere_starts_the_phase_over_there_and_leaves_the_node_alone(tmp_path):
    """LLMZ_RERUN_DIR: the trainer writes to the new folder, which the same command resumes;
    a folder that would mix with the node's files or another run's is refused (exit 2)."""
    s = spec(tmp_path, trainer={"python": argv_dump(tmp_path)})
    script = write_phase_script(s)

    def job(rerun: str | None, **env: str) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/bin:/bin", **env, **({"LLMZ_RERUN_DIR": rerun} if rerun else {})}
        return subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, env=env)
    scheduled = job("ignored", LLMZ_SCHEDULED="1", SLURM_JOB_ID="41")   # leaked into a job
    assert scheduled.returncode == 0 and "LLMZ_RERUN_DIR is ignored" in scheduled.stderr
    assert not (tmp_path / "ignored").exists() and (s.node_dir / "job.claim").exists()
    before = files_of(s.node_dir)
    rerun = tmp_path / "rerun"
    for _ in range(2):      # relative to where it starts; the second run resumes the first
        assert job("rerun").returncode == 0
        assert f"--output-dir={rerun}" in json.loads((rerun / "argv.json").read_text())
        assert json.loads((rerun / "status.json").read_text())["state"] == "completed"
    assert not (rerun / "job.claim").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    (tmp_path / "another" / "rerun_of").parent.mkdir()
    (tmp_path / "another" / "rerun_of").write_text("/runs/x/nodes/0002 token tok-2\n")
    for folder, why in [(str(s.node_dir), "is the node's folder, inside it or around it"),
                        (f"{s.node_dir}/again", "is the node's folder, inside it or around it"),
                        (str(tmp_path / "nodes"), "is the node's folder, inside it or around it"),
                        (str(other), "already holds files"),
                        (str(tmp_path / "another"), "holds a rerun of another phase"),
                        (str(tmp_path / 'say "hi"'), "a quote, backslash")]:
        refused = job(folder)
        assert (refused.returncode, why in refused.stderr) == (2, True), (folder, refused.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "another", "argv-dump", "nodes", "other", "rerun"]
    assert files_of(s.node_dir) == before


def test_a_second_rerun_into_a_folder_in_use_is_refused_until_the_first_ends(tmp_path):
    """Two reruns into one folder would write one status.json and one checkpoint folder
    each: the second exits 3 at once while the first runs; afterwards it resumes."""
    waiting = tmp_path / "waiting-trainer"
    waiting.write_text(f"""#!{sys.executable}
import os, pathlib, time
node = pathlib.Path(os.environ["LLMZ_NODE_DIR"])
(node / "started").touch()
while not (node / "release").exists():
    time.sleep(0.05)
""")
    waiting.chmod(0o755)
    script = write_phase_script(spec(tmp_path, trainer={"python": str(waiting)}))
    rerun = tmp_path / "rerun"
    cmd = ["bash", str(script)]
    env = {"PATH": "/usr/bin:/bin", "LLMZ_RERUN_DIR": str(rerun)}
    first = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (rerun / "started").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        (rerun / "started").unlink()
        second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 3, second.stderr
        assert f"another job is training in {rerun}" in second.stderr
        assert not (rerun / "started").exists()
        assert json.loads((rerun / "status.json").read_text())["state"] == "running"
    finally:
        (rerun / "release").touch()
        first.wait(timeout=60)
    assert first.returncode == 0
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr


def test_shell_metacharacters_in_values_never_execute(tmp_path):
    for hostile in HOSTILE:
        s = spec(tmp_path, task=files_task(train_files=[hostile], val_files=[f"/v/{hostile}"],
                                           reward_path=f"/r/{hostile}.py"),
                 trainer={"cache_dir": hostile})
        argv = run_by_hand(tmp_path, s)
        assert f"--train-files={hostile}" in argv and f"--val-files=/v/{hostile}" in argv
        assert f"--reward-path=/r/{hostile}.py" in argv and f"--cache-dir={hostile}" in argv
    assert not list(tmp_path.rglob("PWNED")) and not Path("PWNED").exists()


@settings(max_examples=25, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=60))
def test_any_printable_path_reaches_the_trainer_unchanged(tmp_path_factory, path):
    tmp_path = tmp_path_factory.mktemp("prop")
    argv = run_by_hand(tmp_path, spec(tmp_path, task=files_task(test_files=[path])))
    assert f"--test-files={path}" in argv


def test_slurm_time_formats():
    assert [parse_time(t) for t in ("30", "5:30", "1:00:00", "2-0", "1-1:30", "1-00:00:10")] == [
        1800, 330, 3600, 172800, 91800, 86410]
    for bad in ("", "1h", "0", "1:2:3:4", "-1"):
        with pytest.raises(ValueError):
            parse_time(bad)


def controller_job(tmp_path: Path, **changes) -> Path:
    from llmzero_slurm.config import ControllerJobConfig
    from llmzero_slurm.render import write_controller_script
    job = replace(ControllerJobConfig(partition="cpu", qos="workflow", time="7-00:00:00"),
                  **changes)
    return write_controller_script("exp1", tmp_path, job, ["/usr/bin/env", "sleep", "60"],
                                   "tok-c")


def test_the_controller_job_script_is_a_long_small_requeueable_job(tmp_path):
    """Issue 16: sites end long processes on login nodes and offer a long CPU job instead."""
    script = controller_job(tmp_path)
    d = directives(script.read_text())
    assert (d["partition"], d["qos"], d["time"], d["cpus-per-task"]) == \
        ("cpu", "workflow", "7-00:00:00", "1")
    assert "requeue" in d and d["signal"] == "B:USR1@300"
    assert d["output"] == f"{tmp_path}/controller-%j.out" and d["job-name"] == "llmz-exp1-controller"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    shellcheck(script)


@pytest.mark.parametrize("changes, key", [
    ({"partition": "cpu;id"}, "controller.partition"),
    ({"time": "forever"}, "controller.time"),
    ({"mem": "4G\n#SBATCH --uid=0"}, "controller.mem"),
    ({"cpus": 0}, "controller.cpus"),
    ({"extra_directives": ["--clusters=other"]}, "controller.extra_directives[0]"),
])
def test_bad_controller_job_settings_are_refused_naming_the_key(tmp_path, changes, key):
    with pytest.raises(ConfigError) as err:
        controller_job(tmp_path, **changes)
    assert f"'{key}" in str(err.value)


@pytest.mark.parametrize("limit", ["5", "00:04:00", "0:09:59"])
def test_a_controller_job_too_short_for_its_requeue_warning_is_refused(tmp_path, limit):
    """With time 00:04:00 Slurm sent the 5-minute USR1 at once: the job requeued itself every
    30 s for ever, never searching. Ten minutes leave it five to run."""
    with pytest.raises(ConfigError, match="controller.time.*at least 10 minutes.*requeues itself"):
        controller_job(tmp_path, time=limit)
    assert directives(controller_job(tmp_path, time="00:10:00").read_text())["time"] == "00:10:00"


def test_the_controller_job_requeues_itself_near_its_limit_and_passes_on_term(tmp_path):
    shims = tmp_path / "bin"
    shims.mkdir()
    # A slow scontrol: Slurm's TERM lands while the USR1 trap still runs, as on a loaded host,
    # where the script once exited with USR1's status (138) instead of the controller's.
    (shims / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >>{tmp_path}/scontrol.log\nsleep 1\n")
    (shims / "scontrol").chmod(0o755)
    script = controller_job(tmp_path)
    job = subprocess.Popen(["bash", str(script)], cwd=tmp_path, env={
        "PATH": f"{shims}:/usr/bin:/bin", "SLURM_JOB_ID": "77"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while "sleep" not in subprocess.run(["ps", "--ppid", str(job.pid), "-o", "comm="],
                                        capture_output=True, text=True).stdout:
        assert time.monotonic() < deadline, "the controller command never started"
        time.sleep(0.1)
    job.send_signal(signal.SIGUSR1)                  # Slurm: the time limit is near
    deadline = time.monotonic() + 10
    log = tmp_path / "scontrol.log"       # the shell creates it, then writes: wait for a line
    while not (log.exists() and log.read_text().endswith("\n")):
        assert time.monotonic() < deadline, "the job did not requeue itself"
        time.sleep(0.1)
    assert log.read_text() == "requeue 77\n"
    assert job.poll() is None                        # still running until Slurm's TERM
    job.terminate()
    _, err = job.communicate(timeout=20)
    assert job.returncode == 128 + signal.SIGTERM and "requeueing controller job 77" in err


# Records where it ran and what the setup lines exported, wherever a job runs it from.
WHERE_DUMP = f"""#!{sys.executable}
import json, os, sys
with open(sys.argv[0] + ".json", "a") as fh:
    fh.write(json.dumps([os.getcwd(), os.environ.get("LLMZ_FROM_SETUP")]) + "\\n")
"""


def test_relative_setup_lines_run_from_the_configs_folder_in_every_job(tmp_path, monkeypatch):
    """Review: a phase ran the slurm.setup lines in its node folder, the --check --on-cluster
    job where sbatch ran, the monitor in the controller's folder: `source ./env.sh` passed the
    check and failed every phase "during setup". Each job now runs them from the config's
    folder (slurm.setup_dir), then goes on where it was."""
    from llmzero_slurm.config import load_config
    from llmzero_slurm.controller.cluster_check import environment_job
    from llmzero_slurm.controller.keeper import MonitorKeeper
    from llmzero_slurm.render import write_check_job
    from llmzero_slurm.schedulers import SlurmScheduler
    from llmzero_slurm.store.run_store import RunStore

    exp, away, bin_ = tmp_path / "exp", tmp_path / "away", tmp_path / "bin"
    for folder in (exp, away, bin_):
        folder.mkdir()
    (exp / "env.sh").write_text("export LLMZ_FROM_SETUP=yes\n")
    dump = bin_ / "srun"             # the monitor's srun, the phase's and the check's python
    dump.write_text(WHERE_DUMP)
    dump.chmod(0o755)
    (bin_ / "sbatch").write_text(f"#!/bin/sh\ncp \"$1\" {tmp_path}/monitor.sh\n"
                                 "echo 'Submitted batch job 4242'\n")
    (bin_ / "sbatch").chmod(0o755)
    (exp / "experiment.yaml").write_text(
        f"name: demo\nscheduler: slurm\ntask: {{builtin: addition}}\ntrainer: {{python: {dump}}}\n"
        "agents: {backend: heuristic}\nslurm: {setup: ['source ./env.sh']}\n")
    monkeypatch.chdir(away)
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    store = RunStore.create(tmp_path / "run", load_config(exp / "experiment.yaml"))
    cfg = store.config                           # the frozen copy, as phases are rendered from
    node = spec(tmp_path, slurm=cfg.slurm, trainer=cfg.trainer)
    check_job, _ = environment_job(cfg)
    MonitorKeeper(store, SlurmScheduler()).ensure(True)
    scripts = [write_phase_script(node), tmp_path / "monitor.sh",
               write_check_job("demo", tmp_path / "check", check_job, "t", tmp_path / "plan")]
    for script in scripts:
        done = subprocess.run(["bash", str(script)], cwd=away, capture_output=True, text=True,
                              timeout=60, env={**os.environ, "SLURM_JOB_ID": "5"})
        assert done.returncode == 0, done.stdout + done.stderr
    ran = [json.loads(line) for line in Path(f"{dump}.json").read_text().splitlines()]
    assert ran == [[str(node.node_dir), "yes"], [str(away), "yes"], [str(away), "yes"]]
    # Review: a setup_dir the compute nodes do not see (a config written to a login node's
    # /tmp, moved since) failed every job at once; the lines now run where the job is, said.
    (exp / "env.sh").rename(node.node_dir / "env.sh")   # where a phase is
    shutil.rmtree(exp)
    done = subprocess.run(["bash", str(write_phase_script(node))], cwd=away, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "SLURM_JOB_ID": "6"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"llmzero: warning: cannot enter slurm.setup_dir {exp}" in done.stderr


def test_a_copied_runs_script_run_by_hand_refuses_to_write_into_the_run_it_came_from(tmp_path):
    """Walkthrough: `cp -a runs/NAME elsewhere` then `bash elsewhere/nodes/0007/phase.sbatch`
    changed the ORIGINAL run's status.json (which could be a live run): the script named its
    node folder by the absolute path it was rendered with. Run by hand (no SLURM_JOB_ID) from
    any folder but the one it names, it now refuses before touching anything, naming both."""
    s = spec(tmp_path / "run", trainer={"python": argv_dump(tmp_path)})
    write_phase_script(s)
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(tmp_path / "run", copy)
    script = copy / "nodes" / "0007" / "phase.sbatch"
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{script.parent}" in done.stderr and f"{s.node_dir}" in done.stderr
    assert f"llmzero-repair {copy}" in done.stderr
    assert sorted(p.name for p in s.node_dir.iterdir()) == ["phase.sbatch"]   # nothing written
    assert sorted(p.name for p in script.parent.iterdir()) == ["phase.sbatch"]
    moved = tmp_path / "moved"
    (tmp_path / "run").rename(moved)    # the folder it names is gone: refused the same way
    gone = subprocess.run(["bash", str(moved / "nodes" / "0007" / "phase.sbatch")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert gone.returncode == 2 and f"llmzero-repair {moved}" in gone.stderr, gone.stderr
    assert not s.node_dir.exists()


def test_templates_are_those_of_the_release_whose_code_is_loaded(tmp_path):
    """An upgrade in place (git pull, pip) under a running controller left its loaded code
    rendering the new release's templates: with 50 commits' upgrade every report refresh
    said 'report not updated: UndefinedError: 'run_dir' is undefined' until a restart, and a
    phase template wanting a new value would fail each phase so. Templates are read with the
    code, so one release renders them."""
    for name in ("llmzero_slurm", "templates"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    check = (
        "from llmzero_slurm import paths, render\n"
        "from llmzero_slurm.agents import prompting\n"
        "from llmzero_slurm.report import html\n"
        "names = {'report/index.html.j2': html.LOADER, 'shell.j2': render._ENV.loader,\n"
        "         'proposer.j2': prompting._ENV.loader}\n"
        "before = {n: loader.get_source(None, n)[0] for n, loader in names.items()}\n"
        "for path in paths.TEMPLATES.rglob('*.j2'):\n"
        "    path.write_text('{{ the_next_release }}')\n"
        "print(all(loader.get_source(None, n)[0] == before[n] != '{{ the_next_release }}'\n"
        "          for n, loader in names.items()))\n")
    done = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0 and done.stdout == "True\n", done.stderr
