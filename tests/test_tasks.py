"""Built-in tasks: verl-format parquet splits and rewards that survive any completion."""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import threading

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from llmzero_slurm.errors import ConfigError, DataError
from llmzero_slurm.tasks import TASKS, get_task, reward_path
from llmzero_slurm.tasks.dataset import (SPLIT_SIZES, check_footer, generate_rows, materialize,
                                         read_examples, write_parquet)
from llmzero_slurm.tasks.reward_file import judge, load_reward

SMALL = {"train": 60, "val": 20, "test": 20}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_splits_are_deterministic_disjoint_and_verl_shaped(name, tmp_path):
    task = get_task(name)
    rows = generate_rows(task, SMALL)
    assert rows == generate_rows(task, SMALL)
    questions = [{r["prompt"][0]["content"] for r in rows[s]} for s in ("train", "val", "test")]
    assert sum(map(len, questions)) == sum(SMALL.values())   # no problem appears twice
    write_parquet(rows["val"], tmp_path / "val.parquet")
    table = pq.read_table(tmp_path / "val.parquet")
    assert set(table.column_names) == {"data_source", "prompt", "ability", "reward_model",
                                       "extra_info"}
    first = table.to_pylist()[0]
    assert first["prompt"][0]["role"] == "user" and first["data_source"] == name
    assert first["reward_model"]["style"] == "rule"


@pytest.mark.parametrize("name", sorted(TASKS))
def test_ground_truth_scores_one_and_a_wrong_answer_zero(name):
    task = get_task(name)
    for row in generate_rows(task, SMALL)["train"]:
        truth = row["reward_model"]["ground_truth"]
        assert task.compute_score(name, truth, truth) == 1.0
        assert task.compute_score(name, f"the answer is {truth}", truth) == 1.0
        assert task.compute_score(name, truth + "7", truth) == 0.0


MALFORMED = [None, b"12", 12, 3.5, "", " ", "\x00\x01", "nan", "-", "+-+", "9" * 5000,
             "🙂" * 100, "answer:", "\n\n", ["12"], {"answer": "12"}]


@pytest.mark.parametrize("name", sorted(TASKS))
@pytest.mark.parametrize("completion", MALFORMED, ids=repr)
def test_malformed_completions_score_zero(name, completion):
    assert get_task(name).compute_score(name, completion, "12") == 0.0


@pytest.mark.parametrize("name", sorted(TASKS))
@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=300))
def test_any_text_scores_zero_or_one(name, text):
    assert get_task(name).compute_score(name, text, "121", None) in (0.0, 1.0)


def test_reward_files_load_by_path_without_torch():
    """verl imports the reward file by path; it must not need the package or torch."""
    code = ("import importlib.util, sys\n"
            "for path in sys.argv[1:]:\n"
            "    spec = importlib.util.spec_from_file_location('r', path)\n"
            "    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "    assert m.compute_score('x', 'zzz', '1') == 0.0\n"
            "assert 'torch' not in sys.modules and 'llmzero_slurm' not in sys.modules\n")
    paths = [str(reward_path(name)) for name in TASKS]
    subprocess.run([sys.executable, "-I", "-c", code, *paths], check=True)
    fn = load_reward(reward_path("addition"))
    assert judge(fn, "f", "addition", "42", "42", {}).score == 1.0


def test_a_dict_reward_trains_on_its_score_and_validates_on_its_acc(tmp_path):
    path = tmp_path / "partial.py"
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                    "    return {'score': 0.25, 'acc': 0.0}\n")
    result = judge(load_reward(path), path, "s", "x", "y", {})
    assert (result.score, result.acc, result.accuracy) == (0.25, 0.0, 0.0)
    plain = judge(load_reward(reward_path("addition")), "f", "addition", "42", "42", {})
    assert (plain.score, plain.acc, plain.accuracy) == (1.0, None, 1.0)


@pytest.mark.parametrize("result, score, acc", [
    ("answer == truth", 1.0, None),                               # a bool, as verl takes it
    ("numpy.float32(0.5)", 0.5, None),                            # numpy's scalars
    ("numpy.int64(1)", 1.0, None),
    ("numpy.bool_(True)", 1.0, None),
    ("{'score': 1.0, 'acc': answer == truth}", 1.0, 1.0),         # verl's math_dapo shape
    ("{'score': numpy.float32(-1.0), 'acc': numpy.bool_(False)}", -1.0, 0.0),
])
def test_rewards_verl_accepts_are_judged_as_numbers(tmp_path, result, score, acc):
    """verl writes whatever compute_score returns into its reward tensor, so a bool or a numpy
    scalar is a valid reward there; refusing it failed every phase of a working reward file."""
    path = tmp_path / "verl_style.py"
    path.write_text("import numpy\n"
                    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                    "    answer, truth = solution_str, ground_truth\n"
                    f"    return {result}\n")
    judged = judge(load_reward(path), path, "s", "x", "x", {})
    assert (judged.score, judged.acc) == (score, acc)
    assert type(judged.score) is float and (acc is None or type(judged.acc) is float)


