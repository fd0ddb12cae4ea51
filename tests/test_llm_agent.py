"""LLMAgent: exact log-probs, batching and KV-cache reuse that change nothing, candidate choice, seeding."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.llm import LLMAgent, length_buckets, tool_call_complete
from agents.lm import candidate_log_policy
from agents.records import AgentStep, pack_session
from agents.models import build_tiny_model, train_tokenizer
from envs.prompts import render_transcript
from helpers import float32_tol

NAMES = ["Edra Vane", "Tolis Marr", "Ikel Osk", "Varn Holt", "Oskarde", "Mira Quell"]
SYSTEM = "You browse an offline encyclopedia. Call one tool per turn."


def _texts() -> list[str]:
    lines = []
    for i, a in enumerate(NAMES):
        for j, b in enumerate(NAMES):
            lines.append(f'Question: where was {a} born? search("{a}") open({i + j + 1}) answer("{b}")')
            lines.append(f"[Search results for {a}]\n{j + 1}. {b} /wiki/{b.replace(' ', '_')}")
    return lines * 8


def _messages(question: str, turns: list[tuple[str, str]] = ()) -> list[dict[str, str]]:
    """A session's messages as the env writes them: system, task, then (action, tool result) pairs."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Question: {question}"}]
    for action, result in turns:
        messages += [{"role": "assistant", "content": action}, {"role": "user", "content": result}]
    return messages


def _info(messages, session_id=0, **extra):
    return {"session_id": session_id, "messages": messages, **extra}


@pytest.fixture(scope="module")
def tiny():
    """A 1M-parameter model, overfit for a few seconds to answer the first question with a search call."""
    torch.set_num_threads(1)
    tokenizer = train_tokenizer(_texts(), vocab_size=600)
    model = build_tiny_model(tokenizer, "1m", seed=0)
    target = render_transcript(_messages("where was Edra Vane born?")) + 'search("Edra Vane") and more text here'
    ids = torch.tensor([tokenizer.encode(target)])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(150):
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.05:
            break
    return model.eval(), tokenizer


def _path_tol(step: AgentStep, vocab: int = 600) -> float:
    """The tolerance between two paths' scores of ``step`` (stored or recomputed, batched or alone): a token's
    log-prob sums at most ``n`` float32 terms (the keys its query attends to, or the tiny tokenizer's vocabulary
    in the log-softmax) of magnitude ``scale`` (its largest log-prob), and a choice's score sums up to its longest
    candidate's tokens of those, hence :func:`helpers.float32_tol` times that length."""
    n = max(vocab, len(step.prompt_ids) + sum(len(c) for c in step.candidate_ids or [step.gen_ids]))
    scale = max(1.0, float(step.logprobs.abs().max()) if step.logprobs.numel() else 1.0)
    return float32_tol(n, scale) * max([1, *(len(c) for c in step.candidate_ids or [])])


def _reference_logprobs(model, step: AgentStep) -> torch.Tensor:
    """log p(gen_ids | prompt) from one plain forward pass over the whole unpadded sequence."""
    with torch.no_grad():
        logits = model(torch.tensor([step.prompt_ids + step.gen_ids])).logits[0].float()
    n = len(step.prompt_ids)
    return torch.log_softmax(logits[n - 1 : -1], -1).gather(1, torch.tensor(step.gen_ids)[:, None]).squeeze(1)


def _acted(agent, observation: str, info) -> tuple[str, AgentStep]:
    """One env's action, and the step record the agent returned with it."""
    (action,), (step,) = agent.act_batch_recorded([observation], [info])
    return action, step


def _run_sessions(agent, questions, steps, result=lambda k: f"[Result {k}]\n1. Edra Vane /wiki/Edra_Vane"):
    """Drive one session per env for ``steps`` steps, appending each action and a tool result like the env does."""
    turns = [[] for _ in questions]
    history = []
    for k in range(steps):
        messages = [_messages(q, t) for q, t in zip(questions, turns)]
        actions, steps = agent.act_batch_recorded([render_transcript(m) for m in messages],
                                                  [_info(m) for m in messages])
        assert [s.text for s in steps] == actions
        history.append(steps)
        for t, action in zip(turns, actions):
            t.append((action, result(k)))
    return history


def test_generation_stops_at_the_end_of_the_tool_call(tiny):
    model, tokenizer = tiny
    agent = LLMAgent(model, tokenizer, temperature=0, max_new_tokens=30)
    messages = _messages("where was Edra Vane born?")
    assert agent.act(render_transcript(messages), _info(messages)) == 'search("Edra Vane")'


@pytest.mark.parametrize(
    "text, complete",
    [
        ('search("Edra Vane")', True),
        ('search("Edra (Vane")', True),
        ('search("Edra Vane)', False),
        ('search("a \\" )")', True),
        ("I will open(3", False),
        ('<tool_call>{"name": "open", "arguments": {"target": 3}}', False),
        ('<tool_call>{"name": "open", "arguments": {"target": 3}}</tool_call>', True),
        ('<think>search("x")</think> answer(', False),
        ("no call at all (really)", False),
    ],
)
def test_tool_call_complete(text, complete):
    assert tool_call_complete(text) is complete


