"""Mosaic's marginal contributions (``algos.credit``): session chains, the rollout estimator on real branched
rollouts, and the likelihood estimator, on groups whose useful and useless sessions are known by construction."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from transformers import DynamicCache

import envs  # noqa: F401  (registers the environments)
from agents import Agent, OracleAgent
from agents.llm import LLMAgent
from agents.models import build_tiny_model, train_tokenizer
from algos.credit import advantages
from algos.learn.bc import TeacherForcing
from algos.credit.estimators import chains, likelihood_contributions, rollout_contributions
from algos.rollout import Collector, Request, Trajectory
from helpers import SITE_SIZE
from envs.actions import format_action

BUDGET = 14


def _make_env() -> gym.Env:
    return gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, hops=1, max_steps=BUDGET)


class Scripted(Agent):
    """Plays ``opening`` (one action a step, from the episode's start), then the oracle takes over."""

    def __init__(self, env: gym.Env, opening: list[str], compact_at: float | None = None):
        self.opening = opening
        self.oracle = OracleAgent(env, compact_at=compact_at)

    def reset(self, index: int | None = None) -> None:
        self.oracle.reset(index)

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if info["steps_used"] < len(self.opening):
            return self.opening[info["steps_used"]]
        return self.oracle.act(observation, info)


class AnswerIfSeen(Agent):
    """The continuation policy: hands on the gold answer when its context holds it, else gives up at once.

    So ``V(state)`` is 1 exactly when the facts found so far reached the context that acts next: what work
    carried across a handoff (a summary, a subagent's result) is worth. (The oracle would not do here: it
    replans from the gold path in every session it did not start, so its ``V`` only counts the steps left.)
    """

    def __init__(self, env: gym.Env):
        self.site = env.unwrapped.site

    def act(self, observation: str, info: dict[str, Any]) -> str:
        gold = self.site.task(info["task_id"]).answer
        text = gold if gold in observation else "unknown"
        return format_action("answer" if info["depth"] == 0 else "finish", text)


@pytest.fixture(scope="module")
def task():
    return _make_env().unwrapped.tasks[0]


def _run(agent: Agent, task, record_snapshots: bool = True, student: LLMAgent | None = None,
         budget: int = BUDGET) -> Trajectory:
    if student is not None:
        agent = TeacherForcing(agent, student)
    request = Request(seed=0, options={"task_id": task.id, "max_steps": budget})
    (trajectory,) = Collector(_make_env, 1).run(agent, [request], record_snapshots=record_snapshots)
    return trajectory


def _cut(task, student: LLMAgent | None = None) -> Trajectory:
    """Searches, reads the fact and compacts on its last step (budget 3): the new session never acts. R = 0"""
    t = _run(OracleAgent(_make_env(), compact_at=0.2), task, student=student, budget=3)
    assert [(s["kind"], s["steps"]) for s in t.tree["sessions"]] == [("root", 3), ("compact", 0)]
    assert t.reward == 0.0 and task.answer in t.tree["sessions"][0]["handoff"]
    return t


def _group(task, student: LLMAgent | None = None) -> dict[str, Trajectory]:
    """Four trajectories of one task whose sessions' worth is known by construction.

    useful:   session 0 finds the fact and compacts with it, session 1 answers.             R = 1
    useless:  session 0 compacts at once ("Nothing found yet."), session 1 does all the work. R = 1
    fail:     answers without looking.                                                      R = 0
    fork:     root forks the whole question at once; the child finds the fact, compacts, finishes with it;
              the root then finds it again, compacts, answers (sessions: 0 root, 1 fork, 2 its compaction,
              3 the root's compaction).                                                     R = 1
    """
    env = _make_env()
    return {
        "useful": _run(OracleAgent(env, compact_at=0.2), task, student=student),
        "useless": _run(Scripted(env, [format_action("compact", "Nothing found yet.")]), task, student=student),
        "fail": _run(Scripted(env, [format_action("answer", "I do not know")]), task, student=student),
        "fork": _run(Scripted(env, [format_action("fork", task.question)], compact_at=0.2), task, student=student),
    }


@pytest.fixture(scope="module")
def group(task) -> dict[str, Trajectory]:
    runs = _group(task)
    # The scenario is what the docstring says it is.
    assert [t.reward for t in runs.values()] == [1.0, 1.0, 0.0, 1.0]
    useful, useless, fork = runs["useful"].tree["sessions"], runs["useless"].tree["sessions"], runs["fork"].tree["sessions"]
    assert len(useful) == 2 and task.answer in useful[0]["handoff"]
    assert len(useless) == 2 and task.answer not in useless[0]["handoff"]
    assert [(s["kind"], s["parent"]) for s in fork] == [("root", None), ("fork", 0), ("compact", 1), ("compact", 0)]
    return runs


# Chains ----------------------------------------------------------------------------------------------------------


def _tree(*sessions: tuple[str, int | None]) -> Trajectory:
    rows = [{"id": k, "kind": kind, "parent": parent} for k, (kind, parent) in enumerate(sessions)]
    return Trajectory(group=0, task_id="t", budget=8, reward=0.0, tree={"sessions": rows})


def test_chains_follow_compactions_from_each_root_or_fork_session():
    # 0 root -> 1 compacts it; 1 forks 2 (which compacts into 3) and 4; then 1 compacts into 5.
    t = _tree(("root", None), ("compact", 0), ("fork", 1), ("compact", 2), ("fork", 1), ("compact", 1))
    assert chains(t) == [[0, 1, 5], [2, 3], [4]]
    assert chains(_tree(("root", None))) == [[0]]


def test_chains_of_a_real_tree_partition_its_sessions(group):
    assert chains(group["fork"]) == [[0, 3], [1, 2]]
    for t in group.values():
        found = sorted(sid for chain in chains(t) for sid in chain)
        assert found == t.session_ids


# Rollout estimator ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rollout_d(group):
    runs = list(group.values())
    d = rollout_contributions(runs, Collector(_make_env, 4), AnswerIfSeen(_make_env()), continuations=2, seed=0)
    return dict(zip(group, d))


def test_a_useless_session_gets_less_rollout_credit_than_a_useful_one(rollout_d):
    assert rollout_d["useless"][0] < rollout_d["useful"][0]
    # The useless trajectory's credit went to the session that did its work.
    assert rollout_d["useless"][1] > rollout_d["useless"][0]


def test_rollout_contributions_are_value_differences_at_each_boundary(group, rollout_d):
    # V = 1 where the fact reached the context acting next, else 0; root chains start at V(reset) (0 here:
    # nothing seen yet) and fork chains at V before the fork; they end at R (root) or at V once the result
    # is back (fork).
    assert rollout_d["useful"] == pytest.approx([1.0, 0.0])
    assert rollout_d["useless"] == pytest.approx([0.0, 1.0])
    assert rollout_d["fail"] == pytest.approx([0.0])
    # root chain [0, 3]: V(reset) 0 -> V(start of 3) = 1 -> R = 1; fork chain [1, 2]: V before fork 0 -> 1 -> 1.
    assert rollout_d["fork"] == pytest.approx([1.0, 1.0, 0.0, 0.0])
    for name, t in group.items():
        root_chain = chains(t)[0]
        assert rollout_d[name][root_chain].sum() == pytest.approx(t.reward - 0.0)  # they telescope from V(reset)


def test_the_first_session_credit_does_not_depend_on_how_the_rest_of_the_group_ended(group):
    # Issue 16's bias: a root chain that starts at the group's mean reward gives the first session less the
    # more of the group succeeded (in an all-success group it can only lose). Started at V(reset) from
    # continuations, a session's D is the same whatever the other trajectories' rewards.
    def first(others: str, root_start: str) -> float:
        runs = [group["useful"], group[others]]
        d = rollout_contributions(runs, Collector(_make_env, 4), AnswerIfSeen(_make_env()), continuations=1,
                                  seed=0, root_start=root_start)
        return float(d[0][0])

    assert first("useless", "rollout") == pytest.approx(first("fail", "rollout")) == pytest.approx(1.0)
    # The old start, still available by name, is what moved: 1 - mean R is 0 in [useful, useless], 0.5 with fail.
    assert first("useless", "group_mean") == pytest.approx(0.0)
    assert first("fail", "group_mean") == pytest.approx(0.5)
    with pytest.raises(ValueError, match="root_start='mean'"):
        first("fail", "mean")


def test_a_group_rollout_root_start_is_one_value_for_the_group_from_m_continuations(group, task, monkeypatch):
    """Every trajectory of a group resets to the same state (one task, one budget), so V(reset) can be estimated
    once: M continuations for the group instead of M per trajectory, the same credit where V(reset) is sure."""
    runs = list(group.values())
    asked: list[int] = []
    real_run = Collector.run

    def counting_run(self, agent, requests, **kwargs):
        asked.append(len(requests))
        return real_run(self, agent, requests, **kwargs)

    monkeypatch.setattr(Collector, "run", counting_run)
    d = {start: rollout_contributions(runs, Collector(_make_env, 4), AnswerIfSeen(_make_env()), continuations=2,
                                      seed=0, root_start=start) for start in ("rollout", "group_rollout")}
    # The policy's V(reset) is 0 for every trajectory (nothing seen yet): shared or not, the same credit.
    for per_trajectory, shared in zip(d["rollout"], d["group_rollout"]):
        assert shared == pytest.approx(per_trajectory)
    # The root's continuations: 2 per trajectory, against 2 for the whole group.
    assert asked[0] - asked[1] == 2 * (len(runs) - 1)
    # A group of two tasks or budgets has no one reset state: refused, naming what it needs.
    with pytest.raises(ValueError, match="one task and budget"):
        rollout_contributions([group["useful"], _cut(task)], Collector(_make_env, 2), AnswerIfSeen(_make_env()),
                              continuations=1, seed=0, root_start="group_rollout")


def test_a_fork_made_on_the_last_step_never_acts_and_gets_no_credit(group, task):
    # Budget 1: the root's only step forks, and the episode ends there. The child never acted, so neither it
    # nor the root (which started and ended at V = 0) moved anything.
    env = _make_env()
    t = _run(Scripted(env, [format_action("fork", task.question)]), task, budget=1)
    assert [(s["kind"], s["steps"]) for s in t.tree["sessions"]] == [("root", 1), ("fork", 0)] and t.reward == 0.0
    d = rollout_contributions([group["useful"], t], Collector(_make_env, 2), AnswerIfSeen(_make_env()),
                              continuations=1, seed=0)
    assert d[1] == pytest.approx([0.0, 0.0])
    assert d[0] == pytest.approx([1.0, 0.0])


def test_a_session_cut_off_by_the_budget_keeps_its_own_credit(group, task):
    # The episode ended with the compaction, so V at the new session's start is the final reward: the session
    # that acted carries the trajectory's whole R - mean, and the one that never acted gets nothing.
    runs = [group["useful"], _cut(task)]
    d = rollout_contributions(runs, Collector(_make_env, 2), AnswerIfSeen(_make_env()), continuations=1, seed=0)
    assert d[1] == pytest.approx([0.0 - 0.0, 0.0])  # R - V(reset), and 0 for the session that never acted


def test_mosaic_advantage_ranks_the_useful_session_above_the_useless_one(group, rollout_d):
    runs = list(group.values())
    rows = np.concatenate([np.full(t.num_sessions, i) for i, t in enumerate(runs)])
    a = advantages.mosaic([t.reward for t in runs], rows, np.concatenate(list(rollout_d.values())))
    first_row = np.cumsum([0] + [t.num_sessions for t in runs])
    useful, useless = first_row[0], first_row[1]
    assert a[useful] > a[useless]


@pytest.mark.parametrize("m", [0, -1, 1.5])
def test_rollout_contributions_need_at_least_one_continuation(group, m):
    with pytest.raises(ValueError, match="at least 1 continuation"):
        rollout_contributions([group["useful"]], Collector(_make_env, 1), AnswerIfSeen(_make_env()),
                              continuations=m, seed=0)


def test_continuations_below_one_are_refused_when_the_run_is_configured(capsys):
    # Before: M = 0 passed every check and failed deep in the first iteration ("boundary_values must be
    # finite", the mean of no continuations). Now the config and the command line refuse it, naming the fix.
    from algos.learn.config import TrainConfig
    from mosaic_gym.cli import main

    for m in (0, -2):
        with pytest.raises(ValueError, match=r"continuations=1 or more"):
            TrainConfig(continuations=m)
    assert TrainConfig(continuations=1).continuations == 1
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--continuations", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and "--continuations 1 or more" in err[-1]


def test_rollout_contributions_need_snapshots(task):
    t = _run(OracleAgent(_make_env(), compact_at=0.2), task, record_snapshots=False)
    with pytest.raises(ValueError, match="record_snapshots"):
        rollout_contributions([t], Collector(_make_env, 1), AnswerIfSeen(_make_env()), continuations=1, seed=0)


# Likelihood estimator ----------------------------------------------------------------------------------------------


class CopyModel(torch.nn.Module):
    """A hand-built scorer: the next token is likely exactly when it already occurs in the context.

    Under it, ``log p(answer("gold") | context)`` is high iff the context holds the gold answer's words.
    """

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                logits_to_keep: int | torch.Tensor = 0, use_cache: bool = False,
                past_key_values: DynamicCache | None = None, **_) -> SimpleNamespace:
        tokens = input_ids
        if past_key_values is not None:  # the cache holds the earlier tokens' ids (as its one layer's keys)
            if past_key_values.get_seq_length():
                tokens = torch.cat([past_key_values.layers[0].keys[:, 0, :, 0].long(), input_ids], dim=1)
            fed = input_ids.float()[:, None, :, None]
            past_key_values.update(fed, fed, 0)
        seen = torch.nn.functional.one_hot(tokens, self.vocab_size).cummax(dim=1).values[:, -input_ids.shape[1]:]
        logits = 8.0 * seen.float()
        if isinstance(logits_to_keep, torch.Tensor):  # as Transformers models take it: positions, or the last k
            logits = logits[:, logits_to_keep]
        elif logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return SimpleNamespace(logits=logits)


