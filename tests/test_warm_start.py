"""The calibrated warm start: it stops in its band on held-out training rows, the same way each
time, is cached with what it reached, and says clearly when a target cannot be met."""
from __future__ import annotations

import json
import os
import random
import threading

import pytest
import torch

from llmzero_slurm.cputrain import warmstart
from llmzero_slurm.cputrain.model import base_name
from llmzero_slurm.cputrain.tokenizer import CharTokenizer
from llmzero_slurm.errors import DataError
from llmzero_slurm.tasks.dataset import Example

from conftest import flock_held, wait_for


def copy_task(rows: int, seed: int = 0) -> list[Example]:
    """Repeat a digit: learnt in a few dozen steps, so a band is crossed quickly."""
    rng = random.Random(seed)
    digits = [str(rng.randrange(10)) for _ in range(rows)]
    return [Example("copy", ({"role": "user", "content": f"{d}>"},), d) for d in digits]


def exact(data_source, solution_str, ground_truth, extra_info=None) -> float:
    return float(solution_str.strip() == ground_truth)


def test_the_band_is_reached_on_held_out_rows_and_the_same_every_time(tmp_path):
    tok, rows = CharTokenizer(), copy_task(400)
    plan = warmstart.WarmStart(band=(0.3, 0.7), max_steps=400)
    first, record = warmstart.train_base(tok, rows, exact, tmp_path / "r.py", plan, "b", print)
    again, record2 = warmstart.train_base(tok, rows, exact, tmp_path / "r.py", plan, "b", print)
    assert 0.3 <= record.probe_accuracy <= 0.7 and record.steps > 0
    assert record.probe_rows == 50                 # the last eighth of 400 rows, never trained on
    assert record.curve[-1] == (record.steps, record.probe_accuracy)
    assert all(acc < 0.3 for _, acc in record.curve[:-1])   # it stopped at the first crossing
    assert (record2.steps, record2.probe_accuracy) == (record.steps, record.probe_accuracy)
    for (name, a), (_, b) in zip(first.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name


def test_the_base_is_cached_with_the_accuracy_it_reached(tmp_path):
    tok, rows = CharTokenizer(), copy_task(400)
    plan = warmstart.WarmStart(band=(0.3, 0.7), max_steps=400)
    logged: list[str] = []
    torch.manual_seed(7)
    rng = torch.random.get_rng_state()
    umask = os.umask(0o002)     # a cache a group shares (LLMZERO_CACHE)
    try:
        _, name, record = warmstart.load_base(tok, rows, exact, tmp_path / "r.py", plan,
                                              tmp_path / "cache", logged.append)
    finally:
        os.umask(umask)
    # safetensors wrote the weights 0600: a colleague's phase could not load the cached base
    cached = warmstart.base_folder(tmp_path / "cache", name)
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in cached.iterdir()} == \
        {p.name: "0o664" for p in cached.iterdir()}
    # Building the base leaves the caller's random stream alone, so the phase that built it
    # initialises its LoRA exactly as a later phase that finds it cached.
    assert torch.equal(torch.random.get_rng_state(), rng)
    stored = json.loads((cached / "warm_start.json").read_text())
    assert stored["probe_accuracy"] == record.probe_accuracy and stored["band"] == [0.3, 0.7]
    assert stored["numerics"]["torch"] == torch.__version__
    assert any("held-out accuracy" in line for line in logged)
    logged.clear()
    _, again, _ = warmstart.load_base(tok, rows, exact, tmp_path / "r.py", plan,
                                      tmp_path / "cache", logged.append)
    assert again == name and logged == []          # from the cache, no training
    other = warmstart.WarmStart(band=(0.5, 0.9), max_steps=400)
    assert warmstart.base_id(tok, rows, other) != base_name(name)   # another target, another base


