"""verl phase scripts: rendered for every phase kind, checked by verl's schema, bash and shellcheck,
and the multi-node script run on the local Slurm cluster with stand-ins for the GPU programs."""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from llmzero_slurm.backends.verl import VerlBackend
from llmzero_slurm.backends.verl.metrics_copy import carry
from llmzero_slurm.backends.verl.schema import compose, unavailable_reason
from llmzero_slurm.config import SlurmConfig, TaskConfig
from llmzero_slurm.errors import ConfigError
from llmzero_slurm.render import PhaseSpec, render
from llmzero_slurm.schedulers import LocalScheduler
from llmzero_slurm.search.tree import Status
from llmzero_slurm.store.node_dir import NodeDir
from conftest import files_of, finish
from full_disk import on_full_disk
from verl_stubs import stub_merger, verl_checkpoint

HP = {"lr": 5e-5, "kl_loss_coef": 0.001, "use_kl_loss": True, "clip_ratio_high": 0.28,
      "train_batch_size": 128, "ppo_mini_batch_size": 64, "lora_rank": 64, "lora_alpha": 64,
      "rollout_n": 8, "total_epochs": 1, "max_response_length": 6144, "grad_clip": 1.0,
      "weight_decay": 0.01, "norm_adv_by_std_in_grpo": False, "save_freq": 10, "test_freq": 10,
      "ppo_micro_batch_size_per_gpu": 4, "log_prob_micro_batch_size_per_gpu": 8}
TASK = TaskConfig(train_files=["/data/gsm8k/train.parquet"], val_files=["/data/gsm8k/val.parquet"],
                  test_files=["/data/gsm8k/test.parquet"], reward_path="/data/gsm8k/reward.py")


def spec(tmp_path: Path, kind: str = "scratch", nodes: int = 1, resume: bool = False,
         **changes) -> PhaseSpec:
    parent = tmp_path / "nodes" / "0003"
    base = dict(experiment="gsm", node_id=7, kind=kind, node_dir=tmp_path / "nodes" / "0007",
                token="tok7", hparams=HP, backend="verl",
                slurm=SlurmConfig(nodes=nodes, gpus_per_node=2, cpus_per_task=1, time="00:05:00"),
                task=TASK, trainer={"test_data_sources": ["gsm8k_test"]},
                model_path="Qwen/Qwen3-8B", resume_dir=parent if resume else None,
                resume_step=30 if resume else 0)
    return PhaseSpec(**{**base, **changes})


def parent_checkpoint(tmp_path: Path) -> Path:
    """A finished verl parent phase that started at global step 10 and saved its step 20."""
    parent = tmp_path / "nodes" / "0003"
    verl_checkpoint(parent, 20, {"r": 64, "lora_alpha": 64, "task_type": "CAUSAL_LM"})
    (parent / "verl_step_offset").write_text("10\n")
    return parent


def test_each_job_has_its_own_ray_directory(tmp_path):
    """Issue 16: two phases sharing a node must never join each other's Ray."""
    one = render(spec(tmp_path))
    assert 'export RAY_TMPDIR=${TMPDIR:-/tmp}/llmz-ray-${SLURM_JOB_ID:-$$}' in one
    assert "unset RAY_ADDRESS" in one
    several = render(spec(tmp_path, nodes=2))
    assert "--temp-dir=\"$RAY_TMPDIR\"" in several and "unset RAY_ADDRESS" not in several


def test_each_ray_node_has_the_cpus_verl_reserves_for_its_gpu_workers(tmp_path):
    """The Ray head and workers of a multi-node phase were started with the allocation's
    CPUs (here 1): below verl's 3 per GPU its placement group could never be placed."""
    several = spec(tmp_path, nodes=2)
    script = render(several)
    assert '--num-cpus="$LLMZ_RAY_CPUS"' in script
    assert int(VerlBackend().env(several)["LLMZ_RAY_CPUS"]) > 3 * several.slurm.gpus_per_node


