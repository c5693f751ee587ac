"""The mutations tests/mutations/check.py applies: each a one-line change to the code and the
tests that must catch it. Add one here with every behaviour a test pins down."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str                 # relative to the repository root
    old: str                  # exact snippet; must occur exactly once in the file
    new: str
    tests: tuple[str, ...]    # pytest node ids that must fail with the mutation applied


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "small_batch_gemv_rows", "parrot/engines/builtin/model.py",
        "        wins = gemv.kernel_wins(n, k, rows) if measured is None else measured\n",
        "        wins = rows == 1 if measured is None else measured\n",
        ("tests/engines/builtin/test_small_batch_gemv.py",)),
    Mutation(
        "small_batch_gemv_prefill", "parrot/engines/builtin/model.py",
        "        wins = gemv.kernel_wins(n, k, rows) if measured is None else measured\n",
        "        wins = rows <= 64 if measured is None else measured\n",
        ("tests/engines/builtin/test_small_batch_gemv.py",)),
    Mutation(
        "linear_choice_followed", "parrot/engines/builtin/model.py",
        "        wins = gemv.kernel_wins(n, k, rows) if measured is None else measured\n",
        "        wins = gemv.kernel_wins(n, k, rows)\n",
        ("tests/engines/builtin/test_linear_choice.py",)),
    Mutation(
        "linear_choice_faster_side", "parrot/engines/builtin/linear_choice.py",
        "            if small < library:\n", "            if small > library:\n",
        ("tests/engines/builtin/test_linear_choice.py",)),
    Mutation(
        "constraint_mask_applied", "parrot/engines/builtin/sampler.py",
        "    rows, masked = masked_rows(logits, grammars) if grammars else ([], None)\n",
        "    rows, masked = [], None\n",
        ("tests/engines/builtin/test_sampler.py::"
         "test_constrained_rows_sample_only_allowed_tokens_and_free_rows_are_untouched",)),
    Mutation(
        "constraint_checked_at_submit", "parrot/wire_types/calls.py",
        "                check_constraint(self.output_sampling(spec.name).constraint,\n",
        "                check_constraint(None,\n",
        ("tests/frontend/test_typed_outputs.py::"
         "test_the_server_refuses_a_bad_schema_over_raw_http",)),
    Mutation(
        "simulated_constrained_value", "parrot/engines/simulated.py",
        "        value = None if sampling.constraint is None else sample_value(\n",
        "        value = None if True else sample_value(\n",
        ("tests/engines/test_sim_values.py::test_the_simulated_engine_generates_the_value",)),
    Mutation(
        "forced_tool_call_decoded_under_schema", "parrot/server/openai_tools.py",
        "        if not self.forced:\n            return self.response_format\n",
        "        if True:\n            return self.response_format\n",
        ("tests/server/test_openai_tools.py::test_forced_tool_calls",)),
    Mutation(
        "device_lock_taken", "parrot/engines/builtin/device_lock.py",
        "        fcntl.flock(handle, fcntl.LOCK_EX)\n", "",
        ("tests/engines/builtin/test_device_lock.py",
         "tests/engines/builtin/test_linear_choice.py")),
    Mutation(
        "linear_choice_locks_its_gpu", "parrot/engines/builtin/build.py",
        "with exclusive_device(device_key(model.device)) as waited:",
        'with exclusive_device("elsewhere") as waited:',
        ("tests/engines/builtin/test_linear_choice.py",)),
    Mutation(
        "paged_prefill_positions", "parrot/engines/builtin/runner.py",
        "plan = kernels.plan_prefill([(start, end - start, pos)",
        "plan = kernels.plan_prefill([(start, end - start, 0)",
        ("tests/engines/builtin/test_paged_prefill.py",)),
    Mutation(
        "long_prompts_raise_the_latency_limit", "parrot/policies/slots.py",
        "        if size <= self._suits_up_to:\n",
        "        if True:\n",
        ("tests/policies/test_app_centric.py",)),
    Mutation(
        "small_latency_call_keeps_the_capacity", "parrot/policies/slots.py",
        "        size = smaller_known(self.latency_floor, own)\n",
        "        size = smaller_known(0, own)\n",
        ("tests/policies/test_app_centric.py", "tests/policies/test_policy_invariants.py")),
    Mutation(
        "staging_two_mirrors", "parrot/engines/builtin/staging.py",
        "        self._current ^= 1\n", "",
        ("tests/engines/builtin/test_staging.py",)),
    Mutation(
        "lookahead_finished_rows_leave", "parrot/engines/builtin/graphs.py",
        "    index, j = [], 0\n", "    return None\n    index, j = [], 0\n",
        ("tests/engines/builtin/test_lookahead.py",)),
    Mutation(
        "lookahead_group_crosses_block", "parrot/engines/builtin/lookahead.py",
        "    if any(crossing) and owned is None:\n",
        "    if any(crossing) and (owned is None or rows.groups is not None):\n",
        ("tests/engines/builtin/test_lookahead.py",)),
    Mutation(
        "lookahead_fed", "parrot/engines/builtin/runner.py",
        "        if host.sample_rows != list(range(len(rows.token_ids))):\n",
        "        if True:\n",
        ("tests/engines/builtin/test_lookahead.py",)),
    Mutation(
        "no_affinity_counts_prefix_load", "parrot/policies/slots.py",
        "                    if is_brought or self.counts_prefix(prefix):\n",
        "                    if affinity and (is_brought or self.counts_prefix(prefix)):\n",
        ("tests/policies/test_app_centric.py::"
         "test_without_affinity_a_set_sharing_a_prefix_fits_as_the_engine_counts_it",)),
    Mutation(
        "live_warmup_full_outputs", "bench/paper/live_runs.py",
        'full_outputs=variant.mode == "parrot",', "full_outputs=False,",
        ("tests/bench/test_live_paper.py::"
         "test_the_warm_up_generates_full_outputs_in_parrot_mode_only",)),
    Mutation(
        "live_warmup_one_variant_per_mode", "bench/paper/live_runs.py",
        '    return [v for v in variants if v.mode == "parrot" or v in baseline]\n',
        '    return list({v.mode: v for v in variants}.values())\n',
        ("tests/bench/test_live_paper.py::"
         "test_every_parrot_variant_warms_and_one_request_level_variant",)),
    Mutation(
        "warmup_every_prefill_tile", "parrot/engines/builtin/warmup.py",
        '    tunings = getattr(kernels, "PREFILL_TUNINGS", (None,))\n',
        "    tunings = (None,)\n",
        ("tests/engines/builtin/test_startup.py::"
         "test_warm_up_compiles_the_paged_prefill_kernel_when_the_model_runs_it",)),
    Mutation(
        "prefill_without_cudnn", "parrot/engines/builtin/attention.py",
        "    if device.type != \"cuda\":\n", "    if True:\n",
        ("tests/engines/builtin/test_prefill_attention.py",)),
    Mutation(
        "scheduler_fifo", "parrot/manager/scheduler.py",
        "    return sorted(calls, key=lambda c: c.arrival_seq)",
        "    return sorted(calls, key=lambda c: c.arrival_seq, reverse=True)",
        ("tests/manager/test_scheduler_order.py",)),
    Mutation(
        "contexts_lru_touch_on_hit", "parrot/manager/contexts.py",
        "            if (ctx := self._by_hash.get(piece.prefix_hash)) is not None:\n"
        "                self._by_hash.move_to_end(piece.prefix_hash)\n",
        "            if (ctx := self._by_hash.get(piece.prefix_hash)) is not None:\n",
        ("tests/manager/test_contexts_lru.py",)),
    Mutation(
        "executor_evict_and_retry", "parrot/manager/executor.py",
        "        if await engine.contexts.evict_all() == 0:\n            raise\n",
        "        raise\n",
        ("tests/manager/test_executor_kv_retry.py",)),
    Mutation(
        "engine_pool_tokens_never_decremented", "parrot/manager/engine_pool.py",
        "        self.num_tokens_in_use -= placed.num_tokens\n",
        "        self.num_tokens_in_use -= 0\n",
        ("tests/manager/test_engine_pool_accounting.py",)),
    Mutation(
        "builtin_lru_victim", "parrot/engines/builtin/batch_scheduler.py",
        "victim = min(owning or idle, key=lambda c: c.last_used)",
        "victim = max(owning or idle, key=lambda c: c.last_used)",
        ("tests/engines/builtin/test_batch_scheduler_order.py::"
         "test_kv_pressure_evicts_the_least_recently_used_idle_context",)),
    Mutation(
        "builtin_prefill_before_decode", "parrot/engines/builtin/batch_scheduler.py",
        "for work in decodes + prefills:",
        "for work in prefills + decodes:",
        ("tests/engines/builtin/test_batch_scheduler_order.py::"
         "test_a_decode_step_goes_before_an_older_prefill_that_would_eat_the_budget",)),
    Mutation(
        "manager_no_failure_propagation", "parrot/manager/manager.py",
        "                    if consumer.state in (CallState.PENDING, CallState.READY):\n"
        "                        pending.append((consumer,",
        "                    if False:\n"
        "                        pending.append((consumer,",
        ("tests/manager/test_manager.py::test_failure_propagates_downstream",)),
    Mutation(
        "executor_free_swallows_everything", "parrot/manager/executor.py",
        "    except UnknownContextError:\n",
        "    except Exception:\n",
        ("tests/manager/test_executor_free_context.py",)),
    Mutation(
        "contexts_evict_most_recent", "parrot/manager/contexts.py",
        "        for ctx in self._by_hash.values():\n            if freed >= num_tokens:",
        "        for ctx in reversed(self._by_hash.values()):\n            if freed >= num_tokens:",
        ("tests/manager/test_contexts_lru.py",)),
    Mutation(
        "lifecycle_done_not_final", "parrot/manager/lifecycle.py",
        "    _D: frozenset(),", "    _D: frozenset({_R}),",
        ("tests/manager/test_lifecycle.py",)),
    Mutation(
        "scheduler_skip_placement_validation", "parrot/manager/scheduler.py",
        "checked = check_placements(placements, self._ready, self._pool)",
        "checked = list(placements)",
        ("tests/manager/test_scheduler_policy_failures.py::"
         "test_an_invalid_placement_changes_nothing",)),
    Mutation(
        "scheduler_policy_failures_never_fail_calls", "parrot/manager/scheduler.py",
        "        if self.num_policy_failures < MAX_POLICY_FAILURES:\n",
        "        if True:\n",
        ("tests/manager/test_scheduler_policy_failures.py::"
         "test_a_policy_that_keeps_raising_fails_its_calls_at_once",)),
    Mutation(
        "scheduler_failure_count_not_reset", "parrot/manager/scheduler.py",
        "        self.num_policy_failures = 0\n        dispatches = []\n",
        "        dispatches = []\n",
        ("tests/manager/test_scheduler_policy_failures.py::"
         "test_a_policy_that_recovers_resets_the_count",)),
    Mutation(
        "placement_criterion_ignored", "parrot/manager/manager.py",
        "        engine.add_call(call, criterion)\n",
        "        engine.add_call(call)\n",
        ("tests/manager/test_scheduler_policy_failures.py::"
         "test_the_placement_criterion_is_what_the_engine_counts",)),
    Mutation(
        "builtin_loop_spins_on_scheduler_error", "parrot/engines/builtin/engine.py",
        "                await self._back_off(retry_s)\n",
        "",
        ("tests/engines/builtin/test_engine_scheduling_faults.py::"
         "test_a_raising_scheduler_fails_requests_backs_off_and_recovers",)),
    Mutation(
        "builtin_healthy_while_scheduling_fails", "parrot/engines/builtin/engine.py",
        "return not self._closing and self._unhealthy is None \\\n",
        "return not self._closing \\\n",
        ("tests/engines/builtin/test_engine_scheduling_faults.py::"
         "test_engine_server_healthz_is_503_while_scheduling_fails",)),
    Mutation(
        "sessions_expire_while_waited_on", "parrot/manager/sessions.py",
        "if session.tasks or session.num_waiters or idle < self._ttl_s:",
        "if idle < self._ttl_s:",
        ("tests/manager/test_sessions.py::"
         "test_a_session_with_a_waiting_get_or_a_running_call_is_kept",)),
    Mutation(
        "latency_backlog_behind_chains", "parrot/policies/slots.py",
        "            return True   # it would wait for a whole chain, or delay its own, "
        "not a turn\n",
        "            pass\n",
        ("tests/policies/test_app_centric.py::"
         "test_a_call_behind_running_chains_joins_rather_than_wait_for_a_chain_to_end",)),
    Mutation(
        "waiting_consumer_alone", "parrot/manager/nodes.py",
        "<= sum(b.var_id in outputs for b in c.inputs.values())",
        "<= len(c.inputs)",
        ("tests/manager/test_manager.py::"
         "test_a_call_has_a_waiting_consumer_only_where_its_outputs_alone_hold_it_back",)),
    Mutation(
        "prefill_ahead_into_idle_prefill_only", "parrot/manager/prefill_ahead.py",
        "    if _uncached_tokens(pieces, engine) > 0 and not engine.prefills_only("
        "producer.call_id):",
        "    if False:",
        ("tests/manager/test_prefill_ahead.py::"
         "test_no_prefix_is_filled_ahead_while_the_engine_has_other_prefill_queued",)),
    Mutation(
        "whole_prompt_prefix_is_prefilled", "parrot/manager/executor.py",
        "                    engine.note_prefilled(call.call_id)\n",
        "                    pass\n",
        ("tests/manager/test_prefill_ahead.py::"
         "test_a_call_whose_whole_prompt_is_a_cached_prefix_has_no_prefill_queued",)),
    Mutation(
        "bench_failed_apps_are_an_error", "parrot/sim/compare.py",
        "        if not failed:\n",
        "        if True:\n",
        ("tests/sim/test_cluster_sim.py::"
         "test_a_run_with_failed_applications_is_an_error_with_no_speedup",)),
    Mutation(
        "rate_search_checkpoint", "bench/paper/live_runs.py",
        "            checkpoint(result)\n",
        "            pass\n",
        ("tests/bench/test_live_paper.py::"
         "test_a_rate_search_finds_each_variants_rate_on_live_engines",)),
    Mutation(
        "latency_backlog_admitted", "parrot/policies/app_centric.py",
        "        if criterion is Criterion.LATENCY and self.params.admit_latency_backlog:\n",
        "        if False:\n",
        ("tests/policies/test_app_centric.py::"
         "test_waiting_latency_calls_join_while_the_mean_completion_drops",)),
    Mutation(
        "latency_backlog_isolated", "parrot/policies/slots.py",
        "        if running <= 0 or waiting <= 0 or self.serves(Criterion.THROUGHPUT):\n",
        "        if running <= 0 or waiting <= 0:\n",
        ("tests/policies/test_app_centric.py::"
         "test_a_backlog_never_joins_throughput_work_nor_passes_the_throughput_capacity",)),
    Mutation(
        "latency_backlog_free_kv", "parrot/policies/slots.py",
        "        if after > self.view.throughput_capacity or demand.load > self.kv_free():\n",
        "        if after > self.view.throughput_capacity:\n",
        ("tests/policies/test_app_centric.py::"
         "test_a_backlog_takes_only_free_kv_never_evicting_cached_contexts",)),
    Mutation(
        "kv_overflow_counts_held_contexts_once", "parrot/manager/engine_pool.py",
        "        return self._running_kv_tokens() + self.contexts.num_idle_tokens - self.kv_"
        "capacity_tokens\n",
        "        return self._running_kv_tokens() + self.contexts.num_cached_tokens - self.kv_"
        "capacity_tokens\n",
        ("tests/manager/test_engine_pool.py::"
         "test_a_context_a_running_call_forks_is_not_counted_again_for_overflow",)),
    Mutation(
        "kv_free_keeps_room_of_contexts_filled_ahead", "parrot/manager/engine_pool.py",
        "                            - self.contexts.num_ahead_tokens\n",
        "                            - 0\n",
        ("tests/manager/test_engine_pool.py::"
         "test_the_view_gives_the_kv_free_of_running_calls_and_contexts_filled_ahead",)),
    Mutation(
        "prefill_ahead_reserves_its_context", "parrot/manager/prefill_ahead.py",
        "    engine.contexts.release_ahead(chain)\n",
        "    engine.contexts.release(chain)\n",
        ("tests/manager/test_prefill_ahead.py::"
         "test_a_prefix_filled_ahead_is_reserved_until_its_call_forks_it",)),
    Mutation(
        "latency_backlog_mean_estimate", "parrot/policies/slots.py",
        "        return ((total / (running + 1) + 1) * profile.decode_ms(after)\n",
        "        return ((total / (running + 1)) * profile.decode_ms(after)\n",
        ("tests/policies/test_app_centric.py::"
         "test_waiting_latency_calls_join_while_the_mean_completion_drops",)),
    Mutation(
        "graphs_wider_bucket", "parrot/engines/builtin/graphs.py",
        "WIDER_BUCKET_FACTOR = 2\n", "WIDER_BUCKET_FACTOR = 1\n",
        ("tests/engines/builtin/test_graphs.py::"
         "test_a_shared_prefix_step_replays_a_captured_wider_bucket",)),
    Mutation(
        "graphs_stopgap_never", "parrot/engines/builtin/graphs.py",
        "        return self._cached_wider(key, stopgap=True) or key\n", "        return key\n",
        ("tests/engines/builtin/test_graphs.py::"
         "test_a_shared_prefix_step_with_no_near_bucket_replays_a_stopgap_then_its_own",)),
    Mutation(
        "pauses_counted_since_process_start", "parrot/engines/builtin/engine.py",
        "        self._pauses_at_start = self._pauses.totals()\n",
        "        self._pauses_at_start = self._pauses.totals() - self._pauses.totals()\n",
        ("tests/engines/builtin/test_host_pauses.py::"
         "test_an_engine_counts_only_what_happens_after_it_is_built",)),
    Mutation(
        "pauses_compile_hook_not_chained", "parrot/engines/builtin/host_pauses.py",
        "            ours(**kwargs)\n", "",
        ("tests/engines/builtin/test_host_pauses.py::"
         "test_compile_hooks_count_and_keep_the_previous_hooks_answer",
         "tests/engines/builtin/test_host_pauses.py::"
         "test_a_compile_inside_a_step_is_counted_traced_and_named")),
    Mutation(
        "tpot_counts_unfinished_generates", "parrot/engines/tpot.py",
        "        if not (chunk.is_finished and self._after_first > 0):\n",
        "        if not self._after_first > 0:\n",
        ("tests/engines/test_tpot.py::test_one_token_or_an_unfinished_generate_adds_nothing",
         "tests/engines/builtin/test_engine.py::"
         "test_stats_count_each_finished_generates_time_per_output_token")),
    Mutation(
        "auto_throughput_capacity_share", "parrot/serve_config.py",
        "    share = kv_capacity_tokens * PAPER_THROUGHPUT_TOKENS // PAPER_KV_TOKENS"
        " // 1024 * 1024\n",
        "    share = FALLBACK_THROUGHPUT_CAPACITY\n",
        ("tests/manager/test_engine_pool_accounting.py",)),
    Mutation(
        "throughput_centric_per_engine_cap", "parrot/policies/capped.py",
        "        return engine.throughput_capacity if cap is None else cap\n",
        "        return 32768 if cap is None else cap\n",
        ("tests/policies/test_baselines.py",)),
    Mutation(
        "rate_search_stops_at_budget", "bench/paper/live_runs.py",
        "            if time.perf_counter() > deadline:\n                break\n",
        "            pass\n",
        ("tests/bench/test_live_paper.py::"
         "test_a_rate_search_stops_at_the_budget_and_keeps_the_finished_variants",)),
    Mutation(
        "rate_search_parts_keep_own_ratio", "bench/paper/live_results.py",
        "        merged = merge_rate_search(earlier, experiment)\n",
        "        merged = experiment\n",
        ("tests/bench/test_live_cells.py::"
         "test_a_rate_search_run_in_parts_keeps_each_variants_own_ratio",)),
    Mutation(
        "placement_bound_without_reuse", "parrot/policies/slots.py",
        "            load += call.num_tokens - call.max_reusable_tokens\n",
        "            load += call.num_tokens\n",
        ("tests/policies/test_slots.py::"
         "test_the_bound_never_refuses_room_the_demand_has",)),
    Mutation(
        "chain_step_joins_chains", "parrot/policies/slots.py",
        "                and (call.arrival_seq > self.chained_latency_seq"
        " or call.has_waiting_consumer)):\n",
        "                and call.arrival_seq > self.chained_latency_seq):\n",
        ("tests/policies/test_app_centric.py::"
         "test_a_chain_step_joins_running_chains_whatever_its_submission",)),
    Mutation(
        "prefill_graphs_repad_slots", "parrot/engines/builtin/prefill_graphs.py",
        '        h["slots"][:n], h["slots"][n:tokens] = slots, self.scratch_slot\n',
        '        h["slots"][:n] = slots\n',
        ("tests/engines/builtin/test_prefill_graphs.py",)),
    Mutation(
        "prefill_graphs_attention_between_pieces", "parrot/engines/builtin/prefill_graphs.py",
        "                self.model.attention(q, k, v, k_cache, v_cache, meta, out=attn)\n",
        "                pass\n",
        ("tests/engines/builtin/test_prefill_graphs.py::"
         "test_piecewise_prefill_matches_the_eager_forward",)),
    Mutation(
        "prefill_waits_for_launched_step", "parrot/engines/builtin/engine.py",
        "                batch = self._scheduler.schedule(decode_only=self._runner.has_ahead)\n",
        "                batch = self._scheduler.schedule()\n",
        ("tests/engines/builtin/test_lookahead.py::"
         "test_prefill_arriving_during_a_launched_step_waits_one_step",)),
    Mutation(
        "no_launch_ahead_while_prefill_waits", "parrot/engines/builtin/engine.py",
        "                self._runner.hold_ahead = self._scheduler.has_prefill_work\n",
        "                self._runner.hold_ahead = False\n",
        ("tests/engines/builtin/test_lookahead.py::"
         "test_prefill_arriving_during_a_launched_step_waits_one_step",)),
    Mutation(
        "simulated_engine_makes_up_late_timers", "parrot/engines/simulated.py",
        "        if now - LATE_TIMER_S <= self._step_end < now:\n",
        "        if False:\n",
        ("tests/engines/test_simulated.py::"
         "test_on_a_real_clock_a_late_timer_is_made_up_but_not_a_stall",)),
    Mutation(
        "prefill_work_needs_a_seat", "parrot/engines/builtin/batch_scheduler.py",
        "        return could_join and decoding < self.max_num_seqs\n",
        "        return could_join\n",
        ("tests/engines/builtin/test_batch_scheduler_order.py::"
         "test_no_prefill_work_while_the_decodes_take_every_seat",)),
    Mutation(
        "prefix_context_at_every_recurring_boundary", "parrot/manager/executor.py",
        "        branch[i] = counts[i] >= 2 and counts[i] > most\n",
        "        branch[i] = counts[i] >= 2\n",
        ("tests/manager/test_prefix.py::test_only_branch_points_of_the_sharing_get_contexts",
         "tests/manager/test_executor.py::"
         "test_a_recurring_prompt_of_tiny_boundaries_costs_a_few_engine_round_trips")),
    Mutation(
        "prefix_context_not_at_the_last_shared_input", "parrot/manager/executor.py",
        "            branch[i - 1] = True\n", "            pass\n",
        ("tests/manager/test_prefix.py::test_only_branch_points_of_the_sharing_get_contexts",)),
    Mutation(
        "step_trace_saved_tokens", "parrot/engines/builtin/step_trace.py",
        "            saved += (groups.indptr[g + 1] - groups.indptr[g] - 1) * prefix\n",
        "            saved += (groups.indptr[g + 1] - groups.indptr[g]) * prefix\n",
        ("tests/engines/builtin/test_step_trace.py",)),
    Mutation(
        "prefill_split_reads_from_the_start", "parrot_kernels/_jit_prefill.py",
        "        lo = tl.program_id(2) * split_len\n", "        lo = 0 * split_len\n",
        ("tests/kernels/test_kernels_prefill.py::test_keys_split_into_ranges_match_reference",)),
    Mutation(
        "prefill_split_empty_rows_nan", "parrot_kernels/_jit_prefill.py",
        "        m_use = tl.where(m_new == float(\"-inf\"), 0.0, m_new)\n",
        "        m_use = m_new\n",
        ("tests/kernels/test_kernels_prefill.py::test_keys_split_into_ranges_match_reference",)),
    Mutation(
        "prefill_unmasked_past_the_first_row", "parrot_kernels/_jit_prefill.py",
        "    full = lo + tl.maximum(tl.minimum(pos0 + m0 + 1, end) - lo, 0)",
        "    full = lo + tl.maximum(tl.minimum(pos0 + m0 + 1 + BLOCK_N, end) - lo, 0)",
        ("tests/kernels/test_kernels_prefill.py::test_prefill_matches_reference",)),
    Mutation(
        "prefill_diagonal_blocks_unmasked", "parrot_kernels/_jit_prefill.py",
        "PAGE, BLOCK_N, True, SPLIT)", "PAGE, BLOCK_N, False, SPLIT)",
        ("tests/kernels/test_kernels_prefill.py::test_prefill_matches_reference",)),
    Mutation(
        "shared_prefix_one_block_short", "parrot/engines/builtin/cascade.py",
        "    if a[:limit] == b[:limit]:\n        return limit\n",
        "    if a[:limit] == b[:limit]:\n        return limit - 1\n",
        ("tests/engines/builtin/test_cascade.py",)),
    Mutation(
        "shared_prefix_past_the_first_difference", "parrot/engines/builtin/cascade.py",
        "        if a[:mid] == b[:mid]:\n", "        if a[:mid - 1] == b[:mid - 1]:\n",
        ("tests/engines/builtin/test_cascade.py",)),
    Mutation(
        "decode_small_tiles_never", "parrot_kernels/plan.py",
        "    small = cascade and (batch - groups + 1) * gqa <= SMALL_TILE_M\n",
        "    small = False\n",
        ("tests/kernels/test_kernels_plan.py::"
         "test_a_group_whose_rows_fit_the_smallest_tile_gets_it",)),
    Mutation(
        "prefill_split_never", "parrot_kernels/prefill.py",
        "    elif programs > num_sms or programs == 0:\n",
        "    elif True:\n",
        ("tests/kernels/test_kernels_prefill.py::"
         "test_keys_are_split_only_when_few_tiles_read_a_long_context",)),
    Mutation(
        "warmup_no_split_prefill", "parrot/engines/builtin/warmup.py",
        "    variants = [v for t in tunings for v in ((t,) if t is None else "
        "(t, replace(t, kv_splits=2)))]",
        "    variants = list(tunings)",
        ("tests/engines/builtin/test_startup.py::"
         "test_warm_up_compiles_the_paged_prefill_kernel_when_the_model_runs_it",)),
    Mutation(
        "trace_gaps_longest_first", "parrot/engines/builtin/trace_summary.py",
        "    waits = sorted(steps[1:], key=lambda r: -r.idle_ms)[:n]\n",
        "    waits = sorted(steps[1:], key=lambda r: r.idle_ms)[:n]\n",
        ("tests/engines/builtin/test_trace_summary.py::"
         "test_largest_gaps_are_the_longest_waits_inside_a_segment",)),
    Mutation(
        "auto_latency_capacity_rule", "parrot/speed_profile.py",
        "    return profile.tokens_at_slowdown(PAPER_LATENCY_STEP_RATIO)\n",
        "    return profile.tokens_at_slowdown(2.0)\n",
        ("tests/test_speed_profile.py::"
         "test_the_paper_rule_gives_the_papers_capacity_on_its_own_hardware",)),
    Mutation(
        "reported_profile_ignored", "parrot/manager/engine_pool.py",
        "    if info.speed_profile is not None:\n",
        "    if False:\n",
        ("tests/manager/test_engine_pool.py::"
         "test_auto_latency_capacity_follows_the_profile_the_engine_reports",)),
    Mutation(
        "configured_profile_loses", "parrot/manager/engine_pool.py",
        "    if configured is not None:\n        return configured, \"configured\"\n",
        "    if configured is not None and info.speed_profile is None:\n"
        "        return configured, \"configured\"\n",
        ("tests/manager/test_engine_pool.py::"
         "test_a_configured_profile_or_number_wins_and_no_profile_keeps_the_papers",)),
    Mutation(
        "returning_engine_keeps_old_profile", "parrot/manager/engine_pool.py",
        "        self.contexts = EngineContexts(engine, spec.name, info.block_size)\n"
        "        self._apply_spec()\n",
        "        self.contexts = EngineContexts(engine, spec.name, info.block_size)\n",
        ("tests/manager/test_engine_pool.py::test_a_returning_engine_is_costed_with_its_new_profile",)),
    Mutation(
        "probe_profile_may_fall", "parrot/engines/speed_probe.py",
        "            slowest = max(slowest, ms)\n",
        "            slowest = ms\n",
        ("tests/engines/test_speed_probe.py::test_the_profile_never_gets_faster_with_more_tokens",)),
    Mutation(
        "probe_no_empty_batch_point", "parrot/engines/speed_probe.py",
        "        if x0 > 0:\n",
        "        if False:\n",
        ("tests/engines/test_speed_probe.py::test_the_probe_recovers_a_simulated_engines_profile",
         "tests/engines/test_speed_probe.py::test_the_profile_never_gets_faster_with_more_tokens")),
    Mutation(
        "probe_contexts_kept", "parrot/engines/speed_probe.py",
        "        await asyncio.gather(*(engine.free_context(cid) for cid in ids),\n"
        "                             return_exceptions=True)\n",
        "        pass\n",
        ("tests/engines/test_speed_probe.py::test_the_probe_recovers_a_simulated_engines_profile",
         "tests/engines/builtin/test_startup_probe.py::"
         "test_a_probed_engine_reports_its_profile_and_leaves_nothing_behind")),
    Mutation(
        "probe_plan_overfills_the_cache", "parrot/engines/speed_probe.py",
        "kv_tokens // largest - growth - info.block_size,",
        "kv_tokens // largest,",
        ("tests/engines/test_speed_probe.py::test_a_plan_fits_the_engine",)),
    Mutation(
        "startup_probe_skipped", "parrot/engines/builtin/engine.py",
        "            if self._speed_probe is not None:\n",
        "            if False:\n",
        ("tests/engines/builtin/test_startup_probe.py::"
         "test_a_probed_engine_reports_its_profile_and_leaves_nothing_behind",)),
    Mutation(
        "mixed_job_trace_ignored", "parrot/sim/workloads/apps.py",
        "    offsets = list(spec.job_offsets) or poisson_offsets(\n",
        "    offsets = poisson_offsets(\n",
        ("tests/sim/test_workloads.py::"
         "test_mixed_jobs_follow_a_trace_and_chats_a_fixed_interval",)),
    Mutation(
        "uniform_chats_poisson", "parrot/sim/workloads/apps.py",
        "        if spec.chat_arrivals == \"uniform\":\n",
        "        if False:\n",
        ("tests/sim/test_workloads.py::"
         "test_mixed_jobs_follow_a_trace_and_chats_a_fixed_interval",)),
    Mutation(
        "warmup_replays_the_job_trace", "bench/paper/live_runs.py",
        "                                job_offsets=(0.0,) if spec.job_offsets else (),\n",
        "",
        ("tests/bench/test_live_paper.py::test_warmup_keeps_the_shapes_and_cuts_the_time",)),
    Mutation(
        "simulated_engine_ignores_priority", "parrot/engines/simulated.py",
        "    return req.priority\n", "    return 0\n",
        ("tests/engines/test_simulated.py::"
         "test_a_latency_critical_fill_is_prefilled_before_older_throughput_fills",)),
    Mutation(
        "builtin_scheduler_ignores_priority", "parrot/engines/builtin/batch_scheduler.py",
        "    return work.priority\n", "    return 0\n",
        ("tests/engines/builtin/test_batch_scheduler_order.py::"
         "test_a_latency_critical_fill_prefills_before_older_throughput_fills",)),
    Mutation(
        "placement_criterion_not_sent_as_priority", "parrot/manager/engine_pool.py",
        "        return THROUGHPUT_PRIORITY if throughput else LATENCY_PRIORITY\n",
        "        return LATENCY_PRIORITY\n",
        ("tests/manager/test_scheduler.py::"
         "test_the_engine_priority_of_a_call_is_its_placements_criterion",)),
    Mutation(
        "priority_not_on_the_wire", "parrot/engines/protocol.py",
        "                   text=data.get(\"text\"), priority=data.get(\"priority\", 0))",
        "                   text=data.get(\"text\"))",
        ("tests/engines/test_server_client.py::test_the_priority_of_a_request_crosses_the_wire",)),
    Mutation(
        "submit_criteria_not_seeded", "parrot/manager/manager.py",
        "                self._seed_criterion(session, var, out_spec.criteria)\n",
        "                pass\n",
        ("tests/manager/test_scheduler.py::"
         "test_criteria_given_at_submit_are_deduced_before_the_first_round",)),
    Mutation(
        "frontend_keeps_the_get_to_itself", "parrot/frontend/variable.py",
        "        self.get_criterion = strongest((self.get_criterion, criterion))\n",
        "",
        ("tests/frontend/test_session.py::test_a_get_begun_before_the_submission_travels_with_it",)),
    Mutation(
        "queued_prefill_not_costed", "parrot/policies/slots.py",
        "                   pending_prefill=view.queued_prefill_tokens,\n", "",
        ("tests/policies/test_app_centric.py::"
         "test_prompt_tokens_queued_on_an_engine_delay_a_call_placed_there",)),
    Mutation(
        "latency_limit_counts_throughput_load", "parrot/policies/slots.py",
        "            return self.latency_limit(own) + self.throughput_load\n",
        "            return self.latency_limit(own)\n",
        ("tests/policies/test_app_centric.py::"
         "test_throughput_work_joins_latency_engines_when_latency_free_engines_are_full",)),
    Mutation(
        "isolation_whatever_it_costs", "parrot/policies/app_centric.py",
        "    if not throughput or len(latency_free) == len(slots):\n",
        "    if True:\n",
        ("tests/policies/test_app_centric.py::"
         "test_isolation_holds_while_confining_throughput_work_costs_little",
         "tests/policies/test_app_centric.py::"
         "test_engine_serving_latency_calls_is_held_to_latency_capacity")),
    Mutation(
        "calm_engines_preferred_in_a_round_that_does_not_isolate",
        "parrot/policies/app_centric.py",
        "        return (self.params.isolate_criteria and slot.isolates\n",
        "        return (self.params.isolate_criteria\n",
        ("tests/policies/test_app_centric.py::"
         "test_isolation_holds_while_confining_throughput_work_costs_little",)),
    Mutation(
        "latency_capacity_defaults_to_the_a100s", "parrot/serve_config.py",
        "    latency_capacity: int | None = None\n",
        "    latency_capacity: int | None = 6144\n",
        ("tests/manager/test_engine_pool.py::"
         "test_an_engine_given_no_capacity_is_calibrated_to_its_profile",)),
    Mutation(
        "simulated_engine_reports_no_profile", "parrot/engines/simulated.py",
        "                          c.num_blocks, speed_profile=c.latency.speed_profile())\n",
        "                          c.num_blocks)\n",
        ("tests/engines/test_simulated.py::"
         "test_info_reports_the_latency_model_as_the_engines_speed_profile",
         "tests/manager/test_engine_pool.py::"
         "test_a_simulated_engine_given_no_profile_is_costed_as_its_model_runs")),
    Mutation(
        "app_clock_counts_the_session_open", "parrot/sim/workloads/base.py",
        "        started = env.now()\n",
        "        started = opening\n",
        ("tests/sim/test_workloads.py::"
         "test_an_applications_clock_starts_once_its_session_is_open",)),
    Mutation(
        "earlier_clock_unmarked", "bench/paper/live_cells.py",
        "        if value != \"n/a\" and _earlier_clock(live, r, ref_exp):\n",
        "        if False:\n",
        ("tests/bench/test_live_cells.py::"
         "test_a_run_on_the_earlier_app_clock_is_marked_on_the_ratios_it_enters",)),
    Mutation(
        "search_part_clock_ignored", "bench/paper/live_cells.py",
        "    if PART_CLOCK in searched and searched.get(\"reference_rate\"):\n",
        "    if False:\n",
        ("tests/bench/test_live_cells.py::"
         "test_a_rate_search_part_on_the_earlier_clock_stays_marked_after_a_later_part",)),
    Mutation(
        "rate_search_max_rate_ignored", "bench/paper/live_experiments.py",
        " " * 33 + "(\"max_rate\", max_rate), (\"refinements\", refinements))\n",
        " " * 33 + "(\"refinements\", refinements))\n",
        ("tests/bench/test_live_paper.py::"
         "test_a_shorter_rate_search_changes_only_what_is_given",)),
    Mutation(
        "deferred_open_sent_eagerly", "parrot/frontend/session.py",
        "            if self.credentials is None and self._opening is None:\n",
        "            if False:\n",
        ("tests/frontend/test_session.py::test_a_deferred_open_travels_with_the_first_batch",)),
    Mutation(
        "batch_open_before_its_body_parses", "parrot/server/wire_routes.py",
        "            grant = self.admit_session(token)  # who asks, before what they ask is read\n",
        "            grant = self.admit_session(token)  # who asks, before what they ask is read\n"
        "            self._open_session(grant)\n",
        ("tests/server/test_security.py::"
         "test_a_batch_that_opens_its_session_is_let_in_as_a_session_open_is",)),
    Mutation(
        "batch_open_without_the_tenant_key", "parrot/server/wire_routes.py",
        "            grant = self.admit_session(token)  # who asks, before what they ask is read\n",
        "            grant = TenantGrant(\"b\", \"\")\n",
        ("tests/server/test_security.py::"
         "test_a_batch_that_opens_its_session_is_let_in_as_a_session_open_is",)),
    Mutation(
        "batch_open_skips_the_call_limits", "parrot/server/wire_routes.py",
        "            self.admission.check(None, len(batch.calls))\n",
        "",
        ("tests/server/test_overload.py::"
         "test_a_batch_that_would_open_a_session_is_held_to_the_same_limits",)),
    Mutation(
        "launch_key_without_alignment", "parrot_kernels/launch.py",
        "        return (arg.dtype, arg.get_device(), arg.data_ptr() % 16 == 0)\n",
        "        return (arg.dtype, arg.get_device())\n",
        ("tests/kernels/test_kernels_launch.py::"
         "test_a_key_that_may_specialise_differently_goes_through_the_jit",)),
    Mutation(
        "replay_without_the_layout_check", "parrot_kernels/launch.py",
        "        if not all(_same_layout(o, n) for o, n in zip(old, new)):\n",
        "        if False:\n",
        ("tests/kernels/test_kernels_launch.py::"
         "test_a_replay_with_another_layout_declines",)),
    Mutation(
        "replay_of_a_view_made_inside", "parrot_kernels/launch.py",
        "                      and arg.untyped_storage().data_ptr() in storages):\n",
        "                      and False):\n",
        ("tests/kernels/test_kernels_launch.py::"
         "test_a_view_made_inside_the_wrapper_is_not_replayed",)),
    Mutation(
        "attention_replayed_with_the_first_layers_tensors", "parrot/engines/builtin/model.py",
        "and replay[0].replay(replay[1], tensors):\n",
        "and replay[0].replay(replay[1], replay[1]):\n",
        ("tests/engines/builtin/test_attention_replay.py::"
         "test_the_first_layer_records_and_the_others_replay_with_their_caches",)),
    Mutation(
        "attention_recorded_beside_a_torch_decode", "parrot/engines/builtin/model.py",
        "(not nd or getattr(self._decode, \"replayable\", False))",
        "(not nd or True)",
        ("tests/engines/builtin/test_attention_replay.py::"
         "test_a_decode_path_that_is_not_only_launches_is_never_replayed",)),
    Mutation(
        "mixed_step_prefill_before_its_padded_decode", "parrot/engines/builtin/model.py",
        "                if nd:\n"
        "                    self._decode(decode_q, k_cache, v_cache, meta, self.scale, "
        "out=decode_out)\n"
        "                self.prefill_kernels.paged_prefill_attention(\n"
        "                    q, k_cache, v_cache, meta.prefill_plan, self.scale, out=out)\n",
        "                self.prefill_kernels.paged_prefill_attention(\n"
        "                    q, k_cache, v_cache, meta.prefill_plan, self.scale, out=out)\n"
        "                if nd:\n"
        "                    self._decode(decode_q, k_cache, v_cache, meta, self.scale, "
        "out=decode_out)\n",
        ("tests/engines/builtin/test_paged_prefill.py::"
         "test_a_mixed_step_writes_its_padded_decode_rows_straight_into_the_output",)),
    Mutation(
        "packed_upload_unaligned", "parrot/engines/builtin/staging.py",
        "    align = ALIGN_BYTES // itemsize\n",
        "    align = 1\n",
        ("tests/engines/builtin/test_staging.py::"
         "test_upload_packed_gives_each_array_its_shape_and_values_on_16_byte_boundaries",)),
)
