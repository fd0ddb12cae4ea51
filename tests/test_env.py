"""The multi-session env: Gymnasium conformance, determinism, sessions, budgets, snapshots, candidates."""

from __future__ import annotations

import pickle
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from agents import OracleAgent, RandomAgent
from envs.actions import MAX_ACTION_CHARS, ActionError, format_action, parse_action
from envs.spaces import SHARED_MEMORY_BYTES, AnyText
from helpers import SITE_SIZE, record_stream

IDS = sorted(envs.VARIANTS)


def make(env_id="mosaic/WebQA-v0", **kwargs):
    kwargs.setdefault("site_size", SITE_SIZE)
    return gym.make(env_id, **kwargs)


def run(env, agent, seed=0, options=None):
    obs, info = env.reset(seed=seed, options=options)
    agent.reset()
    history = [(obs, info)]
    while True:
        action = agent.act(obs, info)
        obs, reward, terminated, truncated, info = env.step(action)
        history.append((action, obs, reward, terminated, truncated, info))
        if terminated or truncated:
            return reward, info, history


@pytest.mark.parametrize("env_id", IDS)
def test_check_env_passes_for_every_registered_id(env_id):
    env = make(env_id, candidates=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped, skip_render_check=False)
    assert [str(w.message) for w in caught] == []


def test_spaces_describe_what_is_sent_and_read():
    env = make(session_max_tokens=300, max_steps=12)
    space = env.observation_space
    assert (env.action_space.max_length, space.max_length) == (MAX_ACTION_CHARS, SHARED_MEMORY_BYTES)
    # The action space's bound is the parser's: a call within it is read, one past it is not.
    pad = " " * (env.action_space.max_length - len('answer("x")'))
    assert parse_action(pad + 'answer("x")').name == "answer"
    with pytest.raises(ActionError, match="at most"):
        parse_action(pad + ' answer("x")')
    # The observation space's bound is what AsyncVectorEnv's shared memory carries, to the character.
    vec_space = gym.vector.utils.batch_space(space, 1)
    memory = gym.vector.utils.create_shared_memory(vec_space, n=1)
    fits = "x" * space.max_length
    gym.vector.utils.write_to_shared_memory(vec_space, 0, (fits,), memory)
    assert tuple(gym.vector.utils.read_from_shared_memory(vec_space, memory, n=1)[0]) == (fits,)
    with pytest.raises(ValueError, match="shared_memory"):
        gym.vector.utils.write_to_shared_memory(vec_space, 0, (fits + "x",), memory)
    # Real observations, past a full window and a forced compaction, stay within it.
    obs, info = env.reset(seed=0)
    agent = OracleAgent(env, compact_at=None)
    observations = [obs]
    while True:
        obs, _, terminated, truncated, info = env.step(agent.act(obs, info))
        observations.append(obs)
        if terminated or truncated:
            break
    assert any(env.unwrapped.count_tokens(o) > 300 for o in observations)
    assert all(space.contains(o) and len(o) <= space.max_length for o in observations)


def test_space_samples_stay_short_and_follow_the_seed():
    env = make()
    for space in (env.observation_space, env.action_space):
        space.seed(5)
        first = [space.sample() for _ in range(20)]
        space.seed(5)
        assert [space.sample() for _ in range(20)] == first
        assert all(isinstance(t, str) and len(t) <= space.sample_length for t in first)
        assert max(map(len, first)) > space.sample_length // 2  # lengths spread up to the cap, not near 0
    assert len(AnyText(max_length=3, sample_length=100, seed=0).sample()) <= 3
    with pytest.raises(ValueError, match="sample_length"):
        AnyText(sample_length=-1)


@pytest.mark.parametrize("env_id", IDS)
def test_same_seed_same_rollout_for_200_steps(env_id):
    """Two envs, identical actions (random candidates, with resets), 200+ steps: observations and infos equal."""
    envs_ = [make(env_id, candidates=True, max_steps=(10, 30)) for _ in range(2)]
    agents_ = [RandomAgent(seed=3, compact_prob=0.1, fork_prob=0.1) for _ in range(2)]
    streams = []
    for env, agent in zip(envs_, agents_):
        streams.append(record_stream(env, agent, 220))
    assert streams[0] == streams[1]
    assert pickle.dumps(streams[0]) == pickle.dumps(streams[1])