def test_reward_results_must_be_numbers(tmp_path):
    bad = tmp_path / "bad_reward.py"
    bad.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                   "    return 'yes'\n")
    with pytest.raises(DataError, match="bad_reward.py.*finite number"):
        judge(load_reward(bad), bad, "s", "x", "x", {})
    for wrong in ("None", "float('nan')", "[1.0]", "numpy.array([1.0, 0.0])", "numpy.float64('inf')"):
        bad.write_text("import numpy\n"
                       "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                       f"    return {wrong}\n")
        with pytest.raises(DataError, match="finite number"):
            judge(load_reward(bad), bad, "s", "x", "x", {})
    (tmp_path / "none.py").write_text("x = 1\n")
    with pytest.raises(DataError, match="defines no function compute_score"):
        load_reward(tmp_path / "none.py")
    with pytest.raises(DataError, match="does not exist"):
        load_reward(tmp_path / "missing.py")


def test_materialize_writes_once_and_reads_back(tmp_path):
    paths = materialize("sort", tmp_path)
    stamp = paths["train"].stat().st_mtime_ns
    assert materialize("sort", tmp_path) == paths and paths["train"].stat().st_mtime_ns == stamp
    examples = read_examples(paths["val"])
    assert len(examples) == SPLIT_SIZES["val"] and examples[0].data_source == "sort"


def test_writers_of_one_shared_dataset_file_sharing_a_pid_keep_it_whole(tmp_path):
    """Walkthrough, two runs' phases on two nodes of one cache (LLMZERO_CACHE on a shared
    filesystem) may have one pid: both wrote `.train.parquet.<pid>.tmp` at once, and a torn
    file renamed into the cache stays there, since the cache checks only that it exists.
    Threads of one process stand in for them."""
    rows = generate_rows(get_task("addition"), {"train": 2000, "val": 1, "test": 1})["train"]
    path, errors = tmp_path / "train.parquet", []
    start = threading.Barrier(4)

    def write():
        start.wait()
        try:
            for _ in range(5):
                write_parquet(rows, path)
        except Exception as exc:   # the other writer's rename took its file
            errors.append(exc)
    writers = [threading.Thread(target=write) for _ in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    assert errors == []
    assert pq.read_table(path).to_pylist() == rows
    assert [p.name for p in tmp_path.iterdir()] == ["train.parquet"]


def test_the_starts_footer_check_reads_what_the_trainer_reads(tmp_path):
    """The start's quick check (footers only) refused a folder of parquet files, which the
    trainer reads as one table: it counts the same rows, and refuses the same junk."""
    rows = generate_rows(get_task("addition"), SMALL)["val"]
    (tmp_path / "parts").mkdir()
    write_parquet(rows[:5], tmp_path / "parts" / "a.parquet")
    write_parquet(rows[5:12], tmp_path / "parts" / "b.parquet")
    assert check_footer(tmp_path / "parts") == len(read_examples(tmp_path / "parts")) == 12
    assert check_footer(tmp_path / "parts" / "a.parquet") == 5
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="junk.parquet: cannot read as parquet"):
        check_footer(tmp_path / "junk.parquet")
    write_parquet([{k: v for k, v in r.items() if k != "prompt"} for r in rows], tmp_path / "np.parquet")
    with pytest.raises(DataError, match="has no column 'prompt'"):
        check_footer(tmp_path / "np.parquet")


@pytest.mark.parametrize("name,start", [("train.jsonl", b""), ("train.json", b"\xef\xbb\xbf"),
                                        ("train.parquet", b"\r\n")])
def test_a_json_lines_file_is_named_as_such_with_how_to_convert_it(tmp_path, name, start):
    """A user with JSONL data (the same rows, one JSON object a line) was told only "Parquet
    magic bytes not found in footer. Either the file is corrupted or this is not a parquet
    file"; the refusal now says the file is JSON and how to write it as parquet, wherever the
    file is read (start, --check, the trainer, the inputs record)."""
    from llmzero_slurm.tasks.dataset import footers
    rows = generate_rows(get_task("addition"), SMALL)["train"]
    path = tmp_path / name
    path.write_bytes(start + "".join(json.dumps(r) + "\r\n" for r in rows).encode())
    for read in (check_footer, read_examples, footers):
        with pytest.raises(DataError) as err:
            read(path)
        said = str(err.value)
        assert said.startswith(f"{path}: ") and "holds JSON, not parquet" in said, said
        assert "pq.write_table(pa.Table.from_pylist(" in said and "\n" not in said, said


def test_bad_rows_are_reported_by_file_and_row(tmp_path):
    rows = generate_rows(get_task("addition"), SMALL)["val"]
    rows[3] = {**rows[3], "reward_model": {"style": "rule", "ground_truth": None}}
    write_parquet(rows, tmp_path / "v.parquet")
    with pytest.raises(DataError, match=r"v\.parquet: row 3: .*ground_truth"):
        read_examples(tmp_path / "v.parquet")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="junk.parquet: cannot read as parquet"):
        read_examples(tmp_path / "junk.parquet")


