"""``mosaic view`` in real Chromium: the served page and the static file list a logged run's trajectories;
clicking one draws its session tree (one node per session, of the right kinds, forks as branches), a session
shows the summary it started from, no console error appears, and text from hostile pages or actions
(``<script>``, ``</script>``, markup) shows as text: no script of theirs runs."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import envs  # noqa: F401
from algos import logs
from mosaic_gym import viewer
from mosaic_gym.cli import main
from test_logs import oracle_records

HOSTILE = '<script>window.__pwned = "page"</script><img src=x onerror="window.__pwned=\'img\'"><b>bold</b>'
HOSTILE_ACTION = 'answer("</script><script>window.__pwned = \'action\'</script>")'


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run folder: oracle trajectories with forks and compactions, and one over a hostile corpus."""
    out = tmp_path_factory.mktemp("run")
    with logs.TrajectoryLog(out / ("rollout" + logs.SUFFIX)) as log:
        for record in oracle_records(2, families="compare", session_max_tokens=1500):
            log.write(record)
    corpus = tmp_path_factory.mktemp("corpus")
    (corpus / "documents.jsonl").write_text(json.dumps(
        {"id": "d1", "url": "/wiki/Hostile", "title": "Hostile page", "text": "A hostile page. " + HOSTILE}) + "\n")
    (corpus / "tasks.jsonl").write_text(json.dumps(
        {"id": "h1", "question": "What does the hostile page hold?", "answer": "bold", "aliases": []}) + "\n")
    env = gym.make("mosaic/WebQA-v0", site=str(corpus), split="all")
    obs, info = env.reset(seed=0)
    question, steps = info["session_task"], []
    for action in ['search("hostile")', "open(1)", HOSTILE_ACTION]:
        obs, reward, terminated, truncated, info = env.step(action)
        steps.append(logs.step_record(action, info))
    assert terminated and HOSTILE in steps[1]["shown"]  # the page text really holds the markup
    with logs.TrajectoryLog(out / "hostile" / ("rollout" + logs.SUFFIX)) as log:
        log.write(logs.trajectory_record(info["trajectory"], steps, question=question, reward=reward,
                                         source="rollout"))
    env.close()
    return out


@pytest.fixture(scope="module")
def browser():
    b = viewer.launch_browser()  # on the process's one Playwright, which the env's backend may be using too
    yield b
    b.close()


@pytest.fixture(scope="module")
def served(run_dir):
    server, _ = viewer.serve_in_thread(run_dir)
    yield server
    server.shutdown()
    server.server_close()


def _open(browser, url):
    page = browser.new_page()
    problems = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(url)
    return page, problems


def _entries(run_dir):
    return [(entry, record) for entry, record in viewer.index(run_dir)]


@pytest.mark.parametrize("mode", ["served", "static"])
def test_the_page_shows_each_trajectory_and_its_session_tree(browser, run_dir, served, tmp_path, mode):
    url = served.url if mode == "served" else (viewer.write_html(run_dir, tmp_path / "run.html")).as_uri()
    page, problems = _open(browser, url)
    entries = _entries(run_dir)
    assert page.locator("tr.traj-row").count() == len(entries)
    for entry, record in [(e, r) for e, r in entries if r["task_id"] != "h1"]:
        page.click(f'tr.traj-row[data-n="{entry.n}"]')
        page.wait_for_selector(f'#detail[data-n="{entry.n}"]')
        nodes = page.locator("#tree button.node")
        assert nodes.count() == len(record["sessions"])
        assert [nodes.nth(i).get_attribute("data-kind") for i in range(nodes.count())] == \
            [s["kind"] for s in _tree_order(record["sessions"])]
        # Forks are branches: each fork's node sits inside the .forks block of its parent's cell.
        for s in record["sessions"]:
            if s["kind"] == "fork":
                parent_cell = page.locator(f'.cell:has(> button.node[data-session="{s["parent"]}"])')
                assert parent_cell.locator(f'.forks button.node[data-session="{s["id"]}"]').count() == 1
        # A compaction session shows the summary it started from: the handoff of the session it continues.
        compact = next(s for s in record["sessions"] if s["kind"] == "compact")
        page.click(f'button.node[data-session="{compact["id"]}"]')
        page.wait_for_selector(f'#session[data-session="{compact["id"]}"]')
        summary = record["sessions"][compact["parent"]]["handoff"]
        assert summary and summary in page.locator("#session .opening").text_content()
        assert page.locator("#session .step").count() == compact["steps"]
        # A fork session shows its task.
        fork = next(s for s in record["sessions"] if s["kind"] == "fork")
        page.click(f'button.node[data-session="{fork["id"]}"]')
        assert fork["task"] in page.locator("#session .opening").text_content()
    # The filters narrow the list: by success, by number of sessions.
    page.select_option("#f-sessions", "1")
    assert page.locator("tr.traj-row").count() == sum(len(r["sessions"]) == 1 for _, r in entries)
    page.select_option("#f-sessions", "(any)")
    page.select_option("#f-success", "no")
    assert page.locator("tr.traj-row").count() == sum(not r["success"] for _, r in entries)
    assert problems == []
    page.close()