def test_logprobs_equal_a_fresh_forward_pass(tiny):
    model, tokenizer = tiny
    agent = LLMAgent(model, tokenizer, temperature=1.0, max_new_tokens=12, seed=3)
    questions = ["where was Edra Vane born?", "who taught Tolis Marr, and where did Ikel Osk work?", "Oskarde?"]
    history = _run_sessions(agent, questions, steps=3)
    for steps in history:
        for step in steps:
            assert step.logprobs.dtype == torch.float32 and len(step.logprobs) == len(step.gen_ids) > 0
            torch.testing.assert_close(step.logprobs, _reference_logprobs(model, step), atol=1e-4, rtol=0)


def test_greedy_batched_equals_unbatched(tiny):
    model, tokenizer = tiny
    questions = ["where was Edra Vane born?", "which museum holds the works of Mira Quell?", "Varn Holt?"]
    batched = _run_sessions(LLMAgent(model, tokenizer, temperature=0, max_new_tokens=10), questions, steps=2)
    for i, question in enumerate(questions):
        alone = _run_sessions(LLMAgent(model, tokenizer, temperature=0, max_new_tokens=10), [question], steps=2)
        for k in range(2):
            assert alone[k][0].text == batched[k][i].text
            assert alone[k][0].gen_ids == batched[k][i].gen_ids


def _count_fed_tokens(model):
    fed = []
    handle = model.get_input_embeddings().register_forward_hook(lambda m, args, out: fed.append(args[0].numel()))
    return fed, handle


def test_kv_cache_reuse_equals_recomputing(tiny):
    model, tokenizer = tiny
    questions = ["where was Edra Vane born?", "where was Ikel Osk born?"]
    runs = {}
    for reuse in (True, False):
        fed, handle = _count_fed_tokens(model)
        agent = LLMAgent(model, tokenizer, temperature=0, max_new_tokens=8, reuse_kv=reuse)
        runs[reuse] = (_run_sessions(agent, questions, steps=4), sum(fed))
        handle.remove()
    (cached, fed_cached), (recomputed, fed_recomputed) = runs[True], runs[False]
    for k in range(4):
        for a, b in zip(cached[k], recomputed[k]):
            assert (a.prompt_ids, a.gen_ids, a.text) == (b.prompt_ids, b.gen_ids, b.text)
    assert fed_cached < fed_recomputed / 2
    # The session's tokens only grow: each step's prompt starts with the last step's prompt and output.
    first, second = cached[0][0], cached[1][0]
    assert first.text == 'search("Edra Vane")'
    assert second.prompt_ids[: len(first.prompt_ids) + len(first.gen_ids)] == first.prompt_ids + first.gen_ids


def test_rewritten_history_is_recomputed_from_scratch(tiny):
    model, tokenizer = tiny
    agent = LLMAgent(model, tokenizer, temperature=0, max_new_tokens=8)
    messages = _messages("where was Edra Vane born?", [("open(1)", "[Page]\nEdra Vane was born in Oskarde.")])
    agent.act(render_transcript(messages), _info(messages))
    rewritten = _messages("where was Edra Vane born?", [("open(2)", "[Page]\nEdra Vane was born in Oskarde.")])
    action, step = _acted(agent, render_transcript(rewritten), _info(rewritten))
    fresh = LLMAgent(model, tokenizer, temperature=0, max_new_tokens=8)
    assert action == fresh.act(render_transcript(rewritten), _info(rewritten))
    assert step.prompt_ids == tokenizer.encode(render_transcript(rewritten))


def test_reuse_stops_where_the_env_context_departs_from_the_agents_output(tiny):
    """The same observation twice, then an action the env recorded differently: cached tokens past the
    point where the texts differ must not be used."""
    model, tokenizer = tiny
    agent = LLMAgent(model, tokenizer, temperature=0, max_new_tokens=8)
    messages = _messages("where was Edra Vane born?")
    first = agent.act(render_transcript(messages), _info(messages))
    assert agent.act(render_transcript(messages), _info(messages)) == first
    edited = _messages("where was Edra Vane born?", [(first + " ", "[Result]\n1. Oskarde /wiki/Oskarde")])
    _, step = _acted(agent, render_transcript(edited), _info(edited))
    fresh = LLMAgent(model, tokenizer, temperature=0, max_new_tokens=8)
    _, fresh_step = _acted(fresh, render_transcript(edited), _info(edited))
    assert step.prompt_ids == fresh_step.prompt_ids and step.gen_ids == fresh_step.gen_ids
    torch.testing.assert_close(step.logprobs, _reference_logprobs(model, step), atol=1e-4, rtol=0)


def test_eos_ends_the_output_and_is_left_out_of_the_action(tiny):
    model, tokenizer = tiny
    messages = _messages("where was Edra Vane born?")
    first_token = tokenizer.encode("search")[0]
    saved = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = first_token  # the greedy first token now ends generation
    try:
        agent = LLMAgent(model, tokenizer, temperature=0, max_new_tokens=8)
    finally:
        model.generation_config.eos_token_id = saved
    action, first = _acted(agent, render_transcript(messages), _info(messages))
    assert action == ""
    assert first.gen_ids == [first_token]
    after = _messages("where was Edra Vane born?", [("", "[Error] no tool call found")])
    _, second = _acted(agent, render_transcript(after), _info(after))
    # The eos was generated but is not in the context that follows, so the session packs into two sequences.
    assert second.prompt_ids[: len(first.prompt_ids)] == first.prompt_ids
    packed = pack_session([first, second])
    assert [p.token_ids for p in packed] == [first.prompt_ids + first.gen_ids, second.prompt_ids + second.gen_ids]
    torch.testing.assert_close(second.logprobs, _reference_logprobs(model, second), atol=1e-4, rtol=0)


