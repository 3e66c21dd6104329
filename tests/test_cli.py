"""The command-line tools as a user meets them: --help, --check, status, stop, bad input."""
from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import yaml

from llmzero_slurm.cli.open_run import open_or_create
from llmzero_slurm.cli.start import build_controller, parse_args
from llmzero_slurm.config import parse_config
from llmzero_slurm.errors import ConfigError, SchedulerError, UsageError
from llmzero_slurm.paths import ROOT
from llmzero_slurm.schedulers import LocalScheduler
from llmzero_slurm.schedulers.base import CallJob
from llmzero_slurm.schedulers.local_table import CALL_MODULE, SUPERVISOR
from llmzero_slurm.search.tree import Kind, Node, Results, Resume, Status, Submission
from llmzero_slurm.store.atomic import write_json
from llmzero_slurm.store.run_store import RunStore

from conftest import finish, flock_held, local_phases, slurm_clients, verl_task_files, wait_for
from metrics_files import TEST, VAL, write_metrics
from slurm_shims import CLIENTS, Shims

COMMANDS = ("start", "status", "stop", "report", "repair")


def cli(name: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLMZERO_PYTHON": sys.executable}
    env.pop("ANTHROPIC_API_KEY", None)
    return subprocess.run([str(ROOT / "bin" / f"llmzero-{name}"), *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_output_cut_short_by_a_pipe_ends_quietly():
    """`llmzero-status RUN | head`: the reader leaves early; no traceback, exit 128 + SIGPIPE."""
    program = ("from llmzero_slurm.cli.common import run_main\n"
               "def main(argv):\n"
               "    for i in range(200000):\n"
               "        print(f'line {i}')\n"
               "    return 0\n"
               "run_main(main)\n")
    done = subprocess.run(["bash", "-c", f'set -o pipefail; "{sys.executable}" -c "$0" | head -1',
                           program], capture_output=True, text=True, timeout=120)
    assert done.stdout == "line 0\n"
    assert done.stderr == "" and done.returncode == 141


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help(name):
    done = cli(name, "--help")
    assert done.returncode == 0 and f"llmzero-{name}" in done.stdout


def importing(pid: int) -> bool:
    """Whether the process has begun importing the command's modules: an extension module of
    the standard library is loaded (Python's own start and its site load none)."""
    try:
        return ".cpython-" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_ctrl_c_while_a_command_loads_ends_it_with_130_and_one_line():
    """Issue: Ctrl-C in the first seconds of any llmzero-* command, while Python imported its
    modules, printed a KeyboardInterrupt traceback. It now ends as an interrupt later does: exit
    130 and one line. A signal sent once the imports began lands in them, or (on a fast
    machine, the later ones) as the help is printed or after: never anything else. After means
    once the command is done: Python's finalization restores SIGINT's default action, so a
    signal then ends the process by SIGINT (a shell's 130) with the help whole and nothing
    more said (CI, a loaded machine: the signal of 0.3 s came then)."""
    env = {**os.environ, "LLMZERO_PYTHON": sys.executable}
    whole = cli("status", "--help").stdout
    in_imports = 0
    for delay in (0.0, 0.05, 0.1, 0.3):
        # Ctrl-C as a terminal's shell leaves it to the command: a suite started in the
        # background (`make test &`) hands its processes SIGINT ignored.
        proc = subprocess.Popen([str(ROOT / "bin" / "llmzero-status"), "--help"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=partial(signal.signal, signal.SIGINT, signal.SIG_DFL))
        wait_for(partial(importing, proc.pid), 60, "the command's imports", every=0.001)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        said = (delay, proc.returncode, err[-2000:], out[:200])
        if proc.returncode in (0, -signal.SIGINT):  # done before the signal came, or as it ended
            assert err == "" and out == whole, said
            continue
        assert (proc.returncode, err) == (130, "interrupted\n"), said
        assert "usage: llmzero-status".startswith(out[:21]), said    # none of the help, or some
        in_imports += out == ""
    assert in_imports, "no signal landed while the command loaded"


def test_ctrl_c_in_a_callback_the_import_system_runs_still_ends_the_command():
    """CI (a loaded 2-core machine): a Ctrl-C raised as KeyboardInterrupt inside a module
    lock's weakref callback, which the import system runs, is only printed by Python
    ("Exception ignored in: <function _get_module_lock.<locals>.cb>") and the command went on:
    exit 0 and a traceback. During the imports the handler itself ends the command. Here the
    interrupt is made to land in such a callback."""
    program = ("import os, signal, sys, time, weakref\n"
               "import llmzero_slurm.cli.__main__ as entry\n"
               "real = entry.import_module\n"
               "class Lock: pass\n"
               "def load(name, package=None):\n"
               "    lock = Lock()\n"
               "    ref = weakref.ref(lock, lambda _: (os.kill(os.getpid(), signal.SIGINT),"
               " time.sleep(2)))\n"
               "    del lock\n"
               "    return real(name, package)\n"
               "entry.import_module = load\n"
               "sys.argv = ['llmzero', 'status', '--help']\n"
               "entry.main()\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120, cwd=ROOT,
                          preexec_fn=partial(signal.signal, signal.SIGINT, signal.SIG_DFL))
    assert (done.returncode, done.stderr, done.stdout) == (130, "interrupted\n", ""), done


def test_a_checkout_venv_python_that_cannot_be_run_is_named(tmp_path):
    """Review: a dangling .venv/bin/python (after a pyenv upgrade), or a colleague's that this
    user may not run, fell back to the system python3: a ModuleNotFoundError traceback."""
    checkout = tmp_path / "checkout"
    (checkout / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "bin" / "llmzero-cli", checkout / "bin")
    (checkout / "bin" / "llmzero-status").symlink_to("llmzero-cli")
    venv = checkout / ".venv" / "bin" / "python"
    venv.parent.mkdir(parents=True)
    venv.symlink_to(tmp_path / "gone" / "python3.11")
    env = {k: v for k, v in os.environ.items() if k != "LLMZERO_PYTHON"}
    done = subprocess.run([str(checkout / "bin" / "llmzero-status"), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert str(venv) in done.stderr and "LLMZERO_PYTHON" in done.stderr


@pytest.mark.parametrize("how", ["no .venv", "a dangling .venv", "LLMZERO_PYTHON"])
def test_a_python_without_the_requirements_is_one_line_saying_what_to_do(tmp_path, how):
    """Walkthrough: in a clone with no .venv (or a .venv linked to a venv that is gone) every
    llmzero-* command fell back to python3 and died with a 20-line ModuleNotFoundError."""
    checkout = tmp_path / "checkout"
    (checkout / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "bin" / "llmzero-cli", checkout / "bin")
    (checkout / "bin" / "llmzero-status").symlink_to("llmzero-cli")
    (checkout / "llmzero_slurm").symlink_to(ROOT / "llmzero_slurm")
    bare = tmp_path / "bare"                     # a Python with none of the requirements
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("LLMZERO_PYTHON", "PYTHONPATH")}
    env["PATH"] = f"{bare / 'bin'}:{env['PATH']}"   # its python3 is the one found
    if how == "a dangling .venv":
        (checkout / ".venv").symlink_to(tmp_path / "gone")
    if how == "LLMZERO_PYTHON":
        env["LLMZERO_PYTHON"] = str(bare / "bin" / "python")
    done = subprocess.run([str(checkout / "bin" / "llmzero-status"), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "no usable environment" in done.stderr and "make venv" in done.stderr
    assert "LLMZERO_PYTHON" in done.stderr


def test_an_installed_command_missing_a_requirement_says_how_to_install():
    """An install's llmzero-status (pip --no-deps, say) told its user to run `make venv` in a
    checkout there is none of, or to set LLMZERO_PYTHON, which only bin/llmzero-cli reads."""
    done = subprocess.run([sys.executable, "-c", "import sys; sys.modules['yaml'] = None; "
                           "sys.argv = ['/site/bin/llmzero-status', 'RUN']; "
                           "from llmzero_slurm.cli.__main__ import entry; entry()"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "cannot import yaml" in done.stderr and "pip install" in done.stderr
    assert "make venv" not in done.stderr and "LLMZERO_PYTHON" not in done.stderr


def test_a_missing_module_of_llmzero_slurm_itself_is_a_traceback(tmp_path):
    """A bug (a module of the package gone) is not taken for a missing environment."""
    done = subprocess.run([sys.executable, "-c", "import sys; sys.modules['llmzero_slurm.cli.status'] = None; "
                           "sys.argv = ['x', 'status']; from llmzero_slurm.cli.__main__ import main; main()"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" in done.stderr, done.stderr


def test_cancel_on_stop_is_refused_for_a_controller_job(tmp_path):
    """Review: Slurm ends a controller job with SIGTERM for its own requeue near the time limit
    and for a preemption, not only for a person's scancel; with --cancel-on-stop each requeue
    cancelled every running phase, recorded as a person's cancel."""
    done = cli("start", str(ROOT / "examples" / "cpu-addition-slurm.yaml"), "--run-dir", str(tmp_path / "r"),
               "--submit", "--cancel-on-stop")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--cancel-on-stop does not go with --submit" in done.stderr
    assert not (tmp_path / "r").exists()


def test_stop_says_how_long_it_waits_and_refuses_a_wait_that_is_no_duration(tmp_path):
    """`--wait -5` (or nan) did not wait and said "controller still running after -5 s"."""
    assert "(default 120" in " ".join(cli("stop", "--help").stdout.split())
    for wait in ("-5", "nan"):
        done = cli("stop", str(tmp_path), "--wait", wait)
        assert done.returncode == 2 and "--wait: must be a number of seconds >= 0" in done.stderr


def test_trainer_help_names_every_task_and_its_real_warm_start_defaults():
    """jobs/cpu_grpo.py --help listed four of the five built-in tasks (no `expand`) and gave a
    default band of 0.20:0.35 for files, where the trainer uses 0.55:0.70."""
    from llmzero_slurm.cputrain.defaults import WARM_START_BAND, WARM_START_MAX_STEPS
    from llmzero_slurm.tasks import TASKS
    done = subprocess.run([sys.executable, str(ROOT / "jobs" / "cpu_grpo.py"), "--help"],
                          capture_output=True, text=True, timeout=120)
    text = " ".join(done.stdout.split())
    assert done.returncode == 0
    assert all(re.search(rf"--task TASK a built-in task: .*\b{name}\b", text) for name in TASKS)
    assert f"else {WARM_START_BAND[0]:.2f}:{WARM_START_BAND[1]:.2f})" in text
    assert f"(default {WARM_START_MAX_STEPS})" in text


def example_config(name: str, tmp_path) -> dict:
    """A shipped example as a user adapts it: the verl one gets small generated data files and
    a slurm: section that fits the local cluster's one node (8 CPUs, 4 GPUs)."""
    from llmzero_slurm.tasks import reward_path
    config = yaml.safe_load((ROOT / "examples" / name).read_text())
    if config.get("backend") == "verl":
        files = verl_task_files(tmp_path / "data")
        config["task"].update(train_files=[str(files["train"])], val_files=[str(files["val"])],
                              test_files=[str(files["test"])],
                              reward_path=str(reward_path("addition")))
        config["trainer"]["test_data_sources"] = ["addition_test"]
        del config["slurm"]["partition"]
        config["slurm"].update(gpus_per_node=4, cpus_per_task=8, mem="4G")
    return config


@pytest.mark.slurm
@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "examples").glob("*.yaml")))
def test_check_passes_on_every_shipped_example_and_submits_nothing(tmp_path, name, slurm_env):
    """Issue 15.1: `--check` failed on every verl config, the shipped example included (exit
    2: the evolve render asked the temporary parent for the step offset a verl job records
    when it starts). Each example as shipped, against the local Slurm cluster."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump(example_config(name, tmp_path)))
    done = cli("start", str(path), "--check")
    assert done.returncode == 0, done.stdout + done.stderr
    marks = re.findall(r"^\[(ok|skip|FAIL)\] ", done.stdout, re.M)
    assert len(marks) == 8 and "FAIL" not in marks, done.stdout
    # The example's model is in no HF cache here: its lengths are said unchecked, not passed.
    assert ("[skip] lengths: not checked: the tokenizer of" in done.stdout) == name.startswith("verl")
    assert "[ok] phase scripts: scratch, evolve and debug" in done.stdout
    assert "[ok] scheduler: Slurm reachable" in done.stdout
    assert not (tmp_path / "runs").exists() and not list(tmp_path.glob("**/node.json"))


def char_tokenizer(folder, chat_template: str | None):
    """A small real tokenizer folder (one token per character), as AutoTokenizer loads it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {c: i for i, c in enumerate(["<unk>", "<eos>", *map(chr, range(32, 127)), "\n"])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>")
    tok.chat_template = chat_template
    tok.save_pretrained(folder)
    return folder


@pytest.mark.slurm
@pytest.mark.parametrize("slurm, refusal", [({"partition": "nosuch"}, "invalid partition"),
                                            ({"cpus_per_task": 64}, "not available")])
def test_check_refuses_a_phase_job_the_cluster_cannot_run(tmp_path, slurm_env, slurm, refusal):
    """An unknown partition passed --check; the run then failed its first phase, exit 7."""
    config = example_config("cpu-addition-slurm.yaml", tmp_path)
    config["slurm"].update(slurm)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config))
    done = cli("start", str(path), "--check")
    assert done.returncode == 2
    assert re.search(rf"\[FAIL\] scheduler: Slurm would refuse a phase job .*{refusal}", done.stdout)


def test_check_refuses_a_verl_model_without_a_chat_template(tmp_path):
    """verl applies the chat template to every prompt; a tokenizer without one failed the
    lengths check with a bare ValueError (and would fail every phase job)."""
    from llmzero_slurm.config import parse_config
    from llmzero_slurm.controller.data_checks import check_lengths
    from llmzero_slurm.errors import LLMZeroError
    config = example_config("verl-qwen3-lora.yaml", tmp_path)
    config["model_path"] = str(char_tokenizer(tmp_path / "bare", None))
    with pytest.raises(LLMZeroError, match="bare's tokenizer has no chat template, and verl "
                                           "applies one to every prompt"):
        check_lengths(parse_config(config))
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    config["model_path"] = str(char_tokenizer(tmp_path / "chat", template))
    assert re.match(r"longest prompt \d+ and answer \d+ tokens \(.*chat's tokenizer\)",
                    check_lengths(parse_config(config)))


def test_check_says_a_verl_model_folder_is_not_there(tmp_path):
    """A model_path folder that is not there (a typo) gave '[ok] lengths: not checked: the
    tokenizer of /x is not on this machine (Repo id must be in the form 'repo_name' ...)':
    transformers' words for a hub id, not that the folder is missing. And a check not made
    read as one passed: it is marked [skip]."""
    config = example_config("verl-qwen3-lora.yaml", tmp_path)
    config["model_path"] = str(tmp_path / "no-such-model")
    path = tmp_path / "verl.yaml"
    path.write_text(yaml.safe_dump(config))
    done = cli("start", str(path), "--check")
    assert (f"\n[skip] lengths: not checked: model_path {tmp_path}/no-such-model is not a folder "
            "on this machine (one that only the compute nodes see is read by --check "
            "--on-cluster)\n") in done.stdout


def long_prompt_config(tmp_path, max_prompt_length: int | None) -> tuple[dict, Path]:
    """The verl example with the one-token-a-character tokenizer and a training file of one
    600-token prompt; the file's path."""
    from llmzero_slurm.tasks.dataset import write_parquet
    config = example_config("verl-qwen3-lora.yaml", tmp_path)
    config["model_path"] = str(char_tokenizer(
        tmp_path / "chat", "{% for m in messages %}{{ m['content'] }}{% endfor %}"))
    config["hparams"]["max_prompt_length"] = max_prompt_length
    if max_prompt_length is None:
        del config["hparams"]["max_prompt_length"]
    long = tmp_path / "long.parquet"
    write_parquet([{"data_source": "s", "prompt": [{"role": "user", "content": "1+" * 300}],
                    "reward_model": {"style": "rule", "ground_truth": "300"}}], long)
    config["task"]["train_files"] = [str(long)]
    return config, long


def test_check_counts_a_verl_prompts_tokens_not_its_tokenizers_fields(tmp_path):
    """With transformers 5, whose apply_chat_template returns input_ids and attention_mask
    together, --check counted every verl prompt as 2 tokens: none was ever too long, and verl
    cut every prompt over max_prompt_length to its last tokens, a warning in a worker's log
    the only trace."""
    from llmzero_slurm.config import parse_config
    from llmzero_slurm.controller.data_checks import check_lengths
    from llmzero_slurm.errors import LLMZeroError
    config, long = long_prompt_config(tmp_path, 512)
    with pytest.raises(LLMZeroError, match=re.escape(
            f"{long}: 1 of 1 prompts need more than max_prompt_length=512 tokens (the longest "
            "600, counted with ")):
        check_lengths(parse_config(config))
    config["hparams"]["max_prompt_length"] = 600
    assert check_lengths(parse_config(config)).startswith("longest prompt 600 and answer ")


def test_check_counts_verl_prompts_against_verls_own_limit_when_none_is_set(tmp_path):
    """With max_prompt_length left out, --check said "no length setting to check them
    against", and verl cut every prompt over its own default (512 tokens) to its last 512."""
    from llmzero_slurm.config import parse_config
    from llmzero_slurm.controller.data_checks import check_lengths
    from llmzero_slurm.errors import LLMZeroError
    config, long = long_prompt_config(tmp_path, None)
    with pytest.raises(LLMZeroError, match=re.escape(
            f"{long}: 1 of 1 prompts need more than max_prompt_length=512 tokens (the longest "
            "600, counted with ") + ".*" + re.escape(
            "; it is verl's default: set hparams.max_prompt_length higher or shorten them")):
        check_lengths(parse_config(config))


def test_check_refuses_answers_the_cpu_trainer_cannot_write(tmp_path):
    """The CPU trainer writes printable ASCII only: an answer holding 'ä' or a newline can
    never be produced, so those rows score 0 for good; --check said [ok]."""
    from llmzero_slurm.config import parse_config
    from llmzero_slurm.controller.data_checks import check_lengths
    from llmzero_slurm.errors import LLMZeroError
    from llmzero_slurm.tasks import reward_path
    from llmzero_slurm.tasks.dataset import write_parquet

    def row(question: str, answer: str) -> dict:
        return {"data_source": "s", "prompt": [{"role": "user", "content": question}],
                "reward_model": {"style": "rule", "ground_truth": answer}}
    files = {split: tmp_path / f"{split}.parquet" for split in ("train", "val")}
    write_parquet([row("abc=", "cba"), row("ab=", "ba")], files["train"])
    write_parquet([row("ab\u00e4=", "\u00e4ba"), row("a b=", "b\na"), row("ab=", "ba")],
                  files["val"])
    config = parse_config({"name": "x", "task": {"train_files": [str(files["train"])],
                                                 "val_files": [str(files["val"])],
                                                 "test_files": [str(files["train"])],
                                                 "reward_path": str(reward_path("reverse"))}})
    with pytest.raises(LLMZeroError, match=re.escape(
            f"{files['val']}: 2 of 3 ground-truth answers hold characters that are not among "
            "the CPU trainer's characters ('\\n', '\u00e4'): it can never write them, so these "
            "answers never score")):
        check_lengths(config)


@pytest.mark.parametrize("hparams, message", [
    ({}, r"train\.parquet: [\d,]+ of [\d,]+ ground-truth answers need more than "
         r"max_response_length=8 tokens"),
    ({"max_response_length": 13, "max_prompt_length": 16},
     "prompts need more than max_prompt_length=16 tokens"),
])
def test_check_refuses_prompts_and_answers_that_do_not_fit(tmp_path, hparams, message):
    """Issue 15.2: answers longer than max_response_length were silently cut off in every
    rollout; prompts longer than max_prompt_length failed the job after its queue wait."""
    from llmzero_slurm.tasks import reward_path
    from llmzero_slurm.tasks.dataset import materialize
    files = materialize("reverse", tmp_path / "data")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "scheduler": "local", "hparams": hparams,
                                    "task": {"train_files": [str(files["train"])],
                                             "val_files": [str(files["val"])],
                                             "test_files": [str(files["test"])],
                                             "reward_path": str(reward_path("reverse"))}}))
    done = cli("start", str(path), "--check")
    assert done.returncode == 2, done.stdout
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("[FAIL] lengths")]
    assert re.search(message, line) and "(the longest" in line


@pytest.mark.parametrize("search, given", [
    # a guidebook's short phases are a curriculum: its longest phase must fit the answers
    ({"method": "guidebook"}, "the guidebook method's default space (search.space replaces it) "
                              "gives no phase more than max_response_length=8: raise it"),
    ({"method": "grid", "space": {"max_response_length": [4, 8], "lr": [1.0e-3]}},
     "search.space gives no phase more than max_response_length=8"),
    ({"method": "random", "space": {"max_response_length": {"choice": [6, 8]}}},
     "search.space gives no phase more than max_response_length=8"),
    # llmzero's agents grow capacity, but never past the user's bound
    ({"method": "llmzero", "space": {"max_response_length": {"uniform": [4, 8]}}},
     "search.space gives no phase more than max_response_length=8")])
def test_check_counts_answers_against_the_lengths_the_method_runs(tmp_path, search, given):
    """Only hparams were checked: a space whose every phase is shorter than the answers passed
    --check, then could not produce them. A space that also runs lengths that fit may trade
    cheap, truncating trials against them, as the built-in tasks' capacity dimension does."""
    from llmzero_slurm.config import parse_config
    from llmzero_slurm.controller.data_checks import check_lengths
    from llmzero_slurm.errors import LLMZeroError
    from llmzero_slurm.tasks import reward_path
    from llmzero_slurm.tasks.dataset import materialize
    files = materialize("reverse", tmp_path / "data")       # answers of up to 12 letters
    task = {"train_files": [str(files["train"])], "val_files": [str(files["val"])],
            "test_files": [str(files["test"])], "reward_path": str(reward_path("reverse"))}
    with pytest.raises(LLMZeroError, match=re.escape(given)):
        check_lengths(parse_config({"name": "x", "hparams": {"max_response_length": 16},
                                    "task": task, "search": search}))
    assert "within max_prompt_length=32, max_response_length=16" in check_lengths(
        parse_config({"name": "x", "hparams": {"max_response_length": 16}, "task": task}))
    for method in ("guidebook", "grid"):
        space = {"method": method, "space": {"max_response_length": [8, 16],
                                             "total_training_steps": [10]}}
        assert "within max_prompt_length=32, max_response_length=16" in check_lengths(
            parse_config({"name": "x", "task": task, "search": space}))


SCORE = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"


@pytest.mark.parametrize("source, problem", [
    (SCORE + "    return 'yes'\n", "got 'yes'"),
    (SCORE + "    return float('nan')\n", "got nan"),
    (SCORE + "    raise RuntimeError('boom')\n", "RuntimeError: boom"),
    (SCORE + "    import sys\n    sys.exit(0)\n", "SystemExit: 0"),
    ("import sys\nsys.exit(3)\n" + SCORE + "    return 1.0\n", "SystemExit: 3")],
    ids=["a string", "nan", "raises", "exits when called", "exits when imported"])
def test_check_names_a_bad_reward_file(tmp_path, source, problem):
    bad = tmp_path / "reward.py"
    bad.write_text(source)
    from llmzero_slurm.tasks.dataset import materialize
    files = materialize("addition", tmp_path / "data")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "scheduler": "local", "task": {
        "train_files": [str(files["train"])], "val_files": [str(files["val"])],
        "test_files": [str(files["test"])],
        "reward_path": str(bad)}}))
    done = cli("start", str(path), "--check")
    assert done.returncode == 2
    assert "[FAIL] data and reward" in done.stdout, done.stdout + done.stderr
    assert f"{bad}: " in done.stdout and problem in done.stdout


