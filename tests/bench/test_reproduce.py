"""bench/paper/reproduce.py: a finished run keeps exactly what the results page cites."""

from __future__ import annotations

import json

from bench.paper.reproduce import build_parser, keep_only_cited


def test_only_the_cited_files_are_kept(tmp_path):
    out = tmp_path / "paper"
    sweep = out / "chain_output"
    (sweep / "output_tokens=25").mkdir(parents=True)
    (sweep / "output_tokens=25" / "results.json").write_text("{}")
    (sweep / "sweep.json").write_text(json.dumps({"field": "output_tokens", "points": []}))
    (sweep / "sweep.png").write_bytes(b"png")
    (sweep / "table.txt").write_text("t")
    single = out / "mixed"
    single.mkdir()
    (single / "results.json").write_text(json.dumps(
        {"variants": {"app_centric:parrot": {"e2e_latency_s": {"mean": 1.0},
                                             "apps": [{"e2e": 1.0}]}}}))
    (single / "latency_cdf.png").write_bytes(b"png")
    (single / "timeline_app_centric_parrot.png").write_bytes(b"png")
    for name in ("table.md", "paper.json", "run.json", "stray.log"):
        (out / name).write_text("x")
    assert keep_only_cited(out) == 3
    kept = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert kept == ["chain_output/sweep.json", "chain_output/sweep.png",
                    "chain_output/table.txt", "mixed/latency_cdf.png", "mixed/results.json",
                    "paper.json", "run.json", "table.md"]
    summary = json.loads((single / "results.json").read_text())["variants"]
    assert summary == {"app_centric:parrot": {"e2e_latency_s": {"mean": 1.0},
                                              "num_app_records": 1}}


def test_the_paper_options_live_in_the_lab_not_in_parrot_bench():
    args = build_parser().parse_args(["--out", "x", "--calibrate", "--profile", "a100"])
    assert args.calibrate and args.profile == "a100" and not args.keep_all
    from parrot.cli.bench import build_parser as product_parser
    help_text = product_parser().format_help()
    assert "--sweep" in help_text
    assert not [o for o in ("--paper", "--page ") if o in help_text]