def test_a_fork_keeps_its_parents_cache(tiny):
    """Parent (session 0) acts, a child (session 1) acts twice, then the parent resumes on its grown context."""
    model, tokenizer = tiny
    parent = _messages("where was Edra Vane born?")
    child = _messages("sub-question: who is Edra Vane?")
    result_text = "[Subagent result]\nEdra Vane is a painter."
    steps = {}
    for reuse in (True, False):
        agent = LLMAgent(model, tokenizer, temperature=0, max_new_tokens=8, reuse_kv=reuse)
        first, parent_step = _acted(agent, render_transcript(parent), _info(parent, 0))
        child_action = agent.act(render_transcript(child), _info(child, 1))
        child_more = child + [{"role": "assistant", "content": child_action}, {"role": "user", "content": "ok"}]
        agent.act(render_transcript(child_more), _info(child_more, 1))
        resumed = parent + [{"role": "assistant", "content": first}, {"role": "user", "content": result_text}]
        steps[reuse] = (parent_step, _acted(agent, render_transcript(resumed), _info(resumed, 0))[1])
    (parent_step, resumed_step), (_, recomputed_step) = steps[True], steps[False]
    assert resumed_step.prompt_ids[: len(parent_step.prompt_ids)] == parent_step.prompt_ids
    assert resumed_step.gen_ids == recomputed_step.gen_ids
    torch.testing.assert_close(resumed_step.logprobs, _reference_logprobs(model, resumed_step), atol=1e-4, rtol=0)


def test_reset_drops_the_caches(tiny):
    model, tokenizer = tiny
    agent = LLMAgent(model, tokenizer, temperature=0, max_new_tokens=4, prefix_cache_tokens=0)
    messages = _messages("where was Edra Vane born?")
    agent.act_batch([render_transcript(messages)] * 2, [_info(messages)] * 2)
    agent.reset(0)
    fed, handle = _count_fed_tokens(model)
    _, steps = agent.act_batch_recorded([render_transcript(messages)] * 2, [_info(messages)] * 2)
    handle.remove()
    # Env 0 re-reads its whole prompt; env 1 re-feeds only its last token.
    assert fed[0] == 2 * len(steps[0].prompt_ids)
    agent.reset()
    assert not agent._sessions


@pytest.mark.parametrize("mode", ["generate", "choose"])
def test_a_new_session_starts_from_the_prefix_it_shares_with_a_stored_first_prompt(tiny, mode):
    # Sessions of other envs and tasks open with the same system message: a new one feeds only what follows the
    # longest prefix it shares with a stored first prompt, and acts as if it had fed it all (float rounding).
    model, tokenizer = tiny
    candidates = ['search("Edra Vane")', "open(1)", 'answer("Oskarde")']
    first, second = _messages("where was Edra Vane born?"), _messages("where was Mira Quell born?")
    ids = [tokenizer(render_transcript(m))["input_ids"] for m in (first, second)]
    shared = next(i for i, (a, b) in enumerate(zip(*ids)) if a != b)
    assert 8 <= shared < len(ids[1]) - 1  # (the system message and "Question: where was ")
    runs, fed_second = [], []
    for store in (4096, 0):
        agent = LLMAgent(model, tokenizer, mode=mode, seed=5, max_new_tokens=6, prefix_cache_tokens=store)
        steps = [_acted(agent, render_transcript(first), _info(first, candidates=candidates))[1]]
        fed, handle = _count_fed_tokens(model)
        info = {**_info(second, candidates=candidates), "env_index": 1}
        steps.append(agent.act_batch_recorded([render_transcript(second)], [info])[1][0])
        handle.remove()
        fed_second.append(fed[0])
        runs.append(steps)
    assert fed_second == [len(ids[1]) - shared, len(ids[1])]
    for a, b in zip(*runs):
        assert (a.text, a.prompt_ids, a.gen_ids) == (b.text, b.prompt_ids, b.gen_ids)
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=_path_tol(a), rtol=0)


def test_the_prefix_store_empties_when_the_weights_change_or_on_reset(tiny):
    model, tokenizer = copy.deepcopy(tiny[0]), tiny[1]  # (its weights are replaced below)
    messages = _messages("where was Edra Vane born?")
    agent = LLMAgent(model, tokenizer, temperature=0, max_new_tokens=4)
    n = len(_acted(agent, render_transcript(messages), _info(messages))[1].prompt_ids)

    def fed_by_a_new_session(env_index: int) -> int:
        fed, handle = _count_fed_tokens(model)
        agent.act_batch([render_transcript(messages)], [{**_info(messages), "env_index": env_index}])
        handle.remove()
        return fed[0]

    assert fed_by_a_new_session(1) == 1  # the same prompt in another env: all but its last token stored
    weight = next(model.parameters())
    with torch.no_grad():
        weight.mul_(1.0)  # in place, as an optimizer's step: the stored keys may be another model's
    assert fed_by_a_new_session(2) == n
    assert fed_by_a_new_session(3) == 1
    model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()}, assign=True)  # new tensors
    assert fed_by_a_new_session(4) == n
    agent.reset()
    assert fed_by_a_new_session(5) == n
    with pytest.raises(ValueError, match="prefix_cache_tokens must be >= 0"):
        LLMAgent(model, tokenizer, prefix_cache_tokens=-1)