def test_check_names_a_dataset_file_that_does_not_exist(tmp_path):
    """Audit: it said "cannot read as parquet" of a path that names no file."""
    from llmzero_slurm.tasks import reward_path
    from llmzero_slurm.tasks.dataset import materialize
    files = materialize("addition", tmp_path / "data")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "scheduler": "local", "task": {
        "train_files": [str(files["train"])], "val_files": ["data/nope.parquet"],
        "test_files": [str(files["test"])], "reward_path": str(reward_path("addition"))}}))
    done = cli("start", str(path), "--check")
    assert done.returncode == 2
    assert f"[FAIL] data and reward: {tmp_path}/data/nope.parquet: does not exist (config key " \
           "'task.val_files')\n" in done.stdout, done.stdout


@pytest.mark.parametrize("body, when", [
    ("    import time\n    while True:\n        try:\n            time.sleep(60)\n"
     "        except Exception:\n            pass\n", "row 1 of {train}"),
    ("    if ground_truth == {third!r}:\n        while True:\n            pass\n"
     "    return 1.0\n", "row 3 of {train}")],
    ids=["sleeps, swallowing exceptions", "spins on one row"])
def test_check_gives_up_on_a_reward_that_never_returns(tmp_path, monkeypatch, body, when):
    """A reward that never returned made --check hang forever. It is interrupted, not left
    running: nothing of it outlives the check."""
    import signal
    import threading
    from llmzero_slurm.controller import data_checks
    from llmzero_slurm.errors import DataError
    from llmzero_slurm.tasks.dataset import materialize, read_examples
    files = materialize("addition", tmp_path / "data")
    third = read_examples(str(files["train"]))[2].ground_truth
    reward = tmp_path / "reward.py"
    reward.write_text(SCORE + body.format(third=third))
    monkeypatch.setattr(data_checks, "REWARD_TIMEOUT_S", 0.5)
    cfg = parse_config({"name": "x", "task": {
        "train_files": [str(files["train"])], "val_files": [str(files["val"])],
        "test_files": [str(files["test"])],
        "reward_path": str(reward)}})
    started, threads = time.monotonic(), threading.active_count()
    with pytest.raises(DataError) as err:
        data_checks.check_data(cfg)
    assert time.monotonic() - started < 5
    assert str(err.value) == f"{reward}: compute_score did not return within 0.5 s on " \
        f"{when.format(train=files['train'])}, scoring its own ground truth; a reward must " \
        "answer in well under a second"
    assert threading.active_count() == threads
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
    reward.write_text("while True:\n    pass\n" + SCORE + "    return 1.0\n")
    monkeypatch.setattr(data_checks, "IMPORT_TIMEOUT_S", 0.5)
    with pytest.raises(DataError, match=f"^{re.escape(str(reward))}: importing the reward file "
                                        r"did not finish within 0\.5 s$"):
        data_checks.check_data(cfg)


@pytest.mark.parametrize("body, scoring, problem", [
    ("    if solution_str == ground_truth:\n        return 1.0\n", "an empty response (a model "
     "may answer with nothing)",
     "must be a finite number or a dict with a numeric 'score' (and optional 'acc'), got None"),
    ("    return float(int(solution_str) == int(ground_truth))\n", "an empty response (a model "
     "may answer with nothing)", "ValueError: invalid literal for int() with base 10: ''"),
    ("    if not solution_str.strip():\n        return 0.0\n"
     "    return float(int(solution_str) == int(ground_truth))\n",
     "an answer not in the expected form ('I do not know.')",
     "ValueError: invalid literal for int() with base 10: 'I do not know.'")],
    ids=["no score for a wrong answer", "parses the response without a guard",
         "guards only the empty response"])
def test_check_scores_a_wrong_answer_too(tmp_path, body, scoring, problem):
    """Only ground truths were scored, so a reward that returns None or raises on any other
    answer passed --check and failed the first phase, after its queue wait and warm start.
    Then one guarded against an empty answer alone still passed, and failed in task code on
    the model's first non-numeric sample ('====')."""
    from llmzero_slurm.controller import data_checks
    from llmzero_slurm.errors import DataError
    from llmzero_slurm.tasks.dataset import materialize
    files = materialize("addition", tmp_path / "data")
    reward = tmp_path / "reward.py"
    reward.write_text(SCORE + body)
    cfg = parse_config({"name": "x", "task": {
        "train_files": [str(files["train"])], "val_files": [str(files["val"])],
        "test_files": [str(files["test"])],
        "reward_path": str(reward)}})
    with pytest.raises(DataError) as err:
        data_checks.check_data(cfg)
    assert str(err.value).startswith(f"{reward}: ")
    assert f"scoring {scoring}: " in str(err.value)
    assert str(err.value).endswith(problem)


def test_a_verl_reward_that_imports_the_verl_environments_packages_does_not_block_a_start(
        tmp_path):
    """A verl reward runs in the verl environment of the GPU nodes; verl's own pattern, `from
    verl.utils.reward_score import gsm8k`, needs ray, which a login node's `--no-deps` install
    of verl lacks (math_verify, torch: the same), so every start was refused, exit 2, until
    the job environment's packages were installed on the login node. A package this machine
    lacks is now said, not refused; the cpu backend's phases run this Python, and still
    refuse it."""
    from llmzero_slurm.controller import data_checks
    from llmzero_slurm.errors import DataError
    config = example_config("verl-qwen3-lora.yaml", tmp_path)
    reward = tmp_path / "reward.py"
    reward.write_text("import llmz_not_here_pkg\n" + SCORE + "    return 1.0\n")
    config["task"]["reward_path"] = str(reward)
    cfg = parse_config(config)
    data_checks.check_inputs(cfg)
    assert data_checks.check_data(cfg).endswith(
        f"; {reward} not tried here: it imports llmz_not_here_pkg, which this Python lacks "
        "(the phases import it with the verl environment's Python)")
    reward.write_text("import llmz_not_here_pkg\n")    # no compute_score: nothing to try
    data_checks.check_inputs(cfg)
    reward.write_text("from . import sibling\n" + SCORE + "    return 1.0\n")
    with pytest.raises(DataError, match="cannot import reward file: ImportError"):
        data_checks.check_inputs(cfg)
    files = {k: config["task"][k] for k in ("train_files", "val_files", "test_files")}
    reward.write_text("import llmz_not_here_pkg\n" + SCORE + "    return 1.0\n")
    with pytest.raises(DataError, match="cannot import reward file: ModuleNotFoundError"):
        data_checks.check_inputs(parse_config({"name": "x", "task": {
            **files, "reward_path": str(reward)}}))


def test_a_training_split_smaller_than_a_batch_is_refused_before_a_phase_waits_for_gpus(
        tmp_path):
    """Review: a training split of fewer rows than train_batch_size passed --check and a
    start; verl 0.9.1 drops the ragged tail (len(rows) // train_batch_size steps per epoch,
    here 0) and fails with ZeroDivisionError in fit(), after the queue wait, the model load
    and a validation pass. The largest batch search.space allows counts too."""
    import pyarrow.parquet as pq
    from llmzero_slurm.controller import data_checks
    from llmzero_slurm.errors import DataError
    config = example_config("verl-qwen3-lora.yaml", tmp_path)
    train = Path(config["task"]["train_files"][0])
    small = tmp_path / "small-train.parquet"
    pq.write_table(pq.read_table(train).slice(0, 100), small)
    config["task"]["train_files"] = [str(small)]
    cfg = parse_config(config)
    expected = re.escape(f"{small}: 100 training rows, fewer than train_batch_size=128: no "
                         "phase would have a full batch to train on (hparams.train_batch_size)")
    with pytest.raises(DataError, match=expected):
        data_checks.check_inputs(cfg)
    with pytest.raises(DataError, match=expected):
        data_checks.check_data(cfg)
    config["hparams"]["train_batch_size"] = 64
    config["search"]["space"]["train_batch_size"] = [32, 64, 128]
    with pytest.raises(DataError, match=re.escape(
            "fewer than train_batch_size=128: no phase would have a full batch to train on "
            "(search.space gives no phase more than train_batch_size=128)")):
        data_checks.check_inputs(parse_config(config))
    config["search"]["space"]["train_batch_size"] = [32, 64]
    data_checks.check_inputs(parse_config(config))


def test_check_refuses_a_reward_that_scores_no_ground_truth_as_written(tmp_path):
    """Review: the cpu warm start teaches each ground truth as written; a reward that wants
    another form ('#### 42') scores that 0, so the warm start could never reach its band, and
    --check passed it: the first phase failed after its queue wait and a warm start's work."""
    from llmzero_slurm.controller import data_checks
    from llmzero_slurm.errors import DataError
    from llmzero_slurm.tasks.dataset import materialize
    files = materialize("addition", tmp_path / "data")
    reward = tmp_path / "reward.py"
    reward.write_text(SCORE + "    return float(solution_str == f'#### {ground_truth}')\n")
    task = {"train_files": [str(files["train"])], "val_files": [str(files["val"])],
            "test_files": [str(files["test"])],
            "reward_path": str(reward)}
    with pytest.raises(DataError, match=re.escape(
            "warm start: the reward scores only 0.000 of the ground truths as written (the "
            "text the warm start teaches) on the held-out training rows, below the band's low "
            "end 0.55")):
        data_checks.check_data(parse_config({"name": "x", "task": task}))
    fixed = parse_config({"name": "x", "task": {**task, "warm_start": {"steps": 0}}})
    assert data_checks.check_data(fixed).startswith("3 files")


def test_check_refuses_held_out_prompts_that_are_also_training_prompts(tmp_path):
    """A validation split that repeats training prompts passed --check: the search then
    selects on answers the policy was trained on, and the report's test score means little."""
    from llmzero_slurm.controller import data_checks
    from llmzero_slurm.errors import LLMZeroError
    from llmzero_slurm.tasks import reward_path
    from llmzero_slurm.tasks.dataset import materialize, read_examples, write_parquet
    import pyarrow.parquet as pq
    files = materialize("addition", tmp_path / "data")
    train = pq.read_table(files["train"]).to_pylist()
    leaky = tmp_path / "val.parquet"
    write_parquet(pq.read_table(files["val"]).to_pylist()[:100] + train[:7], leaky)
    task = {"train_files": [str(files["train"])], "val_files": [str(leaky)],
            "test_files": [str(files["test"])], "reward_path": str(reward_path("addition"))}
    with pytest.raises(LLMZeroError, match=re.escape(
            f"{leaky}: 7 of 107 prompts are also in the training split (e.g. "
            f"{read_examples(files['train'])[0].messages[0]['content']!r}); held-out scores "
            "must come from prompts the policy never trained on (at most 1% may repeat)")):
        data_checks.check_data(parse_config({"name": "x", "task": task}))
    # A public set's few repeats are said, not refused.
    write_parquet(pq.read_table(files["val"]).to_pylist()[:200] + train[:2], leaky)
    assert data_checks.check_data(parse_config({"name": "x", "task": task})).startswith(
        f"3 files, 5226 rows; {leaky}: 2 of 202 prompts are also in the training split")
    task["val_files"] = [str(files["val"])]
    assert data_checks.check_data(parse_config({"name": "x", "task": task})) == \
        "3 files, 5536 rows"


def test_check_says_repeats_within_a_split_and_refuses_a_test_split_that_repeats_validation(
        tmp_path):
    """Rows repeated within a split passed --check unsaid (a repeated validation row counts
    twice in every score), and so did test rows that are also validation rows: the search
    selects on validation, so a test score over the same prompts is not held out."""
    from llmzero_slurm.controller import data_checks
    from llmzero_slurm.errors import LLMZeroError
    from llmzero_slurm.tasks import reward_path
    from llmzero_slurm.tasks.dataset import materialize, write_parquet
    import pyarrow.parquet as pq
    files = materialize("addition", tmp_path / "data")
    val = pq.read_table(files["val"]).to_pylist()
    doubled = tmp_path / "val.parquet"
    write_parquet(val + val[:3], doubled)
    task = {"train_files": [str(files["train"])], "val_files": [str(doubled)],
            "test_files": [str(files["test"])], "reward_path": str(reward_path("addition"))}
    assert data_checks.check_data(parse_config({"name": "x", "task": task})) == (
        f"3 files, 5539 rows; {doubled}: 3 of {len(val) + 3} rows repeat a prompt already in "
        "the validation split (each copy counts in its score)")
    leaky = tmp_path / "test.parquet"
    write_parquet(pq.read_table(files["test"]).to_pylist()[:100] + val[:5], leaky)
    task.update(val_files=[str(files["val"])], test_files=[str(leaky)])
    with pytest.raises(LLMZeroError, match=re.escape(
            f"{leaky}: 5 of 105 prompts are also in the validation split")):
        data_checks.check_data(parse_config({"name": "x", "task": task}))


def test_a_config_with_no_task_fails_checks_config_line_and_start_names_the_task(tmp_path):
    """--check printed `[ok] config: ... is valid` and `[ok] lengths: longest prompt 0`, then
    a data check and a script check that each said something else about the missing task."""
    from llmzero_slurm.controller import preflight
    config = tmp_path / "x.yaml"
    config.write_text("name: x\nscheduler: local\n")
    missing = ("config key 'task': is missing: give task.builtin, or your own task's "
               "train_files, val_files, test_files, reward_path")
    checks = preflight.preflight(parse_config({"name": "x", "scheduler": "local"}), "local",
                                 tmp_path / "run")
    assert [c.line() for c in checks if not c.ok or not c.checked] == [
        f"[FAIL] config: {missing}",
        "[skip] data and reward, lengths, phase scripts, run directory and controller job, "
        "scheduler: not checked without a task"]
    assert {c.name for c in checks} >= {"search method", "trainer", "agents"}
    with pytest.raises(ConfigError) as refused:
        open_or_create(parse_args([str(config), "--run-dir", str(tmp_path / "run")]))
    assert str(refused.value) == missing
    assert not (tmp_path / "run").exists()


def test_a_task_without_every_split_and_reward_is_refused_as_the_config_is_read(tmp_path):
    """No test_files read as 'reads exactly one parquet file per split', which a user with
    one file per split took for a complaint about the files they gave; and --check called such
    a config valid before its data check failed."""
    from llmzero_slurm.tasks import reward_path
    from llmzero_slurm.tasks.dataset import materialize
    files = materialize("addition", tmp_path / "data")
    task = {"train_files": [str(files["train"])], "val_files": [str(files["val"])],
            "reward_path": str(reward_path("addition"))}
    with pytest.raises(ConfigError) as refused:
        parse_config({"name": "x", "task": task})
    assert str(refused.value) == (
        "config key 'task.test_files': is missing: your own task needs train_files, val_files, "
        "test_files, reward_path (or give task.builtin)")
    with pytest.raises(ConfigError) as refused:
        parse_config({"name": "x", "task": {"test_files": task["train_files"]}})
    assert [e.key for e in refused.value.errors] == \
        ["task.train_files", "task.val_files", "task.reward_path"]


def test_check_of_a_local_run_names_trainer_packages_the_phases_python_lacks(tmp_path,
                                                                              monkeypatch):
    """Phases of a local run use this machine's Python: a login-node install (no torch) passed
    --check, and every phase then failed on its first import."""
    import venv
    from llmzero_slurm.controller import preflight
    venv.EnvBuilder(with_pip=False).create(tmp_path / "light")
    light = str(tmp_path / "light" / "bin" / "python")
    cfg = {"name": "x", "scheduler": "local", "task": {"builtin": "addition"}}
    checks = {c.name: c for c in preflight.preflight(
        parse_config({**cfg, "trainer": {"python": light}}), "local", tmp_path / "run")}
    assert not checks["trainer"].ok
    assert checks["trainer"].detail == (
        f"{light} cannot import torch, transformers, peft, pyarrow: local phases run with it "
        "(trainer.python names another); install torch from PyTorch's CPU index "
        "(https://download.pytorch.org/whl/cpu), then the cpu extra: pip install -e '.[cpu]'")
    # A site install has no checkout to install from: the hint names the package.
    monkeypatch.setattr(preflight, "ROOT_FIRST", False)
    checks = {c.name: c for c in preflight.preflight(
        parse_config({**cfg, "trainer": {"python": light}}), "local", tmp_path / "run")}
    assert checks["trainer"].detail.endswith("then the cpu extra: pip install 'llmzero-slurm[cpu]'")
    checks = {c.name: c for c in preflight.preflight(parse_config(cfg), "local", tmp_path / "run")}
    assert checks["trainer"].ok, checks["trainer"].detail


@pytest.mark.parametrize("cache", ["afile", "afile/cache"])
def test_a_cache_folder_that_cannot_be_one_is_named_by_check_and_start(tmp_path, monkeypatch,
                                                                        cache):
    """LLMZERO_CACHE naming a file passed --check; every cpu phase then failed at run time."""
    (tmp_path / "afile").write_text("mine")
    monkeypatch.setenv("LLMZERO_CACHE", str(tmp_path / cache))
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "scheduler": "local",
                                    "task": {"builtin": "addition"}}))
    problem = (f"environment variable LLMZERO_CACHE: {tmp_path / 'afile'} is a file, but the cpu "
               "trainer keeps its base models and task data in the folder "
               f"{tmp_path / cache}: point LLMZERO_CACHE at a folder, or unset it")
    check = cli("start", str(path), "--run-dir", str(tmp_path / "run"), "--check")
    assert check.returncode == 2 and f"[FAIL] phase scripts: {problem}\n" in check.stdout
    done = cli("start", str(path), "--run-dir", str(tmp_path / "run"))
    assert (done.returncode, done.stderr) == (2, f"error: {problem}\n")
    assert not (tmp_path / "run").exists()
    from llmzero_slurm.controller.preflight import check_scripts
    with pytest.raises(ConfigError, match=f"^config key 'trainer.cache_dir': "
                                          f"{re.escape(str(tmp_path))}/afile is a file, .*: "
                                          "give a folder$"):
        check_scripts(parse_config({"name": "x", "task": {"builtin": "addition"},
                                    "trainer": {"cache_dir": str(tmp_path / cache)}}))


