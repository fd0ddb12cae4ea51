"""A BrowseComp-Plus-shaped corpus (``tests/fixtures/corpus_bcp``: ``docid``/``text``/``url`` documents,
``query_id``/``query``/``answer``/``evidence_docs``/``gold_docs`` queries, no titles, no splits) works as the
builtin site does: the default split, search and open candidates, the gold path, the oracle, a document's own URL,
titles shown once; then rollout, eval and a tiny choose-mode training run end to end."""

from __future__ import annotations

import gzip
import json
import shutil
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import envs  # noqa: F401  (registers the envs)
from agents import OracleAgent
from agents.oracle import NoGoldPathError
from envs.actions import format_action
from envs.web.corpus import CorpusError, CorpusWarning, default_split, load_corpus, question_queries
from mosaic_gym.cli import main

BCP = Path(__file__).parent / "fixtures" / "corpus_bcp"
ENV_ID = "mosaic/WebQA-v0"


def _lines(file: Path) -> list[dict]:
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]


DOCS = _lines(BCP / "documents.jsonl")
QUERIES = _lines(BCP / "tasks.jsonl")


@pytest.fixture
def corpus(tmp_path) -> Path:
    """A copy of the fixture (its search index is written beside it)."""
    return Path(shutil.copytree(BCP, tmp_path / "corpus", ignore=shutil.ignore_patterns(".mosaic-index")))


def test_queries_without_a_split_get_the_hashed_split_and_the_default_env_has_tasks(corpus):
    site = load_corpus(corpus)
    assert {t.id: t.split for t in site.tasks} == {q["query_id"]: default_split(q["query_id"]) for q in QUERIES}
    env = gym.make(ENV_ID, site=str(corpus))  # split="train" by default
    assert {t.id for t in env.unwrapped.tasks} == {t.id for t in site.tasks if t.split == "train"}
    assert gym.make(ENV_ID, site=str(corpus), split="test").unwrapped.tasks


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("AbCdEfo fthe Van 1?.,'")), max_size=80))
def test_question_queries_are_names_from_the_question_then_the_question(question):
    queries = question_queries(question)
    assert queries == question_queries(question)  # fixed for a question
    folded = " ".join(question.split())
    assert queries[-1] == folded
    for name in queries[:-1]:
        assert name and name in folded and name[0].isupper() and not any(c in name for c in ",?")


def test_reset_offers_searches_and_a_search_offers_pages_to_open(corpus):
    env = gym.make(ENV_ID, site=str(corpus), split="all", candidates=True)
    for query in QUERIES:
        obs, info = env.reset(options={"task_id": query["query_id"]})
        searches = [c for c in info["candidates"] if c.startswith("search(")]
        assert format_action("search", query["query"]) in searches and len(searches) >= 2, info["candidates"]
        obs, reward, terminated, truncated, info = env.step(searches[0])
        assert any(c.startswith("open(") for c in info["candidates"]), info["candidates"]


def test_the_gold_path_opens_the_evidence_then_the_gold_documents(corpus):
    site = load_corpus(corpus)
    path_of = {d.path: d for d in site.documents()}
    url_path = {doc["docid"]: site.local_path(doc["url"]) for doc in DOCS}
    for query in QUERIES:
        task = site.task(query["query_id"])
        ids = [d["docid"] for d in query["evidence_docs"]]
        ids += [d["docid"] for d in query["gold_docs"] if d["docid"] not in ids]
        assert [s.arg for s in task.gold_path if s.tool == "open"] == [url_path[i] for i in ids]
        assert task.gold_path[0].tool == "search" and task.gold_path[0].arg == task.search_queries[0]
        last = task.gold_path[-1]
        gold_paths = {url_path[d["docid"]] for d in query["gold_docs"]}
        assert last.expect == query["answer"] and any(query["answer"] in path_of[p].text for p in gold_paths)


def test_the_oracle_reads_the_gold_documents_before_it_answers(corpus):
    env = gym.make(ENV_ID, site=str(corpus), split="all")
    agent = OracleAgent(env)
    for query in QUERIES:
        obs, info = env.reset(options={"task_id": query["query_id"]})
        actions, done = [], False
        while not done:
            actions.append(agent.act(obs, info))
            obs, reward, terminated, truncated, info = env.step(actions[-1])
            done = terminated or truncated
        assert reward == 1.0 and len(actions) > 2 and actions[-1] == format_action("answer", query["answer"])
        # Each search and page was on the gold path, and the answer was on screen (after the question) before it
        # was given.
        log = info["trajectory"]["step_log"]
        assert all(s["gold"] for s in log if s["tool"] in ("search", "open", "answer")), log
        before = obs.rsplit(format_action("answer", query["answer"]), 1)[0]
        assert query["answer"] in before.split(query["query"], 1)[1]