@pytest.fixture(scope="module")
def student(task):
    env = _make_env()
    site = env.unwrapped.site
    tokenizer = train_tokenizer([f"{d.title}\n{d.text}" for d in site.documents()] + [task.question] * 5,
                                vocab_size=800)
    return LLMAgent(build_tiny_model(tokenizer, "1m", seed=0), tokenizer, mode="choose", seed=0)


@pytest.fixture(scope="module")
def recorded(task, student) -> dict[str, Trajectory]:
    """The same four trajectories, with the student's tokens recorded at every step (teacher forcing)."""
    return _group(task, student=student)


def _direct_logp(model: torch.nn.Module, context: list[int], answer: list[int]) -> float:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([context + answer])).logits[0].float()
    logp = torch.log_softmax(logits[len(context) - 1 : -1], -1)
    return float(logp.gather(1, torch.tensor(answer)[:, None]).sum())


def test_likelihood_credit_goes_to_sessions_that_bring_the_answer_into_context(task, student, recorded):
    model = CopyModel(len(student.tokenizer))
    d = dict(zip(recorded, likelihood_contributions(list(recorded.values()), model, student.encode_action,
                                                    task.answer)))
    assert d["useful"][0] > d["useless"][0] + 1.0
    assert d["useless"][1] > d["useless"][0] + 1.0  # the session that found the fact
    assert abs(d["useless"][0]) < 1.0  # compacting with "Nothing found yet." moved nothing
    assert d["fork"][1] > 1.0  # the subagent's result brought the answer to its parent
    assert abs(d["fail"][0]) < 1.0  # answering without looking brought nothing