def test_caches_follow_env_index_when_the_batch_shrinks(tiny):
    """A collector drops finished envs from the batch; ``info["env_index"]`` keeps each env on its own cache."""
    model, tokenizer = tiny
    agent = LLMAgent(model, tokenizer, temperature=0, max_new_tokens=4)
    sessions = [_messages(q) for q in ("where was Edra Vane born?", "Mira Quell?", "where was Ikel Osk born?")]
    infos = [_info(m, env_index=i) for i, m in enumerate(sessions)]
    actions = agent.act_batch([render_transcript(m) for m in sessions], infos)
    grown = [m + [{"role": "assistant", "content": a}, {"role": "user", "content": "ok"}]
             for m, a in zip(sessions, actions)]
    fed, handle = _count_fed_tokens(model)
    (action,) = agent.act_batch([render_transcript(grown[2])], [_info(grown[2], env_index=2)])
    handle.remove()
    assert fed[0] < 10  # only the new turn, not the whole context of env 2
    fresh = LLMAgent(model, tokenizer, temperature=0, max_new_tokens=4)
    assert action == fresh.act(render_transcript(grown[2]), _info(grown[2]))


def test_same_seed_same_actions(tiny):
    model, tokenizer = tiny
    questions = ["where was Tolis Marr born?", "Mira Quell?"]

    def texts(seed):
        agent = LLMAgent(model, tokenizer, temperature=1.5, max_new_tokens=10, seed=seed)
        return [[s.text for s in steps] for steps in _run_sessions(agent, questions, steps=2)]

    assert texts(7) == texts(7)
    assert texts(7) != texts(8)


def test_choose_scores_candidates_by_likelihood(tiny):
    model, tokenizer = tiny
    messages = _messages("where was Edra Vane born?")
    candidates = ['search("Edra Vane")', 'search("Tolis Marr")', "open(3)", 'answer("Oskarde")', "scroll(\"down\")"]
    info = _info(messages, candidates=candidates)
    agent = LLMAgent(model, tokenizer, mode="choose", temperature=1.0, seed=0)
    action, step = _acted(agent, render_transcript(messages), info)
    assert action == candidates[step.choice] and step.text == action
    assert float(step.choice_probs.sum()) == pytest.approx(1.0, abs=1e-9)
    likelihoods = []
    for ids in step.candidate_ids:
        reference = AgentStep(0, step.prompt_ids, ids, torch.zeros(len(ids)), "")
        likelihoods.append(float(_reference_logprobs(model, reference).sum()))
    order = sorted(range(len(candidates)), key=lambda c: likelihoods[c])
    assert sorted(range(len(candidates)), key=lambda c: float(step.choice_probs[c])) == order
    torch.testing.assert_close(step.logprobs, _reference_logprobs(model, step), atol=1e-4, rtol=0)
    greedy = LLMAgent(model, tokenizer, mode="choose", temperature=0)
    assert greedy.act(render_transcript(messages), info) == candidates[order[-1]] == 'search("Edra Vane")'


def test_choose_batches_envs_and_small_score_budgets_agree(tiny):
    model, tokenizer = tiny
    prompts = [_messages("where was Edra Vane born?"), _messages("a longer question about Mira Quell and Varn Holt?")]
    infos = [_info(prompts[0], candidates=["open(1)", 'answer("Oskarde")']),
             _info(prompts[1], candidates=['search("Mira Quell")', "open(2)", 'find("born")'])]
    observations = [render_transcript(m) for m in prompts]
    probs = []
    for budget in (1 << 16, 40):
        agent = LLMAgent(model, tokenizer, mode="choose", length_normalize=True, max_score_tokens=budget)
        _, steps = agent.act_batch_recorded(observations, infos)
        probs.append(steps)
    for a, b in zip(*probs):
        torch.testing.assert_close(a.choice_probs, b.choice_probs, atol=_path_tol(a), rtol=0)


def _three_steps(model: Any, tokenizer: Any, mode: str, max_prompt_tokens: int) -> list[AgentStep]:
    """Three batched steps of three sessions of different lengths (each step's result appended to its session),
    by a new agent feeding at most ``max_prompt_tokens`` prompt tokens a pass: every step's record."""
    questions = ["where was Edra Vane born?", "a longer question about Mira Quell and Varn Holt?", "Oskarde?"]
    candidates = ['search("Edra Vane")', "open(1)", 'answer("Oskarde")']
    agent = LLMAgent(model, tokenizer, mode=mode, temperature=1.0, seed=3, max_new_tokens=12,
                     max_prompt_tokens=max_prompt_tokens)
    turns: list[list[tuple[str, str]]] = [[] for _ in questions]
    steps: list[AgentStep] = []
    for k in range(3):
        messages = [_messages(q, t) for q, t in zip(questions, turns)]
        actions, batch = agent.act_batch_recorded([render_transcript(m) for m in messages],
                                                  [_info(m, candidates=candidates) for m in messages])
        steps += batch
        for t, action in zip(turns, actions):
            t.append((action, f"[Result {k}]"))
    return steps


@pytest.mark.parametrize("mode", ["generate", "choose"])
def test_prompts_past_max_prompt_tokens_go_through_in_runs_and_act_the_same(tiny, mode):
    # One row per pass (a cap below any prompt's width) against the whole batch in one pass, over three steps:
    # the first with no cache (the runs' keys copied into the batch's cache), then from each session's cache
    # (the runs writing their rows of it in place). The same actions, and the same log-probs to float rounding
    # (a matrix product over fewer rows may sum in another order).
    model, tokenizer = tiny
    runs = [_three_steps(model, tokenizer, mode, cap) for cap in (1 << 20, 1)]
    for a, b in zip(*runs):
        assert (a.text, a.prompt_ids, a.gen_ids) == (b.text, b.prompt_ids, b.gen_ids)
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=_path_tol(a), rtol=0)
        if mode == "choose":
            torch.testing.assert_close(a.choice_probs, b.choice_probs, atol=_path_tol(a), rtol=0)
    with pytest.raises(ValueError, match="max_prompt_tokens must be >= 1"):
        LLMAgent(model, tokenizer, max_prompt_tokens=0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 5)), min_size=1, max_size=4))
