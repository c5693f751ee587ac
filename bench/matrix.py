"""The policy matrix: every built-in workload × engine counts × policies, in simulation.

    cells = run_matrix(MatrixSpec(), processes=2)
    write_outputs(cells, Path("docs/results/matrix_fair"), spec)

Each cell is one (workload, number of engines); in it every variant runs the workload (its
registry defaults, `WorkloadSpec` otherwise) on a fresh simulated cluster with the same seed, so
a cell is a deterministic function of (workload, engines, seed, setting). A cell's figure is
app_centric's speedup over the *best* request-level baseline: the smallest mean end-to-end
latency of the main applications among the baselines, divided by app_centric's. Workloads come
from `WORKLOADS`, so a workload added there appears in the matrix without changes here.

Two settings (`SETTINGS`):

* `fair` (the default): every output length drawn and hidden under a loose cap (no oracle);
  every variant's engines cache prompt prefixes automatically (as vLLM's and SGLang's do:
  the request-level baselines' labels say so); app_centric with its defaults
  (work-conserving); the latency-centric baseline capped at exactly app_centric's latency
  capacity, calibrated per profile by one rule; the throughput-centric baseline at each
  engine's throughput capacity, as app_centric's throughput calls.
* `paper` (an ablation, the setting the matrix was first published in): exact output lengths
  (`ignore_eos`), baselines without prefix caching, app_centric with the paper's latency rule
  (`work_conserving: false`), the latency-centric cap calibrated from the paper's 4,096.
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from parrot.manager.engine_profiles import speed_profile
from parrot.speed_profile import calibrated_latency_capacity
from parrot.sim.cluster import ClusterSpec
from parrot.sim.compare import Settings, parse_variant, run_variant
from parrot.sim.workloads.registry import WORKLOADS
from parrot.sim.workloads.spec import WorkloadSpec

# Arrival rates (requests per second) of a workload's open-loop traffic.
RATE_FIELDS = ("chat_rate", "request_rate")

PARROT = "app_centric"
BASELINES = ("least_queue:baseline", "latency_centric:baseline", "throughput_centric:baseline")
# Automatic prefix caching on a request-level baseline's engines (sim_prefix_cache.py).
PREFIX_CACHING = "+engine.prefix_caching=true"
SETTINGS = ("fair", "paper")
ENGINE_COUNTS = (1, 2, 4, 8)
LONG_CONTEXT_PROFILE = "h200_llama7b"          # 16384-token context (configs/profiles/)
LONG_CONTEXT_WORKLOADS = ("copilot", "gpts")
PAPER_PROFILE = "a100_llama13b"                 # the paper's hardware and model
LATENCY_CENTRIC_PAPER_TOKENS = 4096             # the paper's latency-centric baseline cap


@dataclass(frozen=True)
class MatrixSpec:
    workloads: tuple[str, ...] = field(default_factory=lambda: tuple(WORKLOADS))
    engine_counts: tuple[int, ...] = ENGINE_COUNTS
    # the application-centric variant: app_centric with the setting's parameters, and any of
    # its own (`app_centric+policy.KEY=VALUE`); its cells are under "app_centric" whatever
    # they are (matrix.json's spec names them)
    parrot: str = PARROT
    # None: the setting's (BASELINES, each with prefix caching in the fair setting)
    baselines: tuple[str, ...] | None = None
    seed: int = 0
    profile: str = "a100_llama13b"
    setting: str = "fair"

    def __post_init__(self) -> None:
        unknown = sorted(set(self.workloads) - set(WORKLOADS))
        if unknown:
            raise ValueError(f"workloads: {unknown} unknown; allowed: {sorted(WORKLOADS)}")
        if self.setting not in SETTINGS:
            raise ValueError(f"setting: {self.setting!r} unknown; allowed: {list(SETTINGS)}")
        if self.baselines is None:
            suffix = PREFIX_CACHING if self.setting == "fair" else ""
            object.__setattr__(self, "baselines", tuple(b + suffix for b in BASELINES))
        for variant in (self.parrot, *self.variants[1:]):
            parse_variant(variant)  # raises CompareError naming a bad item

    @property
    def variants(self) -> tuple[str, ...]:
        """app_centric, then the baselines."""
        assert self.baselines is not None  # set in __post_init__
        return (self.parrot, *self.baselines)

    def cells(self) -> list[tuple[str, int]]:
        return [(w, n) for w in self.workloads for n in self.engine_counts]


@dataclass(frozen=True)
class Cell:
    workload: str
    num_engines: int
    mean_e2e_s: dict[str, float | None]     # per variant; None when it did not finish
    chat_mean_s: dict[str, float | None]    # background apps (chat, batch jobs), if any
    wall_s: float

    @property
    def best_baseline(self) -> str | None:
        finished = {v: t for v, t in self.mean_e2e_s.items() if v != PARROT and t}
        return min(finished, key=finished.__getitem__) if finished else None

    @property
    def speedup(self) -> float | None:
        """Best baseline's mean E2E / app_centric's (> 1: app_centric is faster)."""
        best, ours = self.best_baseline, self.mean_e2e_s.get(PARROT)
        if ours is None:
            return None
        if best is None:
            return math.inf  # every baseline failed (e.g. deadlocked) where app_centric ran
        return self.mean_e2e_s[best] / ours  # type: ignore[operator]


def cell_workload_spec(workload: str, num_engines: int, seed: int,
                       setting: str = "fair") -> WorkloadSpec:
    """The workload's registry defaults; on a cluster smaller than the one it is meant for
    (`Workload.num_engines`), its open-loop arrival rates and its number of main applications
    are scaled down in proportion (rounded up), so each engine is offered the load the
    workload intends instead of a backlog that outgrows it (four map-reduce jobs submitted
    together do not fit one engine's KV cache). Larger clusters keep the designed load."""
    registered = WORKLOADS[workload]
    # fair: hidden lengths (the workloads' default); paper: exact ones
    lengths = "exact" if setting == "paper" else "sampled"
    values: dict[str, Any] = {**registered.spec_defaults, "output_lengths": lengths,
                              "seed": seed}
    scale = min(1.0, num_engines / registered.num_engines)
    if scale < 1.0:
        base = WorkloadSpec(**values)
        for key in RATE_FIELDS:
            if getattr(base, key) > 0:
                values[key] = getattr(base, key) * scale
        for key in (registered.main_apps_field, registered.background_apps_field):
            if key is not None:
                values[key] = max(1, math.ceil(getattr(base, key) * scale))
    return WorkloadSpec(**values)


def profile_for(workload: str, default: str) -> str:
    """`default`, unless the workload's prompts exceed its context window (copilot's
    6000-token system prompt, the GPTs' 7437-token one do not fit the A100 LLaMA-13B
    profile's 4096): then the long-context profile."""
    return LONG_CONTEXT_PROFILE if workload in LONG_CONTEXT_WORKLOADS else default


def latency_capacity_for(profile: str) -> int:
    """The engines' latency capacity, calibrated to the profile by the paper's rule
    (speed_profile.calibrated_latency_capacity, what `latency_capacity: auto` gives an
    engine): 6144 on a100_llama13b, 20480 on h200_llama7b."""
    return calibrated_latency_capacity(speed_profile({"profile": profile}))


def latency_centric_capacity_for(profile: str) -> int:
    """The latency-centric baseline's per-engine cap, calibrated by the same rule as
    app_centric's latency capacity (so neither side keeps an A100 figure on faster hardware):
    the paper caps that baseline at 4096 tokens on its A100 LLaMA-13B, where a decode step
    is 34 ms, 1.55x the empty-batch step; the same ratio elsewhere: 4096 on a100_llama13b,
    13312 on h200_llama7b."""
    paper = speed_profile({"profile": PAPER_PROFILE})
    ratio = paper.decode_ms(LATENCY_CENTRIC_PAPER_TOKENS) / paper.decode_ms(0)
    return speed_profile({"profile": profile}).tokens_at_slowdown(ratio)


def policy_params_for(setting: str, profile: str) -> dict[str, dict[str, Any]]:
    """Policy parameters of a cell (module docstring): fair, app_centric's defaults and the
    latency-centric cap equal to its latency capacity; paper, the paper's latency rule and
    the cap calibrated from the paper's 4,096 tokens."""
    if setting == "paper":
        return {"app_centric": {"work_conserving": False},
                "latency_centric": {"token_capacity": latency_centric_capacity_for(profile)}}
    return {"latency_centric": {"token_capacity": latency_capacity_for(profile)}}


def run_cell(spec: MatrixSpec, workload: str, num_engines: int) -> Cell:
    """Run every variant of one cell (in this process)."""
    started = time.perf_counter()
    profile = profile_for(workload, spec.profile)
    # fair: every variant on the same engines, automatic prefix caching on (as a deployment
    # on vLLM or SGLang has it); the baselines' labels say so too
    engine_params = {"prefix_caching": True} if spec.setting == "fair" else {}
    settings = Settings(workload=workload, seed=spec.seed,
                        cluster=ClusterSpec(num_engines=num_engines, profile=profile,
                                            latency_capacity=latency_capacity_for(profile),
                                            engine_params=engine_params),
                        workload_spec=cell_workload_spec(workload, num_engines, spec.seed,
                                                         spec.setting),
                        policy_params=policy_params_for(spec.setting, profile))
    means: dict[str, float | None] = {}
    chats: dict[str, float | None] = {}
    for variant in spec.variants:
        run = run_variant(settings, parse_variant(variant))
        # app_centric's figures under its own name whatever parameters the variant gives it
        label = PARROT if variant == spec.parrot else variant
        main = [r.latency_s for r in run.records if r.is_main and r.error is None]
        chat = [r.latency_s for r in run.records if not r.is_main and r.error is None]
        ok = run.status == "ok" and main and len(main) == len(
            [r for r in run.records if r.is_main])
        means[label] = sum(main) / len(main) if ok else None
        chats[label] = sum(chat) / len(chat) if chat else None
    return Cell(workload, num_engines, means, chats, time.perf_counter() - started)


def run_matrix(spec: MatrixSpec, processes: int = 2) -> list[Cell]:
    """Every cell, `processes` at a time (each cell in its own worker process)."""
    cells = spec.cells()
    if processes <= 1:
        return [run_cell(spec, w, n) for w, n in cells]
    # The longest cells first (open-loop traffic, then more engines), so the last worker is
    # not left running a long cell alone.
    def cost(cell: tuple[str, int]) -> tuple[bool, int]:
        defaults = WORKLOADS[cell[0]].spec_defaults
        return (not any(k in defaults for k in RATE_FIELDS), -cell[1])

    with ProcessPoolExecutor(max_workers=processes) as pool:
        futures = {cell: pool.submit(run_cell, spec, *cell) for cell in sorted(cells, key=cost)}
        return [futures[cell].result() for cell in cells]


def geometric_mean(values: Sequence[float]) -> float | None:
    finite = [v for v in values if v and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in finite) / len(finite)) if finite else None