@pytest.mark.parametrize("addresses, head", [
    ("10.1.2.3", "10.1.2.3"),
    ("fe80::1e34:daff:fe5a:1 10.1.2.3", "10.1.2.3"),   # IPv6 first (verl's own script skips it)
    ("127.0.1.1 10.1.2.3", "10.1.2.3"),                # a loopback alias first
    ("127.0.0.1", "127.0.0.1"),                        # a one-node allocation: loopback will do
])
def test_the_ray_head_address_is_one_the_other_nodes_can_reach(tmp_path, addresses, head):
    """`hostname --ip-address` on the head node can list an IPv6 or a loopback address first;
    Ray's head was started on that first word, and the workers on the other nodes never
    joined (the job gave up after 5 minutes of its multi-node GPU allocation)."""
    script = render(spec(tmp_path, nodes=2))
    start = script.index("\nllmz_head_ip=") + 1
    srun = '$(srun --overlap --nodes=1 --ntasks=1 -w "$llmz_head" hostname --ip-address'
    rule = script[start:script.index("\n", script.index("')", start))].replace(
        srun, f"$(echo '{addresses}'")
    assert "echo" in rule, rule
    out = subprocess.run(["bash", "-c", f"{rule}\necho \"$llmz_head_ip\""], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == head


def test_an_evolve_phase_skips_the_validation_its_parent_made(tmp_path):
    """Issue 16: every evolve phase repeated verl's validation before training on weights
    its parent had validated at that step (825 s against 90 s a training step)."""
    parent = parent_checkpoint(tmp_path)
    child = spec(tmp_path, kind="evolve", resume=True)
    backend = VerlBackend()
    assert "trainer.val_before_train=false" not in backend.overrides(child)
    assert "LLMZ_PARENT_METRICS" not in backend.env(child)
    (parent / "metrics.jsonl").write_text(
        '{"step": 20, "data": {"val-core/gsm8k/acc/mean@1": 0.30}}\n'
        '{"step": 30, "data": {"val-core/gsm8k/acc/mean@1": 0.35, "test-core/t/acc/mean@1": 0.2,'
        ' "actor/kl_loss": 0.1}}\n')
    assert "trainer.val_before_train=false" in backend.overrides(child)
    env = backend.env(child)
    assert env["LLMZ_PARENT_METRICS"] == str(parent / "metrics.jsonl")
    assert env["LLMZ_PARENT_NODE"] == "3"
    metrics = Path(child.node_dir) / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    assert carry(parent / "metrics.jsonl", metrics, 30, 3) == 1
    assert carry(parent / "metrics.jsonl", metrics, 30, 3) == 0       # a requeued attempt
    [row] = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert row == {"step": 30, "data": {"val-core/gsm8k/acc/mean@1": 0.35,
                                        "test-core/t/acc/mean@1": 0.2},
                   "carried_from": {"node": 3, "step": 30}}


def test_only_complete_verl_checkpoints_are_offered_as_parents(tmp_path):
    """Issue 14.7: verl writes a step's shards before its tracker file; a step cut off mid-save
    (above the tracker, or missing a rank's shard) was offered as a parent."""
    parent = parent_checkpoint(tmp_path)
    files = NodeDir(parent)
    verl_checkpoint(parent, 40, None)            # moves the tracker to 40
    (parent / "ckpt" / "global_step_40" / "actor" / "model_world_size_2_rank_1.pt").unlink()
    verl_checkpoint(parent, 60, None)
    (parent / "ckpt" / "latest_checkpointed_iteration.txt").write_text("20")
    assert VerlBackend().checkpoint_steps(files) == [30]     # global = folder + offset 10
    (parent / "ckpt" / "latest_checkpointed_iteration.txt").write_text("60")
    assert VerlBackend().checkpoint_steps(files) == [30, 70]
    (parent / "ckpt" / "latest_checkpointed_iteration.txt").unlink()
    assert VerlBackend().checkpoint_steps(files) == []


def main_ppo_overrides(script: str, nnodes: int, node_dir: Path) -> list[str]:
    """The override list the script passes to main_ppo, with $SLURM_NNODES and $LLMZ_NODE_DIR
    (the node's folder, or a rerun's) as the job sets them."""
    start = script.index("-m verl.trainer.main_ppo")
    line = script[start:script.index(" &\n", start)].replace(" \\\n", " ")
    line = line.replace('"${SLURM_NNODES:-1}"', str(nnodes))
    line = line.replace("${llmz_validated:+trainer.val_before_train=false}", "")   # not requeued
    words = shlex.split(line.replace("${LLMZ_NODE_DIR}", str(node_dir)))
    return words[2:]


def script_of(phase: PhaseSpec) -> Path:
    """The phase's script, rendered into its node folder (made when missing)."""
    node_dir = Path(phase.node_dir)
    node_dir.mkdir(parents=True, exist_ok=True)
    script = node_dir / "phase.sbatch"
    script.write_text(render(phase))
    return script


def shell_checks(path: Path) -> None:
    subprocess.run(["bash", "-n", str(path)], check=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    # SC2317: functions called only from traps look unreachable to shellcheck.
    out = subprocess.run(["shellcheck", "-e", "SC2317", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


CASES = {"scratch": dict(), "evolve": dict(kind="evolve", resume=True),
         "debug": dict(kind="debug", resume=True, hparams={**HP, "gpu_memory_utilization": 0.4}),
         "multi-node": dict(kind="evolve", resume=True, nodes=4)}


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}")
@pytest.mark.parametrize("case", CASES)
def test_rendered_phases_compose_with_verl_and_pass_shellcheck(tmp_path, case):
    parent_checkpoint(tmp_path)
    phase = spec(tmp_path, **CASES[case])
    script = render(phase)
    path = tmp_path / "phase.sbatch"
    path.write_text(script)
    shell_checks(path)
    cfg = compose(main_ppo_overrides(script, phase.slurm.nodes, phase.node_dir))
    assert cfg.trainer.nnodes == phase.slurm.nodes
    assert cfg.trainer.default_local_dir == f"{phase.node_dir}/ckpt"
    assert ("ray start --head" in script) == (phase.slurm.nodes > 1)
    if phase.resume_dir is None:
        assert cfg.actor_rollout_ref.model.lora_adapter_path is None
        assert "export_adapter.py" not in script
    else:
        assert cfg.actor_rollout_ref.model.lora_adapter_path == \
            f"{phase.resume_dir}/export/global_step_30/lora_adapter"
        # global step 30 of a parent that started at step 10 is its own step 20
        assert f"LLMZ_PARENT_ACTOR={phase.resume_dir}/ckpt/global_step_20/actor" in script


@pytest.mark.parametrize("trainer, hparams, match", [
    ({"overrides": ["custom_reward_function.path=/r.py"]}, HP, "reward.custom_reward_function"),
    ({"overrides": ["actor_rollout_ref.actor.grad_clip=0.5"]}, HP, "optim.clip_grad"),
    ({"overrides": ["actor_rollout_ref.model.lora_adapter_path=/a"]}, HP, "per phase"),
    ({}, {k: v for k, v in HP.items() if k != "lora_rank"}, "lora_rank"),
])
def test_traps_are_refused_before_a_script_exists(tmp_path, trainer, hparams, match):
    parent_checkpoint(tmp_path)
    with pytest.raises(ConfigError, match=match):
        render(spec(tmp_path, kind="evolve", resume=True, hparams=hparams,
                    trainer={"test_data_sources": ["gsm8k_test"], **trainer}))


def test_parent_that_was_not_a_verl_phase_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="verl_step_offset"):
        render(spec(tmp_path, kind="evolve", resume=True))


def test_test_sources_come_from_the_parquet_and_must_differ(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    def parquet(name, source):
        path = tmp_path / name
        pq.write_table(pa.table({"data_source": [source, source], "prompt": ["a", "b"]}), path)
        return str(path)

    task = TaskConfig(train_files=[parquet("train.parquet", "gsm8k")],
                      val_files=[parquet("val.parquet", "gsm8k")],
                      test_files=[parquet("test.parquet", "gsm8k_test")])
    env = VerlBackend().env(spec(tmp_path, task=task, trainer={}))
    assert env["LLMZ_TEST_SOURCES"] == "gsm8k_test"
    task.test_files = [parquet("test2.parquet", "gsm8k")]
    with pytest.raises(ConfigError, match="share data_source"):
        VerlBackend().env(spec(tmp_path, task=task, trainer={}))
    # The script splits the sources as shell words: one with glob characters would expand
    # against the files of its working folder, and its test scores would stay validation's.
    for source in ("gsm8k test", "gsm8k[hard]", "gsm*", "gsm?"):
        task.test_files = [parquet("test3.parquet", source)]
        with pytest.raises(ConfigError, match="use a data_source without spaces"):
            VerlBackend().env(spec(tmp_path, task=task, trainer={}))


@pytest.mark.parametrize("split", ["val_files", "test_files"])
def test_a_file_without_data_source_is_named_under_its_own_key(tmp_path, split):
    """A validation file was reported under trainer.test_data_sources, with advice to list the
    test sources there: a list that a readable file's check never reads anyway."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def parquet(name, column):
        path = tmp_path / name
        pq.write_table(pa.table({column: ["gsm8k"], "prompt": ["a"]}), path)
        return str(path)

    files = {key: [parquet(f"{key}.parquet", "data_source")]
             for key in ("train_files", "val_files", "test_files")}
    files[split] = [parquet("no-source.parquet", "source")]
    with pytest.raises(ConfigError) as err:
        VerlBackend().env(spec(tmp_path, task=TaskConfig(**files), trainer={}))
    assert err.value.key == f"task.{split}" and "no-source.parquet" in err.value.problem
    assert "test_data_sources" not in err.value.problem


def test_listed_test_sources_are_checked_against_the_files_that_can_be_read(tmp_path):
    """trainer.test_data_sources (for test files the login node cannot read) skipped every
    check: with verl's gsm8k preprocessing, which labels each split openai/gsm8k, and the
    example's [gsm8k_test], test rows were logged as validation, the search chose on them
    and the agents saw test scores."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def parquet(name, source):
        path = tmp_path / name
        pq.write_table(pa.table({"data_source": [source], "prompt": ["a"]}), path)
        return str(path)

    task = TaskConfig(train_files=[parquet("train.parquet", "openai/gsm8k")],
                      val_files=[parquet("val.parquet", "openai/gsm8k")],
                      test_files=[parquet("test.parquet", "openai/gsm8k")])
    listed = {"test_data_sources": ["gsm8k_test"]}
    with pytest.raises(ConfigError, match=r"lists \['gsm8k_test'\], but the test files hold "
                                          r"\['openai/gsm8k'\]"):
        VerlBackend().env(spec(tmp_path, task=task, trainer=listed))
    task.test_files = [parquet("test2.parquet", "gsm8k_test")]
    assert VerlBackend().env(spec(tmp_path, task=task, trainer=listed))["LLMZ_TEST_SOURCES"] \
        == "gsm8k_test"
    task.test_files = [str(tmp_path / "on-the-cluster-only.parquet")]     # taken as listed
    assert VerlBackend().env(spec(tmp_path, task=task, trainer=listed))["LLMZ_TEST_SOURCES"] \
        == "gsm8k_test"


STUB_PYTHON = """#!/bin/bash
# python3 stand-in: records main_ppo's arguments and writes what verl's file logger would.
if [[ ${1:-} == -m && ${2:-} == verl.trainer.main_ppo ]]; then
    printf '%s\\n' "${@:3}" >"$STUB_LOG/main_ppo.args"
    printf 'RAY_TMPDIR=%s\\nRAY_ADDRESS=%s\\n' "${RAY_TMPDIR:-}" "${RAY_ADDRESS:-}" >"$STUB_LOG/main_ppo.env"
    # What Ray leaves in its folder (session logs, spilled objects) while verl trains.
    mkdir -p "$RAY_TMPDIR/session_latest/logs" && touch "$RAY_TMPDIR/session_latest/logs/raylet.out"
    if [[ -n ${STUB_TRAIN_S:-} ]]; then      # training that a signal ends
        sleep "$STUB_TRAIN_S" >/dev/null 2>&1 &
        wait $!
    fi
    printf '%s\\n' "${HF_HUB_OFFLINE-unset}" "${TRANSFORMERS_OFFLINE-unset}" >"$STUB_LOG/main_ppo.hub"
    env >"$STUB_LOG/main_ppo.environ"
    for arg in "$@"; do
        case $arg in +ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH=*)
            log=${arg#*=}; log=${log//\\"/} ;;
        esac
    done
    printf '%s\\n' '{"step": 0, "data": {"val-core/gsm8k/acc/mean@1": 0.4, "val-core/gsm8k_test/acc/mean@1": 0.3}}' \\
        '{"step": 1, "data": {"actor/entropy": 0.7}}' >"$log"
    exit 0
fi
if [[ -n ${STUB_FOLLOWER_DIES:-} && ${1:-} == */metrics_copy.py && ${2:-} == follow ]]; then
    exit 1      # the follower died (an NFS error, a signal) before copying anything
fi
exec REAL_PYTHON "$@"
"""

STUB_RAY = """#!/bin/bash
# ray stand-in: `start` records itself and blocks like `ray start --block`; `status` lists nodes.
case $1 in
    start) echo "$*" >>"$STUB_LOG/ray.log"; exec sleep 300 ;;
    status) echo "Active:"; grep -c '^start' "$STUB_LOG/ray.log" | xargs seq | sed 's/^/ 1 node_/' ;;
esac
"""


def stub_programs(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    """An environment whose python3 (main_ppo), ray and verl's merger are the stand-ins; the
    folder where the first two record their calls, and the merger's call log."""
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    log.mkdir()
    (bin_dir / "python3").write_text(STUB_PYTHON.replace("REAL_PYTHON", sys.executable))
    (bin_dir / "ray").write_text(STUB_RAY)
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    env, merger_log = stub_merger(tmp_path, dict(os.environ))
    env.update(PATH=f"{bin_dir}:{env['PATH']}", STUB_LOG=str(log))
    return env, log, merger_log


# Ray's longest socket below its temp dir: /ray/session_<date>_<time>_<usec>_<pid>/sockets/
# plasma_store (68 characters with a 7-digit pid); Linux takes 107 at most in a socket path.
RAY_SOCKET_TAIL, SOCKET_PATH_MAX = 68, 107


@pytest.mark.parametrize("tmpdir", ["short", "long"])
def test_ray_sockets_fit_whatever_the_sites_tmpdir(tmp_path, tmpdir):
    """A site's per-job TMPDIR (/net/.../slurm_jobdir/1355700/tmp.t0016 in verl issue 1120)
    put Ray's sockets past the 107-byte limit of a Unix socket path: Ray refused to start,
    and every phase failed after its wait in the queue."""
    phase = spec(tmp_path)
    script = script_of(phase)
    env, log, _ = stub_programs(tmp_path)
    site_tmp = Path("/tmp") if tmpdir == "short" else tmp_path / "slurm_jobdir/1355700/tmp.t0016"
    site_tmp.mkdir(parents=True, exist_ok=True)
    job_id = str(900000 + os.getpid() % 99999)
    subprocess.run(["bash", str(script)], env={**env, "TMPDIR": str(site_tmp), "SLURM_JOB_ID": job_id},
                   check=True, capture_output=True, timeout=120)
    ray_tmp = (log / "main_ppo.env").read_text().splitlines()[0].removeprefix("RAY_TMPDIR=")
    assert job_id in ray_tmp and not Path(ray_tmp).exists()     # made, then removed (below)
    assert len(ray_tmp) + RAY_SOCKET_TAIL <= SOCKET_PATH_MAX, ray_tmp
    if tmpdir == "short":
        assert ray_tmp == f"{site_tmp}/llmz-ray-{job_id}"       # the site's own, where it fits


@pytest.fixture
def node_tmp():
    """A node's local TMPDIR, short enough for Ray's sockets (a longer one gives way to /tmp)."""
    folder = Path(tempfile.mkdtemp(prefix="llmzt", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("planted", ["another user's folder", "a link"])
def test_a_ray_folder_someone_else_made_first_is_not_taken(tmp_path, node_tmp, planted):
    """RAY_TMPDIR's name is known before a job starts (llmz-ray-<job id> in TMPDIR or /tmp,
    which every user may write): a folder another user made there first, or a link to one,
    was taken with `mkdir -p`, so Ray's sockets and session files went where that user could
    read and change them. Such a name is passed over for a folder of the job's own."""
    script = script_of(spec(tmp_path))
    env, log, _ = stub_programs(tmp_path)
    theirs = node_tmp / "theirs"
    theirs.mkdir(mode=0o777)
    planted_at = node_tmp / "llmz-ray-54"
    if planted == "a link":
        planted_at.symlink_to(theirs)
    else:
        planted_at.mkdir(mode=0o777)
        os.chown(planted_at, 65534, 65534)          # nobody's, as another user's would be
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120,
                          env={**env, "TMPDIR": str(node_tmp), "SLURM_JOB_ID": "54"})
    assert done.returncode == 0, done.stderr
    ray_tmp = (log / "main_ppo.env").read_text().splitlines()[0].removeprefix("RAY_TMPDIR=")
    assert ray_tmp.startswith("/tmp/llmz-ray-") and ray_tmp != str(planted_at), ray_tmp
    assert not Path(ray_tmp).exists() and list(theirs.iterdir()) == []
    assert planted_at.is_symlink() if planted == "a link" else planted_at.is_dir()


@pytest.mark.parametrize("end", ["trained", "cancelled"])
def test_a_phase_leaves_no_ray_folder_on_the_node(tmp_path, node_tmp, end):
    """RAY_TMPDIR (Ray's session logs and spilled objects, on the node's local disk) was made
    for every job and never removed: nodes filled up phase by phase. It goes when the trainer
    has ended, whether it finished or a signal ended it; another job's folder stays."""
    script = script_of(spec(tmp_path))
    env, log, _ = stub_programs(tmp_path)
    site_tmp = node_tmp
    (site_tmp / "llmz-ray-52").mkdir()     # another phase's, on the same node
    env = {**env, "TMPDIR": str(site_tmp), "SLURM_JOB_ID": "53"}
    if end == "trained":
        done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
    else:
        job = subprocess.Popen(["bash", str(script)], env={**env, "STUB_TRAIN_S": "60"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not (site_tmp / "llmz-ray-53" / "session_latest").exists():
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()
            time.sleep(0.1)
        job.terminate()
        assert job.wait(timeout=60) == 143, job.communicate()
    assert sorted(p.name for p in site_tmp.iterdir()) == ["llmz-ray-52"]


@pytest.mark.parametrize("model, offline", [("/models/Qwen3-8B", ["1", "1"]),
                                            ("Qwen/Qwen3-8B", ["unset", "unset"])],
                         ids=["folder", "hub-id"])
def test_a_model_in_a_folder_is_trained_without_asking_the_hub(tmp_path, model, offline):
    """verl phases ran with the hub online: with the model in a folder, a compute node
    without internet still had each hub call transformers or vLLM makes wait for its
    timeout. Such a phase now runs offline (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE); a hub id
    is left to the environment, since a node may download it."""
    phase = spec(tmp_path, model_path=model)
    script = script_of(phase)
    env, log, _ = stub_programs(tmp_path)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.pop(name, None)
    subprocess.run(["bash", str(script)], env={**env, "SLURM_JOB_ID": "44"}, check=True,
                   capture_output=True, timeout=120)
    assert (log / "main_ppo.hub").read_text().split() == offline


def test_a_scheduled_phase_keeps_the_key_of_the_logger_it_is_configured_with(tmp_path,
                                                                              monkeypatch):
    """`trainer.extra_loggers: [wandb]` worked on a rerun by hand, but the scheduled phase never
    had WANDB_API_KEY (a credential by name, withheld from every job): verl's wandb logger
    failed to log in. A logger not configured gets no key, and no job gets the LLM key."""
    phase = spec(tmp_path, trainer={"test_data_sources": ["gsm8k_test"], "extra_loggers": ["wandb"]})
    script = script_of(phase)
    env, log, _ = stub_programs(tmp_path)
    keys = {"WANDB_API_KEY": "wandb-0001112223", "SWANLAB_API_KEY": "swan-4445556667",
            "ANTHROPIC_API_KEY": "sk-ant-test-8889990001"}
    for name, value in {"PATH": env["PATH"], "STUB_LOG": env["STUB_LOG"], **keys}.items():
        monkeypatch.setenv(name, value)
    kept = VerlBackend().kept_credentials(phase.trainer)
    sched = LocalScheduler(tmp_path / "local-jobs", ["ANTHROPIC_API_KEY"], kept)
    assert finish(sched, sched.submit(script, "tok7")).status is Status.COMPLETED
    scheduled = (log / "main_ppo.environ").read_text()
    by_hand = subprocess.run(["bash", str(script)], env={**os.environ, "SLURM_JOB_ID": "46"},
                             capture_output=True, text=True, timeout=120)
    assert by_hand.returncode == 0, by_hand.stderr
    for run, trainer in (("scheduled", scheduled), ("by hand", (log / "main_ppo.environ").read_text())):
        assert "WANDB_API_KEY=wandb-0001112223\n" in trainer, run
        assert "SWANLAB_API_KEY" not in trainer and "ANTHROPIC_API_KEY" not in trainer, run


STUB_SRUN = """#!/bin/bash
# srun stand-in: logs the CPUs each step gets as srun of Slurm 22.05-23.02 decides (its own
# --cpus-per-task, else SRUN_CPUS_PER_TASK, else 1: the batch job's is not inherited), runs it.
cpus=${SRUN_CPUS_PER_TASK:-1}
while [[ $1 == -* ]]; do
    case $1 in
        --cpus-per-task=*) cpus=${1#*=} ;;
        -c | --cpus-per-task | -w) [[ $1 == -w ]] || cpus=$2; shift ;;
    esac
    shift
done
echo "$cpus $1" >>"$STUB_LOG/srun.log"
exec "$@"
"""


def test_each_ray_step_of_a_multi_node_phase_gets_the_jobs_cpus(tmp_path, node_tmp):
    """srun of Slurm 22.05-23.02 does not inherit the batch job's --cpus-per-task: the Ray
    head and workers each ran in a step of one CPU, whatever --num-cpus told Ray."""
    script = script_of(spec(tmp_path, nodes=2, slurm=SlurmConfig(
        nodes=2, gpus_per_node=2, cpus_per_task=16, time="00:05:00")))
    env, log, _ = stub_programs(tmp_path)
    (tmp_path / "bin" / "srun").write_text(STUB_SRUN)
    (tmp_path / "bin" / "scontrol").write_text("#!/bin/bash\nprintf 'n1\\nn2\\n'\n")
    for stub in ("srun", "scontrol"):
        (tmp_path / "bin" / stub).chmod(0o755)
    allocation = {"SLURM_JOB_ID": "47", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2",
                  "SLURM_JOB_NUM_NODES": "2", "SLURM_CPUS_PER_TASK": "16"}
    allocation["TMPDIR"] = str(node_tmp)
    with open(tmp_path / "job.out", "w") as out:
        job = subprocess.Popen(["bash", str(script)], env={**env, **allocation}, stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
        try:
            assert job.wait(timeout=120) == 0, (tmp_path / "job.out").read_text()
            # Ray's steps end with the job: none is left in its process group.
            assert subprocess.run(["pgrep", "-g", str(job.pid)]).returncode == 1
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGTERM)
    steps = (log / "srun.log").read_text().splitlines()
    # The Ray head and worker, then one step on every node that removes Ray's folder there.
    assert sorted(steps) == ["16 hostname", "16 ray", "16 ray", "16 rm"]
    assert not list(node_tmp.iterdir())


@pytest.mark.parametrize("validated", [True, False])
def test_a_requeued_phase_does_not_validate_its_checkpoint_again(tmp_path, validated):
    """A requeued (preempted) or continued phase resumes its own newest checkpoint, and verl
    validated it again before training (trainer.val_before_train defaults to true): a
    validation pass of GPU time spent on a score metrics.jsonl already held."""
    phase = spec(tmp_path)                        # a scratch phase, first global step 0
    node_dir = Path(phase.node_dir)
    (node_dir / "ckpt").mkdir(parents=True)
    (node_dir / "ckpt" / "latest_checkpointed_iteration.txt").write_text("20")
    scores = {"val-core/gsm8k/acc/mean@1": 0.4} if validated else {"actor/entropy": 0.7}
    (node_dir / "metrics.jsonl").write_text(json.dumps({"step": 20, "data": scores}) + "\n")
    script = script_of(phase)
    env, log, _ = stub_programs(tmp_path)
    subprocess.run(["bash", str(script)], env={**env, "SLURM_JOB_ID": "43"}, check=True,
                   capture_output=True, timeout=120)
    args = (log / "main_ppo.args").read_text().splitlines()
    assert ("trainer.val_before_train=false" in args) == validated


@pytest.mark.parametrize("tracker", ["20", None])
def test_a_requeued_phase_drops_the_rows_its_discarded_attempt_logged(tmp_path, tracker):
    """verl resumes a requeued phase from its newest checkpoint; the rows the killed attempt
    logged after it stayed in metrics.jsonl (as its verl file left them too). A phase stopped
    again before reaching them kept their scores, though no checkpoint holds those weights,
    and the monitor saw no new step to judge until it passed them."""
    phase = spec(tmp_path)                        # a scratch phase, first global step 0
    node_dir = Path(phase.node_dir)
    (node_dir / "ckpt").mkdir(parents=True)
    if tracker:
        (node_dir / "ckpt" / "latest_checkpointed_iteration.txt").write_text(tracker)
    rows = [{"step": s, "data": {"val-core/gsm8k/acc/mean@1": s / 100}} for s in range(0, 35, 5)]
    (node_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (node_dir / "verl_metrics.jsonl").write_text(json.dumps(
        {"step": 38, "data": {"actor/entropy": 0.5}}) + "\n")     # not yet copied
    script = script_of(phase)
    env, _, _ = stub_programs(tmp_path)
    subprocess.run(["bash", str(script)], env={**env, "SLURM_JOB_ID": "44"}, check=True,
                   capture_output=True, timeout=120)
    kept = [json.loads(line)["step"] for line in (node_dir / "metrics.jsonl").read_text().splitlines()]
    # Then the stand-in's own rows (steps 0 and 1 of the new attempt).
    assert kept == ([0, 5, 10, 15, 20] if tracker else []) + [0, 1]


def test_what_verl_logged_reaches_metrics_even_when_the_follower_died(tmp_path):
    """The follower copying verl's log while it trains may die (an error of the shared
    filesystem, a signal); nothing copied the rest when verl ended, so the phase was scored
    from a partial curve, its final validation missing."""
    phase = spec(tmp_path)
    script = script_of(phase)
    node_dir = script.parent
    env, _, _ = stub_programs(tmp_path)
    subprocess.run(["bash", str(script)], env={**env, "SLURM_JOB_ID": "45",
                                               "STUB_FOLLOWER_DIES": "1"},
                   check=True, capture_output=True, timeout=120)
    kept = [json.loads(line)["step"] for line in (node_dir / "metrics.jsonl").read_text().splitlines()]
    assert kept == [0, 1]


@pytest.mark.parametrize("requeue", [True, False])
def test_a_phase_on_a_full_disk_keeps_its_first_step_or_stops(tmp_path, requeue):
    """verl_step_offset was written by a shell redirection, which empties the file before it
    writes: a requeue on a full disk left it empty, and the job went on, so the controller
    could no longer read the phase's checkpoints nor a child start from one ("missing or
    unreadable"). Now it is replaced atomically: a requeue keeps the record it had, and a job
    that cannot write it stops there, naming the file and the cause."""
    phase = spec(tmp_path)                        # a scratch phase, first global step 0
    script = script_of(phase)
    node_dir = script.parent
    if requeue:
        (node_dir / "verl_step_offset").write_text("0\n")
    env, log, _ = stub_programs(tmp_path)
    job = on_full_disk(node_dir, ["bash", str(script)], env={**env, "SLURM_JOB_ID": "44"})
    assert job.returncode == 1, job.stdout[-2000:] + job.stderr[-2000:]
    assert f"llmzero: could not write {node_dir}/verl_step_offset (No space left on device)" \
        in job.stderr
    assert not (log / "main_ppo.args").exists()        # stopped before training
    if requeue:
        assert VerlBackend().step_offset(node_dir) == 0
    else:
        assert not (node_dir / "verl_step_offset").exists()
    assert not list(node_dir.glob("*.tmp*"))


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}")
def test_a_rerun_elsewhere_takes_every_output_of_a_verl_phase_along(tmp_path):
    """LLMZ_RERUN_DIR: main_ppo's checkpoints and file logger, the metrics copy, the carried
    parent scores, the step offset and status.json all go to the rerun's folder, which starts
    from the parent's adapter again; the node's folder and the parent's stay as they were."""
    parent = parent_checkpoint(tmp_path)
    (parent / "metrics.jsonl").write_text(
        '{"step": 30, "data": {"val-core/gsm8k/acc/mean@1": 0.35, "actor/entropy": 0.5}}\n')
    phase = spec(tmp_path, kind="evolve", resume=True)
    node_dir, rerun = Path(phase.node_dir), tmp_path / "rerun-0007"
    text = render(phase)
    # Only the #SBATCH output and the variable itself name the node's folder.
    assert [line for line in text.splitlines() if str(node_dir) in line] == [
        f"#SBATCH --output={node_dir}/slurm-%j.out", f"export LLMZ_NODE_DIR={node_dir}"]
    assert 'export LLMZ_VERL_METRICS="${LLMZ_NODE_DIR}/verl_metrics.jsonl"' in text
    cfg = compose(main_ppo_overrides(text, 1, rerun))
    assert cfg.trainer.default_local_dir == f"{rerun}/ckpt"
    assert cfg.trainer.resume_mode == "auto"        # an empty ckpt/: from the parent's adapter
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH == \
        f"{rerun}/verl_metrics.jsonl"
    assert cfg.actor_rollout_ref.model.lora_adapter_path == \
        f"{parent}/export/global_step_30/lora_adapter"
    node_dir.mkdir(parents=True)
    script = node_dir / "phase.sbatch"
    script.write_text(text)
    env, log, _ = stub_programs(tmp_path)

    def job(**extra: str) -> None:
        proc = subprocess.run(["bash", str(script)], env={**env, **extra}, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    job(LLMZ_SCHEDULED="1", SLURM_JOB_ID="41")
    before = {folder: files_of(folder) for folder in (node_dir, parent)}
    job(LLMZ_RERUN_DIR=str(rerun))
    assert (log / "main_ppo.args").read_text().splitlines() == main_ppo_overrides(text, 1, rerun)
    assert json.loads((rerun / "status.json").read_text())["state"] == "completed"
    assert (rerun / "metrics.jsonl").read_text() == (node_dir / "metrics.jsonl").read_text()
    assert (rerun / "verl_step_offset").read_text().strip() == "30"
    assert (rerun / "verl_metrics.jsonl").exists() and not (rerun / "job.claim").exists()
    assert {folder: files_of(folder) for folder in (node_dir, parent)} == before


@pytest.mark.slurm
def test_multi_node_script_runs_to_training_on_slurm(tmp_path):
    parent = parent_checkpoint(tmp_path)
    # The parent validated the resume step (global 30): the child carries it (issue 16).
    (parent / "metrics.jsonl").write_text(
        '{"step": 30, "data": {"val-core/gsm8k/acc/mean@1": 0.35, "actor/entropy": 0.5}}\n')
    phase = spec(tmp_path, kind="evolve", resume=True, nodes=2)
    script = script_of(phase)
    node_dir = script.parent
    env, log, merger_log = stub_programs(tmp_path)
    # The local cluster has one node: the 2-node script runs its Ray choreography on it.
    job = subprocess.run(["sbatch", "--parsable", "--nodes=1", str(script)], env=env,
                         capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    status = node_dir / "status.json"
    deadline = time.time() + 90
    while time.time() < deadline:
        if status.exists() and json.loads(status.read_text())["state"] != "running":
            break
        time.sleep(1)
    output = (node_dir / f"slurm-{job}.out").read_text()
    assert json.loads(status.read_text())["state"] == "completed", output
    args = (log / "main_ppo.args").read_text().splitlines()
    assert args == main_ppo_overrides(script.read_text(), 1, node_dir)
    port = 20000 + (int(job) % 9000) * 5
    assert (log / "main_ppo.env").read_text().strip().endswith(f":{port}")
    [head] = (log / "ray.log").read_text().splitlines()
    assert head.startswith("start --head") and f"--port={port}" in head and "--num-gpus=2" in head
    [merge] = [json.loads(line) for line in merger_log.read_text().splitlines()]
    assert merge[merge.index("--local_dir") + 1] == str(tmp_path / "nodes/0003/ckpt/global_step_20/actor")
    metrics = [json.loads(line) for line in (node_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics == [
        {"step": 30, "data": {"val-core/gsm8k/acc/mean@1": 0.35},
         "carried_from": {"node": 3, "step": 30}},
        {"step": 30, "data": {"val-core/gsm8k/acc/mean@1": 0.4, "test-core/gsm8k_test/acc/mean@1": 0.3}},
        {"step": 31, "data": {"actor/entropy": 0.7}}]
    assert "trainer.val_before_train=false" in args
    assert (node_dir / "verl_step_offset").read_text().strip() == "30"


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}")
def test_example_config_renders_a_phase_verl_accepts(tmp_path):
    from llmzero_slurm.config import load_config
    from llmzero_slurm.paths import ROOT

    cfg = load_config(ROOT / "examples" / "verl-qwen3-lora.yaml")
    phase = PhaseSpec(cfg.name, 0, "scratch", tmp_path / "nodes" / "0000", "tok0", cfg.hparams,
                      cfg.backend, cfg.slurm, cfg.task, cfg.trainer, cfg.model_path)
    script = render(phase)
    assert "#SBATCH --gpus-per-node=8" in script
    cfg_verl = compose(main_ppo_overrides(script, 1, phase.node_dir))
    actor = cfg_verl.actor_rollout_ref.actor
    assert (actor.optim.lr, actor.kl_loss_coef, actor.clip_ratio_high) == (5e-5, 0.001, 0.28)
    assert cfg_verl.actor_rollout_ref.model.lora_rank == 64
    assert cfg_verl.data.max_response_length == 6144


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}")
def test_rendering_refuses_a_key_verl_does_not_know(tmp_path):
    with pytest.raises(ConfigError) as err:
        render(spec(tmp_path, trainer={"test_data_sources": ["gsm8k_test"],
                                       "overrides": ["actor_rollout_ref.rollout.max_num_seq=8"]}))
    assert err.value.key == "actor_rollout_ref.rollout.max_num_seq"


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"{unavailable_reason()}")
@pytest.mark.parametrize("train_batch_size, problem", [(6, "over the job's 8 GPUs"), (8, None)])
def test_the_plan_check_splits_batches_over_every_node_of_the_job(tmp_path, train_batch_size,
                                                                  problem):
    """Review: plan_problem composed verl's config without trainer.nnodes, so it split a step
    over one node's GPUs: on 2 nodes of 4 GPUs it let 12 responses a step through, which the
    render then refused for the job's 8 GPUs, failing the node. Now the plan check counts every
    node, as the render does, and the agent hears of it while it can mend its answer."""
    phase = spec(tmp_path, slurm=SlurmConfig(nodes=2, gpus_per_node=4, cpus_per_task=8,
                                             time="01:00:00"),
                 hparams={**HP, "train_batch_size": train_batch_size,
                          "ppo_mini_batch_size": train_batch_size, "rollout_n": 2,
                          "ppo_micro_batch_size_per_gpu": 1,
                          "log_prob_micro_batch_size_per_gpu": 1})
    found = VerlBackend().plan_problem(phase)
    if problem is None:
        assert found is None
        render(phase)
        return
    assert found is not None and found.startswith("train_batch_size: ") and problem in found
    with pytest.raises(ConfigError, match=problem):
        render(phase)


def test_a_lora_alpha_verl_cannot_read_is_refused_before_submission(tmp_path):
    """Review: a fractional lora_alpha (16.5) passed the shared vocabulary (peft takes any)
    and reached the script as actor_rollout_ref.model.lora_alpha=16.5, but verl 0.9.1's
    HFModelConfig.lora_alpha is an int: the job failed as it started, after its wait in the
    queue. Now the plan check and the render refuse it, naming hparams.lora_alpha; a whole
    number written as a float still reaches verl as an int."""
    phase = spec(tmp_path, hparams={**HP, "lora_alpha": 16.5})
    assert (VerlBackend().plan_problem(phase) or "").startswith("lora_alpha: is 16.5")
    with pytest.raises(ConfigError) as err:
        render(phase)
    assert err.value.key == "hparams.lora_alpha" and "whole number" in err.value.problem
    assert "actor_rollout_ref.model.lora_alpha=32 " in render(
        spec(tmp_path, hparams={**HP, "lora_alpha": 32.0}))


def test_a_planned_batch_larger_than_the_training_split_is_told_to_the_agent(tmp_path):
    """Review: an agent could propose a train_batch_size above the training split's rows
    (search.space need not bound it); verl 0.9.1 then has 0 steps per epoch and fails in
    fit() with ZeroDivisionError after the queue wait, model load and validation. The plan
    check now says so, and the agent mends its answer."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    train = tmp_path / "train.parquet"
    pq.write_table(pa.table({"data_source": ["gsm8k"] * 100, "prompt": ["q"] * 100,
                             "reward_model": ["a"] * 100}), train)
    task = TaskConfig(train_files=[str(train)], val_files=TASK.val_files,
                      test_files=TASK.test_files, reward_path=TASK.reward_path)
    phase = spec(tmp_path, task=task, hparams={**HP, "train_batch_size": 128})
    assert (VerlBackend().plan_problem(phase) or "").startswith(
        "train_batch_size: 100 training rows, fewer than train_batch_size=128")
    assert VerlBackend().plan_problem(spec(tmp_path, task=task, hparams={
        **HP, "train_batch_size": 64})) is None
    assert VerlBackend().plan_problem(spec(tmp_path)) is None    # files not on this machine


@pytest.mark.parametrize("failing", ["--head", "--address"])
def test_a_ray_step_that_ends_at_once_fails_the_phase_at_once(tmp_path, node_tmp, failing):
    """Review: a Ray head or worker that could not start (its port taken, `ray` missing on the
    node) ended its srun step at once, but the job polled `ray status` for 5 minutes, holding
    every GPU of the allocation, before it said that Ray had not come up. Now an ended step
    fails the phase as soon as it is seen, naming the node and the step's exit code."""
    script = script_of(spec(tmp_path, nodes=2))
    env, log, _ = stub_programs(tmp_path)
    ray = tmp_path / "bin" / "ray"
    ray.write_text(STUB_RAY.replace(
        "start)", f'start) [[ " $* " == *" {failing}"* ]] && {{ echo "port taken" >&2; exit 4; }}'
        "\n           ", 1))
    (tmp_path / "bin" / "srun").write_text(STUB_SRUN)
    (tmp_path / "bin" / "scontrol").write_text("#!/bin/bash\nprintf 'n1\\nn2\\n'\n")
    for stub in ("srun", "scontrol", "ray"):
        (tmp_path / "bin" / stub).chmod(0o755)
    allocation = {"SLURM_JOB_ID": "48", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2",
                  "SLURM_JOB_NUM_NODES": "2", "TMPDIR": str(node_tmp)}
    started = time.monotonic()
    done = subprocess.run(["bash", str(script)], env={**env, **allocation}, text=True,
                          capture_output=True, timeout=120, start_new_session=True)
    assert done.returncode == 1 and time.monotonic() - started < 30, done.stderr
    node = "n1" if failing == "--head" else "n2"
    assert f"the Ray {'head' if node == 'n1' else 'worker'} on {node} exited with code 4" \
        in done.stderr
    status = json.loads((tmp_path / "nodes" / "0007" / "status.json").read_text())
    assert status["state"] == "failed" and "during ray" in status["reason"]


def test_an_evolve_phase_exports_with_the_trust_its_model_runs_with(tmp_path):
    """Review: a phase run with actor_rollout_ref.model.trust_remote_code=true exported its
    parent's adapter with verl's merger trusting no code, which fails for such a model."""
    parent_checkpoint(tmp_path)
    trusting = spec(tmp_path, kind="evolve", resume=True, trainer={
        "test_data_sources": ["gsm8k_test"],
        "overrides": ["actor_rollout_ref.model.trust_remote_code=true"]})
    assert VerlBackend().env(trusting)["LLMZ_TRUST_REMOTE_CODE"] == "1"
    assert '${LLMZ_TRUST_REMOTE_CODE:+--trust-remote-code}' in render(trusting)
    assert "LLMZ_TRUST_REMOTE_CODE" not in VerlBackend().env(
        spec(tmp_path, kind="evolve", resume=True))


def test_the_script_passes_each_override_on_its_own_line(tmp_path):
    """Walkthrough: a verl user diffing phase.sbatch against the launch script it replaces
    found main_ppo and its ~45 overrides on one line of ~2,400 characters. Each now has a line
    of its own, as verl's example scripts write them, in the order main_ppo gets them."""
    phase = spec(tmp_path)
    script = render(phase)
    start = script.index("-m verl.trainer.main_ppo")
    lines = script[start:script.index(" &\n", start)].split(" \\\n")
    assert lines[0] == "-m verl.trainer.main_ppo"
    words = [shlex.split(line.replace("${LLMZ_NODE_DIR}", "N").replace(
        "${llmz_validated:+trainer.val_before_train=false}", "")) for line in lines[1:]]
    assert all(len(w) == 1 for w in words[:-1]), lines
    overrides = VerlBackend().overrides(replace(phase, node_dir=Path("N")))
    assert [w[0] for w in words[:len(overrides)]] == overrides
    assert main_ppo_overrides(script, 1, Path("N"))[:len(overrides)] == overrides
