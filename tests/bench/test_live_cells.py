"""The live column of the paper table comes from the committed live results: the one-engine
runs and the two-engine runs (gpts, mixed), each in its own folder."""

from __future__ import annotations

import json

import pytest

from bench.paper.live_cells import EARLIER_CLOCK_MARK, live_cell
from bench.paper.live_results import load, load_run, publish
from parrot.sim.workloads.base import APP_CLOCK
from bench.paper.experiments import EXPERIMENTS
from bench.paper.report import BEGIN, END, refresh_page, write_report


def _run(mean: float, per_token: float | None = None, chat: float | None = None) -> dict:
    run = {"status": "ok", "e2e_latency_s": {"mean": mean},
           "normalized_latency_s_per_token": {"mean": per_token}}
    if chat is not None:
        run["background"] = {"normalized_latency_s_per_token": {"mean": chat}}
    return run


LIVE = {"map_reduce": {"app_clock": APP_CLOCK, "reference": "latency_centric:baseline",
                       "variants": {"app_centric:parrot": _run(5.0),
                                    "latency_centric:baseline": _run(10.0)}},
        "copilot_32": {"app_clock": APP_CLOCK, "reference": "least_queue:baseline",
                       "variants": {"least_queue:parrot": _run(3.0),
                                    "app_centric:parrot": {"status": "error"},
                                    "least_queue:baseline": _run(9.0)}},
        "copilot_32_static": {"app_clock": APP_CLOCK, "reference": "least_queue:parrot",
                              "variants": {"least_queue:parrot": _run(1.5)}}}


def test_ratios_are_the_reference_mean_over_ours_and_failures_say_na():
    assert live_cell(LIVE, "map_reduce_apps") == "vs latency-capped request-level: 2.00×"
    cell = live_cell(LIVE, "copilot").split("<br>")
    assert cell[0] == "32 users, sharing vs no sharing: 3.00×"
    assert cell[1] == "32 users, app_centric vs no sharing: n/a"      # that run failed
    assert cell[2] == "64 users, sharing vs no sharing: n/a"          # not in the results
    assert cell[3] == "32 users, sharing vs static sharing: 0.50×"    # cross-run baseline
    assert live_cell(LIVE, "chain_bg") == "pending"    # its sweep point has not run
    assert live_cell(LIVE, "gpts_rate") == "pending"   # a two-engine row, not run yet
    assert live_cell(LIVE, "no_such_row") == "not run live"


def test_a_sweeps_points_run_live_one_at_a_time_fill_its_row():
    points = {key: {"app_clock": APP_CLOCK, "reference": "latency_centric:baseline",
                    "variants": {"app_centric:parrot": _run(2.0),
                                 "latency_centric:baseline": _run(base)}}
              for key, base in (("map_reduce_8", 3.0), ("map_reduce_16", 4.0))}
    assert live_cell(points, "map_reduce_chunks").split("<br>") == [
        "doc_tokens 8192: vs latency-capped request-level: 1.50×",
        "doc_tokens 16384: vs latency-capped request-level: 2.00×"]
    # a point that did not run is left out of the row, not shown as n/a
    assert live_cell({"map_reduce_8": points["map_reduce_8"]}, "map_reduce_chunks") == \
        "doc_tokens 8192: vs latency-capped request-level: 1.50×"


def test_no_results_or_a_smoke_run_leave_the_column_pending(tmp_path):
    assert live_cell(load_run(tmp_path / "missing.json"), "map_reduce_apps") == "pending"
    smoke = tmp_path / "results.json"
    smoke.write_text(json.dumps({"smoke": True, "experiments": LIVE}))
    assert load_run(smoke) is None
    real = tmp_path / "real.json"
    real.write_text(json.dumps({"smoke": False, "experiments": LIVE}))
    assert load_run(real) == LIVE


TWO_ENGINES = {
    "gpts": {"app_clock": APP_CLOCK, "reference": "least_queue:baseline",
             "variants": {"app_centric:parrot": _run(3.0, 0.02),
                          "least_queue:parrot": _run(2.0, 0.01),
                          "app_centric:parrot+policy.prefix_affinity=false": _run(9.0, 0.16),
                          "least_queue:baseline": _run(8.0, 0.08)}},
    "mixed": {"app_clock": APP_CLOCK, "reference": "latency_centric:parrot",
              "variants": {"app_centric:parrot": _run(4.0, chat=0.02),
                           "throughput_centric:parrot": _run(2.0, chat=0.05),
                           "latency_centric:parrot": _run(12.0, chat=0.03)}},
}


