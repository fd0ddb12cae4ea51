"""What code outside the env reads of it (``envs.view``), and the parts the env is made of: the browsing tools,
the grading and the candidates, each used alone; and the web, which imports nothing above it."""

from __future__ import annotations

import ast
import dataclasses
import pickle
from pathlib import Path

import gymnasium as gym
import pytest

import envs
from agents import OracleAgent
from envs import grading
from envs.actions import ActionError
from envs.candidates import Candidates, notes
from envs.sb3 import CandidateActions
from envs.session import Session
from envs.tools import WebTools, make_backend
from helpers import SITE_SIZE

WEB = Path(envs.__file__).parent / "web"


def make(env_id="mosaic/WebQA-v0", **kwargs):
    kwargs.setdefault("site_size", SITE_SIZE)
    return gym.make(env_id, **kwargs)


def fresh_session() -> Session:
    return Session(id=0, parent=None, kind="root", depth=0, messages=[], pieces=[], tokens=0)


@pytest.mark.parametrize("env_id", sorted(envs.VARIANTS))
def test_the_view_reads_the_settings_through_wrappers(env_id):
    env = make(env_id, session_max_tokens=1234, chunk_tokens=99, max_sessions=5, max_fork_depth=1, split="test",
               hops=(1, 2), summary_choices=True)
    seen = envs.view(CandidateActions(env))
    allowed = envs.VARIANTS[env_id]
    assert (seen.allow_compact, seen.allow_fork) == (allowed["allow_compact"], allowed["allow_fork"])
    assert (seen.session_max_tokens, seen.chunk_tokens, seen.max_sessions, seen.max_fork_depth) == (1234, 99, 5, 1)
    assert seen.candidates and seen.summary_choices  # (the wrapper switched candidates on)
    assert seen.tasks and all(t.split == "test" and 1 <= t.hops <= 2 for t in seen.tasks)
    assert seen.site is envs.view(env).site and envs.view(seen) is seen


def test_the_view_is_read_only_and_its_tasks_are_the_env_s_as_asked():
    env = make(compare_answer="year", families="compare", split="all")
    seen = envs.view(env)
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen.session_max_tokens = 1
    assert isinstance(seen.tasks, tuple)
    task = seen.tasks[0]
    assert seen.task(task.id) == task and task.answer_kind == "year"
    with pytest.raises(KeyError):
        seen.task("no such task")


def test_the_view_of_an_env_that_is_no_webqa_env_is_a_type_error():
    with pytest.raises(TypeError, match="CartPoleEnv is not a WebQA env"):
        envs.view(gym.make("CartPole-v1"))
    with pytest.raises(TypeError, match="str is not a WebQA env"):
        envs.view("mosaic/WebQA-v0")


def test_a_snapshot_taken_through_the_view_resumes_exactly():
    env, other = make(candidates=True), make(candidates=True)
    env.reset(seed=3)
    for action in ('search("a question")', "open(1)", 'scroll("down")'):
        env.step(action)
    snap = pickle.loads(pickle.dumps(envs.view(env).snapshot()))
    after = env.step("open(2)")
    other.reset(options={"snapshot": snap})
    again = other.step("open(2)")
    assert again[0] == after[0] and again[1:4] == after[1:4] and again[4] == after[4]
    assert envs.view(other).acting_session() == envs.view(env).acting_session()


def test_the_view_reads_the_episode_as_its_last_info_holds_it():
    env = make(session_max_tokens=1500)
    agent = OracleAgent(env, compact_at=0.3, fork=True)
    obs, info = env.reset(seed=1)
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(agent.act(obs, info))
        done = terminated or truncated
    seen = envs.view(env)
    assert seen.trajectory() == info["trajectory"] and seen.session_tree() == info["trajectory"]["sessions"]
    assert len(seen.session_tree()) > 1  # (it compacted or forked: a tree, not one session)


def test_the_oracle_takes_the_env_or_its_view_alike():
    env = make("mosaic/WebQA-Single-v0", split="test")
    by_env, by_view = OracleAgent(env, compact_at=0.5, fork=True), OracleAgent(envs.view(env), compact_at=0.5, fork=True)
    assert (by_env.fork, by_env.compact_at) == (by_view.fork, by_view.compact_at) == (False, None)
    obs, info = env.reset(seed=0)
    assert by_env.act(obs, info) == by_view.act(obs, info)


def test_the_tools_show_pages_and_refuse_what_the_site_lacks(small_site):
    tools = WebTools(small_site, make_backend("text", small_site))
    session = fresh_session()
    with pytest.raises(ActionError, match="no page is open"):
        tools.run(session, "scroll", "down")
    shown = tools.run(session, "search", small_site.tasks[0].search_queries[0])
    assert shown.text.startswith("[Search results: ") and shown.mentions_of in shown.text
    assert session.page is not None and session.chunk == 0 and len(session.pages_read) == 1
    with pytest.raises(ActionError, match="no link 999"):
        tools.run(session, "open", 999)
    with pytest.raises(ActionError, match="outside this website"):
        tools.run(session, "open", "https://elsewhere.example/page")
    opened = tools.run(session, "open", 1)
    assert session.page.url == tools.resolve_target(fresh_session(), session.page.url)
    assert opened.text.startswith(f"[Page: {session.page.title} | {session.page.url} | part 1 of ")
    missing = tools.run(session, "find", "zzzz-not-on-any-page")
    assert "no passage contains it" in missing.text and missing.mentions_of == ""


def test_grading_takes_aliases_and_marks_a_gold_page_once(small_site):
    task = next(t for t in small_site.tasks if t.aliases and t.subtasks)
    assert grading.answer_right(task, f"  {task.aliases[0].upper()} ") and not grading.answer_right(task, "nobody")
    assert (grading.answer_reward(True), grading.answer_reward(False)) == (1.0, 0.0)
    sub = task.subtasks[0]
    assert grading.finish_right(task, sub.question, sub.answer)
    assert not grading.finish_right(task, "a question it never asked", sub.answer)
    gold_page = sorted(grading.gold_urls(small_site, task))[0]
    reached: set[str] = set()
    marks = [grading.step_marks(small_site, task, "open", url=url, reached=reached, success=False, fork_task=None,
                                result=None) for url in (gold_page, gold_page, "/no/such/page")]
    assert marks == [(True, False), (False, False), (False, True)] and reached == {gold_page, "/no/such/page"}


def test_candidates_offer_summaries_from_what_the_session_read(small_site):
    session = fresh_session()
    session.steps, session.pages_read = 1, ["Search: x"]
    text = "\n".join(f"{d.title} was here." for _, d in zip(range(3), small_site.documents()))
    complete_only, with_choice = Candidates(small_site), Candidates(small_site, summary_choices=True)
    complete_only.record(session, text)
    assert session.mentions and session.facts
    assert complete_only.summaries(session) == [notes(session)]
    assert with_choice.summaries(session) == [notes(session), notes(session, keep_facts=False)]
    assert notes(session, keep_facts=False) == "Pages read: Search: x. Notes: none"
    task = small_site.tasks[0]
    actions = Candidates(small_site, allow_compact=False).actions(task, [], session)
    assert not any(a.startswith("compact(") for a in actions)
    assert any(a.startswith("compact(") for a in complete_only.actions(task, [], session))


def test_the_web_imports_nothing_above_it():
    above = []
    for path in sorted(WEB.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level > 1:
                above.append(f"{path.name}: from {'.' * node.level}{node.module or ''}")
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            above += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "envs" and not n.startswith("envs.web")]
    assert above == []