def markdown_table(cells: Sequence[Cell], spec: MatrixSpec) -> str:
    """Workloads down, engine counts across; each entry `speedup× (best baseline)`."""
    by_key = {(c.workload, c.num_engines): c for c in cells}
    head = "| workload | " + " | ".join(f"{n} engine{'s' * (n > 1)}" for n in spec.engine_counts)
    lines = [head + " |", "|---|" + "---|" * len(spec.engine_counts)]
    for workload in spec.workloads:
        row = []
        for n in spec.engine_counts:
            cell = by_key[(workload, n)]
            s = cell.speedup
            best = (cell.best_baseline or "none").split(":")[0]
            row.append("failed" if s is None else f"{s:.2f}× ({best})")
        lines.append(f"| {workload} | " + " | ".join(row) + " |")
    gm = geometric_mean([c.speedup for c in cells if c.speedup is not None])
    lines.append("")
    lines.append(f"Geometric mean: {gm:.2f}×; lowest: "
                 f"{min((c.speedup for c in cells if c.speedup is not None), default=0):.2f}×."
                 if gm else "No cell finished.")
    return "\n".join(lines)


def results_json(cells: Sequence[Cell], spec: MatrixSpec, wall_s: float) -> dict[str, Any]:
    return {
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} python {platform.python_version()}",
        "spec": asdict(spec),
        "wall_s": wall_s,
        "geometric_mean_speedup": geometric_mean([c.speedup for c in cells
                                                  if c.speedup is not None]),
        "cells": [{**asdict(c), "best_baseline": c.best_baseline,
                   "speedup": None if c.speedup is None or not math.isfinite(c.speedup)
                   else c.speedup} for c in cells],
    }