@pytest.mark.parametrize("drop", ["gold_docs", "both"])
def test_the_oracle_refuses_a_task_without_a_gold_path_in_one_line(corpus, capsys, drop):
    records = _lines(corpus / "tasks.jsonl")
    for record in records:
        record.pop("gold_docs")
        if drop == "both":
            record.pop("evidence_docs")
    # Without gold_docs the evidence documents are still a path; without either there is none.
    (corpus / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    env = gym.make(ENV_ID, site=str(corpus), split="all")
    if drop == "gold_docs":
        with_evidence = [t for t in env.unwrapped.tasks if t.gold_path]
        assert len(with_evidence) == sum(1 for r in records if r["evidence_docs"])
        return
    with pytest.raises(NoGoldPathError, match=r"the oracle follows gold paths, and \d+ of \d+ task"):
        OracleAgent(env)
    with pytest.raises(NoGoldPathError):  # given the site, it refuses when asked to act on such a task
        agent = OracleAgent(env.unwrapped.site)
        agent.act(*env.reset(seed=0))
    assert main(["rollout", "--site", str(corpus), "--agent", "oracle", "--split", "all"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mosaic rollout: the oracle follows gold paths"), err


@pytest.mark.parametrize("gold, fragment", [
    ({"docid": 1.5}, "must list document ids"),
    ([[1]], "must list document ids"),
    ([True], "must list document ids"),
    ("101", '"gold_docs" must be a list'),
    ([{"text": "no id"}], "must list document ids"),
])
def test_malformed_gold_docs_are_one_clear_error(corpus, gold, fragment):
    record = dict(QUERIES[0], gold_docs=gold if isinstance(gold, (list, str)) else [gold])
    (corpus / "tasks.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(CorpusError, match=fragment) as err:
        load_corpus(corpus)
    assert "tasks.jsonl line 1" in str(err.value) and "\n" not in str(err.value)


def test_gold_documents_missing_from_the_corpus_are_left_out_with_a_warning(corpus):
    record = dict(QUERIES[0], gold_docs=[{"docid": "no-such-doc"}], evidence_docs=[])
    (corpus / "tasks.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.warns(CorpusWarning, match="no-such-doc"):
        site = load_corpus(corpus)
    assert site.tasks[0].gold_path == ()


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d["docid"])
def test_a_documents_own_url_opens_it_and_its_title_is_shown_once(corpus, doc):
    env = gym.make(ENV_ID, site=str(corpus), split="all")
    env.reset(seed=0)
    obs, *_ = env.step(format_action("open", doc["url"]))
    view = env.unwrapped.acting_session().page
    assert view is not None and view.url == env.unwrapped.site.local_path(doc["url"])
    title = view.title
    assert title and title in doc["text"]
    lines = [line for chunk in view.chunks for line in chunk.splitlines()]
    assert lines.count(title) == 1, lines
    assert not any(line.startswith(("---", "title:")) for line in lines)


@pytest.mark.parametrize("url", ["https://example.org/wiki/No_Such_Page", "https://elsewhere.org/wiki/Drennick",
                                 "https://example.org"])
def test_other_absolute_urls_stay_outside_the_site(corpus, url):
    env = gym.make(ENV_ID, site=str(corpus), split="all")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(format_action("open", url))
    assert info["action_error"] and "outside this website" in info["action_error"]


def _actions(folder: Path) -> list[str]:
    return [str(step["action"]) for file in sorted(folder.rglob("*.traj.jsonl.gz"))
            for line in gzip.open(file, "rt") for step in json.loads(line)["steps"]]


def test_rollout_eval_and_choose_mode_training_run_on_the_corpus(corpus, tmp_path, capsys):
    assert main(["rollout", "--site", str(corpus), "--agent", "oracle", "--episodes", "1"]) == 0
    assert "SOLVED" in capsys.readouterr().out
    assert main(["eval", "--site", str(corpus), "--agent", "oracle", "--n", "1", "--ks", "1", "--ts", "8",
                 "--no-progress", "--out", str(tmp_path / "eval")]) == 0
    table = json.loads((tmp_path / "eval" / "passkt.json").read_text())
    assert table and all(a.startswith(("search(", "open(", "answer(", "scroll(", "find("))
                         for a in _actions(tmp_path / "eval"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a tiny model's own warnings are not under test
        code = main(["train", "--site", str(corpus), "--model", "tiny-100k", "--mode", "choose", "--bc-episodes", "4",
                     "--bc-epochs", "1", "--iterations", "2", "--group-size", "2", "--eval-episodes", "2",
                     "--eval-tasks", "2", "--no-progress", "--out", str(tmp_path / "run")])
    assert code == 0, capsys.readouterr().err[-2000:]
    trained = _actions(tmp_path / "run" / "trajectories")
    assert any(a.startswith("search(") for a in trained) and any(a.startswith("open(") for a in trained), trained
    steps = [json.loads(line)["steps_used"] for file in (tmp_path / "run" / "trajectories").glob("*.gz")
             for line in gzip.open(file, "rt")]
    assert max(steps) > 1