def test_gpts_and_mixed_ratios_use_their_papers_metrics():
    gpts = live_cell(TWO_ENGINES, "gpts_rate").split("<br>")
    assert gpts[0].endswith("app_centric vs no sharing: 4.00×")     # per output token
    assert gpts[1] == "affinity off vs no sharing: 0.50×"
    assert gpts[2] == "sharing, least-queue placement vs no sharing: 8.00×"
    mixed = live_cell(TWO_ENGINES, "mixed").split("<br>")
    assert mixed[0].endswith("chat normalized latency vs latency-centric: 1.50×")
    assert mixed[1] == "chat normalized latency vs throughput-centric: 2.50×"
    assert mixed[2] == "map-reduce job time vs latency-centric: 3.00×"
    assert mixed[3] == "map-reduce job time vs throughput-centric: 0.50×"


def test_a_live_rate_search_adds_the_papers_rate_ratios_higher_is_better():
    searched = {**TWO_ENGINES, "gpts_rate": {"app_clock": APP_CLOCK,
                                             "reference": "least_queue:baseline", "variants": {
        "app_centric:parrot": {"sustainable_rate": 24.0},
        "least_queue:parrot": {"sustainable_rate": 32.0},
        "app_centric:parrot+policy.prefix_affinity=false": {"sustainable_rate": 12.0},
        "least_queue:baseline": {"sustainable_rate": 4.0}}}}
    gpts = live_cell(searched, "gpts_rate").split("<br>")
    assert gpts[0].endswith("sustainable rate at <= 40 ms/token: app_centric vs no sharing: "
                            "6.00×")
    assert gpts[1] == "affinity off vs no sharing: 3.00×"
    assert gpts[2] == "sharing, least-queue placement vs no sharing: 8.00×"
    assert gpts[3].endswith("app_centric vs no sharing: 4.00×")    # the fixed-rate run
    # without the search its rows are left out, not "n/a"; so are variants it did not run
    assert "sustainable rate" not in live_cell(TWO_ENGINES, "gpts_rate")
    del searched["gpts_rate"]["variants"]["least_queue:parrot"]
    assert "least-queue placement vs no sharing: " not in \
        live_cell(searched, "gpts_rate").split("<br>")[2]


def _write(results, run_id, experiments, smoke=False):
    """A live run's folder (as bench/paper/live.py writes it), published into results/live."""
    folder = results.parent / "runs" / results.name / run_id
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"smoke": smoke,
                                                      "experiments": experiments}))
    (folder / "log.txt").write_text(f"Machine: test\nCommand: live.py {run_id}\n\nbody\n")
    publish(folder, results / "live", run_id)


def load_live_dirs(results):
    return load(results / "live")


def test_both_live_folders_fill_the_table(tmp_path):
    results = tmp_path / "results"
    assert load_live_dirs(results) is None
    _write(results, "run1", TWO_ENGINES)
    assert set(load_live_dirs(results)) == {"gpts", "mixed"}
    _write(results, "run0", LIVE)
    merged = load_live_dirs(results)
    assert set(merged) == set(LIVE) | set(TWO_ENGINES)
    out = results / "paper"
    out.mkdir()
    table = write_report(out, EXPERIMENTS, {}, 1.0)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()}
    gpts_row = next(v for k, v in rows.items() if k.startswith("GPTs"))
    assert "app_centric vs no sharing: 4.00×" in gpts_row
    mixed_row = next(v for k, v in rows.items() if k.startswith("mixed: chat"))
    assert "map-reduce job time vs latency-centric: 3.00×" in mixed_row
    map_reduce_row = next(v for k, v in rows.items() if "3 apps of 32" in k)
    assert "vs latency-capped request-level: 2.00×" in map_reduce_row


def test_refresh_page_rewrites_the_table_from_committed_runs(tmp_path):
    results = tmp_path / "results"
    out = results / "paper"
    out.mkdir(parents=True)
    (out / "run.json").write_text(json.dumps({"wall_s": 3.0, "runs": {
        "mixed": {"exit": 0, "seconds": 2.0}}}))
    page = tmp_path / "RESULTS.md"
    page.write_text(f"top\n{BEGIN}\nold\n{END}\nend\n")
    refresh_page(out, page)
    assert "| pending |" in page.read_text() and "old" not in page.read_text()
    _write(results, "run1", TWO_ENGINES)
    table = refresh_page(out, page)
    assert "chat normalized latency vs latency-centric: 1.50×" in page.read_text()
    assert table in page.read_text() and page.read_text().endswith(f"{END}\nend\n")
    paper = json.loads((out / "paper.json").read_text())
    assert paper["wall_s"] == 3.0 and paper["experiments"]["mixed"]["seconds"] == 2.0
    assert f"--profile h200_llama7b --out {out}/mixed`" in table