def test_likelihood_credit_of_a_session_cut_off_by_the_budget_is_measured_at_its_own_end(task, student):
    # The next session never acted (no prompt of it was seen), so "after" is this session's final context.
    cut = _cut(task, student=student)
    (d,) = likelihood_contributions([cut], CopyModel(len(student.tokenizer)), student.encode_action, task.answer)
    assert d[0] > 1.0 and d[1] == 0.0


def test_two_forks_of_one_task_are_each_scored_around_their_own_fork_step(task, student):
    # The root forks the same task twice; the first child finishes with nothing, the second with the answer.
    # Each child is scored at the parent's prompts around its own fork, so only the second gets the credit
    # (matching the first fork step for both gave them identical D).
    env = _make_env()
    fork = format_action("fork", task.question)
    opening = [fork, format_action("finish", "nothing"), fork, format_action("finish", task.answer)]
    t = _run(Scripted(env, opening), task, student=student)
    sessions = t.tree["sessions"]
    assert [(s["kind"], s["parent"], s["task"]) for s in sessions[:3]] == [
        ("root", None, None), ("fork", 0, task.question), ("fork", 0, task.question)]
    (d,) = likelihood_contributions([t], CopyModel(len(student.tokenizer)), student.encode_action, task.answer)
    assert d[2] > d[1] + 1.0
    assert abs(d[1]) < 1.0