def test_different_seeds_give_different_tasks():
    env = make()
    task_ids = {env.reset(seed=s)[1]["task_id"] for s in range(10)}
    assert len(task_ids) > 1


def test_gym_make_vec_sync_and_async():
    for mode in ("sync", "async"):
        vec = gym.make_vec("mosaic/WebQA-v0", num_envs=2, vectorization_mode=mode, site_size=SITE_SIZE, max_steps=3)
        obs, info = vec.reset(seed=0)
        assert len(obs) == 2 and all(isinstance(o, str) for o in obs)
        obs, reward, terminated, truncated, info = vec.step(['search("x")', "nonsense"])
        assert list(info["steps_used"]) == [1, 1]
        assert info["action_error"][1] and not info["action_error"][0]
        twins = [make(max_steps=3) for _ in range(2)]
        for k, twin in enumerate(twins):
            twin.reset(seed=k)
        expected = [twin.step(a)[0] for twin, a in zip(twins, ['search("x")', "nonsense"])]
        assert tuple(obs) == tuple(expected) and "Search results" in obs[0]
        vec.close()


def test_bad_kwargs_name_the_fix():
    with pytest.raises(TypeError, match="did you mean 'max_steps'"):
        make(max_step=3)
    with pytest.raises(ValueError, match="overflow"):
        make(overflow="explode")
    with pytest.raises(ValueError, match="max_steps"):
        make(max_steps=0)
    with pytest.raises(ValueError, match="available hops"):
        make(hops=99)


def test_budget_int_range_list_and_reset_override():
    env = make(max_steps=(5, 9))
    budgets = {env.reset(seed=s)[1]["max_steps"] for s in range(40)}
    assert budgets == set(range(5, 10))
    env = make(max_steps=[4, 16])
    assert {env.reset(seed=s)[1]["max_steps"] for s in range(20)} == {4, 16}
    obs, info = env.reset(seed=0, options={"max_steps": 7})
    assert info["max_steps"] == 7 and "[Steps left: 7]" in obs
    assert "[Steps left" not in make(show_budget=False).reset(seed=0)[0]


def test_budget_truncates_with_reason_and_no_time_limit_double_count():
    env = make(max_steps=3)
    env.reset(seed=0)
    for i in range(3):
        obs, reward, terminated, truncated, info = env.step('find("x")')
    assert truncated and not terminated and info["truncation_reason"] == "max_steps"
    assert info["trajectory"]["steps_used"] == 3
    assert env.spec.max_episode_steps is None


def test_errors_cost_a_step_and_are_reported():
    env = make()
    env.reset(seed=0)
    for action, message in [("hello", "no tool call"), ("open(3)", "no page open"),
                            ('finish("x")', "root agent"), ("scroll()", "no page is open"),
                            ('open("/wiki/No_Such_Page_Anywhere")', "no page at")]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert message in info["action_error"]
        assert "Error: " + info["action_error"] in obs
    assert info["steps_used"] == 5


def test_compacted_session_holds_only_system_task_and_summary():
    env = make()
    obs, info = env.reset(seed=0)
    question = info["messages"][1]["content"]
    task = env.unwrapped.state.task
    env.step(format_action("search", task.search_queries[0]))
    before_obs, *_ = env.step("open(1)")
    obs, reward, terminated, truncated, info = env.step(format_action("compact", "NOTE: remember the vane"))
    assert info["session_kind"] == "compact" and info["parent_id"] == 0 and info["session_id"] == 1
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert "NOTE: remember the vane" in obs and task.question in obs
    assert "Search results" not in obs and "open(1)" not in obs
    assert info["messages"][0] == env.unwrapped.state.sessions[0].messages[0]
    assert question.split("\n")[0] in info["messages"][1]["content"]
    # the new session has no page on screen
    assert "no page" in env.step("scroll()")[4]["action_error"]


