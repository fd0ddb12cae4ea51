"""A claim's results from its finished runs: paired differences over seeds with 95% intervals, the smallest
difference the design could detect, the probe's curves, and the markdown and plots (:func:`summarize`,
:func:`markdown`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from algos.study.presets import CLAIMS, Claim, run_configs


def finished(folder: Path) -> dict[str, Any] | None:
    """The run's ``summary.json``, or None if it has none or one cut short (a kill while it was written): such
    a run is resumed from its checkpoint, which writes the summary again."""
    path = folder / "summary.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (ValueError, UnicodeDecodeError):
        return None


# ---------------------------------------------------------------------------------------------------------
# Intervals
# ---------------------------------------------------------------------------------------------------------
# Two-sided 95% Student-t quantiles by degrees of freedom (no scipy here); beyond 30, the normal's 1.96.



_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def interval(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean and 95% t-interval half-width of ``values`` (None values dropped; half-width None below 2 values).

    >>> interval([0.5, 0.7, 0.6])
    {'mean': 0.6, 'ci95': 0.248, 'n': 3}
    """
    xs = np.array([v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))], float)
    if xs.size == 0:
        return {"mean": None, "ci95": None, "n": 0}
    half = None
    if xs.size > 1:
        t = _T95[xs.size - 2] if xs.size - 2 < len(_T95) else 1.96
        half = round(float(t * xs.std(ddof=1) / math.sqrt(xs.size)), 3)
    return {"mean": round(float(xs.mean()), 3), "ci95": half, "n": int(xs.size)}


def _shown(cell: dict[str, Any], digits: int = 3) -> str:
    if cell["mean"] is None:
        return "n/a"
    return f"{cell['mean']:.{digits}f}" + (f" ± {cell['ci95']:.{digits}f}" if cell["ci95"] is not None else "")


def _held(cell: dict[str, Any], sign: int = 1) -> str:
    """'held' when the interval excludes 0 on the side ``sign``, 'not shown' else."""
    if cell["mean"] is None or cell["ci95"] is None:
        return "not shown (too few seeds)"
    low, high = cell["mean"] - cell["ci95"], cell["mean"] + cell["ci95"]
    return "held" if (low > 0 if sign > 0 else high < 0) else "not shown"


# ---------------------------------------------------------------------------------------------------------
# The summary
# ---------------------------------------------------------------------------------------------------------
def summarize(claim: str, out: str | Path, seeds: int = 3, quick: bool = False) -> dict[str, Any]:
    """The claim's results from its finished runs: ``results.json``, ``results.md`` and plots in
    ``OUT/<claim>/``; returns the results."""
    spec = CLAIMS[claim]
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for arm, seed, config in run_configs(claim, out, seeds, quick):
        summary = finished(Path(config.out))
        if summary is not None:
            history = [json.loads(line) for line in (Path(config.out) / "metrics.jsonl").read_text().splitlines()]
            runs.setdefault(arm.name, {})[seed] = {"summary": summary, "history": history, "folder": Path(config.out),
                                                   "settings": _run_settings(Path(config.out))}
    folder = Path(out) / claim
    folder.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"claim": claim, "question": spec.question, "quick": quick,
                               "settings": {a: _arm_settings(r) for a, r in runs.items()}, "arms": {},
                               "finished": {a: sorted(r) for a, r in runs.items()}}
    for arm in spec.arms:
        results["arms"][arm.name] = _arm_results(runs.get(arm.name, {}))
    a, b = spec.arms[0].name, spec.arms[1].name
    results["paired"] = _paired(runs.get(b, {}), runs.get(a, {}))  # second arm minus first
    if spec.kind == "budgets":
        results["budgets"] = _budget_results(runs, a, b)
    if spec.kind == "recovery":
        results["recovery"] = {name: _recovery_results(r) for name, r in runs.items()}
    if spec.kind == "credit":
        results["credit"] = _credit_results(runs, plot=folder / "credit")
    probe = _probe_results(runs, a, b)
    if probe:
        results["probe"] = probe
    results["verdict"] = _verdict(spec, results)
    (folder / "results.json").write_text(json.dumps(results, indent=2))
    (folder / "results.md").write_text(markdown(results))
    from algos.plots import plot_pass_at_t, plot_study

    if runs:
        plot_study({name: [r["history"] for r in seeds_.values()] for name, seeds_ in runs.items()},
                   folder / "curves.png", title=f"{claim}: {spec.question}")
        if probe:
            from algos.plots import plot_probe

            plot_probe({name: arm["curve"] for name, arm in probe["arms"].items()}, folder / "probe.png",
                       threshold=PROBE_THRESHOLD, title=f"{claim}: P(right session decision) at fixed states")
        curves = {name: _pass_curves(seeds_) for name, seeds_ in runs.items()}
        if any(curves.values()):
            plot_pass_at_t(curves, folder / "pass_at_t.png", title=f"{claim}: held-out Pass@(1,T)")
    return results