def test_check_says_a_phase_time_limit_within_its_usr1_lead(tmp_path):
    """A phase is sent USR1 120 s before its time limit: a slurm.time of 90 s got its warning
    at once (and an end with no Slurm notice read as the limit), and --check passed it unsaid."""
    from llmzero_slurm.controller.preflight import check_scripts
    exp = {"name": "x", "task": {"builtin": "addition"}, "scheduler": "slurm",
           "slurm": {"time": "1:30"}}
    assert check_scripts(parse_config(exp)).endswith(
        "; note: slurm.time is 1:30 (90 s), within the 120 s before its limit at which Slurm "
        "warns a phase (USR1), so the warning comes at its start: the job's output says its "
        "time limit is near, and an end with no Slurm notice is recorded as a time limit; give "
        "it more than 120 s")
    assert "note" not in check_scripts(parse_config({**exp, "slurm": {"time": "2:01"}}))
    assert "note" not in check_scripts(parse_config({**exp, "scheduler": "local"}))


@pytest.mark.parametrize("config, run_dir, args, key", [
    ({"controller": {"time": "x"}}, "run", ["--submit"], "'controller.time'"),
    ({"slurm": {"time": "forever"}}, "run", [], "'slurm.time'"),
    ({}, "sp ace", [], "'run_dir': must be an absolute path without spaces"),
    # Valid alone, but not with the trainer's default ppo_mini_batch_size (8 x 4 rollouts).
    ({"hparams": {"rollout_n": 4, "ppo_micro_batch_size_per_gpu": 128}}, "run", [],
     "'ppo_micro_batch_size_per_gpu': must divide ppo_mini_batch_size * rollout_n (32)"),
], ids=["controller-time", "slurm-time", "run-dir-with-a-space", "micro-batch-vs-defaults"])
def test_what_only_a_rendered_script_refuses_is_refused_before_the_run_exists(
        tmp_path, config, run_dir, args, key):
    """A bad `controller:` or `slurm:` value, or a run directory that no #SBATCH --output line
    can carry, was frozen into a new run directory before any script was rendered: the start
    failed (exit 2, or 7 once every phase had failed at render) and every later start resumed
    the bad frozen copy. --check passed the first and the last."""
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "scheduler": "local",
                                    "task": {"builtin": "addition"},
                                    "search": {"budget_iterations": 1}, **config}))
    run = tmp_path / run_dir
    check = cli("start", str(path), "--run-dir", str(run), "--check")
    assert check.returncode == 2, check.stdout + check.stderr
    assert any(line.startswith("[FAIL]") and key in line for line in check.stdout.splitlines())
    done = cli("start", str(path), "--run-dir", str(run), *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("error: config key ") and key in done.stderr
    assert "Traceback" not in done.stderr and not run.exists()


def test_a_run_moved_to_a_path_with_a_space_is_refused_before_it_adds_a_node(tmp_path):
    """A run copied (tar, cp -a) to a path with a space and resumed there created its next
    node, failed it for good ("its phase script could not be rendered"), ended the search
    and exited 0: the run's tree held a failure no phase had earned. Now the resume is refused
    as a start there is (exit 2), and nothing in the run changes."""
    store = RunStore.create(tmp_path / "run", parse_config(
        {"name": "demo", "scheduler": "local", "task": {"builtin": "addition"},
         "search": {"budget_iterations": 1}}))
    moved = tmp_path / "moved here"
    shutil.copytree(store.root, moved)
    before = {p: p.read_bytes() for p in moved.rglob("*") if p.is_file()}
    done = cli("start", str(moved))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("error: config key 'run_dir': must be an absolute path "
                                  "without spaces, quotes or '%' (it goes into #SBATCH --output)")
    assert done.stderr.count("\n") == 1 and "run directory:" not in done.stdout
    assert {p: p.read_bytes() for p in moved.rglob("*") if p.is_file()} == before


def test_a_start_under_a_umask_that_locks_out_the_runs_group_says_so(tmp_path):
    """A member of the group sharing a run (its folder setgid, group-writable) who starts it
    under umask 022 writes files and node folders the group cannot write: a colleague's
    resume or stop later fails with Permission denied on them. The start now says so, and
    which umask to use; under umask 002, or in a folder of one's own, it says nothing."""
    store = two_phase_run(tmp_path, search={"budget_iterations": 2})
    store.root.chmod(0o2775)
    umask = os.umask(0o022)
    try:
        told = cli("start", str(store.root))
        os.umask(0o002)
        fine = cli("start", str(store.root))
    finally:
        os.umask(umask)
    assert told.returncode == fine.returncode == 0, told.stderr + fine.stderr
    group = grp.getgrgid(store.root.stat().st_gid).gr_name
    assert f"note: {store.root} is writable by group {group}, but your umask 022 keeps that " \
           "group from writing the files this run adds; start it under umask 002 so your " \
           "group can resume and stop it\n" in told.stdout
    assert "your umask" not in fine.stdout
    store.root.chmod(0o755)
    os.umask(0o022)
    try:
        alone = cli("start", str(store.root))
    finally:
        os.umask(umask)
    assert alone.returncode == 0 and "your umask" not in alone.stdout


@pytest.mark.parametrize("option, value", [
    ("--poll", "-1"), ("--poll", "0"), ("--poll", "nan"), ("--poll", "inf"), ("--poll", "soon"),
    ("--cluster-timeout", "-5"), ("--cluster-timeout", "0"), ("--cluster-timeout", "nan"),
])
def test_seconds_options_must_be_positive_and_finite(capsys, option, value):
    """--poll -1 or nan made the controller poll in a tight loop, --poll 0 silently fell back
    to the config's interval, --cluster-timeout -5 was taken as given."""
    from llmzero_slurm.cli.start import parse_args
    with pytest.raises(SystemExit) as exit_:
        parse_args(["exp.yaml", option, value])
    assert exit_.value.code == 2
    assert f"argument {option}: must be a number of seconds > 0 (got '{value}')" \
        in capsys.readouterr().err


@pytest.mark.parametrize("first, second", [
    ("--detach", "--submit"), ("--check", "--detach"), ("--check", "--submit")])
def test_ways_to_run_the_controller_exclude_each_other_and_check(capsys, first, second):
    """--detach --submit detached and never submitted; --check ignored either silently."""
    from llmzero_slurm.cli.start import parse_args
    with pytest.raises(SystemExit) as exit_:
        parse_args(["exp.yaml", first, second])
    assert exit_.value.code == 2
    assert f"argument {second}: not allowed with argument {first}" in capsys.readouterr().err


@pytest.mark.parametrize("args", [[], ["--check"]], ids=["start", "check"])
def test_a_missing_config_file_is_named_as_such(tmp_path, args):
    """--check took a path that is no file for a run directory: 'cannot read
    .../x.yaml/experiment.yaml'."""
    path = tmp_path / "nowhere" / "x.yaml"
    done = cli("start", str(path), *args)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: config key '<file>': cannot read {path}: " \
                                  "No such file or directory"


def test_a_bad_config_is_one_line_naming_the_key(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("name: x\nhparams:\n  lr: '1e-3; rm -rf ~'\n")
    done = cli("start", str(path))
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: config key 'hparams.lr'")
    assert "Traceback" not in done.stderr


def test_every_problem_of_a_config_is_printed_at_once_by_start_and_check(tmp_path):
    """A start or --check named only the first problem, so three typos took three rounds:
    a start prints them all under their count, --check each as a FAIL line, and says the
    checks that read the config did not run. Both exit 2 and create nothing."""
    path = tmp_path / "exp.yaml"
    path.write_text("name: x\nscheduler: local\ntask: {builtin: addition}\nslurm: {nodse: 1}\n"
                    "agents: {backend: claude}\nsearch: {concurrency: 0}\n")
    keys = ["'slurm.nodse': unknown key", "'agents.backend': must be auto",
            "'search.concurrency': must be > 0"]
    done = cli("start", str(path), "--run-dir", str(tmp_path / "run"))
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and lines[0] == f"error: 3 problems found in {path}:"
    assert [line.startswith(f"  config key {key}") for line, key in zip(lines[1:], keys)] == \
        [True] * 3 and len(lines) == 4
    check = cli("start", str(path), "--run-dir", str(tmp_path / "run"), "--check")
    lines = check.stdout.splitlines()
    assert check.returncode == 2 and check.stderr == "", check.stderr
    assert [line.startswith(f"[FAIL] config: config key {key}")
            for line, key in zip(lines, keys)] == [True] * 3
    assert lines[3:] == ["[FAIL] other checks: not run: fix the config first"]
    assert not (tmp_path / "run").exists()


def test_a_run_dir_that_is_a_file_or_cannot_be_made_is_one_line(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text("name: x\nscheduler: local\ntask:\n  builtin: addition\n")
    (tmp_path / "afile").write_text("mine")
    for run_dir, code, message in ((tmp_path / "afile", 2, "afile is a file, not a folder"),
                                   (tmp_path / "afile" / "run", 3, "cannot be created as a run directory")):
        done = cli("start", str(config), "--run-dir", str(run_dir))
        assert done.returncode == code and message in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "afile").read_text() == "mine"


def test_start_refuses_a_search_its_method_cannot_run_before_freezing_the_run(tmp_path):
    """Review: hparams outside `search.space` were refused (exit 2) only after the run folder
    was created; the fixed YAML was then ignored as 'differs' from the frozen copy, and every
    later start failed the same way until the folder was deleted by hand."""
    config = tmp_path / "x.yaml"
    config.write_text("name: x\nscheduler: local\ntask:\n  builtin: addition\n"
                      "hparams: {lr: 1.0e-3}\nsearch:\n  space:\n    lr: [1.0e-4, 2.0e-4]\n")
    done = cli("start", str(config), "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "search.space" in done.stderr and "does not hold the experiment's own hparams" \
        in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("case, message", [
    ("builtin-typo", "config key 'task.builtin': unknown task 'additon' (known: addition"),
    ("missing-val-file", "gone.parquet: does not exist (config key 'task.val_files')"),
    ("reward-signature", "compute_score(answer) cannot be called the way verl calls it"),
])
def test_start_refuses_a_task_its_phases_cannot_read_before_the_run_exists(tmp_path, case, message):
    """User walkthrough: a plain start ran none of --check's data checks, so a typo of a builtin
    task, a missing data file or a reward of the wrong signature made a frozen run whose first
    phase failed after its queue wait (exit 7). A start now refuses them, exit 2, nothing made."""
    files = verl_task_files(tmp_path / "data")
    reward = tmp_path / "reward.py"
    reward.write_text(SCORE + "    return 0.0\n")
    task = {"train_files": [str(files["train"])], "val_files": [str(files["val"])],
            "test_files": [str(files["test"])], "reward_path": str(reward)}
    if case == "builtin-typo":
        task = {"builtin": "additon"}
    elif case == "missing-val-file":
        task["val_files"] = [str(tmp_path / "gone.parquet")]
    else:
        reward.write_text("def compute_score(answer):\n    return 0.0\n")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "scheduler": "local", "task": task}))
    run = tmp_path / "run"
    done = cli("start", str(path), "--run-dir", str(run))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert message in done.stderr, done.stderr
    # A config error is said as every other one is; a file's problem points to the full report.
    assert (f"llmzero-start {path} --check gives the full report" in done.stderr) == \
        (case != "builtin-typo")
    assert not run.exists()
    check = cli("start", str(path), "--run-dir", str(run), "--check")
    assert check.returncode == 2 and any(line.startswith("[FAIL]") and message in line
                                         for line in check.stdout.splitlines()), check.stdout
    assert ("[ok] config" in check.stdout) == (case != "builtin-typo")


def test_a_resume_is_not_refused_for_a_data_file_gone_since_the_run_started(tmp_path):
    """The start's data checks are for a new run: a run already frozen resumes (its phases say
    what they miss), so a moved file never locks a user out of the run that used it."""
    files = verl_task_files(tmp_path / "data")
    reward = tmp_path / "reward.py"
    reward.write_text(SCORE + "    return 0.0\n")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "scheduler": "local", "task": {
        "train_files": [str(files["train"])], "val_files": [str(files["val"])],
        "test_files": [str(files["test"])], "reward_path": str(reward)}}))
    args = parse_args([str(path), "--run-dir", str(tmp_path / "run")])
    store = open_or_create(args)
    files["val"].unlink()
    assert open_or_create(args).root == store.root
    assert open_or_create(parse_args([str(store.root)])).root == store.root


def test_start_refuses_another_experiment_in_a_run_dir_holding_a_run(tmp_path):
    """User walkthrough: `llmzero-start other.yaml --run-dir runs/X` with another `name:`
    resumed the run in runs/X with a note and exit 0, spending compute on the wrong search."""
    exp = {"name": "first", "scheduler": "local", "task": {"builtin": "addition"}}
    first, other = tmp_path / "first.yaml", tmp_path / "other.yaml"
    first.write_text(yaml.safe_dump(exp))
    other.write_text(yaml.safe_dump({**exp, "name": "second"}))
    run = tmp_path / "run"
    open_or_create(parse_args([str(first), "--run-dir", str(run)]))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(UsageError) as err:
        open_or_create(parse_args([str(other), "--run-dir", str(run)]))
    assert f"{run} holds the run 'first', not 'second'" in str(err.value), str(err.value)
    assert f"llmzero-start {run}" in str(err.value) and "another --run-dir" in str(err.value)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_start_and_check_refuse_a_run_dir_inside_another_run(tmp_path):
    """Walkthrough, a second seed: `--run-dir runs/first/seed2` made a run inside the first."""
    exp = tmp_path / "first.yaml"
    exp.write_text(yaml.safe_dump({"name": "first", "scheduler": "local",
                                   "task": {"builtin": "addition"}}))
    run = tmp_path / "run"
    open_or_create(parse_args([str(exp), "--run-dir", str(run)]))
    inner = run / "seed2"
    for how in ((), ("--check",)):
        done = cli("start", str(exp), "--run-dir", str(inner), *how)
        assert done.returncode == 2 and "Traceback" not in done.stderr + done.stdout
        said = done.stderr + done.stdout
        assert f"{inner} is inside the run directory {run} (run 'first')" in said, said
        assert f"such as {run}-seed2" in said
        assert not inner.exists()


def test_a_run_directory_given_with_a_run_dir_elsewhere_is_refused(tmp_path):
    """Walkthrough, a second seed: `llmzero-start runs/first --run-dir runs/first-seed2`
    resumed runs/first, --run-dir ignored without a word, instead of making the run asked for."""
    exp = tmp_path / "first.yaml"
    exp.write_text(yaml.safe_dump({"name": "first", "scheduler": "local",
                                   "task": {"builtin": "addition"}}))
    run, other = tmp_path / "run", tmp_path / "run-seed2"
    open_or_create(parse_args([str(exp), "--run-dir", str(run)]))
    for how in ((), ("--check",)):
        done = cli("start", str(run), "--run-dir", str(other), *how)
        said = done.stderr + done.stdout
        assert done.returncode == 2 and "Traceback" not in said, said
        assert (f"{run} is a run directory, resumed where it is: --run-dir {other} is for a new "
                f"run, from a config (for one with this run's: llmzero-start "
                f"{run / 'experiment.yaml'} --run-dir {other})") in said, said
        assert not other.exists()
    assert open_or_create(parse_args([str(run), "--run-dir", str(run)])).root == run


def test_of_two_starts_racing_to_one_new_run_dir_the_later_resumes_the_run(tmp_path, monkeypatch):
    """Walkthrough, one run dir given twice at once (a seed loop that forgot --run-dir): the
    later start, past its checks after the other had made the run, failed with exit 3 as if the
    folder were damaged ("already holds a run; open it instead of creating it"). It resumes
    that run now, and its lease says whether a controller already runs it."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump({"name": "first", "scheduler": "local",
                                   "task": {"builtin": "addition"}}))
    args, real = parse_args([str(exp), "--run-dir", str(tmp_path / "run")]), RunStore.create

    def the_other_start_wins(root, config, found=()):
        monkeypatch.setattr(RunStore, "create", real)
        real(root, config, found)
        return real(root, config, found)
    monkeypatch.setattr(RunStore, "create", the_other_start_wins)
    assert open_or_create(args).root == tmp_path / "run"


def test_start_leaves_a_folder_that_is_not_a_run_alone(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "experiment.yaml").write_text("name: x\nscheduler: local\ntask:\n  builtin: addition\n"
                                          "# my notes\n")
    done = cli("start", str(mine / "experiment.yaml"), "--run-dir", str(mine))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{mine} is not a run directory and not empty (it holds experiment.yaml)" in done.stderr
    assert [p.name for p in mine.iterdir()] == ["experiment.yaml"]
    assert (mine / "experiment.yaml").read_text().endswith("# my notes\n")


def two_phase_run(tmp_path, **config) -> RunStore:
    """A run without a controller: scratch node 0 (val 0.4), evolve node 1 (val 0.5) from it."""
    store = RunStore.create(tmp_path / "run", parse_config({"name": "demo", "scheduler": "local",
                                                            **config}))
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"lr": 1e-3}, status=Status.COMPLETED,
                                  results=Results(best_val=0.4, checkpoints=[10])))
    store.add_node(lambda i: Node(i, 0, Kind.EVOLVE, {"lr": 5e-4}, resume=Resume(0, 10),
                                  status=Status.COMPLETED, results=Results(best_val=0.5)))
    return store


def test_status_and_stop_on_a_run_without_a_controller(tmp_path):
    store = two_phase_run(tmp_path)
    table = cli("status", str(store.root))
    assert table.returncode == 0
    assert "0001 evolve  completed" in table.stdout and "best val 0.500 (node 1: 0 -> 1)" in table.stdout
    data = json.loads(cli("status", str(store.root), "--json").stdout)
    assert data["best_path"] == [0, 1] and not data["controller_running"]
    stop = cli("stop", str(store.root))
    assert stop.returncode == 0 and "no controller is running" in stop.stdout
    assert not (store.root / "stop.json").exists()    # no request left for a later controller


def test_status_names_a_recorded_checkpoint_whose_folder_is_gone(tmp_path):
    """Crash walkthrough: a completed phase's checkpoint folder deleted (by hand, a scratch
    purge) went unsaid by llmzero-status; the next phases resumed from it failed and the
    search ended. Status now names the node, the steps and the folder."""
    store = two_phase_run(tmp_path)
    ckpt = store.node_dir(0).ckpt
    (ckpt / "global_step_10").mkdir(parents=True)
    assert "checkpoint" not in cli("status", str(store.root)).stdout
    (ckpt / "global_step_10").rmdir()
    status = cli("status", str(store.root))
    assert status.returncode == 0, status.stderr
    assert "warning: node 0: the checkpoint of step 10, recorded in node.json, is gone from " \
           "nodes/0000/ckpt: no phase can resume from it" in status.stdout


def test_status_disk_says_what_the_run_holds_by_part(tmp_path, capsys):
    """A user under a quota had no way to learn from llmzero-status what a run held on disk,
    or how much of it was checkpoints (a resume point) rather than files that can be redrawn.
    Only with --disk: a walk of the run is too dear for status under `watch`."""
    from llmzero_slurm.cli import status
    store = two_phase_run(tmp_path)
    ckpt = store.root / "nodes" / "0001" / "ckpt" / "global_step_10"
    ckpt.mkdir(parents=True)
    (ckpt / "adapter_model.safetensors").write_bytes(b"x" * 300_000)
    assert status.main([str(store.root)]) == 0
    assert "disk:" not in capsys.readouterr().out
    assert status.main([str(store.root), "--disk"]) == 0
    [line] = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("disk:")]
    assert re.search(r"checkpoints 3\d\dK", line) and "run files" in line, line
    assert status.main([str(store.root), "--json", "--disk"]) == 0
    disk = json.loads(capsys.readouterr().out)["disk"]
    assert disk["checkpoints"]["files"] == 3 and disk["checkpoints"]["bytes"] >= 300_000


def test_status_disk_says_what_keeping_only_useful_checkpoints_would_free(tmp_path, capsys):
    """A user under a quota learns what search.keep_checkpoints: useful would free before
    setting it: here node 1's step 10, neither its last checkpoint nor a resume point."""
    from llmzero_slurm.cli import status
    store = two_phase_run(tmp_path)
    for step in (10, 20):
        ckpt = store.node_dir(1).checkpoint_dir(step)
        ckpt.mkdir(parents=True)
        (ckpt / "adapter_model.safetensors").write_bytes(b"x" * 300_000)
    store.update_node(1, lambda n: setattr(n.results, "checkpoints", [10, 20]))
    assert status.main([str(store.root), "--disk"]) == 0
    [line] = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("disk:")]
    assert re.search(r"; search.keep_checkpoints: useful would free 3\d\dK in 2 files$", line), line
    assert status.main([str(store.root), "--json", "--disk"]) == 0
    assert json.loads(capsys.readouterr().out)["disk_keep_useful_frees"]["files"] == 2
    # A run that keeps only those already has nothing more to free.
    useful = two_phase_run(tmp_path / "b", search={"keep_checkpoints": "useful"})
    assert status.main([str(useful.root), "--disk"]) == 0
    assert "would free" not in capsys.readouterr().out