def test_a_phase_waiting_on_another_jobs_base_says_so(tmp_path):
    """Walkthrough, two runs of one experiment side by side: the second run's first phase waited
    silently, its log empty for as long as the first run's phase trained the shared base."""
    tok, rows, plan = CharTokenizer(), copy_task(100), warmstart.WarmStart(steps=0)
    name = warmstart.base_id(tok, rows, plan)
    lock = warmstart.base_folder(tmp_path / "cache", name).with_name(name + ".lock")
    lock.parent.mkdir(parents=True)
    logged: list[str] = []
    with flock_held(lock):
        waiter = threading.Thread(target=warmstart.load_base, args=(
            tok, rows, exact, tmp_path / "r.py", plan, tmp_path / "cache", logged.append))
        waiter.start()
        wait_for(lambda: logged, 30, "the waiting phase's line")
        assert waiter.is_alive()
    waiter.join(30)
    assert not waiter.is_alive()
    assert logged[0] == (f"warm start: waiting for another job, which trains or reads base {name} "
                         f"(holding {lock}); this phase goes on once it is done"), logged
    assert len(logged) == 2 and "training base" in logged[1]


def test_an_unreachable_band_says_what_to_change(tmp_path):
    plan = warmstart.WarmStart(band=(0.99, 1.0), max_steps=20)
    with pytest.raises(DataError, match=r"reached only .* in 20 supervised steps.*max_steps"):
        warmstart.train_base(CharTokenizer(), copy_task(400), exact, tmp_path / "r.py", plan,
                             "b", print)


def test_a_reward_that_refuses_the_ground_truth_as_written_fails_before_training(tmp_path):
    """Review: the warm start teaches each ground truth as written; a reward that wants another
    form ('#### 7', as verl's strict gsm8k does) scores that 0, so the band could never be
    reached, and the phase failed only after max_steps of training, advising more steps."""
    def wants_hashes(data_source, solution_str, ground_truth, extra_info=None) -> float:
        return float(solution_str.strip() == f"#### {ground_truth}")

    plan = warmstart.WarmStart(band=(0.3, 0.6), max_steps=20)
    with pytest.raises(DataError, match=r"scores only 0.000 of the ground truths as written "
                                        r"\(the text the warm start teaches\).*below the "
                                        r"band's low end 0.30"):
        warmstart.train_base(CharTokenizer(), copy_task(400), wants_hashes, tmp_path / "r.py",
                             plan, "b", print)


def test_too_few_rows_for_a_probe_and_bad_settings_are_refused(tmp_path):
    with pytest.raises(DataError, match="too few for a calibrated warm start"):
        warmstart.train_base(CharTokenizer(), copy_task(100), exact, tmp_path / "r.py",
                             warmstart.WarmStart(), "b", print)
    with pytest.raises(DataError, match="band"):
        warmstart.WarmStart(band=(0.5, 0.4))


def test_fixed_steps_and_no_warm_start(tmp_path):
    tok, rows = CharTokenizer(), copy_task(100)     # too few for a probe, fine for fixed steps
    none, record = warmstart.train_base(tok, rows, exact, tmp_path / "r.py",
                                        warmstart.WarmStart(steps=0), "b", print)
    assert (record.mode, record.steps, record.probe_accuracy) == ("none", 0, None)
    fresh = warmstart.random_model(tok, warmstart.SEED)
    for (name, a), (_, b) in zip(none.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), name
    _, record = warmstart.train_base(tok, rows, exact, tmp_path / "r.py",
                                     warmstart.WarmStart(steps=5), "b", print)
    assert (record.mode, record.steps) == ("steps", 5)