def test_fork_finish_round_trips_at_depth_two_and_session_tree():
    env = make(max_fork_depth=2)
    env.reset(seed=0)
    steps = [
        ('search("alpha")', 0), ('fork("child task")', 1), ('search("beta")', 1), ('fork("grandchild task")', 2),
        ('finish("deep result")', 1), ('finish("child result")', 0), ('answer("nope")', 0),
    ]
    for action, depth_after in steps:
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["action_error"] is None, info["action_error"]
        assert info["depth"] == depth_after
        if action.startswith("fork"):
            # a fresh context: the system prompt and the fork's task, none of the parent's steps
            assert 'search("alpha")' not in obs and 'search("beta")' not in obs
            assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert terminated and reward == 0.0
    tree = info["trajectory"]["sessions"]
    assert [(s["id"], s["parent"], s["kind"], s["depth"], s["task"], s["steps"], s["handoff"]) for s in tree] == [
        (0, None, "root", 0, None, 3, "nope"),
        (1, 0, "fork", 1, "child task", 3, "child result"),
        (2, 1, "fork", 2, "grandchild task", 1, "deep result"),
    ]
    assert env.unwrapped.session_tree() == tree
    view = env.unwrapped.acting_session()
    assert view.id == 0 and view.page is not None and view.pages_read == ("Search: alpha",)
    root_context = env.unwrapped.state.sessions[0].text
    assert "child result" in root_context and "deep result" not in root_context
    assert all(s["tokens_in"] > 0 and s["tokens_out"] > 0 for s in tree)


def test_fork_deeper_than_limit_truncates():
    env = make(max_fork_depth=1)
    env.reset(seed=0)
    env.step('fork("a")')
    *_, truncated, info = env.step('fork("b")')
    assert truncated and info["truncation_reason"] == "max_fork_depth"


def test_max_sessions_truncates():
    env = make(max_sessions=2)
    env.reset(seed=0)
    env.step('compact("one")')
    *_, truncated, info = env.step('compact("two")')
    assert truncated and info["truncation_reason"] == "max_sessions"


def test_budget_runs_out_inside_a_child():
    env = make(max_steps=4)
    env.reset(seed=0)
    env.step('fork("sub")')
    env.step('search("x")')
    env.step('search("y")')
    obs, reward, terminated, truncated, info = env.step('search("z")')
    assert truncated and info["truncation_reason"] == "max_steps" and info["depth"] == 1
    assert [s["steps"] for s in info["trajectory"]["sessions"]] == [1, 3]


def test_variants_refuse_disabled_tools():
    env = make("mosaic/WebQA-Single-v0")
    obs, info = env.reset(seed=0)
    assert "compact(" not in obs and "fork(" not in obs
    assert "not available" in env.step('compact("x")')[4]["action_error"]
    compact_only = make("mosaic/WebQA-Compact-v0")
    compact_only.reset(seed=0)
    assert "not available" in compact_only.step('fork("x")')[4]["action_error"]
    fork_only = make("mosaic/WebQA-Fork-v0")
    fork_only.reset(seed=0)
    assert "not available" in fork_only.step('compact("x")')[4]["action_error"]
    assert fork_only.step('fork("x")')[4]["session_kind"] == "fork"