def test_the_sixteen_file_multi_agent_run_shows_only_when_it_ran():
    def team(ours, thr, lat):
        return {"app_clock": APP_CLOCK, "reference": "latency_centric:baseline",
                "variants": {"app_centric:parrot": _run(ours),
                             "throughput_centric:baseline": _run(thr),
                             "latency_centric:baseline": _run(lat)}}
    eight = {"multi_agent": team(10.0, 15.0, 50.0)}
    assert live_cell(eight, "multi_agent").split("<br>") == [
        "8 files, vs latency-centric: 5.00×", "8 files, vs throughput-centric: 1.50×"]
    both = {**eight, "multi_agent_16": team(20.0, 50.0, 200.0)}
    assert live_cell(both, "multi_agent").split("<br>")[2:] == [
        "16 files, vs latency-centric: 10.00×", "16 files, vs throughput-centric: 2.50×"]


def _search(reference: str, rates: dict[str, float]) -> dict:
    base = rates[reference]
    return {"app_clock": APP_CLOCK,
            "reference": reference, "rate_search": {"target_s_per_token": 0.04},
            "variants": {label: {"sustainable_rate": rate, "capped": False,
                                 "ratio_vs_reference": rate / base, "reference_rate": base}
                         for label, rate in rates.items()}}


def test_a_rate_search_run_in_parts_keeps_each_variants_own_ratio(tmp_path):
    """The live search of four variants is run as two device calls, each with the reference;
    the table shows each variant's ratio against the reference of its own part."""
    results = tmp_path / "results"
    first = _search("least_queue:baseline", {"app_centric:parrot": 80.0,
                                             "least_queue:baseline": 10.0})
    second = _search("least_queue:baseline", {"least_queue:parrot": 54.0,
                                              "least_queue:baseline": 9.0})
    second["variants"]["app_centric:parrot"] = {"skipped": "time budget"}
    _write(results, "run0", {"gpts_rate": first})
    _write(results, "run1", {"gpts_rate": second})
    merged = load_live_dirs(results)
    assert merged is not None
    variants = merged["gpts_rate"]["variants"]
    assert variants["app_centric:parrot"]["sustainable_rate"] == 80.0  # not the skipped part
    assert variants["least_queue:baseline"]["reference_rate"] == 9.0   # the later part's
    cell = live_cell(merged, "gpts_rate").split("<br>")
    assert cell[0].endswith("app_centric vs no sharing: 8.00× (80.0 vs 10.00 req/s)")
    assert cell[1] == "sharing, least-queue placement vs no sharing: 6.00× (54.0 vs 9.00 req/s)"
    # any other experiment: the later folder's run replaces the earlier one's whole
    _write(results, "run2", {"map_reduce": LIVE["map_reduce"]})
    _write(results, "run3", {"map_reduce": {"app_clock": APP_CLOCK,
                                                   "reference": "latency_centric:baseline",
                                                   "variants": {}}})
    assert load_live_dirs(results)["map_reduce"]["variants"] == {}


def test_every_live_ratio_names_a_runnable_experiment_and_a_paper_row():
    from bench.paper.live_cells import LIVE_RATIOS
    from bench.paper.live_experiments import EXTRA_EXPERIMENTS, LIVE_EXPERIMENTS
    runnable = {e.key for e in (*LIVE_EXPERIMENTS, *EXTRA_EXPERIMENTS)}
    named = {e.key for e in EXTRA_EXPERIMENTS}
    rows = {e.key for e in EXPERIMENTS}
    assert set(LIVE_RATIOS) <= rows
    for ratios in LIVE_RATIOS.values():
        for r in ratios:
            assert r.experiment in runnable, r
            # an experiment run only when named may be missing: its ratios must say so
            assert r.optional or r.experiment not in named, r


def cell_of(live: dict, key: str, label: str) -> str:
    """The part of a row's live cell that starts with `label`."""
    return next(c for c in live_cell(live, key).split("<br>") if c.startswith(label))


def test_a_run_on_the_earlier_app_clock_is_marked_on_the_ratios_it_enters():
    earlier = {key: {k: v for k, v in run.items() if k != "app_clock"}
               for key, run in LIVE.items()}
    assert live_cell(earlier, "map_reduce_apps") == \
        f"vs latency-capped request-level: 2.00×{EARLIER_CLOCK_MARK}"
    # a cross-run ratio is marked when either run is on the earlier clock
    mixed = {**LIVE, "copilot_32_static": earlier["copilot_32_static"]}
    cell = live_cell(mixed, "copilot").split("<br>")
    assert cell[0] == "32 users, sharing vs no sharing: 3.00×"
    assert cell[3] == f"32 users, sharing vs static sharing: 0.50×{EARLIER_CLOCK_MARK}"
    # the engines' own TPOT does not run on an application's clock
    tpot = {key: {**run, "variants": {label: {**v, "engine_tpot_s": 0.01}
                                      for label, v in run["variants"].items()}}
            for key, run in earlier.items()}
    assert cell_of(tpot, "copilot", "TPOT, 32 users") == \
        "TPOT, 32 users, sharing vs static sharing: 1.00×"