def test_a_dataset_file_that_does_not_exist_is_named_with_its_key(tmp_path):
    """Audit: a path that names no file was reported as "cannot read as parquet"."""
    from llmzero_slurm.backends.verl.data import held_out_sources
    from llmzero_slurm.backends.verl.settings import VerlSettings
    from llmzero_slurm.config import TaskConfig
    missing = tmp_path / "nope.parquet"
    with pytest.raises(DataError) as caught:
        read_examples(missing, "task.val_files")
    assert str(caught.value) == f"{missing}: does not exist (config key 'task.val_files')"
    with pytest.raises(DataError, match=r"nope\.parquet: does not exist$"):
        read_examples(missing)
    val = materialize("addition", tmp_path / "data")["val"]
    with pytest.raises(DataError) as caught:      # verl reads the test files' data sources
        held_out_sources(TaskConfig(val_files=[str(val)], test_files=[str(missing)]),
                         VerlSettings())
    assert str(caught.value) == f"{missing}: does not exist (config key 'task.test_files')"


def test_a_reward_column_stored_as_json_text_says_so(tmp_path):
    """Issue 15.3: a JSON-string reward_model got "needs a 'ground_truth'"."""
    rows = generate_rows(get_task("addition"), SMALL)["val"]
    rows = [{**r, "reward_model": json.dumps(r["reward_model"])} for r in rows]
    write_parquet(rows, tmp_path / "v.parquet")
    with pytest.raises(DataError, match=r"v\.parquet: row 0: column 'reward_model' holds text"):
        read_examples(tmp_path / "v.parquet")


def test_a_file_in_another_schema_names_the_missing_columns(tmp_path):
    """A file with question/answer columns was reported as "row 0: column 'prompt' must be a
    chat list", of a column it does not have; a plain-text prompt got the same words without
    saying how verl wants it."""
    rows = generate_rows(get_task("addition"), SMALL)["val"]
    write_parquet([{"data_source": r["data_source"], "question": r["prompt"][0]["content"],
                    "answer": r["reward_model"]["ground_truth"]} for r in rows],
                  tmp_path / "qa.parquet")
    with pytest.raises(DataError) as caught:
        read_examples(tmp_path / "qa.parquet")
    assert str(caught.value).startswith(
        f"{tmp_path / 'qa.parquet'}: has no column 'prompt', 'reward_model' (its columns: "
        "data_source, question, answer); ")
    write_parquet([{**r, "prompt": r["prompt"][0]["content"]} for r in rows],
                  tmp_path / "text.parquet")
    with pytest.raises(DataError, match=r"text\.parquet: row 0: column 'prompt' holds text; "
                                        r"verl's schema wants a chat list: "
                                        r"\[\{'role': 'user', 'content': '"):
        read_examples(tmp_path / "text.parquet")


@pytest.mark.parametrize("signature", ["(solution, answer)",
                                       "(data_source, solution_str, ground_truth, extra_info, x)",
                                       "(src, text, truth, extra=None)"])
def test_a_reward_with_the_wrong_signature_names_the_file_and_the_expected_one(tmp_path,
                                                                              signature):
    """Issue 15.3: a wrong signature failed at the first reward with a bare TypeError."""
    path = tmp_path / "my_reward.py"
    path.write_text(f"def compute_score{signature}:\n    return 1.0\n")
    with pytest.raises(DataError, match=r"my_reward\.py: compute_score.* cannot be called the way "
                       r"verl calls it, compute_score\(data_source, solution_str, ground_truth, "
                       r"extra_info=None\)"):
        load_reward(path)
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None,"
                    " **kw):\n    return 1.0\n")
    assert load_reward(path)("s", "t", "g", {}) == 1.0


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(ConfigError, match="known: addition, arithmetic, expand, reverse, sort"):
        get_task("subtraction")