def heatmap(cells: Sequence[Cell], spec: MatrixSpec, path: Path) -> None:
    """PNG: app_centric's speedup over the best baseline per cell (log colour scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    by_key = {(c.workload, c.num_engines): c for c in cells}
    grid = [[by_key[(w, n)].speedup or float("nan") for n in spec.engine_counts]
            for w in spec.workloads]
    fig, ax = plt.subplots(figsize=(1.6 * len(spec.engine_counts) + 2.5,
                                    0.55 * len(spec.workloads) + 1.5))
    image = ax.imshow(grid, cmap="RdYlGn", norm=LogNorm(vmin=0.5, vmax=2.0), aspect="auto")
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            ax.text(j, i, "—" if value != value else f"{value:.2f}×", ha="center",
                    va="center", fontsize=9)
    ax.set_xticks(range(len(spec.engine_counts)), [str(n) for n in spec.engine_counts])
    ax.set_yticks(range(len(spec.workloads)), list(spec.workloads))
    ax.set_xlabel("simulated engines")
    ax.set_title("app_centric speedup over the best request-level baseline")
    bar = fig.colorbar(image, ax=ax, label="speedup (log scale)")
    ticks = [0.5, 0.75, 1.0, 1.5, 2.0]
    bar.set_ticks(ticks, labels=[f"{t:g}×" for t in ticks])
    bar.minorticks_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(cells: Sequence[Cell], spec: MatrixSpec, out: Path, wall_s: float) -> str:
    """matrix.md, matrix.json and matrix.png under `out`; returns the markdown table."""
    out.mkdir(parents=True, exist_ok=True)
    table = markdown_table(cells, spec)
    (out / "matrix.md").write_text(table + "\n")
    (out / "matrix.json").write_text(json.dumps(results_json(cells, spec, wall_s), indent=2)
                                     + "\n")
    heatmap(cells, spec, out / "matrix.png")
    return table