def test_a_users_reward_function_names_its_base(tmp_path):
    """A band is reached when the reward says so; a cached base was found by data and plan
    alone, so a base calibrated under a lenient reward was reused, out of its band, after the
    user made the reward strict. A built-in task's base keeps the name it had."""
    from argparse import Namespace

    from llmzero_slurm.cputrain.session import warm_start_plan

    tok, rows = CharTokenizer(), copy_task(200)
    reward = tmp_path / "reward.py"

    def base(text: str, name: str = "compute_score") -> str:
        reward.write_text(text)
        args = Namespace(task=None, reward_path=reward, reward_name=name,
                         warm_start_band=None, warm_start_max_steps=None, warm_start_steps=None)
        return warmstart.base_id(tok, rows, warm_start_plan(args))
    lenient = base("def compute_score(*a, **k):\n    return 1.0\n")
    assert base("def compute_score(*a, **k):\n    return 0.0\n") != lenient
    assert base("def compute_score(*a, **k):\n    return 1.0\n", "other") != lenient
    assert base("def compute_score(*a, **k):\n    return 1.0\n") == lenient
    builtin = Namespace(task="addition", warm_start_band=None, warm_start_max_steps=None,
                        warm_start_steps=None)
    assert warm_start_plan(builtin).key() == warmstart.WarmStart(
        band=warm_start_plan(builtin).band).key()


def test_a_base_cache_on_a_filesystem_without_flock_is_refused_naming_the_fix(tmp_path,
                                                                            monkeypatch):
    """Review: the base cache's lock fell back silently to filelock's soft lock there, which
    never breaks the marker of a job killed while training the base on another host: every
    later phase then waited on it, silently, until its own time limit."""
    import errno
    import fcntl

    from llmzero_slurm.errors import StateError

    def no_flock(fd, op):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    monkeypatch.setattr(fcntl, "flock", no_flock)
    with pytest.raises(StateError, match=r"cannot be locked: this filesystem has no flock.*"
                                         r"LLMZERO_CACHE"):
        warmstart.load_base(CharTokenizer(), copy_task(100), exact, tmp_path / "r.py",
                            warmstart.WarmStart(steps=0), tmp_path / "cache", print)


def test_a_base_trained_elsewhere_to_other_weights_takes_no_adapter_of_this_one(tmp_path):
    """Review: a base was named by what shaped it (data, plan), not by its weights; a band
    warm start on another numeric path (another CPU, a node's own cache) stops at another
    step, and a parent's adapter was then applied, silently, to other weights than its own."""
    from llmzero_slurm.cputrain.model import with_lora

    tok, rows, plan = CharTokenizer(), copy_task(100), warmstart.WarmStart(steps=0)
    base, name, _ = warmstart.load_base(tok, rows, exact, tmp_path / "r.py", plan,
                                        tmp_path / "here", print)
    adapter = tmp_path / "adapter"
    with_lora(base, name, 8, 16.0, "all-linear").save_pretrained(str(adapter))
    # The same plan and data, warm-started elsewhere to other weights.
    elsewhere = warmstart.base_folder(tmp_path / "elsewhere", name)
    elsewhere.parent.mkdir(parents=True)
    cached = warmstart.base_folder(tmp_path / "here", name)
    other, _, _ = warmstart.load_base(tok, rows, exact, tmp_path / "r.py", plan,
                                      tmp_path / "here", print)
    with torch.no_grad():
        next(other.parameters()).add_(0.01)
    other.save_pretrained(elsewhere)
    (elsewhere / "warm_start.json").write_text((cached / "warm_start.json").read_text())
    moved, moved_name, _ = warmstart.load_base(tok, rows, exact, tmp_path / "r.py", plan,
                                               tmp_path / "elsewhere", print)
    assert moved_name != name
    with pytest.raises(DataError, match="adapter was trained on base .*: the same data and warm "
                                        "start reached other weights here"):
        with_lora(moved, moved_name, 8, 16.0, "all-linear", adapter)
    again, again_name, _ = warmstart.load_base(tok, rows, exact, tmp_path / "r.py", plan,
                                               tmp_path / "here", print)
    assert again_name == name
    with_lora(again, again_name, 8, 16.0, "all-linear", adapter)     # its own base: taken
