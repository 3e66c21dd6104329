"""The embedded CPU GRPO trainer, run through its command line as a phase script runs it.

One session-scoped good phase is shared by the learning, format, checkpoint and evolve tests;
the collapse, requeue and memory tests run phases of their own. All share one base model.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean

import pytest

from llmzero_slurm.cputrain.checkpoint import load_state, save_state
from llmzero_slurm.cputrain.defaults import DEFAULTS
from llmzero_slurm.cputrain.probe import PROBE_SIZE
from llmzero_slurm.cputrain.warmstart import base_folder
from llmzero_slurm.paths import JOBS
from llmzero_slurm.tasks import addition, expand
from llmzero_slurm.tasks.dataset import SPLIT_SIZES

from conftest import wait_for

pytestmark = pytest.mark.slow

VERL_STEP_METRICS = {
    "actor/entropy", "actor/kl_loss", "actor/ppo_kl", "actor/pg_loss", "actor/pg_clipfrac",
    "actor/pg_clipfrac_lower", "actor/grad_norm", "actor/lr", "critic/rewards/mean",
    "critic/score/mean", "response_length/mean", "response_length/clip_ratio", "timing_s/step",
    "perf/max_rss_gb"}
VAL = "val-core/addition/acc/mean@1"
TEST = "test-core/addition/acc/mean@1"
GOOD_STEPS = 100
VAL_ROWS = SPLIT_SIZES["val"]


def _load_cli():
    spec = importlib.util.spec_from_file_location("cpu_grpo", JOBS / "cpu_grpo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CLI = _load_cli()


def read_metrics(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def by_step(lines: list[dict], key: str) -> dict[int, float]:
    return {line["step"]: line["data"][key] for line in lines if key in line["data"]}


@pytest.fixture(scope="session")
def cache_dir(base_cache) -> Path:
    return base_cache


def run_phase(cache_dir: Path, out: Path, *args: str, task: str = "addition") -> int:
    return CLI.main(["--task", task, "--output-dir", str(out),
                     "--cache-dir", str(cache_dir), *args])


def spawn(cache_dir: Path, out: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen([sys.executable, str(JOBS / "cpu_grpo.py"), "--task", "addition",
                             "--output-dir", str(out), "--cache-dir", str(cache_dir), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.fixture(scope="session")
def good_phase(cache_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("good")
    assert run_phase(cache_dir, out, f"total_training_steps={GOOD_STEPS}", "test_freq=25",
                     "save_freq=50") == 0
    return out


def noise(accuracy: float) -> float:
    """The standard error of a validation accuracy: the split's own binomial noise."""
    return math.sqrt(max(accuracy * (1 - accuracy), 0.05) / VAL_ROWS)


def clearly_above(late: float, early: float) -> bool:
    """Three standard errors of the difference: not an accident of which rows were drawn."""
    return late - early >= 3 * math.hypot(noise(late), noise(early))


def base_record(cache_dir: Path, phase: Path) -> dict:
    """The warm-start record of the base `phase` trained on (the cache holds others too)."""
    config = next((phase / "ckpt").glob("global_step_*/adapter_config.json"))
    name = json.loads(config.read_text())["base_model_name_or_path"]
    return json.loads((base_folder(cache_dir, name) / "warm_start.json").read_text())


def consistent_with_band(base: float, band: tuple[float, float]) -> bool:
    """The probe and the validation split are different rows of one distribution: a base in
    band on the one is within three standard errors of the band on the other."""
    low, high = band
    return low - 3 * noise(low) <= base <= high + 3 * noise(high)