def test_status_of_a_run_that_completed_nothing_says_the_last_failure(tmp_path):
    """A detached or submitted search that ended without a completed phase (exit 7: a reward
    that raised on a model's answer) said why only in the controller's log; status showed
    'failed' and nothing else. It now says what the controller said at its end."""
    store = RunStore.create(tmp_path / "run", parse_config({"name": "demo", "scheduler": "local"}))
    why = "the job failed in task code (data or reward): ValueError: invalid literal"
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"lr": 1e-3}, status=Status.FAILED,
                                  diagnosis=f"initial configuration\ndebugging stopped: {why}"))
    table = cli("status", str(store.root))
    assert table.returncode == 0, table.stderr
    assert f"note: no phase completed, so the search found nothing; the last failure: " \
        f"debugging stopped: {why}" in table.stdout
    assert "the last failure" not in cli("status", str(two_phase_run(tmp_path / "b").root)).stdout


def test_status_shows_the_samples_spent_the_stoppers_saving_and_the_gain_over_the_base(tmp_path):
    """What benchmarks/search_quality.py measures of a search, shown for the user's own run:
    the base model's score is node 0's validation before its first step."""
    store = two_phase_run(tmp_path, search={"budget_samples": 40_960})
    write_metrics(store.node_dir(0).metrics_file, [(0, {VAL: 0.4, TEST: 0.38}), (10, {VAL: 0.45})])
    store.update_node(1, lambda n: (setattr(n, "status", Status.EARLY_STOPPED),
                                    setattr(n.results, "last_step", 30),
                                    n.hparams.update(total_training_steps=50)))
    store.update_node(0, lambda n: setattr(n.results, "last_step", 10))
    table = cli("status", str(store.root))
    assert table.returncode == 0, table.stderr
    per_step = 32 * 8                                    # the cpu trainer's default batch shape
    assert (f"training samples: {30 * per_step:,} trained of 40,960; early stopping saved "
            f"{30 * per_step:,} of {60 * per_step:,} planned (50%, 1 phase)") in table.stdout
    assert "gain: validation 0.400 -> 0.500 (+0.100, +25% over the base)" in table.stdout
    assert "0.38" not in table.stdout                    # test scores are for the report only
    used = json.loads(cli("status", str(store.root), "--json").stdout)["usage"]
    assert used["samples_trained"] == 30 * per_step and used["base_val"] == 0.4
    assert used["samples_saved_by_early_stopping"] == 30 * per_step


def test_status_says_what_the_agents_spent_and_how_often_the_heuristic_stood_in(tmp_path):
    """A search whose key the service refused (401) on every call ran on the heuristics, and
    llmzero-status said nothing of the agents at all: neither that nor what they spent."""
    store = two_phase_run(tmp_path)
    usage = {"input_tokens": 1200, "output_tokens": 300, "cache_write_tokens": 0,
             "cache_read_tokens": 0, "cost_usd": 0.0081}
    down = ["LLM unavailable: Anthropic API: AuthenticationError: Error code: 401",
            "used the heuristic agent instead"]
    write_json(store.node_dir(1).proposal_file, {
        "agent": "proposer", "backend": "anthropic", "answers": [], "fallbacks": down,
        "result": {}, "usage": dict.fromkeys(usage, 0)})
    write_json(store.node_dir(1).early_stop_file, [
        {"agent": "stopper", "backend": "anthropic", "answers": ["CONTINUE"], "fallbacks": [],
         "result": {"action": "CONTINUE"}, "usage": usage}])
    table = cli("status", str(store.root))
    assert ("agents: 1 LLM call, 1,500 tokens, $0.0081; the heuristic answered 1 of 2 "
            "decisions in the LLM's place (last: LLM unavailable: Anthropic API: "
            "AuthenticationError: Error code: 401)") in table.stdout, table.stdout
    agents = json.loads(cli("status", str(store.root), "--json").stdout)["agents"]
    assert agents["proposer"]["heuristic"] == 1 and agents["stopper"]["calls"] == 1
    # Walkthrough: after the server came back, the line read as if the LLM were still down.
    # An LLM decision recorded after the last fallback is said.
    decided = json.loads(store.node_dir(1).early_stop_file.read_text())
    write_json(store.node_dir(1).early_stop_file, [{**decided[0], "created_at": 2e9}])
    write_json(store.node_dir(1).proposal_file, {
        **json.loads(store.node_dir(1).proposal_file.read_text()), "created_at": 1e9})
    assert "AuthenticationError: Error code: 401; the LLM has answered since)" in \
        cli("status", str(store.root)).stdout


def test_status_shows_no_nan_base_score_and_its_json_is_valid(tmp_path):
    """Review: a NaN validation at step 0 was taken as the base score: the table said
    "validation nan -> 0.500 (+nan)" and --json printed NaN, which is not JSON."""
    store = two_phase_run(tmp_path)
    write_metrics(store.node_dir(0).metrics_file, [(0, {VAL: float("nan")}), (10, {VAL: 0.45})])
    table = cli("status", str(store.root))
    assert table.returncode == 0 and "nan" not in table.stdout.lower(), table.stdout
    done = cli("status", str(store.root), "--json")
    def refuse(constant):
        raise AssertionError(f"{constant} in --json")
    data = json.loads(done.stdout, parse_constant=refuse)
    assert data["usage"]["base_val"] is None


def test_status_after_a_cancel_counts_phases_whose_jobs_ended_as_ended(tmp_path, monkeypatch,
                                                                        capsys):
    """Review: after llmzero-stop --cancel, status kept counting the phases as running: the note
    that a job ended since a controller recorded it came only with a reason (a cancel has
    none), and --json held no live exit code, reason or whether the state is final."""
    from llmzero_slurm.cli import status
    from llmzero_slurm.schedulers.base import job_state
    store = two_phase_run(tmp_path)
    store.add_node(lambda i: Node(i, 1, Kind.EVOLVE, {"lr": 1e-4}, resume=Resume(1, 10),
                                  status=Status.RUNNING, submission=Submission(job_id="4242")))
    monkeypatch.setattr(status, "live_states", lambda store, tree: (
        {"4242": job_state("4242", "CANCELLED", 0)}, None))
    assert status.main([str(store.root)]) == 0
    out = capsys.readouterr().out
    assert "note: node 2: job 4242 ended CANCELLED" in out
    assert "running" not in out.split("phases:")[1].splitlines()[0], out
    assert status.main([str(store.root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["live_jobs"]["4242"] == {"state": "CANCELLED", "exit_code": 0, "reason": None,
                                         "final": True}
    assert isinstance(data["terminal"]["2"], bool)


def test_status_table_shows_a_cancelled_phase_as_cancelled_with_its_logged_steps(
        tmp_path, monkeypatch, capsys):
    """Walkthrough: after llmzero-stop --cancel the table kept the phase's row "running 10-..."
    beside a Slurm column saying CANCELLED, and the samples line counted it as running, until a
    resume recorded the cancel. The row and the sums now say what the scheduler says."""
    from llmzero_slurm.cli import status
    from llmzero_slurm.schedulers.base import job_state
    store = two_phase_run(tmp_path)
    store.update_node(0, lambda n: setattr(n.results, "last_step", 10))
    store.update_node(1, lambda n: setattr(n.results, "last_step", 10))
    store.add_node(lambda i: Node(i, 1, Kind.EVOLVE, {"lr": 1e-4, "total_training_steps": 40},
                                  resume=Resume(1, 10), status=Status.RUNNING,
                                  submission=Submission(job_id="4242")))
    write_metrics(store.node_dir(2).metrics_file, [(s, {VAL: 0.5}) for s in range(11, 23)])
    monkeypatch.setattr(status, "live_states", lambda store, tree: (
        {"4242": job_state("4242", "CANCELLED", 0)}, None))
    assert status.main([str(store.root)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\s*0002 evolve\s+cancelled\s+-\s+10-22 +4242 +CANCELLED", out, re.M), out
    per_step = 32 * 8
    assert f"training samples: {22 * per_step:,} trained;" in out, out
    assert status.main([str(store.root), "--json"]) == 0
    used = json.loads(capsys.readouterr().out)["usage"]
    assert used["samples_trained"] == 22 * per_step
    assert used["samples_trained_by_running_phases"] == 0


def test_status_shows_a_phase_the_stopper_ended_as_early_stopped_before_it_is_recorded(
        tmp_path, monkeypatch, capsys):
    """Walkthrough (concurrency 2): in the seconds between the stopper's cancel and the
    controller's next look, llmzero-status showed the phase as "cancelled" (a person's cancel,
    no verdict), its summary "1 cancelled" and the phases line "(1 cancelled, not counted)";
    the controller then recorded it early_stopped, as its stop decision says."""
    from llmzero_slurm.cli import status
    from llmzero_slurm.schedulers.base import job_state
    store = two_phase_run(tmp_path)
    store.update_node(1, lambda n: setattr(n.results, "last_step", 10))
    store.add_node(lambda i: Node(i, 1, Kind.EVOLVE, {"lr": 1e-4, "total_training_steps": 40},
                                  resume=Resume(1, 10), status=Status.RUNNING,
                                  submission=Submission(job_id="4242")))
    write_metrics(store.node_dir(2).metrics_file, [(s, {VAL: 0.5}) for s in range(11, 23)])
    store.node_dir(2).early_stop_file.write_text(json.dumps(
        [{"step": 20, "result": {"action": "STOP", "reason": "cannot catch up"}}]))
    monkeypatch.setattr(status, "live_states", lambda store, tree: (
        {"4242": job_state("4242", "CANCELLED", 0)}, None))
    assert status.main([str(store.root)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\s*0002 evolve\s+early_stopped\s", out, re.M), out
    assert "cancelled" not in out.split("flags:")[1], out
    per_step = 32 * 8                       # planned 40 steps from step 10, trained 12
    assert f"early stopping saved {28 * per_step:,} of {40 * per_step:,}" in out, out


def test_status_says_why_each_phase_was_stopped_or_cancelled(tmp_path, capsys):
    """Walkthrough "why was my phase cancelled?": status showed early_stopped and cancelled
    with no word of why, which stopper, or what the stop saved; a person's cancel and the
    stopper's read alike to someone who looked at the job's state (CANCELLED both)."""
    from llmzero_slurm.cli import status
    store = two_phase_run(tmp_path)
    store.update_node(1, lambda n: setattr(n.results, "last_step", 10))
    for status_ in (Status.EARLY_STOPPED, Status.CANCELLED):
        store.add_node(lambda i, s=status_: Node(
            i, 1, Kind.EVOLVE, {"lr": 1e-4, "total_training_steps": 40}, resume=Resume(1, 10),
            status=s, results=Results(best_val=0.45, last_step=22),
            submission=Submission(job_id=str(40 + i), scheduler_state="CANCELLED")))
    store.node_dir(2).early_stop_file.write_text(json.dumps([
        {"agent": "stopper", "backend": "heuristic", "model": None,
         "result": {"action": "CONTINUE", "reason": "too early", "step": 15}},
        {"agent": "stopper", "backend": "anthropic", "model": "claude-x",
         "result": {"action": "STOP", "reason": "flat at 0.45,\nbelow node 1's 0.5", "step": 20,
                    "source": "anthropic"}}]))
    assert status.main([str(store.root)]) == 0
    out = capsys.readouterr().out
    per_step = 32 * 8                       # planned 40 steps from step 10, trained 12
    assert (f"node 2: stopped early at step 20 by the LLM stopper (anthropic claude-x): flat at "
            f"0.45, below node 1's 0.5; saved {28 * per_step:,} of {40 * per_step:,} planned "
            "samples") in out, out
    assert ("node 3: cancelled, not by the stopper (no STOP on record): by a person (scancel, "
            "llmzero-stop --cancel) or the batch system") in out, out
    assert status.main([str(store.root), "--json"]) == 0
    ended = json.loads(capsys.readouterr().out)["ended_why"]
    assert ended["2"].startswith("stopped early at step 20 by the LLM stopper") and \
        ended["3"].startswith("cancelled, not by the stopper")


def a_stopped_child(tmp_path: Path, records: list[object]) -> RunStore:
    """two_phase_run with node 2, node 1's child, early stopped at step 22 with `records` in
    its early_stop.json."""
    store = two_phase_run(tmp_path)
    store.update_node(1, lambda n: setattr(n.results, "last_step", 10))
    store.add_node(lambda i: Node(
        i, 1, Kind.EVOLVE, {"lr": 1e-4, "total_training_steps": 40}, resume=Resume(1, 10),
        status=Status.EARLY_STOPPED, results=Results(best_val=0.45, last_step=22),
        submission=Submission(job_id="42", scheduler_state="CANCELLED")))
    store.node_dir(2).early_stop_file.write_text(json.dumps(records))
    return store


def test_status_reads_a_stop_record_whose_result_is_not_a_mapping(tmp_path, capsys):
    """Review: a hand-edited early_stop.json entry with a string result ended status (and the
    report, which had skipped such entries) in an AttributeError; the entry says no STOP."""
    from llmzero_slurm.cli import status
    store = a_stopped_child(tmp_path, [
        {"result": {"action": "STOP", "reason": "flat", "step": 20}}, {"result": "STOP"}])
    assert status.main([str(store.root)]) == 0
    assert "node 2: stopped early at step 20 by the heuristic stopper: flat" in \
        capsys.readouterr().out


def test_status_names_the_heuristic_that_stopped_a_phase_in_the_llms_place(tmp_path, capsys):
    """Review: with the LLM down, the heuristic answers the stopper's question in its place
    (the record keeps the LLM's backend and model, the fallback and the answer's source);
    the stop was said to be the LLM stopper's, with the heuristic's reason."""
    from llmzero_slurm.cli import status
    store = a_stopped_child(tmp_path, [
        {"agent": "stopper", "backend": "anthropic", "model": "claude-x",
         "fallbacks": ["LLM unavailable: connection refused"],
         "result": {"action": "STOP", "reason": "the trend stays below", "step": 20,
                    "source": "rule"}}])
    assert status.main([str(store.root)]) == 0
    assert ("node 2: stopped early at step 20 by the heuristic stopper, in the place of the LLM "
            "stopper (anthropic claude-x): the trend stays below") in capsys.readouterr().out


def test_status_counts_what_a_running_phase_has_trained_so_far(tmp_path):
    """Review: a running phase's samples showed only once it ended, so a long phase read as
    nothing trained for hours; its log already says how far it is."""
    store = two_phase_run(tmp_path)
    store.update_node(0, lambda n: setattr(n.results, "last_step", 10))
    store.update_node(1, lambda n: setattr(n.results, "last_step", 30))
    store.add_node(lambda i: Node(i, 1, Kind.EVOLVE, {"lr": 5e-4, "total_training_steps": 40},
                                  resume=Resume(1, 30), status=Status.RUNNING))
    write_metrics(store.node_dir(2).metrics_file, [(s, {VAL: 0.5}) for s in range(31, 43)])
    per_step = 32 * 8
    table = cli("status", str(store.root))
    assert table.returncode == 0, table.stderr
    assert (f"training samples: {42 * per_step:,} trained ({12 * per_step:,} so far in running "
            "phases)") in table.stdout
    # and its row says how far it is: step 42 logged, more to come (it read "30-..." before)
    assert re.search(r"^\s*0002 evolve\s+running\s+-\s+30-42\.\.\. ", table.stdout, re.M), table.stdout
    shown = json.loads(cli("status", str(store.root), "--json").stdout)
    assert shown["running_logged_steps"] == {"2": 42}
    used = shown["usage"]
    assert used["samples_trained"] == 42 * per_step
    assert used["samples_trained_by_running_phases"] == 12 * per_step


def test_status_of_a_big_tree_lists_its_best_path_and_live_phases_and_counts_the_rest(
        tmp_path, capsys):
    """Review (a search of hundreds of phases): the table listed every phase, and the running
    ones and the best path scrolled away above the summary. Above 40 phases it lists those
    and their ancestors, in place, and counts the rest by status; --all lists every phase,
    and --json holds every node either way."""
    from llmzero_slurm.cli import status
    from treebuild import N
    store = two_phase_run(tmp_path)                     # best path 0 -> 1
    for _ in range(2, 50):                              # 4 failed, 44 completed under node 0
        store.add_node(lambda j: N(j, 0, Status.FAILED if j < 6 else Status.COMPLETED, 0.1))
    store.add_node(lambda j: N(j, 7, Status.COMPLETED, 0.1))          # 50
    store.add_node(lambda j: N(j, 50, Status.RUNNING))                 # 51
    store.add_node(lambda j: N(j, 0, Status.PROPOSED))                 # 52
    assert status.main([str(store.root)]) == 0
    out = capsys.readouterr().out
    assert re.findall(r"^\s*(\d{4}) ", out, re.M) == ["0000", "0001", "0007", "0050", "0051",
                                                      "0052"], out
    assert re.search(r"^\s*0051 evolve\s+running ", out, re.M), out
    assert ("47 more phases not listed: 43 completed, 4 failed (--all lists every phase)"
            in out), out
    assert "53 phases: " in out                         # the summary still counts them all
    assert status.main([str(store.root), "--all"]) == 0
    listed = re.findall(r"^\s*(\d{4}) ", capsys.readouterr().out, re.M)
    assert listed == [f"{i:04d}" for i in [0, 1, *range(2, 8), 50, 51, *range(8, 50), 52]]
    assert status.main([str(store.root), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["nodes"]) == 53


def test_status_names_the_slurm_job_the_controller_runs_in(tmp_path, monkeypatch):
    """Walkthrough: with the controller as a Slurm job (--submit), status said "controller
    running on HOST pid N", a pid on a compute node; the job to look up or scancel was unnamed."""
    from llmzero_slurm.controller.lease import Lease
    store = two_phase_run(tmp_path)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    holder = Lease(store)
    holder.acquire()                      # a live controller: this test process, "in job 4242"
    try:
        table = cli("status", str(store.root))
    finally:
        holder.release()
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith(f"experiment demo (llmzero), controller running on "
                                   f"{socket.gethostname()} pid {os.getpid()} in Slurm job "
                                   f"4242\n"), table.stdout


def test_a_phase_that_ended_before_its_first_step_reads_as_ended_in_status(tmp_path):
    """Walkthrough: a phase that failed in its setup lines (a module load), or was scancelled
    before its first step, read "79-..." in llmzero-status's steps column, "more to come", as
    a running phase does, long after it had ended."""
    store = two_phase_run(tmp_path)
    store.add_node(lambda i: Node(i, 1, Kind.EVOLVE, {"lr": 5e-4}, resume=Resume(1, 10),
                                  status=Status.FAILED))
    store.add_node(lambda i: Node(i, 1, Kind.EVOLVE, {"lr": 2e-4}, resume=Resume(1, 10),
                                  status=Status.CANCELLED))
    table = cli("status", str(store.root))
    assert table.returncode == 0, table.stderr
    assert re.search(r"^\s*0002 evolve\s+failed\s+-\s+10-\s", table.stdout, re.M), table.stdout
    assert re.search(r"^\s*0003 evolve\s+cancelled\s+-\s+10-\s", table.stdout, re.M), table.stdout


@pytest.mark.parametrize("name", ["status", "stop", "report", "repair"])
def test_a_run_directory_that_does_not_exist_is_a_usage_error(tmp_path, name):
    """Audit: a path the user typed that names nothing exited 3 (damaged state); so did a
    folder holding none of a run's files (the README says exit 2). One holding part of a run
    is a damaged run, exit 3."""
    missing = cli(name, str(tmp_path / "nowhere"))
    assert missing.returncode == 2, missing.stderr
    assert missing.stderr == f"error: no run directory at {tmp_path / 'nowhere'}\n"
    (tmp_path / "empty").mkdir()
    empty = cli(name, str(tmp_path / "empty"))
    assert empty.returncode == 2, empty.stderr
    assert empty.stderr == (f"error: {tmp_path / 'empty'} is not a run directory (no meta.json, "
                            "experiment.yaml or nodes/); start one with llmzero-start\n")
    (tmp_path / "part").mkdir()
    (tmp_path / "part" / "experiment.yaml").write_text("name: x\n")
    part = cli(name, str(tmp_path / "part"))
    assert part.returncode == 3 and f"{tmp_path / 'part'}: is a damaged run directory: it has " \
        "experiment.yaml but no meta.json" in part.stderr, part.stderr


@pytest.mark.parametrize("name", ["status", "stop", "report", "repair"])
def test_a_config_file_given_for_a_run_directory_is_a_usage_error(tmp_path, name):
    """`llmzero-status examples/cpu-addition.yaml` exited 3, corrupt or unwritable state."""
    config = tmp_path / "experiment.yaml"
    config.write_text("name: x\n")
    done = cli(name, str(config))
    assert done.returncode == 2, done.stderr
    assert f"{config} is a file, not a run directory" in done.stderr


@pytest.mark.parametrize("name", ["status", "stop", "report", "repair", "start"])
def test_a_report_folder_given_for_a_run_directory_names_the_run(tmp_path, name):
    """`llmzero-report runs/NAME/report` (a slip of tab completion) exited 3 with "is a damaged
    run directory: it has nodes/ but no meta.json": a report folder holds nodes/ (each node's
    curves), and nothing of the run is damaged."""
    store = two_phase_run(tmp_path)
    assert cli("report", str(store.root)).returncode == 0
    done = cli(name, str(store.root / "report"))
    assert done.returncode == 2 and "damaged" not in done.stderr, done.stderr
    assert (f"{store.root / 'report'} is a report folder that llmzero-report wrote, not a run "
            f"directory: the run is {store.root}") in done.stderr, done.stderr


@pytest.fixture
def slurm_down(tmp_path, monkeypatch):
    """Slurm's clients installed, its controller not answering."""
    down = Shims(tmp_path / "bin")
    for client in CLIENTS:
        down.fail(client, (1, 9999), "slurm_load_jobs error: Unable to contact slurm controller "
                                     "(connect failure)")
    monkeypatch.setenv("PATH", f"{down.dir}:{os.environ['PATH']}")


def test_a_start_with_scheduler_slurm_and_no_slurmctld_is_a_batch_system_error(tmp_path, slurm_down):
    """It failed the root phase for good at sbatch, then ended with exit 7."""
    store = RunStore.create(tmp_path / "run", parse_config({"name": "demo", "scheduler": "slurm"}))
    with pytest.raises(SchedulerError, match="no slurmctld answers") as caught:
        build_controller(store)
    assert caught.value.exit_code == 5 and len(store.load_tree()) == 0


def test_each_start_says_who_answers_for_the_agents(tmp_path, capsys, monkeypatch):
    """A run resumed from a shell without the key went on with the offline heuristics, and
    nothing said so: each start now names the LLM (never its key), or why there is none."""
    monkeypatch.delenv("LLMZ_WALK_KEY", raising=False)
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "demo", "scheduler": "local",
        "agents": {"api_key_env": "LLMZ_WALK_KEY", "base_url": "http://127.0.0.1:9"}}))
    build_controller(store)
    said = capsys.readouterr().out
    assert "agents: the offline heuristics ($LLMZ_WALK_KEY is not set" in said
    monkeypatch.setenv("LLMZ_WALK_KEY", "sk-walk-0123456789abcdef")
    build_controller(store)
    said = capsys.readouterr().out
    assert "agents: anthropic, model claude-sonnet-4-6, at http://127.0.0.1:9" in said
    assert "sk-walk" not in said


def test_a_start_tries_the_llm_once_and_says_what_is_wrong(tmp_path, capsys, monkeypatch):
    """A start against a server that was down, refused the key or lacked the model said
    nothing: the first proposal fell back to the heuristics a phase later. Each start now tries
    the LLM with --check's one-token request and says what is wrong and what happens next."""
    from llm_loopback import LoopbackLLM
    monkeypatch.setenv("LLMZ_WALK_KEY", "sk-walk-0123456789abcdef")
    with socket.socket() as s:             # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    agents = {"backend": "openai", "api_key_env": "LLMZ_WALK_KEY", "model": "qwen2"}
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "demo", "scheduler": "local", "agents": {**agents, "base_url": down}}))
    build_controller(store)
    said = capsys.readouterr().err
    assert said.startswith(f"warning: the agents' LLM at {down} did not answer a one-token "
                           "trial request: "), said
    assert "connection refused: nothing listens at 127.0.0.1:" in said.lower()
    assert "each agent call falls back to the offline heuristics while it does not answer" in said
    with LoopbackLLM() as service:
        store.config.agents.base_url = f"{service.url}/v1"
        service.reply({"status": 401, "message": "bad key {key}"})
        build_controller(store)
        said = capsys.readouterr().err
        assert "refused the key in $LLMZ_WALK_KEY" in said and "sk-walk" not in said, said
        assert "every agent call falls back to the offline heuristics until that is fixed" in said
        service.reply({"status": 404, "message": "no model"}, models=["qwen"])
        build_controller(store)
        assert "serves no model 'qwen2'; it serves: 'qwen'" in capsys.readouterr().err
        service.reply("Ready")
        build_controller(store)
        assert capsys.readouterr().err == ""
        assert service.requests[0]["body"]["max_tokens"] == 1     # once, one token


def test_a_trial_that_times_out_names_its_own_limit(monkeypatch):
    """The trial waits min(agents.timeout_s, 15 s), yet its timeout said "no complete answer
    within agents.timeout_s = 15 s" of a config whose agents.timeout_s was 120, and counted
    the service's retries in a trial that makes none."""
    from llm_loopback import LoopbackLLM
    from llmzero_slurm.controller import llm_trial
    monkeypatch.setenv("LLMZ_WALK_KEY", "sk-walk-0123456789abcdef")
    monkeypatch.setattr(llm_trial, "LLM_TRIAL_TIMEOUT_S", 0.3)
    with LoopbackLLM() as service:
        service.reply({"delay": 2.0, "text": "Ready"})
        said = llm_trial.trial_warning(parse_config({"name": "demo", "agents": {
            "backend": "openai", "api_key_env": "LLMZ_WALK_KEY", "model": "qwen2",
            "base_url": f"{service.url}/v1", "timeout_s": 120}}).agents)
    assert said is not None and "agents.timeout_s = 0.3" not in said, said
    assert "no complete answer within the trial's 0.3 s (the lesser of agents.timeout_s, 120 s, " \
           "and 0.3 s)" in said, said


def test_scheduler_auto_is_frozen_as_what_it_chose(tmp_path, capsys, slurm_down):
    """A run that auto-chose Slurm, resumed while slurmctld was briefly down, would have watched
    its Slurm jobs through the local scheduler and started phases on the login node."""
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "demo", "scheduler": "auto",
                                    "task": {"builtin": "addition"}}))
    args = parse_args([str(path), "--run-dir", str(tmp_path / "run")])
    store = open_or_create(args)        # no cluster answers (slurm_down): local
    assert store.config.scheduler == "local"
    assert RunStore.config_of(store.root).scheduler == "local"
    assert open_or_create(args).root == store.root
    assert "differs" not in capsys.readouterr().out      # the same experiment, resumed


