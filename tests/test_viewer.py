"""``mosaic view`` in real Chromium: the served page and the static file list a logged run's trajectories;
clicking one draws its session tree (one node per session, of the right kinds, forks as branches), a session
shows the summary it started from, no console error appears, and text from hostile pages or actions
(``<script>``, ``</script>``, markup) shows as text: no script of theirs runs."""

from __future__ import annotations

import gzip
import json

import gymnasium as gym
import numpy as np
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


# ---- the credit: a group view, credit on the tree's nodes, a landing page ---------------------------------

@pytest.fixture(scope="module")
def credit_run(tmp_path_factory):
    """A Mosaic training run's folder as ``mosaic train`` lays it out: two logged groups (oracle episodes with
    forks and compactions; in group 0 some fail, in group 1 all fail alike) with each session's advantage
    under broadcast and Mosaic (algos.credit.advantages, D drawn at random), metrics.jsonl with KL and a probe metric,
    and summary.json with held-out success."""
    from algos.credit import advantages

    out = tmp_path_factory.mktemp("mosaic")
    episodes = oracle_records(3, families="compare", session_max_tokens=1500)
    rng = np.random.default_rng(0)
    records = []
    for group, (members, rewards) in enumerate([(episodes, [1.0, 0.0, 1.0]), ([episodes[0]] * 3, [0.0] * 3)]):
        rows = np.array([i for i, r in enumerate(members) for _ in r["sessions"]])
        d = rng.normal(size=len(rows)) if group == 0 else np.zeros(len(rows))
        columns = {"broadcast": advantages.broadcast(rewards, rows), "mosaic": advantages.mosaic(rewards, rows, d)}
        for i, (record, reward) in enumerate(zip(members, rewards)):
            record = json.loads(json.dumps(record))
            record.update(source="train", iteration=0, group=group, credit="mosaic", reward=reward,
                          success=reward == 1.0)
            for s, k in zip(record["sessions"], np.flatnonzero(rows == i)):
                s.update(credit_broadcast=float(columns["broadcast"][k]), credit_mosaic=float(columns["mosaic"][k]),
                         credit_advantage=float(columns["mosaic"][k]), credit_contribution=float(d[k]))
            records.append(record)
    logs.write_records(out / "trajectories" / ("iteration-0000" + logs.SUFFIX), records)
    (out / "metrics.jsonl").write_text("".join(json.dumps(
        {"iteration": i, "success": 0.5 + i / 10, "sessions": 3.0, "steps": 9.0, "kl_after": 0.01 * i,
         "probe_recall": 0.2 * i, "loss": 1.0}) + "\n" for i in range(3)))
    (out / "summary.json").write_text(json.dumps({"iterations": 3, "success_warm_start": {"success": 0.4},
                                                  "success_final": {"success": 0.6}}))
    return out, records


def _gap(record):
    return max(abs(s["credit_mosaic"] - s["credit_broadcast"]) for s in record["sessions"])