@pytest.mark.numeric
def test_the_base_lands_in_the_task_band_on_held_out_training_rows(good_phase, cache_dir):
    record = base_record(cache_dir, good_phase)
    low, high = addition.BASE_BAND
    assert record["mode"] == "band" and record["band"] == [low, high]
    assert low <= record["probe_accuracy"] <= high, record
    assert record["probe_rows"] == min(PROBE_SIZE, SPLIT_SIZES["train"] // 8)
    assert record["steps"] == record["curve"][-1][0]
    base = by_step(read_metrics(good_phase), VAL)[0]
    assert consistent_with_band(base, addition.BASE_BAND), (base, record)


@pytest.mark.numeric
def test_the_expand_base_lands_in_its_band_too(cache_dir, tmp_path):
    """The task whose answers get harder with length is calibrated like addition, on every
    numeric path: its warm start stops in the task's band, with room for every answer."""
    assert run_phase(cache_dir, tmp_path, "total_training_steps=1", "max_response_length=16",
                     "save_freq=1", task="expand") == 0
    record = base_record(cache_dir, tmp_path)
    low, high = expand.BASE_BAND
    assert record["mode"] == "band" and low <= record["probe_accuracy"] <= high, record
    base = by_step(read_metrics(tmp_path), "val-core/expand/acc/mean@1")[0]
    assert consistent_with_band(base, expand.BASE_BAND), (base, record)


@pytest.mark.numeric
def test_good_settings_raise_validation_accuracy(good_phase):
    """Against this run's own base, with a margin from the validation split's noise."""
    val = by_step(read_metrics(good_phase), VAL)
    assert sorted(val) == [0, 25, 50, 75, 100]
    assert clearly_above(max(val[75], val[100]), val[0]), val


def test_metrics_file_speaks_verl_file_logger_format(good_phase):
    lines = read_metrics(good_phase)
    assert all(set(line) == {"step", "data"} for line in lines)
    assert [line["step"] for line in lines] == list(range(GOOD_STEPS + 1))
    assert set(lines[0]["data"]) == {VAL, TEST}   # the phase's starting point
    for line in lines[1:]:
        assert VERL_STEP_METRICS <= set(line["data"]), line["step"]
        assert all(isinstance(v, float) for v in line["data"].values())
    # the test split is scored exactly where validation is, under its own prefix
    assert by_step(lines, TEST).keys() == by_step(lines, VAL).keys()
    # the process's peak memory; on a GPU, verl's reserved-memory figure too (there the
    # resident set holds the CUDA runtime's ~1.7 GB as well: measured on an H200 node)
    import torch
    if torch.cuda.is_available():
        assert lines[-1]["data"]["actor/perf/max_memory_reserved_gb"] < 1.0
    else:
        assert lines[-1]["data"]["perf/max_rss_gb"] < 1.0


def test_checkpoints_are_loadable_peft_adapters(good_phase, cache_dir):
    import torch
    from peft import PeftModel
    from transformers import LlamaForCausalLM

    folders = sorted(p.name for p in (good_phase / "ckpt").iterdir())
    assert folders == ["global_step_100", "global_step_50"]
    config = json.loads((good_phase / "ckpt/global_step_100/adapter_config.json").read_text())
    assert config["r"] == 8 and config["lora_alpha"] == 16
    base_dir = base_folder(cache_dir, config["base_model_name_or_path"])
    model = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(base_dir),
                                      str(good_phase / "ckpt/global_step_100"))
    lora = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora and any(torch.count_nonzero(p) for p in lora)   # trained, not the zero init


def test_a_checkpoint_on_a_full_disk_says_the_disk_is_full():
    """torch.save to a path said 'unexpected pos 704 vs 598', and the error analyzer took the
    traceback for a bug in the task's code, ending the chain even once space was freed."""
    import errno
    import torch
    with pytest.raises(OSError) as err:
        save_state({"x": torch.zeros(100_000)}, Path("/dev/full"))
    assert err.value.errno == errno.ENOSPC