def test_a_padded_batch_pass_gets_the_mask_transformers_would_build(shapes):
    # The agent lays a batch out as cached keys right-aligned in `past` columns, then new tokens right-aligned in
    # `width` (LLMAgent._forward) and builds the pass's 4D mask itself: it must be Transformers' own from the 2D
    # mask (or the 2D mask, where Transformers would build none and run SDPA's causal kernel).
    from transformers.masking_utils import sdpa_mask

    from agents.lm import padded_causal_mask

    past, width = max(p for p, _ in shapes), max(n for _, n in shapes)
    mask = torch.zeros((len(shapes), past + width), dtype=torch.long)
    for i, (p, n) in enumerate(shapes):
        mask[i, past - p : past] = 1
        mask[i, past + width - n :] = 1
    model = build_tiny_model(train_tokenizer(_texts()[:4], vocab_size=300), "100k", seed=0)
    theirs = sdpa_mask(batch_size=len(shapes), q_length=width, kv_length=past + width, q_offset=past,
                       attention_mask=mask.bool())
    ours = padded_causal_mask(model, mask, width)
    if theirs is None:
        assert ours is mask
    else:
        assert ours.dtype == torch.bool and torch.equal(ours, theirs.expand_as(ours))
    model.config._attn_implementation = "eager"  # any other attention: the 2D mask, for Transformers to convert
    assert padded_causal_mask(model, mask, width) is mask


@pytest.mark.parametrize("mode", ["choose", "generate"])
def test_cache_room_the_agent_leaves_unset_is_never_read(tiny, mode, monkeypatch):
    # The batch's cache buffers are allocated unset (only the padding in front of a row's keys is zeroed): the
    # room after the cache is written by the passes that extend it before anything reads it. Filled with NaN
    # instead, every step must come out the same, bit for bit (one pass per row and the whole batch at once).
    model, tokenizer = tiny
    empty = torch.Tensor.new_empty
    for cap in (1 << 20, 1):
        clean = _three_steps(model, tokenizer, mode, cap)
        with monkeypatch.context() as patch:
            patch.setattr(torch.Tensor, "new_empty", lambda t, *a, **k: empty(t, *a, **k).fill_(float("nan")))
            poisoned = _three_steps(model, tokenizer, mode, cap)
        for a, b in zip(clean, poisoned, strict=True):
            assert (a.text, a.prompt_ids, a.gen_ids) == (b.text, b.prompt_ids, b.gen_ids)
            assert torch.equal(a.logprobs, b.logprobs) and not a.logprobs.isnan().any()
            if mode == "choose":
                assert torch.equal(a.choice_probs, b.choice_probs)


def test_choose_records_the_policy_the_learner_computes(tiny):
    # The agent's recorded probabilities and log-prob are candidate_log_policy's, the learner's function, applied
    # to the candidates' token log-probs: acting and learning share one policy, not two copies kept equal.
    model, tokenizer = tiny
    messages = _messages("where was Edra Vane born?")
    candidates = ['search("Edra Vane")', "open(3)", 'answer("Oskarde")']
    for temperature, normalize in ((0.7, True), (1.3, False), (0.0, True)):
        agent = LLMAgent(model, tokenizer, mode="choose", temperature=temperature, length_normalize=normalize, seed=0)
        _, step = _acted(agent, render_transcript(messages), _info(messages, candidates=candidates))
        sums = torch.stack([_reference_logprobs(model, AgentStep(0, step.prompt_ids, ids, torch.zeros(len(ids)), ""))
                            .sum() for ids in step.candidate_ids])
        expected = candidate_log_policy(sums, [len(ids) for ids in step.candidate_ids], [len(candidates)],
                                        [normalize], [temperature or 1.0])[0]
        assert step.choice_policy == {"temperature": temperature or 1.0, "length_normalize": normalize}
        torch.testing.assert_close(torch.tensor(step.choice_logprob, dtype=torch.float64), expected[step.choice],
                                   atol=1e-4, rtol=0)
        if temperature:
            torch.testing.assert_close(step.choice_probs, expected.exp(), atol=1e-4, rtol=0)
        else:
            assert step.choice == int(expected.argmax()) and float(step.choice_probs[step.choice]) == 1.0