def test_scheduler_auto_on_a_cluster_whose_slurmctld_is_down_creates_nothing(
        tmp_path, monkeypatch):
    """A new run with scheduler: auto, started on a login node while its slurmctld restarted,
    said '[ok] scheduler: no Slurm cluster: phases run as local processes', was frozen as
    local and trained every phase on the login node. scontrol ping names a controller that
    is DOWN: that is a cluster, not its absence (exit 5, nothing created)."""
    slurm_clients(tmp_path, monkeypatch, sbatch="exit 1", squeue="exit 1", scancel="exit 1",
                  scontrol='echo "Slurmctld(primary) at head1 is DOWN"; exit 1')
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "demo", "scheduler": "auto",
                                    "task": {"builtin": "addition"}}))
    for extra in ([], ["--check"]):
        done = cli("start", str(path), "--run-dir", str(tmp_path / "run"), *extra)
        assert done.returncode == 5, done.stdout + done.stderr
        assert "head1 is DOWN" in done.stderr and "scheduler: local" in done.stderr
        assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


def test_submit_with_no_slurm_answering_creates_nothing(tmp_path, slurm_down):
    """Review: `--submit` froze `scheduler: auto` as local and made the run (and its
    controller-key/) before sbatch failed; the next --submit ran a controller job that trained
    every phase as local processes inside its one CPU."""
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "demo", "scheduler": "auto",
                                    "task": {"builtin": "addition"}}))
    done = cli("start", str(path), "--run-dir", str(tmp_path / "run"), "--submit")
    assert done.returncode == 5, done.stdout + done.stderr
    assert "--submit" in done.stderr and "no slurmctld answers" in done.stderr
    assert not (tmp_path / "run").exists()


def test_submit_refuses_a_config_that_asks_for_local_processes(tmp_path):
    """Review of the change above: `scheduler: local` with --submit said "no slurmctld
    answers" (exit 5) of a cluster that may be fine: it is the config that asks for no Slurm."""
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "demo", "scheduler": "local",
                                    "task": {"builtin": "addition"}}))
    done = cli("start", str(path), "--run-dir", str(tmp_path / "run"), "--submit")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "scheduler: local" in done.stderr and "no slurmctld" not in done.stderr
    assert not (tmp_path / "run").exists()


def test_submit_refuses_a_run_frozen_as_local(tmp_path):
    store = two_phase_run(tmp_path)
    done = cli("start", str(store.root), "--submit")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "frozen as scheduler: local" in done.stderr and "Traceback" not in done.stderr
    assert not (store.root / "controller.sbatch").exists()
    assert not (store.root / "controller-key").exists()


def test_submit_of_a_search_that_spent_its_budget_queues_no_job(tmp_path, monkeypatch):
    """Campaign walkthrough: --submit of a finished search queued a controller job that
    waited its turn on a busy cluster only to say "search finished: 2 of 2"."""
    store = two_phase_run(tmp_path, scheduler="slurm", search={"budget_iterations": 2})
    sbatch = tmp_path / "sbatch-called"
    slurm_clients(tmp_path, monkeypatch, squeue="true", sbatch=f"touch {sbatch}; echo 7")
    done = cli("start", str(store.root), "--submit")
    assert done.returncode == 2, done.stdout + done.stderr
    assert (f"nothing submitted: the search has ended (2 of 2 phases created) with no phase "
            f"left to take in; to go on, raise search.budget_iterations (or another budget) in "
            f"{store.root / 'experiment.yaml'}") in done.stderr, done.stderr
    assert not sbatch.exists() and not (store.root / "controller.sbatch").exists()


def test_scheduler_auto_that_chose_slurm_freezes_a_poll_slurm_accepts(tmp_path, monkeypatch):
    """Review: scheduler: auto with search.poll_interval_s: 0.05 (fine for local processes) was
    frozen as `slurm` with it: 20 squeue calls a second. The frozen poll is raised to 5 s (and
    make_scheduler raises a shorter one, frozen by an earlier release, as it polls)."""
    monkeypatch.setattr("llmzero_slurm.cli.open_run.resolve_scheduler_kind", lambda kind: "slurm")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "demo", "scheduler": "auto",
                                    "task": {"builtin": "addition"},
                                    "search": {"poll_interval_s": 0.05}}))
    store = open_or_create(parse_args([str(path), "--run-dir", str(tmp_path / "run")]))
    frozen = RunStore.config_of(store.root)
    assert (frozen.scheduler, frozen.search.poll_interval_s) == ("slurm", 5.0)


def test_resuming_with_a_changed_config_names_what_it_ignores(tmp_path, capsys):
    """A finished run started again with a larger budget said only that the config "differs",
    then "search finished" with nothing run: which change was ignored was left to guess."""
    path = tmp_path / "exp.yaml"
    exp = {"name": "demo", "scheduler": "local", "task": {"builtin": "addition"},
           "search": {"budget_iterations": 4}, "hparams": {"lr": 1.0e-3}}
    path.write_text(yaml.safe_dump(exp))
    args = parse_args([str(path), "--run-dir", str(tmp_path / "run")])
    open_or_create(args)
    exp["search"]["budget_iterations"], exp["hparams"]["lr"] = 6, 5.0e-4
    path.write_text(yaml.safe_dump(exp))
    capsys.readouterr()
    open_or_create(args)
    out = capsys.readouterr().out
    assert "resuming it with its frozen experiment.yaml" in out
    assert "hparams.lr: 0.001 -> 0.0005" in out and "search.budget_iterations: 4 -> 6" in out


def test_resuming_with_a_larger_budget_says_how_to_give_the_run_more(tmp_path, capsys):
    """A finished run started again with a larger budget was told the change was ignored and
    to "use another --run-dir for a new run": not that the run's own experiment.yaml, which
    each start resumes with, is where its budget is raised."""
    path = tmp_path / "exp.yaml"
    exp = {"name": "demo", "scheduler": "local", "task": {"builtin": "addition"},
           "search": {"budget_iterations": 4}}
    path.write_text(yaml.safe_dump(exp))
    args = parse_args([str(path), "--run-dir", str(tmp_path / "run")])
    open_or_create(args)
    exp["search"].update(budget_iterations=6, budget_samples=100_000)
    path.write_text(yaml.safe_dump(exp))
    capsys.readouterr()
    open_or_create(args)
    out = capsys.readouterr().out
    assert ("to give this run another budget, set search.budget_iterations, "
            f"search.budget_samples in {tmp_path / 'run' / 'experiment.yaml'}") in out, out
    exp["search"].update(budget_iterations=4, budget_samples=None, seed=3)
    path.write_text(yaml.safe_dump(exp))
    open_or_create(args)
    assert "another budget" not in capsys.readouterr().out


def test_detach_reports_a_controller_that_could_not_start(tmp_path):
    """It printed "controller started in the background" and exited 0 while the controller
    it started had exited 6 at once: another one held the run."""
    from llmzero_slurm.controller.lease import Lease
    store = RunStore.create(tmp_path / "run", parse_config({
        "name": "demo", "scheduler": "local", "task": {"builtin": "addition"}}))
    holder = Lease(store)
    holder.acquire()                      # a live controller: this test process
    try:
        done = cli("start", str(store.root), "--detach")
        # Audit F6/F7: --submit queued a job that could only exit 6, and a refused --detach
        # wrote its start and refusal into the running controller's log.
        submitted = cli("start", str(store.root), "--submit")
    finally:
        holder.release()
    for refused in (done, submitted):
        assert refused.returncode == 6, refused.stdout + refused.stderr
        assert "already running" in refused.stderr and "submitted" not in refused.stdout
    assert "started in the background" not in done.stdout
    assert not (store.root / "controller.log").exists()
    assert not (store.root / "controller.sbatch").exists()


def test_a_second_start_of_a_running_experiment_points_to_another_run_dir(tmp_path):
    """Walkthrough, a second seed: `llmzero-start exp.yaml --detach` again, for a run beside
    the first, was refused with "a controller is already running" alone, never saying that
    it had gone to the first run's folder, nor how to make a second run."""
    from llmzero_slurm.controller.lease import Lease
    path, run = tmp_path / "exp.yaml", tmp_path / "run"
    path.write_text(yaml.safe_dump({"name": "demo", "scheduler": "local",
                                    "task": {"builtin": "addition"}}))
    holder = Lease(open_or_create(parse_args([str(path), "--run-dir", str(run)])))
    holder.acquire()                      # a live controller: this test process
    try:
        twice = [cli("start", str(path), "--run-dir", str(run), *how) for how in (("--detach",), ())]
        resumed = cli("start", str(run), "--detach")
    finally:
        holder.release()
    hint = f"; to run {path} a second time beside this run, give another --run-dir"
    for refused in twice:
        assert refused.returncode == 6 and "already running" in refused.stderr, refused.stderr
        assert hint in refused.stderr, refused.stderr
    assert resumed.returncode == 6 and "--run-dir" not in resumed.stderr, resumed.stderr


def test_ctrl_c_while_detach_waits_says_the_controller_goes_on(tmp_path, monkeypatch, capsys):
    """Review: Ctrl-C while --detach waited for its controller to hold the run exited 130
    silently, the controller running on in the background unnamed."""
    from llmzero_slurm.cli import background
    store = two_phase_run(tmp_path)
    monkeypatch.setattr(background, "controller_command", lambda store, args: ["sleep", "60"])
    def interrupted(proc, lease):
        raise KeyboardInterrupt
    monkeypatch.setattr(background, "_started", interrupted)
    args = parse_args([str(store.root), "--detach"])
    assert background.detach(store, args) == 130
    said = capsys.readouterr().err
    pid = int(re.search(r"pid (\d+)", said).group(1))
    try:
        assert "goes on in the background" in said and str(store.root / "controller.log") in said
        assert f"llmzero-stop {store.root}" in said
        os.kill(pid, 0)                                     # still running
    finally:
        os.kill(pid, 9)


def test_detach_shows_the_warnings_its_controller_wrote_before_it_held_the_run(
        tmp_path, monkeypatch):
    """Walkthrough: with --detach, the start's warning that the agents' LLM did not answer
    went to controller.log alone, and the terminal said "controller started" and no more."""
    monkeypatch.setenv("LLMZ_WALK_KEY", "sk-walk-0123456789abcdef")
    with socket.socket() as s:             # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    store = two_phase_run(tmp_path, agents={"backend": "openai", "api_key_env": "LLMZ_WALK_KEY",
                                            "model": "qwen2", "base_url": down})
    done = cli("start", str(store.root), "--detach")
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "controller started in the background" in done.stdout
        warned = done.stderr.splitlines()
        assert warned[0].startswith(f"warning: the agents' LLM at {down} did not answer"), warned
        assert warned[1].startswith("  The search starts anyway"), warned
    finally:
        stopped = cli("stop", str(store.root), "--cancel", "--wait", "120")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def test_detach_on_a_finished_run_says_so_and_exits_0(tmp_path):
    """It printed "error: the controller exited at once (code 0)" and exited 1: a finished
    run's controller ends at once, with success. Under load the start may first see it hold
    the run (it must, to find the search over): then it is reported started, and ends so."""
    store = two_phase_run(tmp_path, search={"budget_iterations": 2})
    done = cli("start", str(store.root), "--detach")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "error" not in done.stderr
    if "started in the background" in done.stdout:
        wait_for(lambda: "search finished" in (store.root / "controller.log").read_text(), 60,
                 "the detached controller to find the search over")
    else:
        assert "search finished" in done.stdout


def test_status_shows_the_recorded_tree_when_slurm_does_not_answer(tmp_path, slurm_down):
    """slurmctld down: status used to retry for a minute, then exit 5 showing nothing."""
    store = RunStore.create(tmp_path / "run", parse_config({"name": "demo", "scheduler": "slurm"}))
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"lr": 1e-3}, status=Status.RUNNING,
                                  submission=Submission(job_id="4242", scheduler_state="RUNNING")))
    started = time.monotonic()
    table = cli("status", str(store.root))
    assert table.returncode == 0, table.stderr
    assert re.search(r"0000 scratch running .* 4242 +RUNNING", table.stdout)
    assert "Slurm did not answer" in table.stdout and "as last recorded" in table.stdout
    assert time.monotonic() - started < 30      # asked once, not retried for a minute
    data = json.loads(cli("status", str(store.root), "--json").stdout)
    assert data["slurm_states"] == {} and "Slurm did not answer" in data["live_states_note"]


def test_a_slurm_conf_naming_no_file_is_named_not_waited_on(tmp_path, monkeypatch):
    """SLURM_CONF with a typo: Slurm's clients retried reading it for a minute; a new run with
    scheduler auto then quietly ran its phases on the login node, and status said only that
    Slurm did not answer. Now the variable is named, and no client is run."""
    shims = Shims(tmp_path / "bin")
    for client in CLIENTS:
        shims.fail(client, (1, 9999), "a Slurm client was run")
    monkeypatch.setenv("PATH", f"{shims.dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf.typo"))
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "demo", "scheduler": "auto",
                                    "task": {"builtin": "addition"}}))
    with pytest.raises(ConfigError, match=r"'scheduler': is 'auto', but SLURM_CONF=.*"
                                          r"slurm.conf.typo names no file: fix or unset it"):
        open_or_create(parse_args([str(path), "--run-dir", str(tmp_path / "new")]))
    assert not (tmp_path / "new").exists()
    store = RunStore.create(tmp_path / "run", parse_config({"name": "demo", "scheduler": "slurm"}))
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"lr": 1e-3}, status=Status.RUNNING,
                                  submission=Submission(job_id="4242", scheduler_state="RUNNING")))
    table = cli("status", str(store.root))
    assert table.returncode == 0, table.stderr
    assert re.search(r"0000 scratch running .* 4242 +RUNNING", table.stdout)
    assert "slurm.conf.typo names no file" in table.stdout and "as last recorded" in table.stdout
    with pytest.raises(ConfigError, match="slurm.conf.typo names no file"):
        build_controller(store)
    assert shims.calls() == []


def test_status_shows_the_recorded_tree_when_the_local_job_table_is_damaged(tmp_path):
    """A damaged local-jobs/jobs.json (an editor, a disk error) made status exit 3 and show
    nothing but that file's name, though every node record read fine."""
    store = RunStore.create(tmp_path / "run", parse_config({"name": "demo", "scheduler": "local"}))
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"lr": 1e-3}, status=Status.RUNNING,
                                  submission=Submission(job_id="1", scheduler_state="RUNNING")))
    table = store.root / "local-jobs" / "jobs.json"
    table.parent.mkdir()
    table.write_text('{"jobs": ')
    shown = cli("status", str(store.root))
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"0000 scratch running .* 1 +RUNNING", shown.stdout)
    assert re.search(r"note: job states are shown as last recorded: .*local-jobs/jobs.json: "
                     r"corrupt JSON", shown.stdout)