@pytest.mark.parametrize("writer", ["trainer state", "adapter weights"])
def test_a_phase_that_fills_the_disk_says_so_in_one_line_and_resumes_once_freed(
        cache_dir, tmp_path, monkeypatch, capsys, writer):
    """A full disk mid-checkpoint ended the job with chained tracebacks (safetensors' own
    SafetensorError for the weights), which read as a bug in the trainer. One line now names
    the folder and the cause, no half-written step is taken for a checkpoint, and the rerun
    once there is space resumes the last whole one."""
    import errno
    import safetensors.torch
    import torch
    real_save, real_serialize = torch.save, safetensors.torch.serialize_file

    def state_full_at_step_4(obj, fh, *args, **kwargs):
        if isinstance(obj, dict) and obj.get("global_step") == 4:
            fh.write(b"PK\x03\x04 part of a checkpoint")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, fh, *args, **kwargs)

    def weights_full_at_step_4(tensors, filename, *args, **kwargs):
        if Path(filename).parent.name.startswith(".global_step_4."):
            raise safetensors.SafetensorError("Error while serializing: I/O error: No space "
                                              "left on device (os error 28)")
        return real_serialize(tensors, filename, *args, **kwargs)
    if writer == "trainer state":
        monkeypatch.setattr(torch, "save", state_full_at_step_4)
    else:
        monkeypatch.setattr(safetensors.torch, "serialize_file", weights_full_at_step_4)
    args = ("total_training_steps=6", "save_freq=2", "test_freq=2")
    assert run_phase(cache_dir, tmp_path, *args) == 1
    err = capsys.readouterr().err
    assert "cpu_grpo: error: " in err and ": could not be written (No space left on device); " \
           "free space, then rerun" in err and "Traceback" not in err
    assert f"error: {tmp_path}" in err
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("global_step_*")) == ["global_step_2"]
    monkeypatch.undo()
    assert run_phase(cache_dir, tmp_path, *args) == 0
    assert "resumed own checkpoint global_step_2" in capsys.readouterr().out
    assert [line["step"] for line in read_metrics(tmp_path)] == list(range(7))


def test_a_checkpoint_names_its_release_and_one_another_release_wrote_says_so(cache_dir, tmp_path,
                                                                             capsys):
    """trainer_state.pt said nothing of the release that wrote it, so a requeue after an
    upgrade that could not read an older state failed with a bare KeyError traceback. It now
    carries the release, and a state this release cannot resume is named with it and the way
    on (a rerun from the start, or that release)."""
    import llmzero_slurm
    args = ("save_freq=2", "test_freq=2")
    assert run_phase(cache_dir, tmp_path, "total_training_steps=2", *args) == 0
    folder = tmp_path / "ckpt" / "global_step_2"
    state = load_state(folder)
    assert state["llmzero_version"] == llmzero_slurm.__version__
    del state["sampler"]                                 # as a release that kept no sampler
    save_state({**state, "llmzero_version": "9.9.9"}, folder / "trainer_state.pt")
    capsys.readouterr()
    assert run_phase(cache_dir, tmp_path, "total_training_steps=4", *args) == 1
    err = capsys.readouterr().err
    assert f"cpu_grpo: error: {folder / 'trainer_state.pt'}: written by llmzero-slurm 9.9.9, " \
           f"which this llmzero-slurm ({llmzero_slurm.__version__}) cannot resume (no " \
           "'sampler'): rerun the phase from its start into a folder of its own " \
           "(LLMZ_RERUN_DIR), or resume it with that release" in err, err[-2000:]
    assert "Traceback" not in err