@pytest.mark.parametrize("policy", ["force_compact", "truncate", "terminate"])
def test_overflow_policies(policy):
    env = make(session_max_tokens=700, overflow=policy, max_steps=40, candidates=True)
    obs, info = env.reset(seed=0)
    task = env.unwrapped.state.task
    env.step(format_action("search", task.search_queries[0]))
    assert info["must_compact"] is False
    for _ in range(20):
        obs, reward, terminated, truncated, info = env.step("open(1)")
        if terminated or truncated or "[Context full" in obs:
            break
        assert info["must_compact"] is False
    if policy == "force_compact":
        assert "[Context full" in obs and not (terminated or truncated)
        assert info["must_compact"] is True and info["messages"][-1]["content"].startswith("[Context full")
        assert len(info["candidates"]) == 1 and info["candidates"][0].startswith("compact(")
        obs, reward, terminated, truncated, info = env.step("I found the page about the vane.")
        assert info["session_kind"] == "compact" and "reply became the summary" in info["action_error"]
        assert info["must_compact"] is False
        assert "I found the page about the vane." in obs
    elif policy == "truncate":
        assert truncated and info["truncation_reason"] == "context_overflow"
    else:
        assert terminated and reward == 0.0 and info["termination_reason"] == "context_overflow"


def test_snapshot_restores_exactly_and_pickles():
    env = make(candidates=True)
    obs, info = env.reset(seed=4)
    query = env.unwrapped.state.task.search_queries[0]
    for action in (format_action("search", query), "open(1)", "scroll()"):
        obs, *_, info = env.step(action)
    snap = pickle.loads(pickle.dumps(env.unwrapped.snapshot()))
    actions = ['search("x")', "scroll()", 'fork("f")', "open(2)", 'finish("r")', 'compact("s")', "open(1)"]
    first = [env.step(a) for a in actions]
    obs2, info2 = env.reset(options={"snapshot": snap})
    assert obs2 == obs and info2 == {**info, "acted_session_id": -1}
    second = [env.step(a) for a in actions]
    assert first == second