def read_only(run: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    """llmzero-NAME as a colleague who may only read the run: the run directory mounted
    read-only in a mount namespace of its own (root's permission bits would not stop it)."""
    if not shutil.which("unshare") or subprocess.run(
            ["unshare", "--mount", "true"], capture_output=True).returncode:
        pytest.skip("needs unshare --mount (root) to mount the run read-only")
    env = {**os.environ, "LLMZERO_PYTHON": sys.executable}
    mount = 'mount --bind -o ro "$1" "$1" && shift && exec "$@"'
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", mount,
                           "sh", str(run), str(ROOT / "bin" / f"llmzero-{name}"), *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_a_reader_of_a_read_only_run_gets_status_and_a_report_of_their_own(tmp_path):
    """A colleague with read access only: llmzero-report died with a traceback (OSError:
    Read-only file system, making <run>/report) and had nowhere else to write; now --output
    takes a folder of theirs, and without it the error names the folder and the way out."""
    store = two_phase_run(tmp_path)
    before = sorted(p.relative_to(store.root) for p in store.root.rglob("*"))
    status = read_only(store.root, "status", str(store.root))
    assert status.returncode == 0 and "best val 0.500 (node 1: 0 -> 1)" in status.stdout
    refused = read_only(store.root, "report", str(store.root))
    assert refused.returncode == 3 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr == (f"error: {store.root / 'report'}: cannot be made (Read-only file "
                              "system); without write access to the run, give a folder of your "
                              "own with --output DIR\n")
    mine = tmp_path / "my-report"
    done = read_only(store.root, "report", str(store.root), "--output", str(mine))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"report: {mine / 'index.html'}\n"
    assert (mine / "strategy.yaml").is_file() and (mine / "tree.png").is_file()
    assert sorted(p.relative_to(store.root) for p in store.root.rglob("*")) == before


def test_a_report_on_a_full_disk_says_to_free_space_not_to_ask_for_write_access(tmp_path,
                                                                              monkeypatch):
    """On a full disk llmzero-report told the run's owner that they had no write access to
    their own run; the cause is named with the way out that fits it."""
    store = two_phase_run(tmp_path)
    monkeypatch.setenv("LLMZERO_FAULT", "enospc:tree.png")
    done = cli("report", str(store.root))
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
    assert "tree.png: could not be written (No space left on device (injected)); it still holds " \
           "what it held before; free space, or give a folder on another filesystem with " \
           "--output DIR" in done.stderr and "write access" not in done.stderr


def test_a_command_denied_a_file_of_the_run_names_it_without_a_traceback(tmp_path):
    """`llmzero-start RUN --detach` by a colleague who may not write the run (here a read-only
    mount; a controller.log another member wrote under umask 022 alike) died with a
    PermissionError or OSError traceback, exit 1; now one line names the file, exit 3."""
    store = two_phase_run(tmp_path)
    done = read_only(store.root, "start", str(store.root), "--detach")
    assert done.returncode == 3, done.stderr
    assert done.stderr == f"error: {store.root / 'controller.log'}: Read-only file system\n"


def test_status_and_report_name_a_record_with_a_missing_parent(tmp_path):
    store = two_phase_run(tmp_path)
    record = json.loads(store.node_path(1).read_text())
    store.node_path(1).write_text(json.dumps({**record, "parent": 42}))
    report = cli("report", str(store.root))
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    status = cli("status", str(store.root))
    assert status.returncode == 0 and "best val 0.400 (node 0)" in status.stdout
    assert re.search(r"node 1 is left out of the search: .*0001/node.json: not a valid node "
                     r"record: parent 42 is no such node in this run", status.stdout)


def test_status_says_a_damaged_record_holds_back_the_sample_budget(tmp_path):
    """The samples and device-hours of a phase whose record cannot be read were counted as
    none; status showed the node left out, not that no phase may start until it is rebuilt."""
    store = two_phase_run(tmp_path, search={"budget_samples": 100000})
    store.node_path(1).write_text('{"schema_version": 1, "id": 1')
    status = cli("status", str(store.root))
    assert status.returncode == 0, status.stderr
    assert (f"warning: node 1's record cannot be read, so what it used of the budget is unknown: "
            f"no phase is created until it is rebuilt (llmzero-repair {store.root} 1)"
            ) in status.stdout
    data = json.loads(cli("status", str(store.root), "--json").stdout)
    assert data["budget_closed"].startswith("node 1's record cannot be read")
    store.rebuild_node(1)
    assert json.loads(cli("status", str(store.root), "--json").stdout)["budget_closed"] is None


def test_stop_cancel_names_a_local_phase_that_runs_as_another_user(tmp_path):
    """A colleague's `llmzero-stop --cancel` on the group's run without Slurm (local
    processes) met a phase the owner started: os.kill raised PermissionError, a traceback
    with exit 1. Now the job is named with its owner, exit 5, as scancel refuses one."""
    marker = SUPERVISOR   # what makes a pid a local job's supervisor
    if os.geteuid() or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run a job as another user and a stop without "
                    "the right to signal it")
    store = two_phase_run(tmp_path)
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"lr": 1e-4}, status=Status.RUNNING,
                                  submission=Submission("t1", "1")))
    owner = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              "--", "sh", "-c", "sleep 120; :", marker,
                              str(store.root / "local-jobs"), "1"])
    try:
        wait_for(lambda: marker.encode() in Path(f"/proc/{owner.pid}/cmdline").read_bytes(),
                 10, "the other user's job")
        (store.root / "local-jobs").mkdir()
        write_json(store.root / "local-jobs" / "jobs.json", {"next_id": 2, "jobs": {"1": {
            "token": "t1", "script": "phase.sbatch", "name": "llmz-demo-0002-scratch",
            "output": str(tmp_path / "slurm-1.out"), "submit_dir": str(tmp_path),
            "time_limit_s": 600, "cpus_per_task": "1", "submitted_at": time.time(),
            "supervisor_pid": owner.pid}}})
        env = {**os.environ, "LLMZERO_PYTHON": sys.executable}
        done = subprocess.run(["setpriv", "--bounding-set=-kill", "--",
                               str(ROOT / "bin" / "llmzero-stop"), str(store.root), "--cancel"],
                              capture_output=True, text=True, env=env, timeout=120)
        assert owner.poll() is None            # still running: it was not ours to stop
    finally:
        owner.kill()
        owner.wait()
    assert done.returncode == 5, done.stderr
    assert done.stderr == (f"error: cancelling job 1: its process {owner.pid} runs as "
                           f"{pwd.getpwuid(65534).pw_name}; only that user (or root) can "
                           "cancel it\n")


def test_a_colleague_stops_a_run_whose_owner_once_submitted_its_controller(tmp_path):
    """`llmzero-start --submit` leaves controller-key/ (mode 0700) in the run. A colleague's
    `llmzero-stop` then failed on removing the key there (Permission denied) before it
    cancelled the controller jobs, the phases or the monitor; it now goes on."""
    if os.geteuid() or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to act as a user who may not enter the folder")
    store = two_phase_run(tmp_path)
    private = store.root / "controller-key"
    private.mkdir(mode=0o700)
    os.chown(private, 65534, 65534)          # the owner's, who submitted the controller
    env = {**os.environ, "LLMZERO_PYTHON": sys.executable}
    done = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--",
                           str(ROOT / "bin" / "llmzero-stop"), str(store.root)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout == "no controller is running for this run\n"


def test_stop_cancel_with_no_controller_cancels_the_phases_itself(tmp_path, tiny_program):
    """Issue 14.8: it used to cancel nothing and exit 0. Audit D4: after a controller killed
    between an sbatch and recording its job id, it missed that phase (status `submitting`),
    left the monitor job running and the LLM key file on disk."""
    store = RunStore.create(tmp_path / "run", parse_config({"name": "demo", "scheduler": "local"}))
    sched = LocalScheduler(store.root / "local-jobs")
    jobs = local_phases(store, tiny_program, [200, 200])
    for node_id in (0, 1):
        wait_for(store.node_dir(node_id).metrics_file.exists, 30, "the first step")
    store.update_node(0, lambda n: (setattr(n.submission, "job_id", jobs[0]),   # 1: never recorded
                                    setattr(n, "status", Status.RUNNING)))
    # The monitor job (a process standing for it: its command line names submitit's local job
    # and its folder) and the key handed over to it, as a controller killed -9 leaves them.
    (store.root / "monitor").mkdir()
    key = store.root / "monitor" / "llm-key.json"
    key.write_text(json.dumps({"name": "ANTHROPIC_API_KEY", "value": "sk-left-behind"}))
    monitor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)",
                                CALL_MODULE, str(store.root / "monitor" / "%j")])
    try:
        (store.root / "monitor" / "monitor.json").write_text(json.dumps({"job_id": monitor.pid}))
        stop = cli("stop", str(store.root))      # the monitor and the key go with the controller
        assert stop.returncode == 0 and f"cancelled the monitor job {monitor.pid}" in stop.stdout
        assert monitor.wait(30) is not None and not key.exists()
        assert all(sched.states([j])[j].status is Status.RUNNING for j in jobs)
        stop = cli("stop", str(store.root), "--cancel")
        assert stop.returncode == 0
        assert f"cancelled 2 queued or running phase(s): jobs {jobs[0]}, {jobs[1]}" in stop.stdout
        assert all(finish(sched, j).status is Status.CANCELLED for j in jobs)
    finally:
        monitor.kill()
        monitor.wait()



def test_stop_cancel_with_no_controller_ends_a_phase_cancelled_while_queued(tmp_path):
    """Review: a phase cancelled before its job started stayed `queued`: its job writes no
    status.json when cancelled pending, and a cluster without accounting soon forgets it, so
    the next llmzero-start failed it as LOST (against the budget and the parent's score).
    Now it ends CANCELLED at once; a job that had started (its claim written, the controller
    not yet told) is left to the status.json its trap writes."""
    from llmzero_slurm.job_names import node_job_name
    store = RunStore.create(tmp_path / "run", parse_config({"name": "demo", "scheduler": "local"}))
    sched = LocalScheduler(store.root / "local-jobs")
    jobs = []
    for node_id in (0, 1):      # each a job that has not run the phase's script yet
        node = store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"total_training_steps": 9},
                                             status=Status.QUEUED))
        script = store.node_dir(node_id).path / "held.sbatch"
        script.write_text(f"#!/bin/bash\n#SBATCH --job-name={node_job_name('demo', node)}\n"
                          f"#SBATCH --comment=token=t{node_id}\n#SBATCH --time=00:05:00\n"
                          f"#SBATCH --output={tmp_path}/slurm-%j.out\nsleep 300\n")
        jobs.append(sched.submit(script, f"t{node_id}"))
        store.update_node(node_id, lambda n: setattr(n, "submission",
                                                     Submission(f"t{n.id}", jobs[-1])))
    store.node_dir(1).claim_file.write_text(jobs[1])      # this one has just started
    stop = cli("stop", str(store.root), "--cancel")
    assert stop.returncode == 0, stop.stderr
    assert all(finish(sched, j).status is Status.CANCELLED for j in jobs)
    queued, started = store.load_tree()
    assert (queued.status, queued.submission.scheduler_state, queued.submission.reason) == \
        (Status.CANCELLED, "CANCELLED", "cancelled by llmzero-stop before it started")
    assert started.status is Status.QUEUED