@pytest.mark.parametrize("mode", ["served", "static"])
def test_opening_a_run_shows_where_the_credits_differ_and_a_group_side_by_side(browser, credit_run, tmp_path, mode):
    folder, records = credit_run
    server = None
    if mode == "served":
        server, _ = viewer.serve_in_thread(folder)
        url = server.url
    else:
        url = viewer.write_html(folder, tmp_path / "run.html").as_uri()
    try:
        page, problems = _open(browser, url)
        # Without a click: the groups whose credits differ (group 0 only; group 1's are all 0), and that group open.
        key = f"trajectories/iteration-0000{logs.SUFFIX}|0|0"
        assert page.locator("#differ-list tr.group-row").evaluate_all("rows => rows.map(r => r.dataset.group)") == [key]
        assert page.locator("#differ-list tr.group-row td").last.text_content() == \
            f"{max(_gap(r) for r in records if r['group'] == 0):.2f}"
        page.wait_for_selector(f'#detail[data-group="{key}"]')
        members = [r for r in records if r["group"] == 0]
        assert page.locator("#group-cards .card").count() == len(members)
        assert page.locator("#group-cards .mini").count() == sum(len(r["sessions"]) for r in members)
        # Each session's two advantages and D, the run's own first, coloured on one diverging scale.
        for n, record in enumerate(members):
            for s in record["sessions"]:
                mini = page.locator(f'#group-cards .card[data-n="{n}"] .mini[data-session="{s["id"]}"]')
                assert float(mini.locator(".chip-mosaic").get_attribute("data-value")) == s["credit_mosaic"]
                assert float(mini.locator(".chip-broadcast").get_attribute("data-value")) == s["credit_broadcast"]
                assert "own" in mini.locator(".chip-mosaic").get_attribute("class")
                assert mini.locator(".contribution").text_content().endswith(f"{abs(s['credit_contribution']):.2f}")
        colours = page.locator("#group-cards .chip").evaluate_all("cs => cs.map(c => getComputedStyle(c).backgroundColor)")
        values = [s[k] for r in members for s in r["sessions"] for k in ("credit_mosaic", "credit_broadcast")]
        reds = {c for c, v in zip(colours, values) if v < -1e-6}
        blues = {c for c, v in zip(colours, values) if v > 1e-6}
        assert reds and blues and not reds & blues
        assert all(int(c.split(",")[0].strip("rgb( ")) > int(c.split(",")[2].strip(" )")) for c in reds)
        assert all(int(c.split(",")[0].strip("rgb( ")) < int(c.split(",")[2].strip(" )")) for c in blues)
        assert page.locator("#detail #credit-legend .scale span").count() == 11
        # A card opens its trajectory: its tree's nodes carry both values, and "450+82 tok" is explained.
        page.click('#group-cards .card[data-n="1"]')
        page.wait_for_selector('#detail[data-n="1"]')
        for s in records[1]["sessions"]:
            node = page.locator(f'#tree button.node[data-session="{s["id"]}"]')
            assert float(node.locator(".chip-mosaic").get_attribute("data-value")) == s["credit_mosaic"]
            assert float(node.locator(".chip-broadcast").get_attribute("data-value")) == s["credit_broadcast"]
        assert "tokens (its opening and tool results)" in page.locator("#detail").text_content()
        # Filters: by group, and by "credit differs".
        page.select_option("#f-group", f"trajectories/iteration-0000{logs.SUFFIX}|0|1")
        assert page.locator("tr.traj-row").count() == sum(r["group"] == 1 for r in records)
        page.select_option("#f-group", "(any)")
        for choice, keep in (("yes", lambda r: _gap(r) > 1e-6), ("no", lambda r: _gap(r) <= 1e-6)):
            page.select_option("#f-differs", choice)
            assert page.locator("tr.traj-row").count() == sum(map(keep, records)) > 0
        # The landing page's curves: held-out success, KL and the probe metric as logged; the legend names the run.
        metrics = page.locator("#overview svg").evaluate_all("s => s.map(x => x.dataset.metric)")
        assert metrics == ["success", "heldout_success", "sessions", "steps", "kl_after", "probe_recall"]
        assert page.locator("#curves .legend").text_content().strip() == "\u25a0 " + folder.name
        assert "0.400 at iteration 0 \u2192 0.600 at iteration 3" in page.locator("#summary").text_content()
        assert "1 of 2 groups" in page.locator("#summary").text_content()
        # Numbers sit under headers aligned like them.
        aligned = page.locator("#traj-list th").evaluate_all("hs => hs.map(h => getComputedStyle(h).textAlign)")
        cells = page.locator("#traj-list tr.traj-row").first.locator("td").evaluate_all(
            "ds => ds.map(d => getComputedStyle(d).textAlign)")
        assert aligned == cells
        assert problems == []
        page.close()
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def test_the_screenshot_opens_the_group_whose_credits_differ_most(credit_run, tmp_path):
    folder, records = credit_run
    server = viewer.ViewerServer(folder)
    try:
        kind, key = viewer.pick_for_screenshot(server)
    finally:
        server.server_close()
    top = max(records, key=_gap)
    assert (kind, key) == ("group", f"trajectories/iteration-0000{logs.SUFFIX}|{top['iteration']}|{top['group']}")
    png = viewer.screenshot(folder, tmp_path / "shot.png", width=900, height=600)
    assert png.read_bytes().startswith(b"\x89PNG")


HOSTILE_LINES = [
    b'{"format_version": true}\n',
    b"[" * 200_000 + b"]" * 200_000 + b"\n",
    b'{"format_version": 1, "source": "<script>window.__pwned=1</script>"}\n',
    b"\xff<script>window.__pwned=2</script>\n",
]


def test_a_hostile_log_shows_its_good_records_and_names_the_rest_as_text(browser, credit_run, tmp_path):
    folder, records = credit_run
    bad = tmp_path / "run"
    bad.mkdir()
    kind = json.loads(json.dumps(records[0]))
    kind["sessions"][1]["kind"] = "<img src=x onerror=\"window.__pwned=3\">"
    lines = [json.dumps(records[0]).encode() + b"\n", *HOSTILE_LINES, json.dumps(kind).encode() + b"\n",
             json.dumps(records[1]).encode() + b"\n"]
    (bad / ("hostile" + logs.SUFFIX)).write_bytes(gzip.compress(b"".join(lines)))
    page, problems = _open(browser, viewer.write_html(bad, bad / "page.html").as_uri())
    assert page.locator("tr.traj-row").count() == 2
    said = page.locator("#problems li").all_text_contents()
    assert [line.split(": ", 1)[0] for line in said] == [f"hostile{logs.SUFFIX}:{n}" for n in range(2, 7)]
    assert any("session 1 is of kind \"<img src=x onerror=" in line for line in said)  # as text
    assert page.evaluate("window.__pwned") is None and page.locator("img").count() == 0
    assert problems == []
    page.close()