def test_a_checkpoint_resumes_only_on_the_device_type_it_was_written_on(cache_dir, tmp_path,
                                                                      monkeypatch, capsys):
    """The trainer takes CUDA when it sees one: a requeue onto the other kind of node failed
    with torch.load's traceback (a CUDA state on a CPU host) or the false "written by another
    llmzero-slurm" (a CPU generator's state given to a CUDA one). Either is now refused,
    before any model is built, naming both devices and the way on."""
    import torch
    args = ("save_freq=1", "test_freq=1")
    assert run_phase(cache_dir, tmp_path, "--warm-start-steps=0", "total_training_steps=1",
                     *args) == 0
    state_file = tmp_path / "ckpt" / "global_step_1" / "trainer_state.pt"
    state = load_state(state_file.parent)
    assert state["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    for written, here in (("cpu", "cuda"), ("cuda", "cpu")):
        save_state({**state, "device": written}, state_file)
        with monkeypatch.context() as patch:
            patch.setattr(torch.cuda, "is_available", lambda cuda=here == "cuda": cuda)
            capsys.readouterr()
            assert run_phase(cache_dir, tmp_path, "--warm-start-steps=0", "total_training_steps=2",
                             *args) == 1
        err = capsys.readouterr().err
        assert f"cpu_grpo: error: {state_file}: written on {written}, this run trains on " \
               f"{here}" in err, err[-2000:]
        assert "LLMZ_RERUN_DIR" in err and "release" not in err and "Traceback" not in err


class _Planted:
    """A pickle that runs code as it is loaded: here it only creates the file it names."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def test_a_checkpoint_state_that_would_run_code_as_it_loads_is_refused(cache_dir, tmp_path,
                                                                      capsys):
    """trainer_state.pt was read with torch.load(weights_only=False): unpickling runs whatever
    the file names, so a file a peer on the shared run directory planted (or any file there
    not written by the trainer) ran its code in the next job that resumed the phase. The
    state holds plain numbers, text and tensors only; anything else is refused, named."""
    import torch
    args = ("save_freq=1", "test_freq=1")
    assert run_phase(cache_dir, tmp_path, "--warm-start-steps=0", "total_training_steps=1",
                     *args) == 0
    state_file = tmp_path / "ckpt" / "global_step_1" / "trainer_state.pt"
    state = load_state(state_file.parent)
    marker = tmp_path / "ran"
    torch.save({**state, "planted": _Planted(marker)}, state_file)
    capsys.readouterr()
    assert run_phase(cache_dir, tmp_path, "--warm-start-steps=0", "total_training_steps=2",
                     *args) == 1
    err = capsys.readouterr().err
    assert not marker.exists()
    assert f"cpu_grpo: error: {state_file}: " in err and "Traceback" not in err, err[-2000:]


def test_a_checkpoint_takes_the_umask_so_a_colleague_can_start_from_it(tmp_path):
    """safetensors writes adapter_model.safetensors 0600 whatever the umask: under a group's
    umask 002 a colleague resuming the shared run could not load a parent's adapter."""
    import torch
    from llmzero_slurm.cputrain.checkpoint import save
    from llmzero_slurm.cputrain.model import random_model, with_lora
    from llmzero_slurm.cputrain.tokenizer import CharTokenizer
    model = with_lora(random_model(CharTokenizer(), 0), "base-x", 8, 16.0, "all-linear")
    umask = os.umask(0o002)
    try:
        folder = save(tmp_path / "ckpt", 5, model, {"x": torch.zeros(1)}, "cpu")
    finally:
        os.umask(umask)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in folder.iterdir()}
    assert "adapter_model.safetensors" in modes and set(modes.values()) == {"0o664"}


SAVE_ONE = """
import sys, torch
from pathlib import Path
from llmzero_slurm.cputrain.checkpoint import save
from llmzero_slurm.cputrain.model import random_model, with_lora
from llmzero_slurm.cputrain.tokenizer import CharTokenizer
model = with_lora(random_model(CharTokenizer(), 0), "base-x", 8, 16.0, "all-linear")
save(Path(sys.argv[1]), 5, model, {"x": torch.zeros(1)}, "cpu")
"""


def test_a_checkpoint_is_on_disk_before_its_folder_takes_its_name(tmp_path):
    """The files of a checkpoint were renamed into place unsynced: a power loss (or a file
    server's crash) after the rename could leave global_step_N whole by name with empty or
    short files, the step a child phase or a requeue then fails to load. Seen with strace: each
    file and the folder are fsynced before the rename, the folder holding it after."""
    import re
    import shutil
    if not shutil.which("strace"):
        pytest.skip("needs strace to see the system calls of a save")
    log = tmp_path / "strace.log"
    subprocess.run(["strace", "-f", "-qq", "-y", "-o", str(log), "-e",
                    "trace=fsync,fdatasync,rename,renameat,renameat2", sys.executable, "-c",
                    SAVE_ONE, str(tmp_path / "ckpt")], check=True, capture_output=True, timeout=300)
    calls = []
    for line in log.read_text().splitlines():
        if synced := re.search(r"\b(?:fsync|fdatasync)\(\d+<([^>]*)>\) = 0", line):
            calls.append(("fsync", synced[1]))
        elif moved := re.search(r"\brename(?:at2?)?\(.*?\"([^\"]+)\", .*?\"([^\"]+)\".*\) = 0", line):
            calls.append(("rename", moved[2], moved[1]))
    final = (tmp_path / "ckpt" / "global_step_5").resolve()
    [at] = [i for i, call in enumerate(calls) if call[:2] == ("rename", str(final))]
    tmp = Path(calls[at][2])
    synced = {call[1] for call in calls[:at] if call[0] == "fsync"}
    files = [p.relative_to(final) for p in final.rglob("*") if p.is_file()]
    assert "trainer_state.pt" in map(str, files) and "adapter_model.safetensors" in map(str, files)
    assert {str(tmp / f) for f in files} <= synced, sorted(synced)
    assert str(tmp) in synced
    assert ("fsync", str(final.parent)) in calls[at + 1:]