def test_likelihood_contributions_are_log_prob_differences_between_the_handoff_contexts(task, student, recorded):
    # With the real tiny policy: D of a compaction session = log p(gold | next session's first prompt) -
    # log p(gold | its own first prompt); of the last = its final context's minus its first prompt's.
    model = student.model
    answer = student.encode_action(format_action("answer", task.answer))
    d = likelihood_contributions(list(recorded.values()), model, student.encode_action, task.answer)
    for t, dt in zip(recorded.values(), d):
        assert dt.shape == (t.num_sessions,) and np.all(np.isfinite(dt))
    useful = recorded["useful"]
    first = [list(useful.steps[sid][0].prompt_ids) for sid in (0, 1)]
    last = useful.steps[1][-1]
    final = list(last.prompt_ids) + list(last.gen_ids)
    expected = [_direct_logp(model, first[1], answer) - _direct_logp(model, first[0], answer),
                _direct_logp(model, final, answer) - _direct_logp(model, first[1], answer)]
    assert d[0] == pytest.approx(expected, abs=1e-3)



def test_the_credit_bench_repeats_exactly_and_scores_every_variant_on_the_same_sessions():
    # bench_credit's figures (docs/algorithms.md, "Checks of the credit") come from one set of rollouts per
    # seed, scored by every variant: same seed, same numbers; same trajectories counted by each variant.
    from mosaic_gym.bench.bench_credit import VARIANTS, measure

    small = dict(groups=3, group_size=4, num_envs=8, policy="context")
    first, again = measure(1, **small), measure(1, **small)
    assert first == again
    assert len({first[name]["trajectories"] for name in VARIANTS}) == 1
    # M more per reset; shared by the group, M per group.
    assert first["continuation_steps_rollout"] > first["continuation_steps_group_rollout"] \
        > first["continuation_steps_group_mean"]


def test_the_credit_bench_runs_from_its_command_line(capsys):
    import json

    from mosaic_gym.bench.bench_credit import BENCHMARK, VARIANTS

    assert BENCHMARK.main(["--smoke", "--groups", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["bench"].startswith("credit") and set(VARIANTS) <= set(result["summary"])
    assert {k: result["settings"][k] for k in ("settings", "seeds", "groups", "group_size", "num_envs")} == \
        {"settings": "smoke", "seeds": 1, "groups": 1, "group_size": 4, "num_envs": 8}