def test_a_choice_of_one_candidate_runs_no_pass_and_a_session_it_continues_acts_as_a_fresh_one(tiny):
    # A forced action (the compaction a full context must make) has pi = 1 whatever the model says: it is not
    # scored, the others of its batch are scored as if it were not there, and a session that goes on after it
    # recomputes its keys (the forced step kept none) and acts as an agent that never saw the session.
    model, tokenizer = tiny
    rows, hook = _passes(model)
    try:
        forced = 'compact("Edra Vane: no birthplace yet")'
        questions = ["where was Edra Vane born?", "where was Mira Quell born?", "a question about Varn Holt?"]
        messages = [_messages(q) for q in questions]
        candidates = [["open(1)", 'answer("Oskarde")'], [forced], ['search("Varn Holt")', "open(2)"]]
        infos = [_info(m, candidates=c, env_index=i) for i, (m, c) in enumerate(zip(messages, candidates))]
        agent = LLMAgent(model, tokenizer, mode="choose", temperature=1.0, seed=0)
        actions, steps = agent.act_batch_recorded([render_transcript(m) for m in messages], infos)
        assert rows and set(rows) == {2}  # the prompt pass and the tree pass, over the two envs that choose
        assert actions[1] == forced and steps[1].choice == 0 and steps[1].choice_logprob == 0.0
        assert steps[1].choice_probs.tolist() == [1.0] and not steps[1].logprobs.any()
        assert steps[1].gen_ids == agent.encode_action(forced) == steps[1].candidate_ids[0]
        alone = LLMAgent(model, tokenizer, mode="choose", temperature=1.0, seed=0)
        _, pair = alone.act_batch_recorded([render_transcript(messages[i]) for i in (0, 2)],
                                           [infos[0], {**infos[2], "env_index": 1}])
        for a, b in zip([steps[0], steps[2]], pair):
            torch.testing.assert_close(a.choice_probs, b.choice_probs, atol=_path_tol(a), rtol=0)
            torch.testing.assert_close(a.logprobs, b.logprobs, atol=_path_tol(a), rtol=0)
        rows.clear()
        assert agent.act_batch_recorded([render_transcript(messages[1])], [infos[1]])[1][0].choice == 0
        assert rows == []  # a batch of forced choices runs no pass at all
        # The forced env's session goes on (a custom env may offer one candidate mid-session).
        later = _messages(questions[1], [(forced, "[Result 0]\n1. Mira Quell /wiki/Mira_Quell")])
        info = _info(later, candidates=['search("Mira Quell")', "open(1)"], env_index=1)
        _, step = _acted(agent, render_transcript(later), info)
        _, fresh = _acted(LLMAgent(model, tokenizer, mode="choose", temperature=1.0, seed=0),
                          render_transcript(later), info)
        assert step.prompt_ids == fresh.prompt_ids
        torch.testing.assert_close(step.choice_probs, fresh.choice_probs, atol=_path_tol(step), rtol=0)
        torch.testing.assert_close(step.logprobs, _reference_logprobs(model, step), atol=1e-4, rtol=0)
    finally:
        hook.remove()


def _passes(model) -> tuple[list[int], object]:
    """The batch size of every forward pass ``model`` makes (a list that fills), and the hook to remove."""
    rows: list[int] = []
    hook = model.register_forward_pre_hook(lambda m, args, kw: rows.append((kw.get("input_ids", args and args[0])
                                                                            ).shape[0]), with_kwargs=True)
    return rows, hook


def _choose_sessions(agent, questions, steps=3):
    """Drive choose-mode sessions, one per env (repeats allowed), as the env would: (actions, steps) per step."""
    candidates = ['search("Edra Vane")', "open(1)", 'answer("Oskarde")', 'search("Mira Quell")']
    turns = [[] for _ in questions]
    history = []
    for k in range(steps):
        messages = [_messages(q, t) for q, t in zip(questions, turns)]
        infos = [_info(m, candidates=candidates, env_index=i) for i, m in enumerate(messages)]
        actions, batch = agent.act_batch_recorded([render_transcript(m) for m in messages], infos)
        history.append((actions, batch))
        for i, (t, action) in enumerate(zip(turns, actions)):  # (each env its own page: repeats part here)
            t.append((action, f"[Result {k}]\n{i}. Edra Vane /wiki/Edra_Vane"))
    return history


def test_a_repeated_choice_takes_its_stored_scores_and_acts_as_a_pass_would(tiny):
    # The group's runs open with the same prompt, so do repeated questions here; a sampled action that agrees
    # makes the next prompts agree too. The stored scores (and a repeat's borrowed keys, which the next step of
    # its session extends) must give the actions and probabilities of an agent that scores every choice.
    model, tokenizer = tiny
    questions = ["where was Edra Vane born?"] * 3 + ["where was Mira Quell born?"] * 2
    runs, passes = [], []
    for store in (4096, 0):
        rows, hook = _passes(model)
        try:
            agent = LLMAgent(model, tokenizer, mode="choose", temperature=1.0, seed=4, score_cache_choices=store)
            runs.append(_choose_sessions(agent, questions) + _choose_sessions(agent, questions[:2]))
        finally:
            hook.remove()
        passes.append(rows)
    for (actions, steps), (actions_off, steps_off) in zip(*runs):
        assert actions == actions_off
        for a, b in zip(steps, steps_off):
            assert (a.prompt_ids, a.gen_ids, a.choice) == (b.prompt_ids, b.gen_ids, b.choice)
            torch.testing.assert_close(a.choice_probs, b.choice_probs, atol=_path_tol(a), rtol=0)
            torch.testing.assert_close(a.logprobs, b.logprobs, atol=_path_tol(a), rtol=0)
            assert a.choice_logprob == pytest.approx(b.choice_logprob, abs=_path_tol(a))
    # The first step scores each distinct question once; the second run of two envs repeats the first's start.
    assert passes[0][:2] == [2, 2] and passes[1][:2] == [5, 5]
    assert sum(passes[0]) < sum(passes[1]) and len(passes[0]) < len(passes[1])