@pytest.mark.parametrize("name, lengths", [("reverse", (2, 12)), ("expand", (1, 15))])
def test_answers_span_lengths_the_default_response_budget_cuts_off(name, lengths):
    """The capacity dimension: at the CPU trainer's default max_response_length a large share
    of the answers (plus EOS) cannot fit, while every prompt fits its default budget."""
    from llmzero_slurm.cputrain.defaults import DEFAULTS
    from llmzero_slurm.cputrain.tokenizer import CharTokenizer
    rows = generate_rows(get_task(name))["train"]
    answers = [len(r["reward_model"]["ground_truth"]) for r in rows]
    assert (min(answers), max(answers)) == lengths
    cut = sum(n + 1 > DEFAULTS["max_response_length"] for n in answers) / len(answers)
    assert 0.3 < cut < 0.7
    tok = CharTokenizer()
    assert max(len(tok.prompt_ids(r["prompt"])) for r in rows) <= DEFAULTS["max_prompt_length"]


def test_expand_decodes_runs_in_order():
    task = get_task("expand")
    assert task.compute_score("expand", "aaabcccc", "aaabcccc") == 1.0
    assert task.compute_score("expand", "aaabccc", "aaabcccc") == 0.0
    for question, answer in (task.sample(random.Random(i)) for i in range(200)):
        runs = question.rstrip("=")
        assert answer == "".join(c * int(k) for c, k in zip(runs[::2], runs[1::2]))


def test_a_reward_gets_the_ground_truth_as_the_file_holds_it(tmp_path):
    """verl hands a reward the file's own value; ground truths were made text for every
    consumer, so a reward comparing numbers scored 0 on the CPU trainer (its warm start
    never reached the band) and --check refused a reward verl runs."""
    from llmzero_slurm.config import parse_config
    from llmzero_slurm.controller import data_checks
    rows = generate_rows(get_task("addition"), SMALL)
    paths = {}
    for split, split_rows in rows.items():
        paths[split] = tmp_path / f"{split}.parquet"
        write_parquet([{**r, "reward_model": {"style": "rule", "ground_truth":
                                              int(r["reward_model"]["ground_truth"])}}
                       for r in split_rows], paths[split])
    example = read_examples(paths["val"])[0]
    assert isinstance(example.ground_truth, int) and example.answer == str(example.ground_truth)
    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, "
                      "extra_info=None):\n    try:\n"
                      "        return float(abs(float(solution_str) - ground_truth) < 1e-6)\n"
                      "    except ValueError:\n        return 0.0\n")
    fn = load_reward(reward)
    assert judge(fn, reward, example.data_source, example.answer, example.ground_truth,
                 example.extra_info).score == 1.0
    task = {"train_files": [str(paths["train"])], "val_files": [str(paths["val"])],
            "test_files": [str(paths["test"])], "reward_path": str(reward)}
    # These small splits are below what a calibrated warm start needs: --check says so, as
    # the phase would; a fixed step count is the way for them.
    # It said "set a fixed number of steps or none" as 'train split', naming neither the file
    # nor the setting.
    with pytest.raises(DataError, match=re.escape(
            f"{paths['train']}: {len(read_examples(paths['train']))} rows are too few for a "
            "calibrated warm start (needs >= 128); set task.warm_start.steps: a fixed number of "
            "steps, or 0 for none")):
        data_checks.check_data(parse_config({"name": "x", "task": task}))
    data_checks.check_data(parse_config({"name": "x", "task": {**task, "warm_start": {"steps": 50}}}))


def test_a_reward_file_defining_a_dataclass_imports(tmp_path):
    """dataclasses looks the class's module up in sys.modules; with postponed annotations an
    unregistered module failed the import with a bare AttributeError."""
    path = tmp_path / "typed_reward.py"
    path.write_text("from __future__ import annotations\n"
                    "from dataclasses import dataclass\n"
                    "@dataclass\nclass Answer:\n    text: str\n"
                    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                    "    return float(Answer(solution_str).text == ground_truth)\n")
    assert load_reward(path)("s", "42", "42", {}) == 1.0
    path.write_text("raise ValueError('broken')\n")
    with pytest.raises(DataError, match="ValueError: broken"):
        load_reward(path)
    assert not [name for name in sys.modules if "typed_reward" in name]


def test_two_reward_files_of_one_name_keep_their_own_modules(tmp_path):
    """Each reward module was registered as llmzero_reward_<stem>: a second file of the same
    name (a val reward beside a train one, two runs' checks in one process) replaced the
    first's entry, under which the first's dataclasses then resolved their annotations."""
    first, second = tmp_path / "a" / "reward.py", tmp_path / "b" / "reward.py"
    for path, value in ((first, 1.0), (second, 0.5)):
        path.parent.mkdir()
        path.write_text("def compute_score(data_source, solution_str, ground_truth, "
                        f"extra_info=None):\n    return {value}\n")
    one, two = load_reward(first), load_reward(second)
    assert sys.modules[one.__module__] is not sys.modules[two.__module__]
    assert (one("s", "x", "x", {}), two("s", "x", "x", {})) == (1.0, 0.5)