def test_a_job_killed_while_replacing_its_best_adapter_leaves_a_whole_one(tmp_path, monkeypatch):
    """The older best adapter was deleted in place: a job killed midway (the OOM killer, the
    end of KillWait, a lost node) left best.json beside no weights, which the report offers
    as the model to load. Whatever the kill point, the job's next start finds a whole one."""
    import shutil
    from llmzero_slurm.cputrain import checkpoint
    from llmzero_slurm.cputrain.model import random_model, with_lora
    from llmzero_slurm.cputrain.tokenizer import CharTokenizer
    model = with_lora(random_model(CharTokenizer(), 0), "base-x", 8, 16.0, "all-linear")
    final = tmp_path / "best_adapter"

    def record(step: int):
        return lambda tmp: (tmp / "best.json").write_text(json.dumps({"step": step}))

    class Killed(BaseException):
        pass
    real = shutil.rmtree

    def killed_midway(path, *args, **kwargs):
        weights = Path(path) / "adapter_model.safetensors"
        if weights.exists():
            weights.unlink()
            raise Killed
        return real(path, *args, **kwargs)

    def whole() -> int:
        checkpoint.remove_partial(tmp_path, final.name)      # the job's next start
        assert sorted(p.name for p in tmp_path.iterdir()) == ["best_adapter"]
        assert (final / "adapter_model.safetensors").stat().st_size > 0
        return json.loads((final / "best.json").read_text())["step"]
    checkpoint.save_adapter(final, model, record(10))
    monkeypatch.setattr(shutil, "rmtree", killed_midway)
    with pytest.raises(Killed):
        checkpoint.save_adapter(final, model, record(20))
    monkeypatch.undo()
    assert whole() == 20
    os.replace(final, tmp_path / ".best_adapter.4242.old")   # killed between the two renames
    assert whole() == 20


def test_a_resume_forgets_a_best_adapter_of_a_step_its_metrics_no_longer_hold(cache_dir,
                                                                            tmp_path):
    """Best at step 5, checkpoint at 2, killed later: the resume cut the metrics back to step 2
    but kept best_adapter/ of step 5, weights whose score no metric held any more."""
    args = ("--warm-start-steps=0", "save_freq=2", "test_freq=1")
    assert run_phase(cache_dir, tmp_path, *args, "total_training_steps=2") == 0
    best = tmp_path / "best_adapter"
    (best / "best.json").write_text(json.dumps({"step": 5, "val_score": 0.9}))
    # Resumed at its last checkpoint, step 2, with nothing left to train: no step is
    # validated again, so only what the resume itself did decides.
    assert run_phase(cache_dir, tmp_path, *args, "total_training_steps=2") == 0
    assert not best.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".best_adapter")]


def test_the_adapter_of_the_best_validation_step_is_kept_and_scores_it(good_phase, cache_dir,
                                                                       tmp_path):
    """save_freq rarely falls on the best validation step, the one the search reports: the
    phase keeps that step's adapter, and a phase started from it validates exactly there."""
    val = {s: v for s, v in by_step(read_metrics(good_phase), VAL).items() if s > 0}
    best_step = max(val, key=lambda s: (val[s], -s))
    kept = json.loads((good_phase / "best_adapter/best.json").read_text())
    assert kept == {"step": best_step, "val_score": val[best_step]}
    assert run_phase(cache_dir, tmp_path, "--init-adapter", str(good_phase / "best_adapter"),
                     "--step-offset", str(best_step), "total_training_steps=1") == 0
    assert read_metrics(tmp_path)[0]["data"][VAL] == pytest.approx(val[best_step], abs=1e-9)