def test_stop_sees_a_controller_that_dies_before_acting_on_the_request(tmp_path):
    """Review: a controller killed while llmzero-stop waited left its lease file: stop waited
    the whole --wait, said "controller still running" and left the phases and the key."""
    store = two_phase_run(tmp_path)
    key = store.root / "controller-key" / "llm-key.json"
    key.parent.mkdir()
    key.write_text("{}")
    holder = subprocess.Popen([sys.executable, "-c",
        "import os, signal, sys, time\n"
        "from llmzero_slurm.controller.lease import Lease\n"
        "from llmzero_slurm.store.run_store import RunStore\n"
        f"Lease(RunStore.open({str(store.root)!r})).acquire()\n"
        # dies once the request is there (a fixed sleep: a stop slow to start on a loaded
        # machine found the controller already gone, and said so)
        f"while not os.path.exists({str(store.root / 'stop.json')!r}): time.sleep(0.05)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"], cwd=ROOT)
    wait_for(lambda: (store.root / "controller.json").exists(), 60, "the controller's lease")
    env = {**os.environ, "LLMZERO_PYTHON": sys.executable}
    started = time.monotonic()
    stop = subprocess.Popen([str(ROOT / "bin" / "llmzero-stop"), str(store.root), "--wait", "90"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    holder.wait(60)                    # reaped: its pid is gone, its lease file stays
    out, err = stop.communicate(timeout=120)
    assert time.monotonic() - started < 60, out + err
    assert "ended without acting on the stop request" in out, out + err
    assert "still running" not in out and stop.returncode == 0, out + err
    assert not key.exists() and not (store.root / "stop.json").exists()


def test_stop_waits_on_through_a_lease_it_cannot_read(tmp_path, monkeypatch, capsys):
    """Review of the change above: a lease that could not be read for a moment (EIO on a
    network filesystem) stood in for the holder, so its dead-looking pid (here: a pid no
    process has) ended the wait as if the controller had died, cancelling the monitor and
    withdrawing the key of a controller that was alive. A read that fails tells nothing."""
    from llmzero_slurm.cli import stop
    from llmzero_slurm.controller.lease import Lease
    from llmzero_slurm.errors import StateError
    store = two_phase_run(tmp_path)
    info = {"token": "t-live", "host": os.uname().nodename, "pid": 2 ** 22 + 1}
    monkeypatch.setattr(stop, "request_stop", lambda store, cancel: info)

    def unreadable(self):
        raise StateError(self.path, "Input/output error")
    monkeypatch.setattr(Lease, "read", unreadable)
    assert stop.main([str(store.root), "--wait", "2"]) == 1
    out = capsys.readouterr().out
    assert "controller still running after 2 s" in out and "ended without" not in out, out


def test_a_run_that_lost_its_meta_json_is_named_damaged_and_repair_rebuilds_it(tmp_path):
    """Review: a deleted meta.json made status, stop, report and repair say "not a run
    directory; start one with llmzero-start", and llmzero-start "not a run directory"."""
    store = two_phase_run(tmp_path)
    (store.root / "meta.json").unlink()
    for name in ("status", "report", "stop", "start"):
        done = cli(name, str(store.root))
        assert done.returncode == 3 and "Traceback" not in done.stderr, (name, done.stderr)
        assert f"llmzero-repair {store.root} rebuilds meta.json" in done.stderr, done.stderr
    repair = cli("repair", str(store.root))
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert "meta.json: missing; rebuilt from the node folders (next node id 2)" in repair.stdout
    assert "kept beside it" not in repair.stdout and not list(store.root.glob("meta.json.damaged-*"))
    assert cli("status", str(store.root)).returncode == 0


def test_status_and_stop_with_a_damaged_stop_request(tmp_path):
    """Audit: a torn stop.json. Status and stop carry on; a stop for a live controller keeps
    the damaged file (moved aside, said in one line) instead of writing over it."""
    from llmzero_slurm.controller.lease import Lease
    store = two_phase_run(tmp_path)
    (store.root / "stop.json").write_bytes(b'{"cancel": tr')
    assert cli("status", str(store.root)).returncode == 0
    done = cli("stop", str(store.root))
    assert done.returncode == 0 and "no controller is running" in done.stdout, done.stderr
    holder = Lease(store)
    holder.acquire()                      # a live controller: this test process
    try:
        done = cli("stop", str(store.root), "--wait", "0")
    finally:
        holder.release()
    assert done.returncode == 0, done.stderr
    [kept] = store.root.glob("stop.json.damaged-*")
    assert kept.read_bytes() == b'{"cancel": tr'
    assert "stop.json cannot be read (corrupt JSON (line 1, column 12)" in done.stdout
    assert f"moved to {kept}" in done.stdout
    assert json.loads((store.root / "stop.json").read_text())["token"] == holder.token


def test_repair_of_a_node_that_does_not_exist_says_so(tmp_path):
    """Audit: `llmzero-repair RUN 99` said node 99 "cannot be rebuilt" (exit 3)."""
    store = two_phase_run(tmp_path)
    done = cli("repair", str(store.root), "0", "99", "-1")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == f"error: no node 99 or -1 in {store.root} (its nodes: 0-1)\n"
    assert done.stdout == ""                       # nothing done before the arguments are right
    empty = RunStore.create(tmp_path / "empty", parse_config({"name": "e", "scheduler": "local"}))
    done = cli("repair", str(empty.root), "3")
    assert done.returncode == 2 and f"no node 3 in {empty.root} (it has no nodes yet)" in done.stderr


@pytest.mark.parametrize("port", ["abc", "80", "1023", "65535", "99999", "6817x", "08000", "-1"])
def test_the_local_cluster_script_refuses_a_bad_port(tmp_path, port):
    """Audit: LLMZERO_SLURM_PORT=abc failed with bash's "abc: unbound variable"."""
    script = str(ROOT / "bin" / "llmzero-local-slurm")
    env = {**os.environ, "LLMZERO_SLURM_PORT": port, "LLMZERO_SLURM_DIR": str(tmp_path)}
    done = subprocess.run([script, "env"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("llmzero-local-slurm: LLMZERO_SLURM_PORT must be a whole number from "
                           f"1024 to 65534 (slurmd takes the port after it), got '{port}'\n")
    good = subprocess.run([script, "env"], capture_output=True, text=True, timeout=60,
                          env={**env, "LLMZERO_SLURM_PORT": "6900"})
    assert good.returncode == 0 and good.stdout == f"export SLURM_CONF={tmp_path}/slurm.conf\n"


def test_status_and_stop_name_the_last_controller_job_when_slurm_is_down(tmp_path, slurm_down):
    """With no controller holding the run and Slurm not answering, whether a submitted
    controller job still waits is unknown: both say so rather than "not running" alone."""
    store = two_phase_run(tmp_path)
    (store.root / "controller-jobs.json").write_text(json.dumps({"jobs": [
        {"job_id": "4241", "submitted_at": 1.0}, {"job_id": "4242", "submitted_at": 2.0}]}))
    said = "Slurm did not answer: controller job 4242, the last submitted, may still wait in its queue"
    status = cli("status", str(store.root))
    assert status.returncode == 0 and "controller not running" in status.stdout, status.stderr
    assert f"note: {said}\n" in status.stdout
    stop = cli("stop", str(store.root))
    assert stop.returncode == 0 and f"note: {said}\n" in stop.stdout, stop.stderr


def test_a_stop_cancel_without_a_controller_names_every_job_left_when_slurm_is_down(
        tmp_path, slurm_down, monkeypatch, capsys):
    """Walkthrough: `llmzero-stop RUN --cancel` with Slurm not answering (SLURM_CONF unset)
    printed "cancelled 0 queued or running phase(s)" and then only the monitor's squeue error:
    the phase job it could not cancel, the one still running, was never named."""
    from llmzero_slurm.cli import stop
    from llmzero_slurm.schedulers import SlurmScheduler
    monkeypatch.setattr(SlurmScheduler, "_pause", lambda self, seconds: None)   # retries at once
    store = RunStore.create(tmp_path / "run", parse_config({"name": "demo", "scheduler": "slurm"}))
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"lr": 1e-3}, status=Status.RUNNING,
                                  submission=Submission(token="t0", job_id="4242")))
    (store.root / "monitor").mkdir(exist_ok=True)
    write_json(store.root / "monitor" / "monitor.json", {"job_id": "4243", "kind": "slurm"})
    assert stop.main([str(store.root), "--cancel"]) == 5
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2, errors
    assert errors[0].startswith("error: cancelling job 4242 (llmz-demo-0000-scratch): scancel "
                                "kept failing"), errors
    assert errors[1].startswith("error: the monitor job 4243 may still run: polling jobs"), errors


def test_a_stop_without_a_controller_goes_on_past_a_refused_controller_job(tmp_path, monkeypatch):
    """Review: in a run a group shares, scancel refused the controller job a colleague had
    submitted (Access/permission denied), and llmzero-stop ended there with a traceback: the
    other controller job stayed queued, the LLM key on disk, --cancel cancelled no phase and
    the monitor job ran on. Now all is done, the refusal named, exit 5."""
    denied = "scancel: error: Kill job error on job id 4241: Access/permission denied"
    slurm_clients(tmp_path, monkeypatch,
                  squeue='for j in 4241 4242; do echo "$j|PENDING|None|0|llmz:controller"; done',
                  scancel=f'case "$*" in *4241*) echo "{denied}" >&2; exit 1;; esac\n'
                          f'echo "$*" >>{tmp_path}/cancelled')
    store = two_phase_run(tmp_path)
    (store.root / "controller-jobs.json").write_text(json.dumps({"jobs": [
        {"job_id": "4241", "submitted_at": 1.0}, {"job_id": "4242", "submitted_at": 2.0}]}))
    key = store.root / "controller-key" / "llm-key.json"
    key.parent.mkdir()
    key.write_text(json.dumps({"name": "ANTHROPIC_API_KEY", "value": "sk-left-behind"}))
    monitor = subprocess.Popen(["sh", "-c", "sleep 300; :", CALL_MODULE,
                                str(store.root / "monitor" / "%j")])
    try:
        (store.root / "monitor").mkdir()
        (store.root / "monitor" / "monitor.json").write_text(json.dumps({"job_id": monitor.pid}))
        stop = cli("stop", str(store.root), "--cancel")
        assert stop.returncode == 5, stop.stdout + stop.stderr
        assert monitor.wait(30) is not None and f"cancelled the monitor job {monitor.pid}" in stop.stdout
    finally:
        monitor.kill()
        monitor.wait()
    assert stop.stderr == ("error: cancelling job 4241 (llmz-demo-controller): scancel failed "
                           f"(exit 1): {denied}\n")
    assert "cancelled controller job 4242 PENDING, not started yet\n" in stop.stdout
    assert (tmp_path / "cancelled").read_text() == "--name=llmz-demo-controller 4242\n"
    assert "cancelled 0 queued or running phase(s)\n" in stop.stdout and not key.exists()


def test_the_controller_job_gets_the_llm_key_through_a_private_file(tmp_path, monkeypatch):
    """Audit F3: `--submit` sent the controller job the whole environment, the key included,
    which slurmctld kept with the job (StateSaveLocation/hash.N/job.N/environment) and slurmdbd
    keeps where a site stores job environments. The job takes the key from a file only the user
    can read, on every start, until the search ends."""
    from llmzero_slurm.controller import controller_job
    key = "sk-ant-test-5556667778"
    slurm_clients(tmp_path, monkeypatch, sbatch=f"env >{tmp_path}/sbatch-env\necho 4242")
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    store = two_phase_run(tmp_path, search={"budget_iterations": 2},
                          agents={"backend": "anthropic"})
    assert controller_job.submit_controller(store, ["true"], event=lambda line: None) == "4242"
    assert key not in (tmp_path / "sbatch-env").read_text()
    kept = store.root / controller_job.KEY_DIR / "llm-key.json"
    assert kept.stat().st_mode & 0o777 == 0o600 and key in kept.read_text()
    monkeypatch.delenv("ANTHROPIC_API_KEY")        # the job's start: no key in its environment
    controller_job.take_key(store)
    assert os.environ["ANTHROPIC_API_KEY"] == key
    monkeypatch.delenv("ANTHROPIC_API_KEY")        # the test process's own, restored after
    done = cli("start", str(store.root))             # the search is over: the key goes
    assert done.returncode == 0, done.stdout + done.stderr
    assert not kept.exists()


def test_a_controller_script_submitted_by_hand_drops_the_runs_own_llm_key(tmp_path,
                                                                          monkeypatch):
    """The controller script drops credentials when submitted by hand, but was rendered
    without the run's LLM key variable: one no credential pattern matches (a gateway's
    `LLM_GATEWAY_PASS`) stayed in the job's environment, and its phases'."""
    from llmzero_slurm.controller import controller_job
    store = two_phase_run(tmp_path, agents={"api_key_env": "LLM_GATEWAY_PASS"})
    slurm_clients(tmp_path, monkeypatch, sbatch='echo 4244')
    assert controller_job.submit_controller(store, ["true"], event=lambda line: None) == "4244"
    script = (store.root / "controller.sbatch").read_text()
    assert "local -A named=([LLM_GATEWAY_PASS]=1)" in script
    assert "-u LLM_GATEWAY_PASS " in script          # and the hint to submit it by hand


@pytest.mark.parametrize("reason", ["JobHeldUser", "JobHeldAdmin", "job requeued in held state"])
def test_a_held_controller_job_is_said_to_wait_for_its_release(tmp_path, monkeypatch, reason):
    """Campaign walkthrough: a controller job held in the queue (scontrol hold, or requeuehold
    by an admin) was shown as 'not started yet', and a new --submit was refused because 'it
    resumes the run when it starts': a held job never starts until someone releases it."""
    from llmzero_slurm.controller import controller_job
    from llmzero_slurm.controller.lease import LeaseHeld
    store = two_phase_run(tmp_path)
    slurm_clients(tmp_path, monkeypatch,
                  squeue=f'echo "4242|PENDING|{reason}|0|llmz:controller"')
    (store.root / "controller-jobs.json").write_text(json.dumps({"jobs": [
        {"job_id": "4242", "submitted_at": 1.0}]}))
    status = cli("status", str(store.root))
    assert (f"controller job 4242 PENDING ({reason}), held: it starts only once released "
            f"(scontrol release 4242)\n") in status.stdout, status.stdout + status.stderr
    with pytest.raises(LeaseHeld, match=r"held: it starts only once released \(scontrol "
                                        r"release 4242\); it resumes the run when it starts"):
        controller_job.refuse_if_queued(store)
    slurm_clients(tmp_path, monkeypatch, scancel="true",
                  squeue=f'echo "4242|PENDING|{reason}|0|llmz:controller"')
    stop = cli("stop", str(store.root))
    assert f"cancelled controller job 4242 PENDING ({reason}), held\n" in stop.stdout, stop.stdout


@pytest.mark.parametrize("registered", [True, False])
def test_a_controller_job_whose_sbatch_answer_was_lost_is_found_by_its_token(
        tmp_path, monkeypatch, registered):
    """Review: sbatch "Socket timed out" may still have queued the controller job. It was not
    recorded, so llmzero-status said "controller not running", llmzero-stop left it queued,
    and it later resumed the run. Now it is looked up by the token in its --comment until
    slurmctld could have registered it (here on the third look, as a busy one does), and
    recorded when found; when not, the error stands."""
    from llmzero_slurm.controller import controller_job
    from llmzero_slurm.schedulers import SlurmScheduler
    monkeypatch.setattr(SlurmScheduler, "settle_s", 3.0)
    monkeypatch.setattr(SlurmScheduler, "least_poll_s", 0.5)   # the looks' spacing, scaled too
    store = two_phase_run(tmp_path)
    timed_out = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"
    script = store.root / "controller.sbatch"
    looks = tmp_path / "looks"
    slurm_clients(tmp_path, monkeypatch,
                  sbatch=f'echo "{timed_out}" >&2\n'
                         + (f"touch {tmp_path}/queued\n" if registered else "") + "exit 1",
                  squeue=f'echo x >>{looks}\n'
                         f'[ -e {tmp_path}/queued ] && [ "$(wc -l <{looks})" -ge 3 ] && '
                         'echo "4243|PENDING|None|0|'
                         f"$(sed -n 's/^#SBATCH --comment=//p' {script})\"\nexit 0")
    if not registered:
        with pytest.raises(SchedulerError, match="Socket timed out on send/recv operation"):
            controller_job.submit_controller(store, ["true"], event=lambda line: None)
        assert not (store.root / "controller-jobs.json").exists()
        return
    assert controller_job.submit_controller(store, ["true"], event=lambda line: None) == "4243"
    status = cli("status", str(store.root))
    assert "controller job 4243 PENDING, not started yet\n" in status.stdout, status.stderr


def test_a_controller_job_refused_for_a_submit_limit_is_not_looked_for(tmp_path, monkeypatch):
    """Review: a submit limit (QOSMaxSubmitJobPerUserLimit) is retryable but certain: no job
    was queued. The controller job's submission still looked for it by its token for settle_s
    and then said only "no job with its token showed", hiding the limit behind a minute's
    wait. Only an answer that leaves it unsure whether the job was queued is looked for."""
    from llmzero_slurm.controller import controller_job
    from llmzero_slurm.schedulers import SlurmScheduler
    monkeypatch.setattr(SlurmScheduler, "settle_s", 30.0)
    store = two_phase_run(tmp_path)
    limit = ("sbatch: error: QOSMaxSubmitJobPerUserLimit\n"
             "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
             "(job submit limit, user's size and/or time limits)")
    looks = tmp_path / "looks"
    slurm_clients(tmp_path, monkeypatch, sbatch=f'printf "{limit}\\n" >&2\nexit 1',
                  squeue=f'echo x >>{looks}\nexit 0')
    started = time.monotonic()
    with pytest.raises(SchedulerError, match="QOSMaxSubmitJobPerUserLimit") as caught:
        controller_job.submit_controller(store, ["true"], event=lambda line: None)
    assert caught.value.retryable and time.monotonic() - started < 10
    assert "no job with its token showed" not in str(caught.value)
    assert not looks.exists()
    assert not (store.root / "controller-jobs.json").exists()


def frozen_by_another_release(store: RunStore, data: dict, release: str = "0.1.9") -> None:
    """The run as another release froze it: experiment.yaml and its copy alike (it wrote
    both), meta.json naming that release; a file differing from its copy is a hand edit."""
    text = yaml.safe_dump(data, sort_keys=False)
    for name in ("experiment.yaml", "experiment.yaml.bak"):
        (store.root / name).write_text(text)
    meta = store.root / "meta.json"
    write_json(meta, {**json.loads(meta.read_text()), "created_by": release})


@pytest.mark.parametrize("name", ["status", "report", "stop", "start"])
def test_a_frozen_config_this_release_refuses_is_named_as_the_runs(tmp_path, name):
    """Audit (upgrades): a run frozen by another release (here a newer one, with a key this
    one lacks) stopped every command with 'config key ...: unknown key', as if the user had
    mistyped a file: no word of the run's experiment.yaml, of releases, or of what to do."""
    store = two_phase_run(tmp_path)
    frozen = store.root / "experiment.yaml"
    data = yaml.safe_load(frozen.read_text())
    data["search"]["budget_tokens"] = 5                 # what a later release might add
    frozen_by_another_release(store, data, "9.9.9")
    done = cli(name, str(store.root))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{frozen}, this run's configuration as frozen when it started, is refused" in done.stderr
    assert "config key 'search.budget_tokens': unknown key" in done.stderr
    assert "written by a newer release: read, stop and resume the run with that one" in done.stderr
    assert yaml.safe_load(frozen.read_text()) == data   # nothing rewritten


def test_a_key_an_older_release_froze_and_this_one_dropped_is_not_called_newer(tmp_path):
    """Walkthrough (upgrades): a run an older release created, resumed with a newer one that
    no longer has one of its keys, was told the key 'was written by a newer release: read,
    stop and resume the run with that one (llmzero-slurm 0.1.9) or a later one', this one
    being later. It names the older release as the one that reads the run."""
    store = two_phase_run(tmp_path)
    data = yaml.safe_load((store.root / "experiment.yaml").read_text())
    data["search"]["budget_tokens"] = 5                 # a key this release has dropped
    frozen_by_another_release(store, data, "0.1.9")
    done = cli("status", str(store.root))
    assert done.returncode == 2 and "newer release" not in done.stderr, done.stderr
    assert "A key unknown here is one this release no longer has: read, stop and resume the " \
           "run with llmzero-slurm 0.1.9." in done.stderr


def test_a_hand_edited_frozen_config_is_named_as_an_edit_and_can_be_stopped_and_repaired(
        tmp_path):
    """Review: a typo'd key in the frozen experiment.yaml (which the README invites editing)
    locked out every command, llmzero-stop and -repair included, blaming "a newer release"
    when the run's own release, the current one, had written it."""
    store = two_phase_run(tmp_path, search={"budget_iterations": 4})
    frozen = store.root / "experiment.yaml"
    frozen.write_text(frozen.read_text().replace("budget_iterations", "budget_iteratons"))
    status = cli("status", str(store.root))
    assert status.returncode == 2 and "Traceback" not in status.stderr
    assert "edited" in status.stderr and "newer release" not in status.stderr
    assert "search.budget_iteratons" in status.stderr and str(frozen) in status.stderr
    assert f"llmzero-repair {store.root}" in status.stderr
    stop = cli("stop", str(store.root))
    assert stop.returncode == 0 and "no controller is running" in stop.stdout, stop.stderr
    repair = cli("repair", str(store.root))
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert "experiment.yaml.bak" in repair.stdout
    assert "budget_iteratons" not in frozen.read_text()
    assert cli("status", str(store.root)).returncode == 0


def test_a_yaml_syntax_error_in_the_frozen_config_is_an_edit_the_run_still_stops_on(tmp_path):
    """Walkthrough: `name: [` typed into the frozen experiment.yaml made llmzero-stop refuse
    (exit 3, "cannot be read") though the README promises a run refused after a hand edit is
    still stopped from the copy; a typo'd key was. A syntax error in a file that differs from
    a readable copy is that edit: named as one, stopped from the copy, put back by repair."""
    store = two_phase_run(tmp_path)
    frozen = store.root / "experiment.yaml"
    edited = frozen.read_text().replace("name: demo", "name: [", 1)
    frozen.write_text(edited)
    for name in ("status", "report"):
        done = cli(name, str(store.root))
        assert done.returncode == 2 and "Traceback" not in done.stderr, (name, done.stderr)
        assert "was edited since the run started" in done.stderr and "not valid YAML" in done.stderr
        assert f"llmzero-repair {store.root}" in done.stderr
    stop = cli("stop", str(store.root))
    assert stop.returncode == 0 and "no controller is running" in stop.stdout, stop.stderr
    assert "stopping the run as experiment.yaml.bak has it" in stop.stderr
    assert frozen.read_text() == edited     # nothing rewritten but by repair
    repair = cli("repair", str(store.root))
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert "put back from experiment.yaml.bak" in repair.stdout
    assert frozen.read_text() == (store.root / "experiment.yaml.bak").read_text()
    [kept] = store.root.glob("experiment.yaml.damaged-*")
    assert kept.read_text() == edited
    assert cli("status", str(store.root)).returncode == 0


def test_a_run_records_the_release_that_created_it_for_status_report_and_upgrades(tmp_path):
    """The version stayed 0.1.0 whatever the release (setup.cfg kept a copy of its own), and
    no run recorded which release created it: status and the report could not say a run was
    another release's, and a frozen config a newer release wrote only said to use "that one".
    setup.cfg now reads the one version; meta.json records the creating release (older runs,
    without it, still read), status notes a run of another release, the report names it, and
    the message for a refused frozen config names the release to use."""
    from setuptools.config.setupcfg import read_configuration
    import llmzero_slurm
    version = llmzero_slurm.__version__
    assert read_configuration(ROOT / "setup.cfg")["metadata"]["version"] == version
    store = two_phase_run(tmp_path)
    meta = store.root / "meta.json"
    assert json.loads(meta.read_text())["created_by"] == version
    shown = cli("status", str(store.root))
    assert shown.returncode == 0 and "note: this run was created by" not in shown.stdout
    assert json.loads(cli("status", str(store.root), "--json").stdout)["created_by"] == version
    assert cli("report", str(store.root)).returncode == 0
    page = (store.root / "report" / "index.html").read_text()
    assert f"run created by llmzero-slurm {version}" in page
    record = json.loads(meta.read_text())
    write_json(meta, {k: v for k, v in record.items() if k != "created_by"})   # an older run
    shown = cli("status", str(store.root))
    assert shown.returncode == 0, shown.stderr
    assert "note: this run was created by a release its meta.json does not name (as before " \
           f"llmzero-slurm 0.2.0); this is llmzero-slurm {version}" in shown.stdout
    data = yaml.safe_load((store.root / "experiment.yaml").read_text())
    data["search"]["budget_tokens"] = 5
    frozen_by_another_release(store, data, "9.9.9")                             # a newer one's
    done = cli("start", str(store.root))
    assert done.returncode == 2, done.stderr
    assert "It was accepted by llmzero-slurm 9.9.9, which started the run. A key unknown here " \
           "was written by a newer release: read, stop and resume the run with that one " \
           "(llmzero-slurm 9.9.9) or a later one." in done.stderr


def test_a_resume_says_another_release_created_the_run(tmp_path):
    """Resuming an older release's run with a newer one said nothing of it (only
    llmzero-status did), though its plan, defaults and job programs may differ from those the
    run's phases ran with."""
    import llmzero_slurm
    store = two_phase_run(tmp_path, search={"budget_iterations": 2})
    meta = store.root / "meta.json"
    write_json(meta, {**json.loads(meta.read_text()), "created_by": "0.1.9"})
    done = cli("start", str(store.root))
    assert done.returncode == 0, done.stderr
    assert "note: this run was created by llmzero-slurm 0.1.9; this is llmzero-slurm " \
           f"{llmzero_slurm.__version__}\n" in done.stdout


def test_records_of_a_newer_release_are_named_as_such_not_as_damage(tmp_path):
    """Audit (upgrades): a colleague's older install met a newer release's records: meta.json
    was 'schema_version 2 is not supported ...; use the matching release' (which one?), and a
    node record with a field it lacks was 'not a valid node record' beside the advice to run
    llmzero-repair, which cannot mend it. Each now says a newer release wrote it."""
    store = two_phase_run(tmp_path)
    record = json.loads(store.node_path(1).read_text())
    store.node_path(1).write_text(json.dumps({**record, "lineage": [0]}))
    status = cli("status", str(store.root))
    assert status.returncode == 0, status.stderr
    assert re.search(r"node 1 is left out of the search: .*0001/node.json: not a valid node "
                     r"record: unknown field lineage, which this llmzero-slurm \(.*\) does not "
                     r"know: a newer release wrote it \(read the run with that one\)", status.stdout)
    meta = store.root / "meta.json"
    write_json(meta, {**json.loads(meta.read_text()), "schema_version": 2})
    for name in ("status", "report", "stop", "start"):
        done = cli(name, str(store.root))
        assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
        assert "meta.json: schema_version 2 is from a newer llmzero-slurm" in done.stderr
        assert "not damaged and llmzero-repair cannot change it: read this run with that " \
               "release or a later one" in done.stderr


def test_a_run_frozen_with_a_value_a_later_release_refuses_can_still_be_read(tmp_path):
    """Audit (upgrades): a check made stricter by an upgrade refused the frozen experiment.yaml
    of a run the older release had accepted, and with it every command: status, report, stop
    and repair exited 2, so the run could not even be reported or stopped. Those now read it
    as it is, with a warning naming the value; a resume says what to change, and what works."""
    store = two_phase_run(tmp_path)
    frozen = store.root / "experiment.yaml"
    data = yaml.safe_load(frozen.read_text())
    data["slurm"]["time"] = "forever"                   # refused here, say by a newer check
    frozen_by_another_release(store, data)
    refused = "config key 'slurm.time': 'forever' is not a Slurm time"
    for name, args, says in (("status", (), "best val 0.500 (node 1: 0 -> 1)"),
                             ("report", (), "report: "), ("stop", ("--cancel",), "no controller"),
                             ("repair", (), "nothing to rebuild")):
        done = cli(name, str(store.root), *args)
        assert done.returncode == 0 and says in done.stdout, done.stderr
        assert f"warning: {frozen}, this run's configuration as frozen when it started, holds " \
               "values this llmzero-slurm" in done.stderr and refused in done.stderr
    assert (store.root / "report" / "index.html").exists()
    resume = cli("start", str(store.root))
    assert resume.returncode == 2 and "Traceback" not in resume.stderr, resume.stderr
    assert refused in resume.stderr and "set it in that file to one it accepts to resume with " \
        "this release (llmzero-status, -report and -stop read the run as it is)" in resume.stderr
    assert yaml.safe_load(frozen.read_text()) == data   # nothing rewritten


def test_a_command_waiting_on_a_held_run_lock_says_so_then_what_to_do(tmp_path):
    """Issue: llmzero-stop (as -repair and -start) waited up to state.lock_timeout_s on a
    tree.lock another process held, silent, as if hung, then said only "still held by another
    process". The wait is said within seconds, naming the file and its holder; the timeout
    says who may hold it and what to do."""
    store = two_phase_run(tmp_path, state={"lock_timeout_s": 6})
    lock = store.root / "tree.lock"
    with flock_held(lock) as holder:
        stop = subprocess.Popen([str(ROOT / "bin" / "llmzero-stop"), str(store.root)],
                                env={**os.environ, "LLMZERO_PYTHON": sys.executable},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        notice = stop.stderr.readline()
        assert stop.poll() is None, notice      # said while it waits
        out, err = stop.communicate(timeout=120)
    held_by = f"held by pid {holder.pid} on this host ({sys.executable} -c import fcntl"
    assert notice.startswith(f"waiting for the lock {lock}, {held_by}"), notice
    assert notice.endswith("(giving up after 6 s)\n")
    assert stop.returncode == 4 and "Traceback" not in err, err
    assert err.startswith(f"error: {lock}: still held after 6 s by pid {holder.pid} on this host")
    assert "another llmzero command or a controller of this run is using it; try again once it " \
           "is done (llmzero-status names a running controller)" in err


def test_a_hand_edited_value_this_release_refuses_is_named_as_the_edit_and_repaired(tmp_path):
    """Issue: a value typed by hand into the frozen experiment.yaml that this release refuses
    was read leniently by status, report and stop with a warning that blamed another release
    ("read as the release that started the run accepted them"), and llmzero-repair left the
    file as it was. The warning now names the edit, the refused value and the way back, and
    llmzero-repair puts back the copy frozen with the run, keeping the edited file."""
    store = two_phase_run(tmp_path)
    frozen = store.root / "experiment.yaml"
    data = yaml.safe_load(frozen.read_text())
    data["slurm"]["time"] = "forever"
    frozen.write_text(yaml.safe_dump(data, sort_keys=False))
    refused = "config key 'slurm.time': 'forever' is not a Slurm time"
    for name, args in (("status", ()), ("report", ()), ("stop", ("--cancel",))):
        done = cli(name, str(store.root), *args)
        assert done.returncode == 0, done.stderr
        assert f"warning: {frozen}, this run's frozen configuration, was edited since the run " \
               "started and holds values this llmzero-slurm" in done.stderr, done.stderr
        assert refused in done.stderr and "release that started the run" not in done.stderr
        assert f"`llmzero-repair {store.root}` puts back experiment.yaml.bak" in done.stderr
    repair = cli("repair", str(store.root))
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert "put back from experiment.yaml.bak" in repair.stdout and "warning" not in repair.stderr
    assert frozen.read_text() == (store.root / "experiment.yaml.bak").read_text()
    kept = [p for p in store.root.iterdir() if p.name.startswith("experiment.yaml.damaged-")]
    assert len(kept) == 1 and "forever" in kept[0].read_text()   # the edit is not lost
    status = cli("status", str(store.root))
    assert status.returncode == 0 and status.stderr == "", status.stderr


def test_a_frozen_state_value_this_release_refuses_is_named_not_a_traceback(tmp_path):
    """The run's lock is made from `state:`: a value refused there cannot be read past (an
    unknown lock kind was a ValueError traceback once the rest of the file was read on)."""
    store = two_phase_run(tmp_path)
    frozen = store.root / "experiment.yaml"
    data = yaml.safe_load(frozen.read_text())
    data["state"]["lock"] = "nfs"
    frozen.write_text(yaml.safe_dump(data, sort_keys=False))
    for name in ("status", "report"):
        done = cli(name, str(store.root))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "config key 'state.lock': must be 'flock' or 'soft'" in done.stderr


def test_a_controller_says_when_its_install_is_upgraded_under_it(tmp_path):
    """Audit (upgrades): an upgrade in place (pip, git pull) under a running controller left it
    running its old code with the new templates and job programs; the one sign was 'report not
    updated: UndefinedError: 'best_adapter' is undefined' after every phase. It now says that
    its files changed, once, and how to run the search on one release."""
    install = tmp_path / "install"            # a release of its own, upgraded below
    for name in ("llmzero_slurm", "templates", "jobs", "bin"):
        shutil.copytree(ROOT / name, install / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    config = tmp_path / "experiment.yaml"
    config.write_text(yaml.safe_dump({
        "name": "up", "scheduler": "local", "task": {"builtin": "addition"},
        "hparams": {"total_training_steps": 1000, "save_freq": 1000, "test_freq": 1000},
        "search": {"method": "practitioner", "poll_interval_s": 1},
        "agents": {"backend": "heuristic"}}))
    run, log = tmp_path / "run", tmp_path / "controller.log"
    env = {**os.environ, "LLMZERO_PYTHON": sys.executable}
    env.pop("ANTHROPIC_API_KEY", None)
    with open(log, "w") as out:
        controller = subprocess.Popen([str(install / "bin" / "llmzero-start"), str(config),
                                       "--run-dir", str(run)], stdout=out, stderr=out, env=env,
                                      cwd=tmp_path)   # python -m puts the working folder first
    try:
        wait_for(lambda: "submitted as job" in log.read_text(), 120, "the phase's submission")
        template = install / "templates" / "report" / "index.html.j2"
        template.write_text(template.read_text() + "{# the next release #}\n")
        said = "llmzero-slurm's files changed under this controller (an upgrade?)"
        wait_for(lambda: said in log.read_text(), 30, "the controller to say so")
        assert f"llmzero-stop {run}, then llmzero-start {run}" in log.read_text()
    finally:
        cli("stop", str(run), "--cancel", "--wait", "60")
        controller.wait(60)
    assert log.read_text().count(said) == 1


def test_a_local_call_job_leads_its_own_session_and_logs_where_slurm_would(tmp_path):
    """Walkthrough: the local monitor ran in the controller's process group (a terminal's
    Ctrl-C reached it too) and left an empty folder literally named %j beside its log folder."""
    sched = LocalScheduler(tmp_path / "run" / "local-jobs")
    folder = tmp_path / "run" / "monitor"
    job_id = sched.submit_call(time.sleep, [300], folder / "%j", CallJob("m", 5))
    try:
        pid = int(job_id)
        wait_for(lambda: list((folder / job_id).glob("*_log.out")), 60, "the call job's log")
        assert os.getsid(pid) == pid != os.getsid(0)
        assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [job_id]
    finally:
        sched.cancel_call(job_id, "m")


def test_ctrl_c_on_a_foreground_local_start_stops_it_without_a_traceback(tmp_path):
    """Walkthrough: Ctrl-C on a foreground `llmzero-start` of a local run printed the
    controller's stop lines, then a KeyboardInterrupt traceback from the monitor's submitit
    process, which shared the terminal's process group. The signal goes to the whole group,
    as a terminal sends it."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "name": "ctrl-c", "backend": "cpu", "scheduler": "local", "task": {"builtin": "addition"},
        "search": {"method": "llmzero", "budget_iterations": 1, "concurrency": 1, "poll_interval_s": 1},
        "agents": {"backend": "heuristic"}}))
    run = tmp_path / "run"
    env = {**os.environ, "LLMZERO_PYTHON": sys.executable, "LLMZERO_CACHE": str(tmp_path / "cache")}
    env.pop("ANTHROPIC_API_KEY", None)
    proc = subprocess.Popen([str(ROOT / "bin" / "llmzero-start"), str(config), "--run-dir", str(run)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        wait_for(lambda: list((run / "monitor").glob("*/*_log.out")), 120, "the monitor job")
        wait_for(lambda: list((run / "nodes").glob("*/status.json")), 120, "a phase")
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        cli("stop", str(run), "--cancel")
    assert proc.returncode == 130, out + err
    assert "Traceback" not in out + err and "keep running" in out + err, out + err
    logs = "".join(p.read_text() for p in (run / "monitor").glob("*/*_log.*"))
    assert "Traceback" not in logs, logs


def test_a_moved_run_has_its_scripts_follow_it_on_start_and_repair(tmp_path):
    """Walkthrough: a run moved or copied (tar, cp), as the README allows, kept phase scripts
    naming the folder it came from, so one rerun by hand wrote into the original run. Started
    or repaired where it is now, its scripts name that folder; nothing else in them, and no
    other file, changes; the original's scripts are left as they are."""
    from llmzero_slurm.render import PhaseSpec, write_phase_script
    store = two_phase_run(tmp_path, task={"builtin": "addition"})
    for node in store.load_tree():
        resume = store.node_dir(node.resume.node).path if node.resume else None
        write_phase_script(PhaseSpec.for_node(store.config, node, store.node_dir(node.id).path,
                                              f"tok-{node.id}", resume))
    before = {p: p.read_text() for p in store.root.glob("nodes/*/phase.sbatch")}
    moved = tmp_path / "elsewhere" / "moved"
    shutil.copytree(store.root, moved)
    repair = cli("repair", str(moved))
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert f"moved here from {store.root}" in repair.stdout and "2 phase script(s)" in repair.stdout
    for path, text in before.items():
        assert path.read_text() == text
        now = (moved / path.relative_to(store.root)).read_text()
        assert now == text.replace(f"{store.root}/", f"{moved}/") and str(store.root) not in now
    assert f"export LLMZ_NODE_DIR={moved}/nodes/0001" in (moved / "nodes/0001/phase.sbatch").read_text()
    assert (moved / "experiment.yaml").read_text() == (store.root / "experiment.yaml").read_text()
    again = cli("repair", str(moved))
    assert "moved" not in again.stdout, again.stdout
    copy = tmp_path / "copy"
    shutil.copytree(store.root, copy)
    open_or_create(parse_args([str(copy)]))
    assert f"export LLMZ_NODE_DIR={copy}/nodes/0000" in (copy / "nodes/0000/phase.sbatch").read_text()


def copied_while_running(tmp_path) -> tuple[RunStore, Path]:
    """A run whose node 1 runs as job 4242, its phase scripts rendered, copied (cp -a) while
    the original still runs: the copy holds the original's job ids."""
    from llmzero_slurm.render import PhaseSpec, write_phase_script
    store = RunStore.create(tmp_path / "run", parse_config({"name": "demo", "scheduler": "local",
                                                          "task": {"builtin": "addition"}}))
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"lr": 1e-3}, status=Status.COMPLETED,
                                  results=Results(best_val=0.4, checkpoints=[10])))
    store.add_node(lambda i: Node(i, 0, Kind.EVOLVE, {"lr": 5e-4}, resume=Resume(0, 10),
                                  status=Status.RUNNING,
                                  submission=Submission("tok-1", "4242", "RUNNING")))
    for node in store.load_tree():
        resume = store.node_dir(node.resume.node).path if node.resume else None
        write_phase_script(PhaseSpec.for_node(store.config, node, store.node_dir(node.id).path,
                                              f"tok-{node.id}", resume))
    copy = tmp_path / "copy"
    shutil.copytree(store.root, copy, symlinks=True)
    return store, copy


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith(".lock")}