def test_the_score_store_empties_when_the_weights_change(tiny):
    model, tokenizer = tiny
    model = copy.deepcopy(model)
    messages = _messages("where was Edra Vane born?")
    info = _info(messages, candidates=['search("Edra Vane")', "open(3)"])
    agent = LLMAgent(model, tokenizer, mode="choose", temperature=1.0, seed=0)
    rows, hook = _passes(model)
    try:
        _, first = _acted(agent, render_transcript(messages), info)
        assert rows == [1, 1]
        _, again = _acted(agent, render_transcript(messages), {**info, "session_id": 1})
        assert rows == [1, 1] and torch.equal(again.choice_probs, first.choice_probs)  # stored: no pass
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.5)  # in place, as an optimizer's step writes
        _, changed = _acted(agent, render_transcript(messages), {**info, "session_id": 2})
        assert rows == [1, 1, 1, 1] and changed.choice == first.choice
        assert not torch.allclose(changed.logprobs, first.logprobs, atol=1e-3)
        agent.reset()
        _acted(agent, render_transcript(messages), {**info, "session_id": 3})
        assert len(rows) == 6
    finally:
        hook.remove()
    with pytest.raises(ValueError, match="score_cache_choices must be >= 0"):
        LLMAgent(model, tokenizer, score_cache_choices=-1)


def test_a_batch_of_short_and_long_contexts_scores_in_length_buckets_as_each_alone_would(tiny):
    """Sessions far apart in length (a parent's long context beside fresh children) go through separate passes,
    and every env's scores are those of a pass over it alone, to float32 rounding."""
    model, tokenizer = tiny
    candidates = ['search("Edra Vane")', "open(1)", 'answer("Oskarde")', 'search("Mira Quell")']
    long_turns = [(f'search("{n}")', f"[Result {k}]\n{k}. {n} /wiki/{n.replace(' ', '_')} " * 6)
                  for k, n in enumerate(NAMES * 2)]
    sessions = [_messages("where was Edra Vane born?", long_turns), _messages("x?"),
                _messages("where was Tolis Marr born?", long_turns[:3]), _messages("who?")]
    infos = [_info(m, candidates=candidates, env_index=i) for i, m in enumerate(sessions)]
    observations = [render_transcript(m) for m in sessions]
    agent = LLMAgent(model, tokenizer, mode="choose", seed=0, prefix_cache_tokens=0)
    _, batched = agent.act_batch_recorded(observations, infos)
    lengths = [len(step.prompt_ids) for step in batched]
    tree = sum(len(ids) for ids in batched[0].candidate_ids)
    assert len(length_buckets([(0, n, tree) for n in lengths])) > 1  # (the case this test is about)
    # A row's log-prob is a difference of float32 sums over at most `longest` terms (keys, then the vocabulary):
    # rounding bounds each by longest * eps * its magnitude; a wrong or shifted row is off by far more.
    longest = max(lengths) + tree
    for observation, info, step in zip(observations, infos, batched):
        alone = LLMAgent(model, tokenizer, mode="choose", seed=0, prefix_cache_tokens=0)
        _, (single,) = alone.act_batch_recorded([observation], [info])
        assert single.candidate_ids == step.candidate_ids and single.prompt_ids == step.prompt_ids
        tolerance = longest * torch.finfo(torch.float32).eps * max(1.0, float(single.logprobs.abs().max()))
        torch.testing.assert_close(step.logprobs, single.logprobs, atol=tolerance, rtol=0)
        torch.testing.assert_close(step.logprobs, _reference_logprobs(model, step), atol=tolerance, rtol=0)
        torch.testing.assert_close(step.choice_probs, single.choice_probs, atol=tolerance, rtol=0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3000), st.integers(1, 2000), st.integers(1, 400)), max_size=40),
       st.floats(1.0, 4.0), st.integers(0, 1 << 20))
def test_length_buckets_cover_every_row_once_within_their_padding_bound(shapes, slack, floor):
    def padded(rows):  # query-key slots of the prompt and tree passes over these rows laid out together
        past, new, tree = (max(shapes[i][k] for i in rows) for k in range(3))
        return len(rows) * (new * (past + new) + tree * (past + new + tree))

    buckets = length_buckets(shapes, slack=slack, floor=floor)
    assert sorted(i for bucket in buckets for i in bucket) == list(range(len(shapes)))
    for bucket in buckets:
        own = sum(padded([i]) for i in bucket)
        assert len(bucket) == 1 or padded(bucket) <= max(slack * own, floor)
    if shapes:  # never more padded work than the whole batch in one layout
        assert sum(padded(bucket) for bucket in buckets) <= padded(range(len(shapes)))


def test_candidate_log_policy_is_each_choices_own_log_softmax():
    sums = torch.tensor([-3.0, -1.0, -2.0, -6.0, -4.0], requires_grad=True)
    sizes, counts = [1, 2, 2, 3, 1], [2, 3]
    table = candidate_log_policy(sums, sizes, counts, [False, True], [0.5, 2.0])
    assert table.dtype == torch.float64 and table.shape == (2, 3) and table[0, 2] == float("-inf")
    alone = torch.tensor([-3.0, -1.0], dtype=torch.float64)
    torch.testing.assert_close(table[0, :2], torch.log_softmax(alone / 0.5, -1))
    mean = torch.tensor([-2.0 / 2, -6.0 / 3, -4.0 / 1], dtype=torch.float64)
    torch.testing.assert_close(table[1], torch.log_softmax(mean / 2.0, -1))
    table[1, 0].backward()
    assert sums.grad[:2].abs().sum() == 0 and sums.grad[2:].abs().sum() > 0
    with pytest.raises(ValueError, match="counts must add up"):
        candidate_log_policy(sums.detach(), sizes, [2, 2], [False, True], [1.0, 1.0])