def test_candidates_are_valid_deterministic_and_never_leak_unseen_answers(small_site):
    env = make(candidates=True, split="test")
    for seed in range(8):
        obs, info = env.reset(seed=seed)
        for _ in range(6):
            cands = info["candidates"]
            assert cands == env.unwrapped.candidate_actions()
            for c in cands:
                parse_action(c)
                if c.startswith("answer("):
                    value = parse_action(c).arg
                    assert value in env.unwrapped.state.sessions[info["session_id"]].text
            obs, reward, terminated, truncated, info = env.step(cands[len(cands) // 2])
            assert info["action_error"] is None, (cands, info["action_error"])
            if terminated or truncated:
                break


def test_no_wall_clock_in_info_and_render_ansi():
    env = make(render_mode="ansi")
    obs, info = env.reset(seed=0)
    assert set(info) >= {"task_id", "session_id", "acted_session_id", "session_kind", "parent_id", "depth",
                         "steps_used", "steps_left", "num_sessions", "messages", "action_error"}
    assert envs.render_transcript(info["messages"]) == obs
    text = env.render()
    assert text.endswith(obs) and "session 0" in text


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("compact_at, fork", [(None, False), (0.5, False), (None, True), (0.5, True)])
def test_oracle_solves_every_test_task(env_id, compact_at, fork):
    env = make(env_id)
    agent = OracleAgent(env, compact_at=compact_at, fork=fork)
    tasks = env.unwrapped.site.tasks_for("test")
    used_compact = used_fork = False
    for task in tasks:
        reward, info, history = run(env, agent, options={"task_id": task.id})
        assert reward == 1.0, (task.family, task.question, info.get("truncation_reason"), history[-1][0])
        kinds = {s["kind"] for s in info["trajectory"]["sessions"]}
        used_compact |= "compact" in kinds
        used_fork |= "fork" in kinds
    assert used_fork == (fork and env.unwrapped.allow_fork)
    if compact_at is not None and env.unwrapped.allow_compact:
        assert used_compact


@pytest.mark.parametrize("window", [400, 600])
def test_oracle_in_a_window_barely_larger_than_the_question_compacts_only_after_acting(window):
    # With the system prompt and question already past compact_at of the window, a fresh session must act
    # before it compacts again (it used to compact at once, forever, never reaching the search).
    env = make("mosaic/WebQA-v0", hops=1, session_max_tokens=window, max_steps=12)
    agent = OracleAgent(env, compact_at=0.5)
    for task in env.unwrapped.site.tasks_for("test")[:10]:
        _, info, history = run(env, agent, options={"task_id": task.id})
        actions = [h[0] for h in history[1:]]
        assert info["num_sessions"] > 1 and actions[0].startswith("search"), actions
        assert not any(a.startswith("compact") and b.startswith("compact") for a, b in zip(actions, actions[1:]))


# --- compare tasks that ask for the winning year ------------------------------------------------------------

COMPARE_KW = {"site_size": 300, "hops": (2, 3), "families": "compare", "max_steps": 24, "session_max_tokens": 2400,
              "candidates": True, "split": "all"}


def _answer_candidates(info: dict) -> list[str]:
    return [c for c in info["candidates"] if c.startswith(("answer(", "finish("))]


def test_compare_by_name_offers_the_names_it_asks_about_before_any_page_is_read():
    """The leak ``compare_answer="year"`` closes: asked for a name, the winner is among the answers on offer at
    the first step, so guessing succeeds without reading."""
    env = gym.make("mosaic/WebQA-Fork-v0", **COMPARE_KW)
    leaked = 0
    for task in env.unwrapped.tasks:
        _, info = env.reset(seed=0, options={"task_id": task.id})
        leaked += f'answer("{task.answer}")' in _answer_candidates(info)
    assert leaked == len(env.unwrapped.tasks) > 0


def _oracle_rewards(env, task_ids, fork: bool) -> list[float]:
    agent, rewards = OracleAgent(env, fork=fork, seed=0), []
    for task_id in task_ids:
        obs, info = env.reset(seed=1, options={"task_id": task_id})
        agent.reset()
        done = False
        while not done:
            obs, reward, term, trunc, info = env.step(agent.act(obs, info))
            done = term or trunc
        kinds = [session["kind"] for session in info["trajectory"]["sessions"]]
        assert ("fork" in kinds) == fork
        rewards.append(reward)
    return rewards


def test_compare_by_year_asks_the_winning_year_which_only_pages_show():
    by_name = gym.make("mosaic/WebQA-Fork-v0", **COMPARE_KW)
    env = gym.make("mosaic/WebQA-Fork-v0", **COMPARE_KW, compare_answer="year")
    ids = [t.id for t in env.unwrapped.tasks]
    assert ids == [t.id for t in by_name.unwrapped.tasks]
    for named, task in zip(by_name.unwrapped.tasks, env.unwrapped.tasks):
        years = [int(sub.answer) for sub in named.subtasks]
        want = max(years) if named.question.endswith("latest?") else min(years)
        assert task.answer == str(want) and task.answer_kind == "year" and task.aliases == ()
        assert task.question.startswith(named.question[:-1]) and task.gold_path == named.gold_path
        assert task.subtasks == named.subtasks and task.split == named.split
        assert env.unwrapped.task(task.id) == task
        obs, info = env.reset(seed=1, options={"task_id": task.id})
        assert _answer_candidates(info) == []  # nothing to guess before reading
        assert task.answer not in obs
    # The oracle reads the same pages and answers the year: it solves what it solved when asked for the name
    # (every task when it forks; in one session the window sometimes overflows, in both modes alike).
    assert _oracle_rewards(env, ids, fork=True) == [1.0] * len(ids)
    assert _oracle_rewards(env, ids, fork=False) == _oracle_rewards(by_name, ids, fork=False)


def test_compare_answer_is_one_of_two_words():
    with pytest.raises(ValueError, match=r"compare_answer='names' is unknown: use 'name' \(the winner\) or 'year'"):
        gym.make("mosaic/WebQA-v0", site_size=120, compare_answer="names")
    env = gym.make("mosaic/WebQA-v0", site_size=120, split="all", compare_answer="year")
    assert all(t.answer_kind == "year" for t in env.unwrapped.tasks if t.family == "compare")
    chain = gym.make("mosaic/WebQA-v0", site_size=120, split="all")
    assert [t for t in env.unwrapped.tasks if t.family != "compare"] == \
        [t for t in chain.unwrapped.tasks if t.family != "compare"]