def test_a_copy_of_a_running_run_neither_cancels_nor_takes_over_its_jobs(tmp_path):
    """Walkthrough on a real cluster: a run copied (cp -a) while it ran holds the original's
    job ids. `llmzero-stop --cancel COPY` cancelled the original's phases and monitor, and
    `llmzero-start`/`llmzero-repair COPY` pointed the copy's scripts at the copy and then
    watched the original's jobs as its own. Now stop --cancel cancels none of them and names
    the original's stop (exit 2); start and repair refuse before anything is written; status
    and a plain stop still work."""
    store, copy = copied_while_running(tmp_path)
    before, original = files_of(copy), files_of(store.root)
    stop = cli("stop", str(copy), "--cancel")
    assert stop.returncode == 2, stop.stdout + stop.stderr
    said = stop.stdout + stop.stderr
    assert f"llmzero-stop --cancel {store.root}" in said and "4242" in said, said
    assert "cancelled 1" not in said and "cancelled the monitor" not in said, said
    for name in ("repair",):
        refused = cli(name, str(copy))
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert str(store.root) in refused.stderr and "4242" in refused.stderr, refused.stderr
        assert "moved here" not in refused.stdout, refused.stdout
    with pytest.raises(UsageError) as start:
        open_or_create(parse_args([str(copy)]))
    assert start.value.exit_code == 2
    assert f"llmzero-start {store.root}" in str(start.value) and "node 1 (job 4242)" in str(start.value)
    assert files_of(copy) == before and files_of(store.root) == original
    assert f"export LLMZ_NODE_DIR={store.root}/nodes/0001" in (copy / "nodes/0001/phase.sbatch").read_text()
    status = cli("status", str(copy))
    assert status.returncode == 0 and "running" in status.stdout, status.stdout + status.stderr
    report = cli("report", str(copy))
    assert report.returncode == 0, report.stdout + report.stderr
    plain = cli("stop", str(copy))
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert files_of(store.root) == original


def test_a_moved_running_run_still_follows_its_move(tmp_path):
    """A run moved (its origin gone, or holding another run since) is no copy: its scripts
    follow it as before, its phases in flight or not."""
    store, copy = copied_while_running(tmp_path)
    shutil.rmtree(store.root)
    repair = cli("repair", str(copy))
    assert repair.returncode == 0 and "moved here" in repair.stdout, repair.stdout + repair.stderr
    store, again = copied_while_running(tmp_path / "b")
    shutil.rmtree(store.root)
    RunStore.create(store.root, parse_config({"name": "demo", "scheduler": "local",
                                                          "task": {"builtin": "addition"}}))
    repair = cli("repair", str(again))
    assert repair.returncode == 0 and "moved here" in repair.stdout, repair.stdout + repair.stderr


def test_check_names_every_budget_and_what_a_static_plan_leaves_out(tmp_path):
    """--check said "llmzero, budget 2 phases" with budget_gpu_hours and budget_wall_hours set
    (either may end the search first), and "grid, budget 2 phases" for a grid of 8 points,
    six of which would never run."""
    from llmzero_slurm.controller.preflight import check_method
    said = check_method(parse_config({"name": "x", "search": {
        "budget_iterations": 2, "budget_samples": 10**6, "budget_gpu_hours": 0.5,
        "budget_wall_hours": 3}}))
    assert said == "llmzero, budget 2 phases or 1,000,000 training samples or 0.5 device-hours " \
                   "or 3 wall-clock hours, concurrency 1"
    said = check_method(parse_config({"name": "x", "search": {"method": "grid",
                                                               "budget_iterations": 2}}))
    assert said == "grid, budget 2 phases, concurrency 1: runs 2 of its 8 points (a larger " \
                   "search.budget_iterations runs more)"


def test_a_method_changed_in_a_run_with_phases_is_refused_by_name(tmp_path):
    """Walkthrough: search.method edited from llmzero to random in a run's experiment.yaml
    (to compare methods) was refused as if an upgrade had changed random's plan ("this
    llmzero-slurm plans it otherwise ... Resume with the release and files the run started
    with"), and llmzero-status headed the llmzero tree "(random)". A run's phases are one
    method's; the refusal now says so, and where another method's run goes."""
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "demo", "scheduler": "local",
                                    "task": {"builtin": "addition"}}))
    run = tmp_path / "run"
    store = open_or_create(parse_args([str(path), "--run-dir", str(run)]))
    frozen = (run / "experiment.yaml").read_text()
    (run / "experiment.yaml").write_text(frozen.replace("method: llmzero", "method: random"))
    open_or_create(parse_args([str(run)]))          # no phase yet: nothing of llmzero's to mix
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"lr": 1e-3}))
    with pytest.raises(ConfigError) as err:
        open_or_create(parse_args([str(run)]))
    assert err.value.key == "search.method"
    assert err.value.problem.startswith(
        f"is random in {run / 'experiment.yaml'}, and the run's phases were made by llmzero"), \
        err.value.problem
    assert "another --run-dir" in err.value.problem
    shown = cli("status", str(run))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("experiment demo (llmzero), "), shown.stdout
    assert f"note: search.method is random in {run / 'experiment.yaml'}, and the run's phases " \
           "were made by llmzero" in shown.stdout, shown.stdout


def test_check_of_a_run_whose_method_was_edited_fails_as_its_start_does(tmp_path, capsys):
    """Walkthrough: search.method edited from random to grid in a run's experiment.yaml passed
    `llmzero-start RUN --check` (every line [ok], exit 0); the start then refused it (exit 2)."""
    from llmzero_slurm.cli.start import main
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "demo", "scheduler": "local",
                                    "task": {"builtin": "addition"},
                                    "search": {"method": "random"}}))
    run = tmp_path / "run"
    store = open_or_create(parse_args([str(path), "--run-dir", str(run)]))
    frozen = (run / "experiment.yaml").read_text()
    (run / "experiment.yaml").write_text(frozen.replace("method: random", "method: grid"))
    assert main([str(run), "--check"]) == 0       # no phase yet: the start goes on too
    store.add_node(lambda i: Node(i, None, Kind.SCRATCH, {"lr": 1e-3}))
    capsys.readouterr()
    assert main([str(run), "--check"]) == 2
    assert (f"[FAIL] run directory: config key 'search.method': is grid in "
            f"{run / 'experiment.yaml'}, and the run's phases were made by random"
            ) in capsys.readouterr().out

def test_check_of_a_config_for_an_existing_run_says_the_start_would_ignore_it(tmp_path, capsys):
    """--check with --run-dir of an existing run passed "budget 6 phases", and the start then
    resumed the run with its frozen budget of 4, ignoring the file just checked."""
    from llmzero_slurm.cli.start import main
    path = tmp_path / "exp.yaml"
    exp = {"name": "demo", "scheduler": "local", "task": {"builtin": "addition"},
           "search": {"budget_iterations": 4}}
    path.write_text(yaml.safe_dump(exp))
    open_or_create(parse_args([str(path), "--run-dir", str(tmp_path / "run")]))
    exp["search"]["budget_iterations"] = 6
    path.write_text(yaml.safe_dump(exp))
    capsys.readouterr()
    main([str(path), "--check", "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert (f"note: {tmp_path / 'run'} holds this run already: a start resumes it with its "
            f"frozen experiment.yaml (your {path} differs, ignored: search.budget_iterations: "
            "4 -> 6;") in out, out
    other = {**exp, "name": "other"}
    path.write_text(yaml.safe_dump(other))
    assert main([str(path), "--check", "--run-dir", str(tmp_path / "run")]) == 2
    assert f"[FAIL] run directory: {tmp_path / 'run'} holds the run 'demo', not 'other'" \
        in capsys.readouterr().out


def test_experiment_hparams_a_replayed_strategy_overrides_are_said(tmp_path, capsys):
    """Walkthrough: a replay "with another seed" (hparams: {seed: 7}) ran seed 1, the seed of
    the strategy's source search, and said nothing: a report's strategy.yaml holds every key of
    each phase, so none of the experiment's hparams reached the phases. --check's method line
    and a new run's start name each one the strategy overrides, and how to run it instead."""
    from llmzero_slurm.controller.preflight import check_method
    strategy = tmp_path / "strategy.yaml"
    strategy.write_text(yaml.safe_dump({"format": "llmzero-strategy/1", "phases": [
        {"steps": 10, "hparams": {"lr": 2e-3, "seed": 1, "temperature": 1.0,
                                  "total_training_steps": 60}},
        {"steps": 10, "hparams": {"lr": 5e-4, "seed": 1, "temperature": 1.0}}]}))
    exp = {"name": "demo", "scheduler": "local", "task": {"builtin": "addition"},
           "hparams": {"seed": 7, "lr": 2e-3, "temperature": 1.0, "total_training_steps": 60},
           "search": {"method": "replay", "strategy_file": str(strategy)}}
    note = (f"{strategy} sets hparams this experiment sets too, and the replay runs the "
            "strategy's: lr=0.002, 0.0005 (hparams: 0.002), seed=1 (hparams: 7), "
            "total_training_steps=10 (hparams: 60); to run the experiment's, delete the key from "
            "each phase of the strategy file (for total_training_steps, set each phase's steps)")
    assert check_method(parse_config(exp)).endswith(f"; note: {note}")
    # what it read of an edited file (phases removed, steps changed) is said too
    assert check_method(parse_config(exp)).startswith(
        "replay, budget 16 phases, concurrency 1: a chain of 2 phases, 10 + 10 steps; note:")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    open_or_create(parse_args([str(path), "--run-dir", str(tmp_path / "replay")]))
    assert f"note: {note}\n" in capsys.readouterr().out
    exp["hparams"] = {"temperature": 1.0}
    assert "note" not in check_method(parse_config(exp))


def test_a_slurm_runs_poll_raised_when_frozen_is_no_difference_on_resume(tmp_path):
    """Walkthrough: the shipped cpu-addition.yaml (poll_interval_s: 2) started again on a Slurm
    run it had made noted "your exp.yaml differs, ignored: search.poll_interval_s: 5.0 -> 2.0":
    the start itself had raised it to Slurm's least when it froze the run."""
    from llmzero_slurm.cli.config_change import ignored
    exp = {"name": "demo", "task": {"builtin": "addition"}, "search": {"poll_interval_s": 2}}
    frozen = parse_config({**exp, "scheduler": "slurm", "search": {"poll_interval_s": 5.0}})
    for scheduler in ("auto", "slurm"):
        given = parse_config({**exp, "scheduler": scheduler})
        assert ignored(frozen, given, tmp_path / "exp.yaml", tmp_path) is None
    slower = parse_config({**exp, "search": {"poll_interval_s": 20}})
    assert "search.poll_interval_s: 5.0 -> 20" in ignored(frozen, slower, tmp_path / "e", tmp_path)


def test_tree_search_settings_a_static_method_never_reads_are_said(tmp_path, capsys):
    """Walkthrough: search.exploration_c, max_evolve_children or early_stopping set under grid,
    random or practitioner changed nothing and said nothing; a user who switched a tuned llmzero
    experiment to grid believed the early stopper still ran. --check's method line and a new
    run's start say which keys that method does not read; llmzero's own run says nothing."""
    from llmzero_slurm.controller.preflight import check_method
    search = {"method": "grid", "exploration_c": 2.0, "early_stopping": False,
              "early_stop_interval_s": 3, "max_evolve_children": 2}   # 2 is the default
    exp = {"name": "demo", "scheduler": "local", "task": {"builtin": "addition"}, "search": search}
    note = ("grid does not read search.exploration_c=2, search.early_stopping=false, "
            "search.early_stop_interval_s=3: "
            "llmzero's tree search and early stopper alone do, so they change nothing in this run")
    assert check_method(parse_config(exp)).endswith(f"; note: {note}")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    open_or_create(parse_args([str(path), "--run-dir", str(tmp_path / "grid")]))
    assert f"note: {note}\n" in capsys.readouterr().out
    path.write_text(yaml.safe_dump({**exp, "search": {**search, "method": "llmzero"}}))
    open_or_create(parse_args([str(path), "--run-dir", str(tmp_path / "llmzero")]))
    assert "does not read" not in capsys.readouterr().out
    assert "note" not in check_method(parse_config({**exp, "search": {"method": "random"}}))


def test_stop_says_how_long_it_waits_for_the_controller_and_that_it_still_waits(tmp_path):
    """Walkthrough: `llmzero-stop` said "stop requested" and then nothing for up to its 120 s
    --wait (a controller in an agent's LLM call acts late): no deadline, no sign of life."""
    from llmzero_slurm.controller.lease import Lease
    store = two_phase_run(tmp_path)
    holder = Lease(store)
    holder.acquire()                      # a live controller that never acts: this test process
    try:
        done = cli("stop", str(store.root), "--wait", "4")
    finally:
        holder.release()
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "waiting up to 4 s for it to stop (it acts at its next poll)", lines
    still = [line for line in lines if line.startswith("controller still running after")]
    assert still[:3] == [f"controller still running after {s} s of 4 s" for s in (1, 2, 3)], lines