def test_choose_without_candidates_says_how_to_get_them(tiny):
    model, tokenizer = tiny
    messages = _messages("x?")
    with pytest.raises(ValueError, match="candidates=True"):
        LLMAgent(model, tokenizer, mode="choose").act(render_transcript(messages), _info(messages))


def test_pack_session_rebuilds_one_sequence_with_generated_tokens_masked(tiny):
    model, tokenizer = tiny
    agent = LLMAgent(model, tokenizer, temperature=1.0, max_new_tokens=6, seed=1)
    history = _run_sessions(agent, ["where was Edra Vane born?"], steps=3)
    steps = [h[0] for h in history]
    (packed,) = pack_session(steps)
    last = steps[-1]
    assert packed.token_ids == last.prompt_ids + last.gen_ids and packed.choices == []
    masked = [j for j, m in enumerate(packed.gen_mask) if m]
    assert [packed.token_ids[j] for j in masked] == [t for s in steps for t in s.gen_ids]
    with torch.no_grad():
        logits = model(torch.tensor([packed.token_ids])).logits[0].float()
    fresh = torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(packed.token_ids[1:])[:, None]).squeeze(1)
    torch.testing.assert_close(torch.tensor(packed.old_logprobs)[masked], fresh[[j - 1 for j in masked]],
                               atol=1e-4, rtol=0)


def test_record_tokenizes_like_choosing_the_forced_action(tiny):
    """Teacher forcing records exactly the ids the agent conditions on and emits, without a model pass."""
    model, tokenizer = tiny
    actions = ['search("Edra Vane")', "open(1)", 'answer("Oskarde")']
    recorded, chosen = LLMAgent(model, tokenizer), LLMAgent(model, tokenizer, mode="choose")
    turns = []
    for k, action in enumerate(actions):
        messages = _messages("where was Edra Vane born?", turns)
        obs = render_transcript(messages)
        (a,) = recorded.record([obs], [_info(messages)], [action])
        _, b = _acted(chosen, obs, _info(messages, candidates=[action]))
        assert (a.prompt_ids, a.gen_ids, a.text) == (b.prompt_ids, b.gen_ids, b.text)
        turns.append((action, f"[Result {k}]"))
    assert len(pack_session([a])) == 1


def test_weights_made_under_inference_mode_never_use_the_store(tiny):
    # Inference tensors keep no version counter: the store cannot tell a change, so it stays empty.
    with torch.inference_mode():
        model = copy.deepcopy(tiny[0])
    messages = _messages("where was Edra Vane born?")
    agent = LLMAgent(model, tiny[1], temperature=0, max_new_tokens=4)
    with torch.inference_mode():
        n = len(_acted(agent, render_transcript(messages), _info(messages))[1].prompt_ids)
        fed, handle = _count_fed_tokens(model)
        agent.act_batch([render_transcript(messages)], [{**_info(messages), "env_index": 1}])
        handle.remove()
    assert fed[0] == n


@settings(max_examples=12, deadline=None)
@given(questions=st.lists(st.lists(st.sampled_from(["Edra ", "Vane", "ñandú", "東京", "9" * 40, " ", "\x00",
                                                     "<|user|>", "Question:", "born?"]), max_size=6).map("".join),
                          min_size=1, max_size=4),
       capacity=st.sampled_from([8, 64, 4096]))
def test_the_prefix_store_acts_as_no_store_on_any_prompts(tiny, questions, capacity):
    # Envs whose sessions start one after another, on prompts that share prefixes of any length (empty, odd
    # characters, special-token look-alikes), at store sizes down to one short prompt: the same choices and
    # probabilities as without the store.
    model, tokenizer = tiny
    candidates = ['search("Edra Vane")', "open(1)", 'answer("Oskarde")']
    runs = []
    for store in (capacity, 0):
        agent = LLMAgent(model, tokenizer, mode="choose", seed=1, prefix_cache_tokens=store)
        steps = []
        for k in range(3):
            envs = [i for i in range(len(questions)) if (i + k) % 2 == 0] or [0]
            messages = [_messages(questions[i]) for i in envs]
            infos = [{**_info(m, session_id=k, candidates=candidates), "env_index": i} for i, m in zip(envs, messages)]
            steps += agent.act_batch_recorded([render_transcript(m) for m in messages], infos)[1]
        runs.append(steps)
    for a, b in zip(*runs):
        assert (a.text, a.prompt_ids) == (b.text, b.prompt_ids)
        torch.testing.assert_close(a.choice_probs, b.choice_probs, atol=_path_tol(a), rtol=0)


def test_choose_mode_encodes_each_candidate_as_encode_action_does(tiny):
    """The candidates are tokenized in one call per step: each one's ids are those encode_action gives it."""
    model, tokenizer = tiny
    agent = LLMAgent(model, tokenizer, mode="choose", seed=0)
    candidates = [['search("Edra Vane")', 'answer("x")', 'open(3)'], ['search("Orin Tal")'], ['answer("ä ☃ 12")']]
    infos = [_info(_messages("where was Edra Vane born?"), session_id=k, candidates=c) for k, c in enumerate(candidates)]
    _, steps = agent.act_batch_recorded([""] * len(infos), infos)
    for step, cands in zip(steps, candidates):
        assert step.candidate_ids == [agent.encode_action(c) for c in cands]