def _run_settings(folder: Path) -> dict[str, Any]:
    """What the run in ``folder`` was trained with: its own ``config.json`` less its seed and folder (the
    study's code may have changed since it ran, so its presets are not read here)."""
    config = json.loads((folder / "config.json").read_text())
    return {k: v for k, v in config.items() if k not in ("seed", "out")}


def _arm_settings(seeds: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The settings an arm's finished runs share, and the seeds whose settings differ from its first's.

    >>> _arm_settings({0: {"settings": {"lr": 1}}, 1: {"settings": {"lr": 2}}, 2: {"settings": {"lr": 1}}})
    {'config': {'lr': 1}, 'differs': {1: ['lr']}}
    """
    first, *others = sorted(seeds)
    config = seeds[first]["settings"]
    differs = {seed: sorted(k for k in set(config) | set(seeds[seed]["settings"])
                            if config.get(k) != seeds[seed]["settings"].get(k)) for seed in others}
    return {"config": config, "differs": {seed: keys for seed, keys in differs.items() if keys}}


METRICS = ("success", "sessions", "sessions_success", "sessions_failure", "context_tokens", "utility", "wasted_sessions",
           "forks", "unused_forks", "step_quality", "error_steps", "recovery", "success_clean")


def _arm_results(seeds: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per arm: held-out metrics after the warm start and after RL, and RL's gain, each over seeds."""
    out: dict[str, Any] = {"seeds": sorted(seeds)}
    for stage, key in (("warm_start", "success_warm_start"), ("final", "success_final")):
        out[stage] = {m: interval([r["summary"][key]["metrics"].get(m) for r in seeds.values()]) for m in METRICS}
    out["rl_gain"] = interval([r["summary"].get("rl_gain") for r in seeds.values()])
    # Before any update, iteration 0's groups are the warm-started policy's: how much they vary inside.
    out["warm_start_groups"] = {k: interval([r["history"][0].get(f"groups_{k}") for r in seeds.values()
                                             if r["history"]])
                                for k in ("k_varies", "k_varies_success", "k_std", "reward_varies")}
    return out


def _paired(b: dict[int, dict[str, Any]], a: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Arm b minus arm a, paired by seed (same warm start) and by test task (same reset seeds)."""
    common = sorted(set(a) & set(b))
    per_seed, per_task, sessions = [], [], []
    for seed in common:
        fa, fb = a[seed]["summary"]["success_final"], b[seed]["summary"]["success_final"]
        diffs = [fb["per_task"][t] - fa["per_task"][t] for t in fa["per_task"]]
        per_task += diffs
        per_seed.append(float(np.mean(diffs)))
        sessions.append(fb["sessions"] - fa["sessions"])
    return {"seeds": common, "success": interval(per_seed), "success_per_task": interval(per_task),
            "sessions": interval(sessions)}


def _pass_curves(seeds: dict[int, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{stage: {T: interval over seeds of Pass@(1,T)}}`` for runs evaluated at several budgets."""
    curves: dict[str, dict[str, Any]] = {}
    for stage, key in (("warm_start", "success_warm_start"), ("final", "success_final")):
        at = [r["summary"][key].get("pass_at_1") for r in seeds.values()]
        at = [x for x in at if x]
        if at:
            curves[stage] = {t: interval([x[t] for x in at]) for t in at[0]}
    return curves


def _budget_results(runs: dict[str, dict[int, dict[str, Any]]], fixed: str, mix: str) -> dict[str, Any]:
    """RL's gain at each T (paired by seed), its change from the largest to the smallest T, and how much
    Pass@(1,T) spreads across T (max - min over T, per seed) for each arm."""
    out: dict[str, Any] = {}
    for name in (fixed, mix):
        seeds = runs.get(name, {})
        gains: dict[str, list[float]] = {}
        spread, shrink = [], []
        for r in seeds.values():
            before, after = r["summary"]["success_warm_start"], r["summary"]["success_final"]
            if "pass_at_1" not in after:
                continue
            ts = sorted(after["pass_at_1"], key=int)
            g = {t: after["pass_at_1"][t] - before["pass_at_1"][t] for t in ts}
            for t in ts:
                gains.setdefault(t, []).append(g[t])
            spread.append(max(after["pass_at_1"].values()) - min(after["pass_at_1"].values()))
            shrink.append(g[ts[-1]] - g[ts[0]])
        out[name] = {"gain_at": {t: interval(v) for t, v in gains.items()}, "gain_largest_minus_smallest_t":
                     interval(shrink), "spread_across_t": interval(spread)}
    spread_diff = []
    for seed in sorted(set(runs.get(fixed, {})) & set(runs.get(mix, {}))):
        s = [max(r.values()) - min(r.values()) for r in (runs[n][seed]["summary"]["success_final"].get("pass_at_1")
                                                         for n in (fixed, mix)) if r]
        if len(s) == 2:
            spread_diff.append(s[0] - s[1])
    out["spread_fixed_minus_budgetmix"] = interval(spread_diff)
    return out


def _recovery_results(seeds: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """After RL minus after the warm start, per seed: recovery, single-step quality, success of clean runs."""
    out = {}
    for m in ("recovery", "step_quality", "success_clean", "erred", "success"):
        diffs = []
        for r in seeds.values():
            before = r["summary"]["success_warm_start"]["metrics"].get(m)
            after = r["summary"]["success_final"]["metrics"].get(m)
            if before is not None and after is not None:
                diffs.append(after - before)
        out[m] = interval(diffs)
    return out


# What the study reports of each seed's compare_credit, as intervals over seeds.
CREDIT_SHARES = ("failures_credited", "successes_blamed", "correlation")


def _credit_results(runs: dict[str, dict[int, dict[str, Any]]],
                    plot: Path | None = None) -> dict[str, Any]:
    """Where Mosaic's advantages differ from broadcast's on the same groups (:mod:`algos.credit.compare`), per
    Mosaic arm: each seed's comparison over its logged training groups, and intervals over seeds; with ``plot``,
    a PNG of every session's two advantages (``<plot>-<arm>.png``, all seeds pooled)."""
    from algos import logs
    from algos.credit.compare import GROUP_KINDS, compare_credit, credit_groups
    from algos.plots import plot_credit

    out: dict[str, Any] = {}
    for name, seeds in runs.items():
        if seeds[min(seeds)]["settings"].get("algo") != "mosaic":
            continue
        per_seed, pooled = {}, []
        for seed, r in sorted(seeds.items()):
            records = [rec for path in logs.find_logs(r["folder"]) for rec in logs.read(path)]
            try:
                compared = compare_credit(records)
            except ValueError as err:
                raise logs.LogError(f"{r['folder']}: {err}") from None
            if compared["groups"]["n"]:
                per_seed[seed] = compared
                pooled += credit_groups(records)
        if not per_seed:
            continue
        if plot is not None:
            plot_credit(pooled, plot.with_name(f"{plot.name}-{name}.png"),
                        title=f"{name}: each session's Mosaic advantage against broadcast's on the same group "
                              f"(seeds {sorted(per_seed)}, training groups)")
        cs = list(per_seed.values())
        roles = sorted({k for c in cs for k in c["sessions"]})
        out[name] = {
            "seeds": sorted(per_seed), "groups_per_seed": interval([c["groups"]["n"] for c in cs]),
            "groups": {k: {m: interval([c["groups"][k][m] for c in cs]) for m in ("share", "differ", "reversed",
                                                                                  "split")} for k in GROUP_KINDS},
            "pairs": {m: interval([c["pairs"][m] for c in cs]) for m in ("reversed", "split")},
            **{m: interval([c[m] for c in cs]) for m in CREDIT_SHARES},
            "sessions": {k: {m: interval([c["sessions"][k][m] for c in cs if k in c["sessions"]])
                             for m in ("n", "broadcast", "mosaic", "new_credit", "flipped")} for k in roles},
            "per_seed": per_seed}
    return out


PROBE_THRESHOLD = 0.9  # a run has learned the session decision when the probe's mean reaches this
# Student-t quantiles for a power statement: one-sided 0.80 by degrees of freedom 1..30 (beyond, the normal's).
_T80 = [1.376, 1.061, 0.978, 0.941, 0.920, 0.906, 0.896, 0.889, 0.883, 0.879, 0.876, 0.873, 0.870, 0.868, 0.866,
        0.865, 0.863, 0.862, 0.861, 0.860, 0.859, 0.858, 0.858, 0.857, 0.856, 0.856, 0.855, 0.855, 0.854, 0.854]


def detectable(values: Sequence[float | None]) -> float | None:
    """The smallest true mean of paired differences like ``values`` that a two-sided 5% t-test over them would
    find with 80% power: ``(t_0.975 + t_0.80) * sd / sqrt(n)`` at ``n - 1`` degrees of freedom (None below 2).

    >>> detectable([0.1, -0.1, 0.2, 0.0])  # sd 0.129, df 3: (3.182 + 0.978) * 0.129 / 2
    0.269
    """
    xs = np.array([v for v in values if v is not None], float)
    if xs.size < 2:
        return None
    df = xs.size - 1
    t95 = _T95[df - 1] if df - 1 < len(_T95) else 1.96
    t80 = _T80[df - 1] if df - 1 < len(_T80) else 0.842
    return round(float((t95 + t80) * xs.std(ddof=1) / math.sqrt(xs.size)), 3)


def probe_curve(run: dict[str, Any]) -> list[float] | None:
    """A run's probe after its warm start, then after each update (None when the run has no probe)."""
    start = (run["summary"].get("probe_warm_start") or {}).get("probe_summary")
    after = [m.get("probe_summary") for m in run["history"]]
    if start is None or any(v is None for v in after):
        return None
    return [start, *after]


def updates_to(curve: Sequence[float], threshold: float = PROBE_THRESHOLD) -> tuple[int, bool]:
    """The updates a probe curve took to reach ``threshold`` (0: already there after the warm start), and whether
    it did; a curve that never does counts as one more than it has (censored: a lower bound).

    >>> updates_to([0.4, 0.7, 0.92, 0.95]), updates_to([0.4, 0.5])
    ((2, True), (2, False))
    """
    for k, value in enumerate(curve):
        if value >= threshold:
            return k, True
    return len(curve), False


def _probe_results(runs: dict[str, dict[int, dict[str, Any]]], a: str, b: str) -> dict[str, Any] | None:
    """Per arm: the probe's curve (interval over seeds per update), its start and end, area under the curve (the
    mean over the warm start and every update), updates to :data:`PROBE_THRESHOLD`; and ``b`` minus ``a`` paired by
    seed for each, with the smallest difference the seeds could detect (:func:`detectable`)."""
    curves = {name: {seed: c for seed, r in seeds.items() if (c := probe_curve(r)) is not None}
              for name, seeds in runs.items()}
    if not any(curves.values()):
        return None
    out: dict[str, Any] = {"threshold": PROBE_THRESHOLD, "arms": {}, "paired": {}}
    stats: dict[str, dict[int, dict[str, float | None]]] = {}
    for name, per_seed in curves.items():
        if not per_seed:
            continue
        length = min(len(c) for c in per_seed.values())
        stats[name] = {}
        for seed, c in per_seed.items():
            c = c[:length]
            reached, ok = updates_to(c)
            held = runs[name][seed]["summary"]
            greedy = [held.get(k, {}).get("greedy", {}).get("success") for k in ("success_warm_start", "success_final")]
            stats[name][seed] = {"start": c[0], "final": c[-1], "gain": c[-1] - c[0], "auc": float(np.mean(c)),
                                 "updates_to": reached, "reached": float(ok),
                                 "greedy_gain": None if None in greedy else greedy[1] - greedy[0],
                                 "rl_gain": held.get("rl_gain")}
        out["arms"][name] = {
            "seeds": sorted(per_seed), "updates": length - 1,
            "curve": [interval([c[k] for c in per_seed.values()]) for k in range(length)],
            **{key: interval([v[key] for v in stats[name].values()])
               for key in ("start", "final", "gain", "auc", "updates_to", "reached", "greedy_gain", "rl_gain")},
            "gain_detectable": detectable([v["gain"] for v in stats[name].values()])}
    common = sorted(set(stats.get(a, {})) & set(stats.get(b, {})))
    for key in ("final", "auc", "updates_to", "greedy_gain", "rl_gain"):
        diffs = [y - x for s in common if (y := stats[b][s][key]) is not None and (x := stats[a][s][key]) is not None]
        out["paired"][key] = {**interval(diffs), "detectable": detectable(diffs)}
    out["paired"]["seeds"] = common
    return out


def _probe_verdict(probe: dict[str, Any], a: str, b: str) -> list[str]:
    lines = []
    for name, arm in probe["arms"].items():
        lines.append(f"{name} learns the session decision (probe after {arm['updates']} updates minus after the warm "
                     f"start: {_shown(arm['start'])} → {_shown(arm['final'])}, gain {_shown(arm['gain'])}): "
                     f"{_held(arm['gain'])}; reached {probe['threshold']} in {_shown(arm['reached'], 2)} of runs, "
                     f"after {_shown(arm['updates_to'], 1)} updates")
    p = probe["paired"]
    if p["seeds"]:
        mde = lambda key: f"smallest detectable difference {p[key]['detectable']}"  # noqa: E731
        lines += [f"{b} - {a}, updates to reach {probe['threshold']} (paired by seed, {len(p['seeds'])} seeds): "
                  f"{_shown(p['updates_to'], 2)}: {b} faster {_held(p['updates_to'], -1)} ({mde('updates_to')})",
                  f"{b} - {a}, area under the probe curve: {_shown(p['auc'])}: {_held(p['auc'])} ({mde('auc')})",
                  f"{b} - {a}, probe after the last update: {_shown(p['final'])}: {_held(p['final'])} "
                  f"({mde('final')})"]
    return lines


def _verdict(spec: Claim, results: dict[str, Any]) -> list[str]:
    a, b = spec.arms[0].name, spec.arms[1].name
    paired = results["paired"]
    if spec.kind == "credit":
        return [f"{b} - {a} held-out success (paired by seed): {_shown(paired['success'])}: "
                f"{_held(paired['success'])}",
                f"{b} - {a} sessions per trajectory: {_shown(paired['sessions'])}: fewer sessions "
                f"{_held(paired['sessions'], -1)}"] + (_probe_verdict(results["probe"], a, b)
                                                        if "probe" in results else [])
    if spec.kind == "budgets":
        budgets = results["budgets"]
        return [f"{a}: RL gain at the largest T minus at the smallest T: "
                f"{_shown(budgets[a]['gain_largest_minus_smallest_t'])}: gain shrinks with T "
                f"{_held(budgets[a]['gain_largest_minus_smallest_t'])}",
                f"Pass@(1,T) spread across T, {a} minus {b}: {_shown(budgets['spread_fixed_minus_budgetmix'])}: "
                f"BudgetMix steadier {_held(budgets['spread_fixed_minus_budgetmix'])}"]
    lines = []
    for name, r in results["recovery"].items():
        lines.append(f"{name}: RL's change in recovery {_shown(r['recovery'])} ({_held(r['recovery'])}), in "
                     f"single-step quality {_shown(r['step_quality'])} ({_held(r['step_quality'])})")
    return lines


def _settings_line(arm: str, settings: dict[str, Any]) -> str:
    """One line of what an arm's runs were trained with, read from their own ``config.json`` (a key a file
    lacks shows as ``?``: the line describes what is there and never fails on a file it did not write).

    >>> _settings_line("a", {"config": {"algo": "mosaic", "pg": {"lr": 1e-4}, "length_normalize": True},
    ...                      "differs": {2: ["lr"]}})
    'a: `?` {}; algo mosaic, ? demonstrations x ? epochs, ? iterations of ? groups x ?, lr 0.0001, candidates scored by mean token log-prob, ? held-out runs per task; seeds that differ: 2 (lr)'
    """
    c = settings["config"]
    get = lambda key: c.get(key, "?")  # noqa: E731
    pg = c.get("pg") if isinstance(c.get("pg"), dict) else {}
    line = (f"{arm}: `{get('env_id')}` {json.dumps(c.get('env_kwargs', {}), sort_keys=True)}; algo {get('algo')}, "
            f"{get('bc_episodes')} demonstrations x {get('bc_epochs')} epochs, {get('iterations')} iterations of "
            f"{get('tasks_per_iter')} groups x {get('group_size')}, lr {pg.get('lr', '?')}"
            + (f", budgets {c['budgets']}" if c.get("budgets") else "")
            + (", candidates scored by mean token log-prob" if c.get("length_normalize") else "")
            + f", {get('eval_episodes')} held-out runs per task"
            + (f" on the first {c['eval_tasks']} test tasks" if c.get("eval_tasks") else ""))
    if settings["differs"]:
        line += "; seeds that differ: " + ", ".join(f"{s} ({', '.join(k)})" for s, k in settings["differs"].items())
    return line


_GROUP_NAMES = {"all_success": "all successes", "mixed": "mixed rewards", "all_failure": "all failures"}


def _credit_markdown(credit: dict[str, Any]) -> list[str]:
    """The section on where Mosaic's credit differs from broadcast's, one per Mosaic arm."""
    lines = []
    for arm, c in credit.items():
        lines += [f"Where Mosaic's credit differs from broadcast's (arm {arm}: both advantages of every session of its "
                  f"logged training groups, {_shown(c['groups_per_seed'], 1)} groups per seed, seeds {c['seeds']}; "
                  "mean ± 95% interval over seeds; docs/algorithms.md, section 8):", "",
                  "| groups | share of groups | groups where Mosaic ≠ broadcast | session pairs reversed | "
                  "session pairs split |", "|---|---|---|---|---|"]
        for k, name in _GROUP_NAMES.items():
            g = c["groups"][k]
            lines.append(f"| {name} | {_shown(g['share'])} | {_shown(g['differ'])} | {_shown(g['reversed'])} | "
                         f"{_shown(g['split'])} |")
        lines += [f"| all | 1 | | {_shown(c['pairs']['reversed'])} | {_shown(c['pairs']['split'])} |", "",
                  "| sessions (trajectory / kind) | per seed | mean broadcast | mean Mosaic | credit where broadcast "
                  "has none | sign flipped |", "|---|---|---|---|---|---|"]
        for k, s in c["sessions"].items():
            lines.append(f"| {k.replace('/', ' / ')} | {_shown(s['n'], 1)} | {_shown(s['broadcast'])} | "
                         f"{_shown(s['mosaic'])} | {_shown(s['new_credit'])} | {_shown(s['flipped'])} |")
        lines += ["", f"Sessions of failed trajectories with positive Mosaic credit: {_shown(c['failures_credited'])}; "
                      f"sessions of successes with negative Mosaic credit: {_shown(c['successes_blamed'])} (broadcast "
                      f"gives neither); correlation of the two over mixed groups' sessions: "
                      f"{_shown(c['correlation'])}.", ""]
    return lines


def _probe_markdown(probe: dict[str, Any]) -> list[str]:
    """The probe's table: per arm, and the second arm minus the first paired by seed (probe.png: the curves)."""
    arms = list(probe["arms"])
    rows = [("probe after the warm start", "start"), ("probe after the last update", "final"),
             ("gain", "gain"), ("area under the curve", "auc"), (f"updates to {probe['threshold']}", "updates_to"),
             (f"runs that reached {probe['threshold']}", "reached"), ("held-out greedy success, gain", "greedy_gain"),
             ("held-out sampled success, gain", "rl_gain")]
    lines = [f"The probe: P(complete summary) at fixed compaction states, exact (mean ± 95% interval over seeds; "
             f"a run that never reached {probe['threshold']} counts its updates + 1):", "",
             "| | " + " | ".join(arms) + " | paired difference (smallest detectable) |", "|---|" + "---|" * (len(arms) + 1)]
    for label, key in rows:
        paired = probe["paired"].get(key)
        cell = f"{_shown(paired)} ({paired['detectable']})" if paired else ""
        lines.append(f"| {label} | " + " | ".join(_shown(probe["arms"][a][key]) for a in arms) + f" | {cell} |")
    return lines + [""]


def markdown(results: dict[str, Any]) -> str:
    """The results as Markdown: a table per stage and arm, the paired comparison and the verdict."""
    arms = list(results["arms"])
    lines = [f"## {results['claim']}: {results['question']}", "",
             "Runs finished: " + ", ".join(f"{a} seeds {results['finished'].get(a, [])}" for a in arms)
             + (" (quick mode: the numbers mean nothing)" if results["quick"] else ""), ""]
    for a in arms:
        if a in results["settings"]:
            lines += [_settings_line(a, results["settings"][a]), ""]
    lines += ["Held-out metrics, mean ± 95% interval over seeds (warm start → after RL):", "",
             "| metric | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for m in METRICS:
        cells = [f"{_shown(results['arms'][a]['warm_start'][m])} → {_shown(results['arms'][a]['final'][m])}"
                 for a in arms]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines.append("| RL gain (paired over tasks) | " + " | ".join(_shown(results["arms"][a]["rl_gain"])
                                                                 for a in arms) + " |")
    for k in ("k_varies", "k_varies_success", "reward_varies"):
        lines.append(f"| warm-start groups: {k} | " + " | ".join(
            _shown(results["arms"][a]["warm_start_groups"][k]) for a in arms) + " |")
    p = results["paired"]
    lines += ["", f"Paired ({arms[1]} - {arms[0]}, same warm start per seed): success {_shown(p['success'])} "
                  f"(per task, pooled over seeds: {_shown(p['success_per_task'])}), sessions {_shown(p['sessions'])}.",
              ""]
    if "budgets" in results:
        for name in arms:
            b = results["budgets"][name]
            lines.append(f"- {name}: RL gain at T " + ", ".join(f"{t}: {_shown(c)}" for t, c in b["gain_at"].items())
                         + f"; Pass@(1,T) spread across T {_shown(b['spread_across_t'])}")
        lines.append("")
    if "probe" in results:
        lines += _probe_markdown(results["probe"])
    if "credit" in results:
        lines += _credit_markdown(results["credit"]) or [
            "Where Mosaic's credit differs from broadcast's: no Mosaic run of this claim logged training groups "
            "(runs made before trajectory logs); rerun its Mosaic arm to see it.", ""]
    lines += ["Verdict:", ""] + [f"- {v}" for v in results["verdict"]] + [""]
    return "\n".join(lines)