@pytest.mark.numeric
def test_child_phase_continues_from_the_parent_level(good_phase, cache_dir, tmp_path):
    parent = by_step(read_metrics(good_phase), VAL)
    assert run_phase(cache_dir, tmp_path, "--init-adapter", str(good_phase / "ckpt/global_step_100"),
                     "--step-offset", "100", "total_training_steps=5", "test_freq=5") == 0
    child = read_metrics(tmp_path)
    assert [line["step"] for line in child] == list(range(100, 106))
    # greedy validation of the same weights: the child starts exactly where the parent stopped
    assert child[0]["data"][VAL] == pytest.approx(parent[100], abs=1e-9)
    assert clearly_above(child[0]["data"][VAL], parent[0]), parent
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["global_step_105"]
    # and it reads on in the parent's data order instead of re-reading its first batches
    parent_state = load_state(good_phase / "ckpt/global_step_100")
    child_state = load_state(tmp_path / "ckpt/global_step_105")
    assert (child_state["epoch"], child_state["position"]) == (
        parent_state["epoch"], parent_state["position"] + 5 * DEFAULTS["train_batch_size"])


def test_learning_rate_too_high_collapses(cache_dir, good_phase, tmp_path):
    """The run is chaotic (curves differ between machines), so assert its shape, not a value."""
    assert run_phase(cache_dir, tmp_path, "lr=1e-2", "total_training_steps=60",
                     "test_freq=10", "save_freq=1000") == 0
    lines, good = read_metrics(tmp_path), read_metrics(good_phase)
    val = by_step(lines, VAL)
    late = [acc for step, acc in val.items() if step >= 20]
    good_val = [acc for step, acc in by_step(good, VAL).items() if step > 0]
    # against this run's own base (step 0) and the good run, not a number from one machine
    assert min(late) <= val[0] / 5 and mean(late) < 0.5 * mean(good_val), (val, good_val)
    assert mean(by_step(lines, "actor/kl_loss").values()) > 3 * mean(
        by_step(good, "actor/kl_loss").values())


def test_sigterm_stops_cleanly_and_a_requeue_resumes(cache_dir, good_phase, tmp_path):
    args = ("total_training_steps=40", "test_freq=10", "save_freq=1000")
    job = spawn(cache_dir, tmp_path, *args)
    metrics = tmp_path / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.exists() and len(read_metrics(tmp_path)) > 3):
        time.sleep(0.2)
    job.send_signal(signal.SIGTERM)
    _, err = job.communicate(timeout=60)
    assert job.returncode == 143, err
    stopped_at = read_metrics(tmp_path)[-1]["step"]
    assert 3 <= stopped_at < 40
    assert (tmp_path / f"ckpt/global_step_{stopped_at}/adapter_model.safetensors").exists()
    # The requeued job (same output dir) picks up its own checkpoint with full state.
    assert run_phase(cache_dir, tmp_path, *args) == 0
    lines = read_metrics(tmp_path)
    assert [line["step"] for line in lines] == list(range(41))
    val = {s: v for s, v in by_step(lines, VAL).items() if s > 0}
    assert json.loads((tmp_path / "best_adapter/best.json").read_text())["step"] == max(
        val, key=lambda s: (val[s], -s))   # one curve, one best across the stop


def test_sigterm_during_the_warm_start_stops_it_at_once_and_caches_no_base(tmp_path):
    """Walkthrough: a phase still in its warm start trained on ~10 s after SIGTERM, until
    SIGKILL. It now stops within a step, exit 143, and leaves no base that a later phase
    would take for a finished one."""
    cache = tmp_path / "cache"
    job = spawn(cache, tmp_path / "out", "--warm-start-steps", "100000")
    try:
        wait_for(lambda: list((cache / "base").glob("*.lock")), 120, "the warm start")
        time.sleep(2)
        job.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        out, err = job.communicate(timeout=60)
    finally:
        job.kill()
    assert job.returncode == 143 and time.monotonic() - signalled < 5, out + err
    assert "warm start: stopped at step" in out and "Traceback" not in err, out + err
    assert not list((cache / "base").rglob("warm_start.json"))