def _tree_order(sessions):
    """The sessions in the order the page draws them: a chain left to right, each node's forks below it."""
    compact_child = {s["parent"]: s for s in sessions if s["kind"] == "compact"}
    forks = {}
    for s in sessions:
        if s["kind"] == "fork":
            forks.setdefault(s["parent"], []).append(s)
    order = []

    def chain(s):
        while s is not None:
            order.append(s)
            for f in forks.get(s["id"], []):
                chain(f)
            s = compact_child.get(s["id"])

    for s in sessions:
        if s["kind"] == "root":
            chain(s)
    return order


@pytest.mark.parametrize("mode", ["served", "static"])
def test_hostile_page_text_and_actions_show_as_text(browser, run_dir, served, tmp_path, mode):
    url = served.url if mode == "served" else (viewer.write_html(run_dir, tmp_path / "run.html")).as_uri()
    page, problems = _open(browser, url)
    [(entry, record)] = [(e, r) for e, r in _entries(run_dir) if r["task_id"] == "h1"]
    scripts = page.locator("script").count()
    page.click(f'tr.traj-row[data-n="{entry.n}"]')
    page.wait_for_selector(f'#detail[data-n="{entry.n}"]')
    for details in page.locator("#session details").all():
        details.locator("summary").click()
    shown = page.locator("#session details pre").all_text_contents()
    assert any(HOSTILE in text for text in shown)
    assert HOSTILE_ACTION in page.locator("#session pre.action").all_text_contents()
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#session b", has_text="bold").count() == 0  # no <b> from the page became an element
    assert page.locator("#session img").count() == 0 and page.locator("script").count() == scripts
    assert problems == []
    page.close()


@pytest.fixture(scope="module")
def hostile_page(browser, tmp_path_factory):
    page = browser.new_page()
    yield page, tmp_path_factory.mktemp("hyp")
    page.close()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40) | st.sampled_from(
    ["</script><script>window.__pwned=1</script>", "<!--<script>", "]]></style><svg onload=alert(1)>"]))
def test_any_text_renders_as_the_same_text(hostile_page, run_dir, text):
    page, folder = hostile_page
    [record] = [r for _, r in _entries(run_dir) if r["task_id"] == "h1"]
    record = json.loads(json.dumps(record))
    record["steps"][0]["action"], record["question"] = text, text
    with logs.TrajectoryLog(folder / ("one" + logs.SUFFIX)) as log:
        log.write(record)
    page.goto(viewer.write_html(folder, folder / "one.html").as_uri())
    page.click('tr.traj-row[data-n="0"]')
    page.wait_for_selector('#detail[data-n="0"]')
    assert page.locator("#session pre.action").first.text_content() == text
    assert page.locator("#detail .question").text_content() == text
    assert page.evaluate("window.__pwned") is None


def test_view_command_writes_a_page_and_refuses_a_missing_folder(run_dir, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["view", str(run_dir), "--html", str(out)]) == 0
    text = out.read_text()
    assert "<script>window.__pwned" not in text and "Content-Security-Policy" in text
    assert main(["view", str(tmp_path / "missing"), "--html", str(out)]) == 2
    assert "no such run folder" in capsys.readouterr().err