def test_a_rate_search_part_on_the_earlier_clock_stays_marked_after_a_later_part(tmp_path):
    """Parts of a search merge per variant, so each ratio keeps the clock of the part that
    measured it, not the clock of the last part merged (in either order)."""
    earlier = _search("least_queue:baseline", {"least_queue:parrot": 54.0,
                                               "least_queue:baseline": 9.0})
    del earlier["app_clock"]
    later = _search("least_queue:baseline", {"app_centric:parrot": 80.0,
                                             "least_queue:baseline": 10.0})
    for order, parts in (("earlier first", (earlier, later)), ("later first", (later, earlier))):
        results = tmp_path / order
        for run_id, part in zip(("run0", "run1"), parts):
            _write(results, run_id, {"gpts_rate": part})
        merged = load_live_dirs(results)
        assert merged is not None
        assert cell_of(merged, "gpts_rate", "2 engines on 1 H200, sustainable rate").endswith(
            "app_centric vs no sharing: 8.00× (80.0 vs 10.00 req/s)"), order
        assert cell_of(merged, "gpts_rate", "sharing, least-queue") == (
            "sharing, least-queue placement vs no sharing: 6.00× (54.0 vs 9.00 req/s)"
            f"{EARLIER_CLOCK_MARK}"), order


def test_publishing_records_which_run_backs_each_experiment(tmp_path):
    results = tmp_path / "results"
    _write(results, "first", {"map_reduce": LIVE["map_reduce"],
                              "gpts_rate": _search("least_queue:baseline",
                                                   {"app_centric:parrot": 80.0,
                                                    "least_queue:baseline": 10.0})})
    _write(results, "second", {"map_reduce": LIVE["map_reduce"],
                               "gpts_rate": _search("least_queue:baseline",
                                                    {"least_queue:parrot": 54.0,
                                                     "least_queue:baseline": 9.0})})
    manifest = json.loads((results / "live" / "manifest.json").read_text())
    assert manifest["experiments"] == {"map_reduce": {"run": "second", "parts": ["second"]},
                                       "gpts_rate": {"run": "second",
                                                     "parts": ["first", "second"]}}
    assert manifest["runs"] == {"first": ["Machine: test", "Command: live.py first"],
                                "second": ["Machine: test", "Command: live.py second"]}
    # a run no cell cites any more leaves the manifest
    _write(results, "third", {"gpts_rate": {**LIVE["map_reduce"]}})
    manifest = json.loads((results / "live" / "manifest.json").read_text())
    assert set(manifest["runs"]) == {"second", "third"}
    assert sorted(p.name for p in (results / "live").iterdir()) == [
        "gpts_rate", "manifest.json", "map_reduce"]
    # a smoke run publishes nothing
    folder = tmp_path / "smoke"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"smoke": True, "experiments": LIVE}))
    with pytest.raises(ValueError, match="smoke"):
        publish(folder, results / "live", "smoke")


def test_a_published_experiment_keeps_summaries_and_counts_app_records(tmp_path):
    results = tmp_path / "results"
    run = {"app_clock": APP_CLOCK, "reference": "least_queue:baseline",
           "variants": {"app_centric:parrot": {
               **_run(2.0), "apps": [{"e2e": 1.0}, {"e2e": 3.0}],
               "background": {"apps": [{"e2e": 5.0}], "normalized_latency_s_per_token":
                              {"mean": 0.5}}}}}
    _write(results, "run0", {"chain_summary": run})
    published = load(results / "live")["chain_summary"]["variants"]["app_centric:parrot"]
    assert "apps" not in published and published["num_app_records"] == 2
    assert published["background"] == {"normalized_latency_s_per_token": {"mean": 0.5},
                                        "num_app_records": 1}
    assert published["e2e_latency_s"] == _run(2.0)["e2e_latency_s"]


def test_the_tables_plot_links_resolve_from_where_each_table_is(tmp_path, monkeypatch):
    """OUT/table.md links its plots from OUT; the table for the page links them from docs/."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "docs" / "results" / "paper"
    run = out / "mixed"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({"variants": {}}))
    (run / "latency_cdf.png").write_bytes(b"png")
    page_table = write_report(out, EXPERIMENTS, {}, 1.0)
    own_table = (out / "table.md").read_text()
    for table, base in ((page_table, tmp_path / "docs"), (own_table, out)):
        links = [line.split("](")[1].split(")")[0] for line in table.splitlines()
                 if "latency_cdf.png](" in line]
        assert links and all((base / link).is_file() for link in links), (links, base)