def test_oversized_batch_under_a_memory_limit_fails_with_a_real_allocation_error(
        cache_dir, good_phase, tmp_path):
    """The CPU's cap counts the libraries too (~600 MB at start); the GPU's counts only
    what the CUDA allocator holds, so it is set lower there."""
    import torch
    gpu = torch.cuda.is_available()
    job = spawn(cache_dir, tmp_path, "--max-memory-mb", "64" if gpu else "700",
                "train_batch_size=64", "rollout_n=32", "ppo_mini_batch_size=64",
                "max_response_length=16", "temperature=3.0", "total_training_steps=1")
    _, err = job.communicate(timeout=300)
    assert job.returncode == 3, err
    assert "out of memory" in err and ("CUDA" if gpu else "can't allocate memory") in err


@pytest.mark.parametrize("bad, named", [
    (["lr=fast"], "lr"), (["lr=0"], "lr"), (["no_such_knob=1"], "no_such_knob"),
    (["gpu_memory_utilization=0.5"], "gpu_memory_utilization"), (["lora_rank=0"], "lora_rank"),
    (["ppo_mini_batch_size=5"], "ppo_mini_batch_size"), (["rollout_n"], "rollout_n"),
])
def test_bad_hyperparameters_exit_2_naming_the_key(bad, named, tmp_path, capsys):
    assert CLI.main(["--task", "addition", "--output-dir", str(tmp_path), *bad]) == 2
    assert named in capsys.readouterr().err


def test_a_cache_folder_that_is_a_file_exits_2_naming_it(tmp_path, monkeypatch, capsys):
    (tmp_path / "afile").write_text("mine")
    monkeypatch.setenv("LLMZERO_CACHE", str(tmp_path / "afile"))
    assert CLI.main(["--task", "addition", "--output-dir", str(tmp_path / "out")]) == 2
    assert f"environment variable LLMZERO_CACHE: {tmp_path / 'afile'} is a file" \
        in capsys.readouterr().err
    assert CLI.main(["--task", "addition", "--output-dir", str(tmp_path / "out"),
                     f"--cache-dir={tmp_path / 'afile'}"]) == 2
    assert f"config key '--cache-dir': {tmp_path / 'afile'} is a file" in capsys.readouterr().err


def test_bad_data_arguments_are_refused(tmp_path, cache_dir, capsys):
    with pytest.raises(SystemExit) as exit_info:
        CLI.main(["--task", "addition", "--train-files", "x.parquet", "--output-dir", "o"])
    assert exit_info.value.code == 2
    assert run_phase(cache_dir, tmp_path, "--init-adapter", str(tmp_path / "nowhere")) == 2
    assert "adapter_config.json" in capsys.readouterr().err


def test_a_damaged_parent_adapter_exits_2_naming_the_file(cache_dir, tmp_path, capsys):
    """A truncated adapter_model.safetensors (a full disk, a copy cut short) failed the child
    with safetensors' traceback, which named no file and read as a bug in the task code."""
    parent = tmp_path / "parent"
    assert run_phase(cache_dir, parent, "total_training_steps=1", "save_freq=1",
                     "test_freq=100") == 0
    weights = parent / "ckpt/global_step_1/adapter_model.safetensors"
    with open(weights, "r+b") as fh:
        fh.truncate(weights.stat().st_size // 2)
    capsys.readouterr()
    assert run_phase(cache_dir, tmp_path / "child", "--init-adapter", str(weights.parent),
                     "total_training_steps=1") == 2
    said = capsys.readouterr().err
    assert f"cpu_grpo: error: {weights}: cannot be loaded" in said and "damaged" in said


def test_verl_format_files_and_a_reward_path_train_another_task(cache_dir, tmp_path):
    """The same parquet + reward-file contract verl uses, here with the string task."""
    from llmzero_slurm.tasks import reward_path
    from llmzero_slurm.tasks.dataset import materialize

    files = materialize("sort", tmp_path / "data")
    out = tmp_path / "out"
    assert CLI.main(["--train-files", str(files["train"]), "--val-files", str(files["val"]),
                     "--test-files", str(files["test"]), "--reward-path", str(reward_path("sort")),
                     "--output-dir", str(out), "--cache-dir", str(cache_dir),
                     "total_training_steps=2", "test_freq=2", "max_response_length=9"]) == 0
    lines = read_metrics(out)
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert 0.0 < lines[0]["data"]["val-core/sort/acc/mean@1"] <= 1.0
    assert "test-core/sort/acc/mean@1" in lines[2]["data"]


def test_a_reward_function_of_another_name_is_the_one_called(cache_dir, tmp_path):
    """task.reward_name reached verl and the preflight but not the CPU trainer, which loaded
    compute_score: a file defining only the named function failed every phase (exit 2), and
    one defining both trained on the wrong reward."""
    from llmzero_slurm.tasks.dataset import materialize

    files = materialize("sort", tmp_path / "data")
    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, "
                      "extra_info=None):\n    return 0.0\n\n"
                      "def lenient(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return 1.0\n")
    out = tmp_path / "out"
    assert CLI.main(["--train-files", str(files["train"]), "--val-files", str(files["val"]),
                     "--test-files", str(files["test"]), "--reward-path", str(reward),
                     "--reward-name", "lenient", "--warm-start-steps", "0",
                     "--output-dir", str(out), "--cache-dir", str(cache_dir),
                     "total_training_steps=1", "test_freq=1", "max_response_length=4"]) == 0
    assert read_metrics(out)[0]["data"]["val-core/sort/acc/mean@1"] == 1.0


def test_a_train_split_smaller_than_one_batch_is_refused(cache_dir, tmp_path, capsys):
    """Every step trained on the whole split instead of train_batch_size prompts, one epoch a
    step, while the budget counted full batches; verl refuses such a split too."""
    from llmzero_slurm.tasks import reward_path
    from llmzero_slurm.tasks.dataset import materialize

    files = materialize("sort", tmp_path / "data")
    assert CLI.main(["--train-files", str(files["train"]), "--val-files", str(files["val"]),
                     "--test-files", str(files["test"]), "--reward-path", str(reward_path("sort")),
                     "--warm-start-steps", "0", "--output-dir", str(tmp_path / "out"),
                     "--cache-dir", str(cache_dir), "train_batch_size=8192"]) == 2
    said = capsys.readouterr().err
    assert "4000 rows, fewer than train_batch_size 8192" in said


def test_a_non_finite_cpu_metric_reaches_the_agents_as_nan(tmp_path):
    """Review: the CPU trainer wrote NaN and infinities as null, which the metrics reader
    skips, so a diverged CPU phase's blow-up never reached the agents; the verl copy keeps it."""
    from llmzero_slurm.agents.offline.signals import Signals
    from llmzero_slurm.cputrain.metrics_log import MetricsLog
    from llmzero_slurm.metrics_reader import read_metrics

    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.write(1, {"actor/grad_norm": 0.5, "actor/pg_loss": 0.1})
    log.write(2, {"actor/grad_norm": float("nan"), "actor/pg_loss": float("inf")})
    log.close()
    read = read_metrics(tmp_path / "metrics.jsonl")
    assert math.isnan(read.get("actor/grad_norm")[-1][1])
    assert read.get("actor/pg_loss")[-1] == (2, math.inf)
    assert Signals.of(read).blown_up


def test_a_requeue_keeps_a_metrics_log_with_undecodable_bytes(tmp_path):
    """Crash walkthrough: bytes that are not UTF-8 in a phase's metrics.jsonl (a client crash
    on a shared filesystem, a stray write) made the trainer's start fail with
    UnicodeDecodeError, every requeue and rerun again, which the error analyzer then blamed on
    the task's code. The trainer now drops the later steps and keeps the rest byte for byte."""
    from llmzero_slurm.cputrain.metrics_log import MetricsLog

    path = tmp_path / "metrics.jsonl"
    garbage = b"\xab\xff\x00junk\n"
    path.write_bytes(b'{"step": 1, "data": {"a": 1}}\n' + garbage
                     + b'{"step": 3, "data": {"a": 3}}\n[[[[\n{"step": 2, "da')
    MetricsLog(path).truncate_after(2)
    assert path.read_bytes() == b'{"step": 1, "data": {"a": 1}}\n' + garbage + b"[[[[\n"
