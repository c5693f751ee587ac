"""The mutations tests/mutations/check.py applies: each a one-line change to the code and the
tests that must catch it. Add one here with every behaviour a test pins down."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str                 # relative to the repository root
    old: str                  # exact snippet
    new: str
    tests: tuple[str, ...]    # pytest node ids that must fail with the mutation applied
    # the definition the snippet lives in ("Class.method", "function" or "<module>"); `old`
    # must occur exactly once there (tests/mutations/anchors.py)
    where: str = "<module>"


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "small_batch_gemv_rows", "parrot/engines/builtin/llama/model.py",
        "        wins = gemv.kernel_wins(n, k, rows) if measured is None else measured\n",
        "        wins = rows == 1 if measured is None else measured\n",
        ("tests/engines/builtin/test_small_batch_gemv.py",),
        where="LlamaModel.linear"),
    Mutation(
        "small_batch_gemv_prefill", "parrot/engines/builtin/llama/model.py",
        "        wins = gemv.kernel_wins(n, k, rows) if measured is None else measured\n",
        "        wins = rows <= 64 if measured is None else measured\n",
        ("tests/engines/builtin/test_small_batch_gemv.py",),
        where="LlamaModel.linear"),
    Mutation(
        "linear_choice_followed", "parrot/engines/builtin/llama/model.py",
        "        wins = gemv.kernel_wins(n, k, rows) if measured is None else measured\n",
        "        wins = gemv.kernel_wins(n, k, rows)\n",
        ("tests/engines/builtin/llama/test_linear_choice.py",),
        where="LlamaModel.linear"),
    Mutation(
        "linear_choice_faster_side", "parrot/engines/builtin/llama/linear_choice.py",
        "            if small < library:\n", "            if small > library:\n",
        ("tests/engines/builtin/llama/test_linear_choice.py",),
        where="measure_linear_choice"),
    Mutation(
        "constraint_mask_applied", "parrot/engines/builtin/sampler.py",
        "    rows, masked = masked_rows(logits, grammars) if grammars else ([], None)\n",
        "    rows, masked = [], None\n",
        ("tests/engines/builtin/test_sampler.py::"
         "test_constrained_rows_sample_only_allowed_tokens_and_free_rows_are_untouched",),
        where="sample"),
    Mutation(
        "sampled_constrained_row_unmasked", "parrot/engines/builtin/sampler.py",
        "                sub[k] = masked[where[row]]\n",
        "                pass\n",
        ("tests/engines/builtin/test_sampler.py::"
         "test_constrained_rows_sample_only_allowed_tokens_and_free_rows_are_untouched",),
        where="_tokens"),
    Mutation(
        "sampled_row_ignores_its_generator", "parrot/engines/builtin/sampler.py",
        "    uniforms = [(generators[row] or random).random() for row in hot]\n",
        "    uniforms = [random.random() for row in hot]\n",
        ("tests/engines/builtin/test_sampler.py::"
         "test_a_seeded_request_samples_the_same_tokens_whoever_shares_its_batch",),
        where="_tokens"),
    Mutation(
        "sampled_steps_not_fed", "parrot/engines/builtin/runner.py",
        "            if work.grammar is not None:\n",
        "            if work.grammar is not None or not work.sampling.is_greedy:\n",
        ("tests/engines/builtin/cuda/test_lookahead.py::"
         "test_steps_are_queued_before_their_tokens_are_read_greedy_or_sampled",),
        where="ModelRunner._fed_prediction"),
    Mutation(
        "constraint_checked_at_submit", "parrot/wire_types/calls.py",
        "                check_constraint(self.output_sampling(spec.name).constraint,\n",
        "                check_constraint(None,\n",
        ("tests/frontend/test_typed_outputs.py::"
         "test_the_server_refuses_a_bad_schema_over_raw_http",),
        where="_CallChecks._check_call"),
    Mutation(
        "simulated_constrained_value", "parrot/engines/simulated.py",
        "        value = None if sampling.constraint is None else sample_value(\n",
        "        value = None if True else sample_value(\n",
        ("tests/engines/test_sim_values.py::test_the_simulated_engine_generates_the_value",),
        where="SimulatedEngine._chunks"),
    Mutation(
        "forced_tool_call_decoded_under_schema", "parrot/server/openai_tools.py",
        "        if not self.forced:\n            return self.response_format\n",
        "        if True:\n            return self.response_format\n",
        ("tests/server/test_openai_tools.py::test_forced_tool_calls",),
        where="ToolUse.constraint"),
    Mutation(
        "device_lock_taken", "parrot/engines/builtin/cuda/device_lock.py",
        "        fcntl.flock(handle, fcntl.LOCK_EX)\n", "",
        ("tests/engines/builtin/cuda/test_device_lock.py",
         "tests/engines/builtin/llama/test_linear_choice.py"),
        where="exclusive_device"),
    Mutation(
        "linear_choice_locks_its_gpu", "parrot/engines/builtin/build.py",
        "with exclusive_device(device_key(model.device)) as waited:",
        'with exclusive_device("elsewhere") as waited:',
        ("tests/engines/builtin/llama/test_linear_choice.py",),
        where="choose_linear_layers"),
    Mutation(
        "paged_prefill_positions", "parrot/engines/builtin/runner.py",
        "plan = kernels.plan_prefill([(start, end - start, pos)",
        "plan = kernels.plan_prefill([(start, end - start, 0)",
        ("tests/engines/builtin/test_paged_prefill.py",),
        where="ModelRunner.attention_meta"),
    Mutation(
        "long_prompts_raise_the_latency_limit", "parrot/policies/slots.py",
        "        if size <= self._suits_up_to:\n",
        "        if True:\n",
        ("tests/policies/test_app_centric.py",),
        where="Slot.latency_limit"),
    Mutation(
        "small_latency_call_keeps_the_capacity", "parrot/policies/slots.py",
        "        size = smaller_known(self.latency_floor, own)\n",
        "        size = smaller_known(0, own)\n",
        ("tests/policies/test_app_centric.py", "tests/policies/test_policy_invariants.py"),
        where="Slot.latency_limit"),
    Mutation(
        "staging_two_mirrors", "parrot/engines/builtin/cuda/staging.py",
        "        self._current ^= 1\n", "",
        ("tests/engines/builtin/cuda/test_staging.py",),
        where="StaticInputs.upload"),
    Mutation(
        "lookahead_finished_rows_leave", "parrot/engines/builtin/cuda/graphs.py",
        "    index, j = [], 0\n", "    return None\n    index, j = [], 0\n",
        ("tests/engines/builtin/cuda/test_lookahead.py",),
        where="predicted_rows_index"),
    Mutation(
        "lookahead_group_crosses_block", "parrot/engines/builtin/cuda/lookahead.py",
        "    if any(crossing) and owned is None:\n",
        "    if any(crossing) and (owned is None or rows.groups is not None):\n",
        ("tests/engines/builtin/cuda/test_lookahead.py",),
        where="next_rows"),
    Mutation(
        "lookahead_fed", "parrot/engines/builtin/runner.py",
        "        if host.sample_rows != list(range(len(rows.token_ids))):\n",
        "        if True:\n",
        ("tests/engines/builtin/cuda/test_lookahead.py",),
        where="ModelRunner._fed_prediction"),
    Mutation(
        "no_affinity_counts_prefix_load", "parrot/policies/slots.py",
        "                    if is_brought or self.counts_prefix(prefix):\n",
        "                    if affinity and (is_brought or self.counts_prefix(prefix)):\n",
        ("tests/policies/test_app_centric.py::"
         "test_without_affinity_a_set_sharing_a_prefix_fits_as_the_engine_counts_it",),
        where="Slot.demand"),
    Mutation(
        "live_warmup_full_outputs", "bench/paper/live_runs.py",
        'full_outputs=variant.mode == "parrot",', "full_outputs=False,",
        ("tests/bench/test_live_paper.py::"
         "test_the_warm_up_generates_full_outputs_in_parrot_mode_only",),
        where="run_live_paper"),
    Mutation(
        "live_warmup_one_variant_per_mode", "bench/paper/live_runs.py",
        '    return [v for v in variants if v.mode == "parrot" or v in baseline]\n',
        '    return list({v.mode: v for v in variants}.values())\n',
        ("tests/bench/test_live_paper.py::"
         "test_every_parrot_variant_warms_and_one_request_level_variant",),
        where="warmup_variants"),
    Mutation(
        "warmup_every_prefill_tile", "parrot/engines/builtin/cuda/precompile.py",
        '    tunings = getattr(kernels, "PREFILL_TUNINGS", (None,))\n',
        "    tunings = (None,)\n",
        ("tests/engines/builtin/cuda/test_startup.py::"
         "test_warm_up_compiles_the_paged_prefill_kernel_when_the_model_runs_it",),
        where="prefill_variants"),
    Mutation(
        "prefill_without_cudnn", "parrot/engines/builtin/llama/attention.py",
        "    if device.type != \"cuda\":\n", "    if True:\n",
        ("tests/engines/builtin/test_prefill_attention.py",),
        where="prefill_sdpa_backends"),
    Mutation(
        "scheduler_fifo", "parrot/manager/scheduler.py",
        "    return sorted(calls, key=lambda c: c.arrival_seq)",
        "    return sorted(calls, key=lambda c: c.arrival_seq, reverse=True)",
        ("tests/manager/test_scheduler_order.py",),
        where="ready_order"),
    Mutation(
        "contexts_lru_touch_on_hit", "parrot/manager/contexts.py",
        "            if (ctx := self._by_hash.get(piece.prefix_hash)) is not None:\n"
        "                self._by_hash.move_to_end(piece.prefix_hash)\n",
        "            if (ctx := self._by_hash.get(piece.prefix_hash)) is not None:\n",
        ("tests/manager/test_contexts_lru.py",),
        where="EngineContexts.acquire"),
    Mutation(
        "executor_evict_and_retry", "parrot/manager/executor.py",
        "        if await engine.contexts.evict_all() == 0:\n            raise\n",
        "        raise\n",
        ("tests/manager/test_executor_kv_retry.py",),
        where="run_call"),
    Mutation(
        "engine_pool_tokens_never_decremented", "parrot/manager/engine_pool.py",
        "        self.num_tokens_in_use -= placed.num_tokens\n",
        "        self.num_tokens_in_use -= 0\n",
        ("tests/manager/test_engine_pool_accounting.py",),
        where="EngineState.remove_call"),
    Mutation(
        "builtin_lru_victim", "parrot/engines/builtin/batch_scheduler.py",
        "victim = min(owning or idle, key=lambda c: c.last_used)",
        "victim = max(owning or idle, key=lambda c: c.last_used)",
        ("tests/engines/builtin/test_batch_scheduler_order.py::"
         "test_kv_pressure_evicts_the_least_recently_used_idle_context",),
        where="BatchScheduler._evict_one"),
    Mutation(
        "builtin_prefill_before_decode", "parrot/engines/builtin/batch_scheduler.py",
        "                (decoding if w.is_decoding else waiting).append(w)\n",
        "                (waiting if w.is_decoding else decoding).append(w)\n",
        ("tests/engines/builtin/test_batch_scheduler_order.py::"
         "test_a_decode_step_goes_before_an_older_prefill_that_would_eat_the_budget",),
        where="BatchScheduler._pick_chunks"),
    Mutation(
        "manager_no_failure_propagation", "parrot/manager/call_flow.py",
        "                    if consumer.state in (CallState.PENDING, CallState.READY):\n"
        "                        pending.append((consumer,",
        "                    if False:\n"
        "                        pending.append((consumer,",
        ("tests/manager/test_manager.py::test_failure_propagates_downstream",),
        where="CallFlow.fail_call"),
    Mutation(
        "executor_free_swallows_everything", "parrot/manager/executor.py",
        "    except UnknownContextError:\n",
        "    except Exception:\n",
        ("tests/manager/test_executor_free_context.py",),
        where="_free_private_context"),
    Mutation(
        "contexts_evict_most_recent", "parrot/manager/contexts.py",
        "        for ctx in self._by_hash.values():\n            if freed >= num_tokens:",
        "        for ctx in reversed(self._by_hash.values()):\n            if freed >= num_tokens:",
        ("tests/manager/test_contexts_lru.py",),
        where="EngineContexts.evict"),
    Mutation(
        "lifecycle_done_not_final", "parrot/manager/lifecycle.py",
        "    _D: frozenset(),", "    _D: frozenset({_R}),",
        ("tests/manager/test_lifecycle.py",),
        where="<module>"),
    Mutation(
        "scheduler_skip_placement_validation", "parrot/manager/scheduler.py",
        "checked = check_placements(placements, self._ready, self._pool)",
        "checked = list(placements)",
        ("tests/manager/test_scheduler_policy_failures.py::"
         "test_an_invalid_placement_changes_nothing",),
        where="Scheduler.decide"),
    Mutation(
        "scheduler_policy_failures_never_fail_calls", "parrot/manager/scheduler.py",
        "        if self.num_policy_failures < MAX_POLICY_FAILURES:\n",
        "        if True:\n",
        ("tests/manager/test_scheduler_policy_failures.py::"
         "test_a_policy_that_keeps_raising_fails_its_calls_at_once",),
        where="Scheduler._policy_failed"),
    Mutation(
        "scheduler_failure_count_not_reset", "parrot/manager/scheduler.py",
        "        self.num_policy_failures = 0\n        dispatches = []\n",
        "        dispatches = []\n",
        ("tests/manager/test_scheduler_policy_failures.py::"
         "test_a_policy_that_recovers_resets_the_count",),
        where="Scheduler.decide"),
    Mutation(
        "placement_criterion_ignored", "parrot/manager/call_flow.py",
        "        engine.add_call(call, criterion)\n",
        "        engine.add_call(call)\n",
        ("tests/manager/test_scheduler_policy_failures.py::"
         "test_the_placement_criterion_is_what_the_engine_counts",),
        where="CallFlow.dispatch"),
    Mutation(
        "builtin_loop_spins_on_scheduler_error", "parrot/engines/builtin/engine_loop.py",
        "                await self._back_off(retry_s)\n",
        "",
        ("tests/engines/builtin/test_engine_scheduling_faults.py::"
         "test_a_raising_scheduler_fails_requests_backs_off_and_recovers",),
        where="EngineLoop._run"),
    Mutation(
        "builtin_healthy_while_scheduling_fails", "parrot/engines/builtin/engine.py",
        "        return not self._batching.closing and self._batching.unhealthy is None \\\n",
        "        return not self._batching.closing \\\n",
        ("tests/engines/builtin/test_engine_scheduling_faults.py::"
         "test_engine_server_healthz_is_503_while_scheduling_fails",),
        where="BuiltinEngine.healthz"),
    Mutation(
        "sessions_expire_while_waited_on", "parrot/manager/sessions.py",
        "if session.tasks or session.num_waiters or idle < self._ttl_s:",
        "if idle < self._ttl_s:",
        ("tests/manager/test_sessions.py::"
         "test_a_session_with_a_waiting_get_or_a_running_call_is_kept",),
        where="IdleExpiry._check"),
    Mutation(
        "latency_backlog_behind_chains", "parrot/policies/slots.py",
        "            return True   # it would wait for a whole chain, or delay its own, "
        "not a turn\n",
        "            pass\n",
        ("tests/policies/test_app_centric.py::"
         "test_a_call_behind_running_chains_joins_rather_than_wait_for_a_chain_to_end",),
        where="Slot.has_room_backlogged"),
    Mutation(
        "waiting_consumer_alone", "parrot/manager/nodes.py",
        "<= sum(b.var_id in outputs for b in c.inputs.values())",
        "<= len(c.inputs)",
        ("tests/manager/test_manager.py::"
         "test_a_call_has_a_waiting_consumer_only_where_its_outputs_alone_hold_it_back",),
        where="Call.has_waiting_consumer"),
    Mutation(
        "prefill_ahead_into_idle_prefill_only", "parrot/manager/prefill_ahead.py",
        "    if _uncached_tokens(pieces, engine) > 0 and not engine.prefills_only("
        "producer.call_id):",
        "    if False:",
        ("tests/manager/test_prefill_ahead.py::"
         "test_no_prefix_is_filled_ahead_while_the_engine_has_other_prefill_queued",),
        where="plan_ahead"),
    Mutation(
        "whole_prompt_prefix_is_prefilled", "parrot/manager/executor.py",
        "                    engine.note_prefilled(call.call_id)\n",
        "                    pass\n",
        ("tests/manager/test_prefill_ahead.py::"
         "test_a_call_whose_whole_prompt_is_a_cached_prefix_has_no_prefill_queued",),
        where="_run_once"),
    Mutation(
        "bench_failed_apps_are_an_error", "parrot/sim/compare.py",
        "        if not failed:\n",
        "        if True:\n",
        ("tests/sim/test_cluster_sim.py::"
         "test_a_run_with_failed_applications_is_an_error_with_no_speedup",),
        where="VariantRun.of"),
    Mutation(
        "rate_search_checkpoint", "bench/paper/live_runs.py",
        "            checkpoint(result)\n",
        "            pass\n",
        ("tests/bench/test_live_paper.py::"
         "test_a_rate_search_finds_each_variants_rate_on_live_engines",),
        where="_run_rate_search"),
    Mutation(
        "latency_backlog_admitted", "parrot/policies/app_centric.py",
        "        if (criterion is Criterion.LATENCY and self.params.admit_latency_backlog\n",
        "        if (False\n",
        ("tests/policies/test_app_centric.py::"
         "test_waiting_latency_calls_join_while_the_mean_completion_drops",),
        where="AppCentricPolicy._place_unit"),
    Mutation(
        "latency_calls_work_conserving", "parrot/policies/slots.py",
        "            if self.work_conserving and serving[Criterion.THROUGHPUT] <= 0:\n",
        "            if False:\n",
        ("tests/policies/test_work_conserving.py::"
         "test_a_lone_latency_call_joins_an_engine_with_room_in_the_same_round",
         "tests/policies/test_work_conserving.py::"
         "test_latency_only_chat_traffic_is_dispatched_while_the_engine_has_room"),
        where="Slot.capacity"),
    Mutation(
        "latency_work_conserving_beside_throughput", "parrot/policies/slots.py",
        "            if self.work_conserving and serving[Criterion.THROUGHPUT] <= 0:\n",
        "            if self.work_conserving:\n",
        ("tests/policies/test_work_conserving.py::"
         "test_a_work_conserving_slot_limits_latency_calls_by_the_engines_own_limit_alone",),
        where="Slot.capacity"),
    Mutation(
        "tpot_target_bounds_every_token", "parrot/policies/slots.py",
        "        if self.target_tokens is not None and (criterion is Criterion.LATENCY\n",
        "        if False and (criterion is Criterion.LATENCY\n",
        ("tests/policies/test_work_conserving.py::"
         "test_the_target_holds_back_throughput_work_that_would_push_a_latency_engine_past_it",),
        where="Slot.capacity"),
    Mutation(
        "output_length_censored_at_cap", "parrot/manager/output_lengths.py",
        "        length = math.inf if num_tokens >= max_tokens else float(num_tokens)\n",
        "        length = float(num_tokens)\n",
        ("tests/manager/test_output_lengths.py::"
         "test_outputs_that_ran_to_their_cap_keep_the_estimate_at_the_cap",),
        where="OutputLengthEstimator.observe"),
    Mutation(
        "sim_engine_stops_at_eos_marker", "parrot/engines/simulated.py",
        "        num_tokens = (sampling.max_tokens if sampling.ignore_eos or stop is None\n",
        "        num_tokens = (sampling.max_tokens if True\n",
        ("tests/engines/test_sim_eos.py::"
         "test_a_generate_stops_at_the_marker_under_a_loose_cap",),
        where="SimulatedEngine._chunks"),
    Mutation(
        "sim_prefix_cache_forks_cached_blocks", "parrot/engines/simulated.py",
        "            return (n, *self._cache.fork(request.text, n))\n",
        "            pass\n",
        ("tests/engines/test_sim_prefix_cache.py::"
         "test_a_second_request_reuses_the_cached_system_prompt",),
        where="SimulatedEngine._prompt"),
    Mutation(
        "batch_waits_a_turn_for_gets", "parrot/frontend/session.py",
        "        await asyncio.sleep(0)\n", "",
        ("tests/frontend/test_session.py::"
         "test_asyncio_gather_of_gets_right_after_the_calls_travels_with_them",),
        where="Session._flush"),
    Mutation(
        "latency_backlog_isolated", "parrot/policies/slots.py",
        "        if running <= 0 or waiting <= 0 or self.serves(Criterion.THROUGHPUT):\n",
        "        if running <= 0 or waiting <= 0:\n",
        ("tests/policies/test_app_centric.py::"
         "test_a_backlog_never_joins_throughput_work_nor_passes_the_throughput_capacity",),
        where="Slot.has_room_backlogged"),
    Mutation(
        "latency_backlog_free_kv", "parrot/policies/slots.py",
        "        if after > self.view.throughput_capacity or demand.load > self.kv_free():\n",
        "        if after > self.view.throughput_capacity:\n",
        ("tests/policies/test_app_centric.py::"
         "test_a_backlog_takes_only_free_kv_never_evicting_cached_contexts",),
        where="Slot.has_room_backlogged"),
    Mutation(
        "kv_overflow_counts_held_contexts_once", "parrot/manager/engine_pool.py",
        "        return self._running_kv_tokens() + self.contexts.num_idle_tokens - self.kv_"
        "capacity_tokens\n",
        "        return self._running_kv_tokens() + self.contexts.num_cached_tokens - self.kv_"
        "capacity_tokens\n",
        ("tests/manager/test_engine_pool.py::"
         "test_a_context_a_running_call_forks_is_not_counted_again_for_overflow",),
        where="EngineState.kv_overflow_tokens"),
    Mutation(
        "kv_free_keeps_room_of_contexts_filled_ahead", "parrot/manager/engine_pool.py",
        "                            - self.contexts.num_ahead_tokens if kv_capacity > 0"
        " else None),\n",
        "                            - 0 if kv_capacity > 0 else None),\n",
        ("tests/manager/test_engine_pool.py::"
         "test_the_view_gives_the_kv_free_of_running_calls_and_contexts_filled_ahead",),
        where="EngineState.make_view"),
    Mutation(
        "latency_tokens_without_their_prefixes", "parrot/manager/engine_pool.py",
        "                own + sum(prefix_tokens[prefix] for prefix in prefixes))\n",
        "                own)\n",
        ("tests/manager/test_engine_pool.py::"
         "test_the_view_splits_the_tokens_in_use_between_throughput_and_latency_calls",),
        where="EngineState._latency_summary"),
    Mutation(
        "prefill_ahead_reserves_its_context", "parrot/manager/prefill_ahead.py",
        "    engine.contexts.release_ahead(chain)\n",
        "    engine.contexts.release(chain)\n",
        ("tests/manager/test_prefill_ahead.py::"
         "test_a_prefix_filled_ahead_is_reserved_until_its_call_forks_it",),
        where="prefill_ahead"),
    Mutation(
        "latency_backlog_mean_estimate", "parrot/policies/slots.py",
        "        return ((total / (running + 1) + 1) * profile.decode_ms(after)\n",
        "        return ((total / (running + 1)) * profile.decode_ms(after)\n",
        ("tests/policies/test_app_centric.py::"
         "test_waiting_latency_calls_join_while_the_mean_completion_drops",),
        where="Slot.has_room_backlogged"),
    Mutation(
        "graphs_wider_bucket", "parrot/engines/builtin/cuda/buckets.py",
        "WIDER_BUCKET_FACTOR = 2\n", "WIDER_BUCKET_FACTOR = 1\n",
        ("tests/engines/builtin/cuda/test_graphs.py::"
         "test_a_shared_prefix_step_replays_a_captured_wider_bucket",),
        where="<module>"),
    Mutation(
        "graphs_stopgap_never", "parrot/engines/builtin/cuda/graphs.py",
        "        return self._cached_wider(key, stopgap=True) or key\n", "        return key\n",
        ("tests/engines/builtin/cuda/test_graphs.py::"
         "test_a_shared_prefix_step_with_no_near_bucket_replays_a_stopgap_then_its_own",),
        where="DecodeGraphs._bucket"),
    Mutation(
        "pauses_counted_since_process_start", "parrot/engines/builtin/engine.py",
        "        self._pauses_at_start = self._pauses.totals()\n",
        "        self._pauses_at_start = self._pauses.totals() - self._pauses.totals()\n",
        ("tests/engines/builtin/observe/test_host_pauses.py::"
         "test_an_engine_counts_only_what_happens_after_it_is_built",),
        where="BuiltinEngine.__init__"),
    Mutation(
        "pauses_compile_hook_not_chained", "parrot/engines/builtin/observe/host_pauses.py",
        "            ours(**kwargs)\n", "",
        ("tests/engines/builtin/observe/test_host_pauses.py::"
         "test_compile_hooks_count_and_keep_the_previous_hooks_answer",
         "tests/engines/builtin/observe/test_host_pauses.py::"
         "test_a_compile_inside_a_step_is_counted_traced_and_named"),
        where="PauseMonitor._chain.hook"),
    Mutation(
        "tpot_counts_unfinished_generates", "parrot/engines/tpot.py",
        "        if not (chunk.is_finished and self._after_first > 0):\n",
        "        if not self._after_first > 0:\n",
        ("tests/engines/test_tpot.py::test_one_token_or_an_unfinished_generate_adds_nothing",
         "tests/engines/builtin/test_engine.py::"
         "test_stats_count_each_finished_generates_time_per_output_token"),
        where="TpotTimer.observe"),
    Mutation(
        "auto_throughput_capacity_share", "parrot/serve_config.py",
        "    share = kv_capacity_tokens * PAPER_THROUGHPUT_TOKENS // PAPER_KV_TOKENS"
        " // 1024 * 1024\n",
        "    share = FALLBACK_THROUGHPUT_CAPACITY\n",
        ("tests/manager/test_engine_pool_accounting.py",),
        where="auto_throughput_capacity"),
    Mutation(
        "throughput_centric_per_engine_cap", "parrot/policies/capped.py",
        "            return engine.throughput_capacity\n",
        "            return 32768\n",
        ("tests/policies/test_baselines.py",),
        where="CappedPolicy.token_capacity"),
    Mutation(
        "capped_auto_capacity_is_not_the_engines_latency_capacity", "parrot/policies/capped.py",
        "        return engine.latency_capacity if isinstance(cap, str) else cap",
        "        return 4096 if isinstance(cap, str) else cap",
        ("tests/policies/test_baselines.py::test_auto_capacity_is_each_engines_latency_capacity",),
        where="CappedPolicy.token_capacity"),
    Mutation(
        "rate_search_stops_at_budget", "bench/paper/live_runs.py",
        "            if time.perf_counter() > deadline:\n                break\n",
        "            pass\n",
        ("tests/bench/test_live_paper.py::"
         "test_a_rate_search_stops_at_the_budget_and_keeps_the_finished_variants",),
        where="_run_rate_search"),
    Mutation(
        "rate_search_parts_keep_own_ratio", "bench/paper/live_results.py",
        "        merged = slim(merge_rate_search(earlier, experiment))\n",
        "        merged = slim(experiment)\n",
        ("tests/bench/test_live_cells.py::"
         "test_a_rate_search_run_in_parts_keeps_each_variants_own_ratio",),
        where="publish"),
    Mutation(
        "placement_bound_without_reuse", "parrot/policies/slots.py",
        "            load += call.num_tokens - call.max_reusable_tokens\n",
        "            load += call.num_tokens\n",
        ("tests/policies/test_slots.py::"
         "test_the_bound_never_refuses_room_the_demand_has",),
        where="Slot.may_have_room"),
    Mutation(
        "chain_step_joins_chains", "parrot/policies/slots.py",
        "                and (call.arrival_seq > self.chained_latency_seq"
        " or call.has_waiting_consumer)):\n",
        "                and call.arrival_seq > self.chained_latency_seq):\n",
        ("tests/policies/test_app_centric.py::"
         "test_a_chain_step_joins_running_chains_whatever_its_submission",),
        where="Slot.has_room_backlogged"),
    Mutation(
        "prefill_graphs_repad_slots", "parrot/engines/builtin/cuda/prefill_graphs.py",
        '        h["slots"][:n], h["slots"][n:tokens] = slots, self.scratch_slot\n',
        '        h["slots"][:n] = slots\n',
        ("tests/engines/builtin/cuda/test_prefill_graphs.py",),
        where="PrefillGraphs.fill"),
    Mutation(
        "prefill_graphs_attention_between_pieces", "parrot/engines/builtin/cuda/prefill_graphs.py",
        "                self.model.attention(q, k, v, k_cache, v_cache, meta, out=attn)\n",
        "                pass\n",
        ("tests/engines/builtin/cuda/test_prefill_graphs.py::"
         "test_piecewise_prefill_matches_the_eager_forward",),
        where="PrefillGraphs.run"),
    Mutation(
        "prefill_waits_for_launched_step", "parrot/engines/builtin/engine_loop.py",
        "                batch = self._scheduler.schedule(decode_only=self._runner.has_ahead)\n",
        "                batch = self._scheduler.schedule()\n",
        ("tests/engines/builtin/cuda/test_lookahead.py::"
         "test_prefill_arriving_during_a_launched_step_waits_one_step",),
        where="EngineLoop._run"),
    Mutation(
        "no_launch_ahead_while_prefill_waits", "parrot/engines/builtin/engine_loop.py",
        "                self._runner.hold_ahead = self._scheduler.prefill_waits_after(batch)\n",
        "                self._runner.hold_ahead = False\n",
        ("tests/engines/builtin/cuda/test_lookahead.py::"
         "test_prefill_arriving_during_a_launched_step_waits_one_step",),
        where="EngineLoop._run"),
    Mutation(
        "simulated_engine_makes_up_late_timers", "parrot/engines/sim_pacing.py",
        "        if now - LATE_TIMER_S <= self.step_end < now:\n",
        "        if False:\n",
        ("tests/engines/test_sim_pacing.py::"
         "test_on_a_real_clock_a_late_timer_is_made_up_but_not_a_stall",),
        where="StepPacer.sleep_for"),
    Mutation(
        "prefill_work_needs_a_seat", "parrot/engines/builtin/batch_scheduler.py",
        "        return could_join and decoding < self.max_num_seqs\n",
        "        return could_join\n",
        ("tests/engines/builtin/test_batch_scheduler_order.py::"
         "test_no_prefill_work_while_the_decodes_take_every_seat",),
        where="BatchScheduler.prefill_waits_after"),
    Mutation(
        "prefix_context_at_every_recurring_boundary", "parrot/manager/executor.py",
        "        branch[i] = counts[i] >= 2 and counts[i] > most\n",
        "        branch[i] = counts[i] >= 2\n",
        ("tests/manager/test_prefix.py::test_only_branch_points_of_the_sharing_get_contexts",
         "tests/manager/test_executor.py::"
         "test_a_recurring_prompt_of_tiny_boundaries_costs_a_few_engine_round_trips"),
        where="plan_prefix_contexts"),
    Mutation(
        "prefix_context_not_at_the_last_shared_input", "parrot/manager/executor.py",
        "            branch[i - 1] = True\n", "            pass\n",
        ("tests/manager/test_prefix.py::test_only_branch_points_of_the_sharing_get_contexts",),
        where="plan_prefix_contexts"),
    Mutation(
        "step_trace_saved_tokens", "parrot/engines/builtin/observe/step_trace.py",
        "            saved += (groups.indptr[g + 1] - groups.indptr[g] - 1) * prefix\n",
        "            saved += (groups.indptr[g + 1] - groups.indptr[g]) * prefix\n",
        ("tests/engines/builtin/observe/test_step_trace.py",),
        where="step_shape"),
    Mutation(
        "prefill_split_reads_from_the_start", "parrot_kernels/_jit_prefill.py",
        "        lo = tl.program_id(2) * split_len\n", "        lo = 0 * split_len\n",
        ("tests/kernels/test_kernels_prefill.py::test_keys_split_into_ranges_match_reference",),
        where="_paged_prefill_kernel"),
    Mutation(
        "prefill_split_empty_rows_nan", "parrot_kernels/_jit_prefill.py",
        "        m_use = tl.where(m_new == float(\"-inf\"), 0.0, m_new)\n",
        "        m_use = m_new\n",
        ("tests/kernels/test_kernels_prefill.py::test_keys_split_into_ranges_match_reference",),
        where="_attend"),
    Mutation(
        "prefill_unmasked_past_the_first_row", "parrot_kernels/_jit_prefill.py",
        "    full = lo + tl.maximum(tl.minimum(pos0 + m0 + 1, end) - lo, 0)",
        "    full = lo + tl.maximum(tl.minimum(pos0 + m0 + 1 + BLOCK_N, end) - lo, 0)",
        ("tests/kernels/test_kernels_prefill.py::test_prefill_matches_reference",),
        where="_paged_prefill_kernel"),
    Mutation(
        "prefill_diagonal_blocks_unmasked", "parrot_kernels/_jit_prefill.py",
        "PAGE, BLOCK_N, True, SPLIT)", "PAGE, BLOCK_N, False, SPLIT)",
        ("tests/kernels/test_kernels_prefill.py::test_prefill_matches_reference",),
        where="_paged_prefill_kernel"),
    Mutation(
        "shared_prefix_one_block_short", "parrot/engines/builtin/llama/cascade.py",
        "    if a[:limit] == b[:limit]:\n        return limit\n",
        "    if a[:limit] == b[:limit]:\n        return limit - 1\n",
        ("tests/engines/builtin/llama/test_cascade.py",),
        where="_common_length"),
    Mutation(
        "shared_prefix_past_the_first_difference", "parrot/engines/builtin/llama/cascade.py",
        "        if a[:mid] == b[:mid]:\n", "        if a[:mid - 1] == b[:mid - 1]:\n",
        ("tests/engines/builtin/llama/test_cascade.py",),
        where="_common_length"),
    Mutation(
        "decode_small_tiles_never", "parrot_kernels/plan.py",
        "    small = cascade and (batch - groups + 1) * gqa <= SMALL_TILE_M\n",
        "    small = False\n",
        ("tests/kernels/test_kernels_plan.py::"
         "test_a_group_whose_rows_fit_the_smallest_tile_gets_it",),
        where="make_plan"),
    Mutation(
        "prefill_split_never", "parrot_kernels/prefill.py",
        "    elif programs > num_sms or programs == 0:\n",
        "    elif True:\n",
        ("tests/kernels/test_kernels_prefill.py::"
         "test_keys_are_split_only_when_few_tiles_read_a_long_context",),
        where="key_splits"),
    Mutation(
        "warmup_no_split_prefill", "parrot/engines/builtin/cuda/precompile.py",
        "    return [v for t in tunings for v in ((t,) if t is None else (t, replace(t, "
        "kv_splits=2)))]",
        "    return list(tunings)",
        ("tests/engines/builtin/cuda/test_startup.py::"
         "test_warm_up_compiles_the_paged_prefill_kernel_when_the_model_runs_it",),
        where="prefill_variants"),
    Mutation(
        "trace_gaps_longest_first", "parrot/engines/builtin/observe/trace_summary.py",
        "    waits = sorted(steps[1:], key=lambda r: -r.idle_ms)[:n]\n",
        "    waits = sorted(steps[1:], key=lambda r: r.idle_ms)[:n]\n",
        ("tests/engines/builtin/observe/test_trace_summary.py::"
         "test_largest_gaps_are_the_longest_waits_inside_a_segment",),
        where="largest_gaps"),
    Mutation(
        "auto_latency_capacity_rule", "parrot/speed_profile.py",
        "    return profile.tokens_at_slowdown(PAPER_LATENCY_STEP_RATIO)\n",
        "    return profile.tokens_at_slowdown(2.0)\n",
        ("tests/test_speed_profile.py::"
         "test_the_paper_rule_gives_the_papers_capacity_on_its_own_hardware",),
        where="calibrated_latency_capacity"),
    Mutation(
        "reported_profile_ignored", "parrot/manager/engine_profiles.py",
        "    if info.speed_profile is not None:\n",
        "    if False:\n",
        ("tests/manager/test_engine_pool.py::"
         "test_auto_latency_capacity_follows_the_profile_the_engine_reports",),
        where="engine_profile"),
    Mutation(
        "configured_profile_loses", "parrot/manager/engine_profiles.py",
        "    if configured is not None:\n        return configured, \"configured\"\n",
        "    if configured is not None and info.speed_profile is None:\n"
        "        return configured, \"configured\"\n",
        ("tests/manager/test_engine_pool.py::"
         "test_a_configured_profile_or_number_wins_and_no_profile_keeps_the_papers",),
        where="engine_profile"),
    Mutation(
        "returning_engine_keeps_old_profile", "parrot/manager/engine_pool.py",
        "        self.contexts = EngineContexts(engine, spec.name, info.block_size)\n"
        "        self._apply_spec()\n",
        "        self.contexts = EngineContexts(engine, spec.name, info.block_size)\n",
        ("tests/manager/test_engine_pool.py::test_a_returning_engine_is_costed_with_its_new_profile",),
        where="EngineState.reconnect"),
    Mutation(
        "probe_profile_may_fall", "parrot/engines/speed_probe.py",
        "            slowest = max(slowest, ms)\n",
        "            slowest = ms\n",
        ("tests/engines/test_speed_probe.py::test_the_profile_never_gets_faster_with_more_tokens",),
        where="ProbeResult.profile"),
    Mutation(
        "probe_no_empty_batch_point", "parrot/engines/speed_probe.py",
        "        if x0 > 0:\n",
        "        if False:\n",
        ("tests/engines/test_speed_probe.py::test_the_probe_recovers_a_simulated_engines_profile",
         "tests/engines/test_speed_probe.py::test_the_profile_never_gets_faster_with_more_tokens"),
        where="ProbeResult.profile"),
    Mutation(
        "probe_contexts_kept", "parrot/engines/speed_probe.py",
        "        await asyncio.gather(*(engine.free_context(cid) for cid in ids),\n"
        "                             return_exceptions=True)\n",
        "        pass\n",
        ("tests/engines/test_speed_probe.py::test_the_probe_recovers_a_simulated_engines_profile",
         "tests/engines/builtin/observe/test_startup_probe.py::"
         "test_a_probed_engine_reports_its_profile_and_leaves_nothing_behind"),
        where="measure_decode"),
    Mutation(
        "probe_plan_overfills_the_cache", "parrot/engines/speed_probe.py",
        "kv_tokens // largest - growth - info.block_size,",
        "kv_tokens // largest,",
        ("tests/engines/test_speed_probe.py::test_a_plan_fits_the_engine",),
        where="ProbePlan.for_engine"),
    Mutation(
        "startup_probe_skipped", "parrot/engines/builtin/engine.py",
        "            if self._speed_probe is not None:\n",
        "            if False:\n",
        ("tests/engines/builtin/observe/test_startup_probe.py::"
         "test_a_probed_engine_reports_its_profile_and_leaves_nothing_behind",),
        where="BuiltinEngine.start"),
    Mutation(
        "mixed_job_trace_ignored", "parrot/sim/workloads/apps.py",
        "    offsets = list(spec.job_offsets) or poisson_offsets(\n",
        "    offsets = poisson_offsets(\n",
        ("tests/sim/test_workloads.py::"
         "test_mixed_jobs_follow_a_trace_and_chats_a_fixed_interval",),
        where="mixed"),
    Mutation(
        "uniform_chats_poisson", "parrot/sim/workloads/apps.py",
        "        if spec.chat_arrivals == \"uniform\":\n",
        "        if False:\n",
        ("tests/sim/test_workloads.py::"
         "test_mixed_jobs_follow_a_trace_and_chats_a_fixed_interval",),
        where="BackgroundChat.__init__"),
    Mutation(
        "warmup_replays_the_job_trace", "bench/paper/live_runs.py",
        "                                job_offsets=(0.0,) if spec.job_offsets else (),\n",
        "",
        ("tests/bench/test_live_paper.py::test_warmup_keeps_the_shapes_and_cuts_the_time",),
        where="warmup_spec"),
    Mutation(
        "simulated_engine_ignores_priority", "parrot/engines/sim_requests.py",
        "    return req.priority\n", "    return 0\n",
        ("tests/engines/test_simulated.py::"
         "test_a_latency_critical_fill_is_prefilled_before_older_throughput_fills",),
        where="by_priority"),
    Mutation(
        "builtin_scheduler_ignores_priority", "parrot/engines/builtin/batch_scheduler.py",
        "    return work.priority\n", "    return 0\n",
        ("tests/engines/builtin/test_batch_scheduler_order.py::"
         "test_a_latency_critical_fill_prefills_before_older_throughput_fills",),
        where="_by_priority"),
    Mutation(
        "placement_criterion_not_sent_as_priority", "parrot/manager/engine_pool.py",
        "        return THROUGHPUT_PRIORITY if throughput else LATENCY_PRIORITY\n",
        "        return LATENCY_PRIORITY\n",
        ("tests/manager/test_scheduler.py::"
         "test_the_engine_priority_of_a_call_is_its_placements_criterion",),
        where="EngineState.request_priority"),
    Mutation(
        "submit_criteria_not_seeded", "parrot/manager/manager.py",
        "                self._seed_criterion(session, var, out_spec.criteria)\n",
        "                pass\n",
        ("tests/manager/test_scheduler.py::"
         "test_criteria_given_at_submit_are_deduced_before_the_first_round",),
        where="Manager.submit"),
    Mutation(
        "frontend_keeps_the_get_to_itself", "parrot/frontend/variable.py",
        "        self.get_criterion = strongest((self.get_criterion, criterion))\n",
        "",
        ("tests/frontend/test_session.py::test_a_get_begun_before_the_submission_travels_with_it",),
        where="SemanticVariable._want"),
    Mutation(
        "queued_prefill_not_costed", "parrot/policies/slots.py",
        "                   pending_prefill=view.queued_prefill_tokens,\n", "",
        ("tests/policies/test_app_centric.py::"
         "test_prompt_tokens_queued_on_an_engine_delay_a_call_placed_there",),
        where="Slot.of"),
    Mutation(
        "latency_limit_counts_throughput_load", "parrot/policies/slots.py",
        "            return self.latency_limit(own) + self.throughput_load\n",
        "            return self.latency_limit(own)\n",
        ("tests/policies/test_app_centric.py::"
         "test_throughput_work_joins_latency_engines_when_latency_free_engines_are_full",),
        where="Slot.capacity"),
    Mutation(
        "isolation_whatever_it_costs", "parrot/policies/app_centric.py",
        "    if len(latency_free) == len(slots):\n",
        "    if True:\n",
        ("tests/policies/test_app_centric.py::"
         "test_isolation_holds_while_confining_throughput_work_costs_little",
         "tests/policies/test_app_centric.py::"
         "test_engine_serving_latency_calls_is_held_to_latency_capacity"),
        where="can_isolate"),
    Mutation(
        "calm_engines_preferred_in_a_round_that_does_not_isolate",
        "parrot/policies/app_centric.py",
        "                                                              or not o[0].isolates)]\n",
        "                                                              or False)]\n",
        ("tests/policies/test_app_centric.py::"
         "test_isolation_holds_while_confining_throughput_work_costs_little",),
        where="AppCentricPolicy._pick"),
    Mutation(
        "latency_capacity_defaults_to_the_a100s", "parrot/serve_config.py",
        "    latency_capacity: int | None = None\n",
        "    latency_capacity: int | None = 6144\n",
        ("tests/manager/test_engine_pool.py::"
         "test_an_engine_given_no_capacity_is_calibrated_to_its_profile",),
        where="EngineSpec"),
    Mutation(
        "simulated_engine_reports_no_profile", "parrot/engines/simulated.py",
        "                          c.num_blocks, speed_profile=c.latency.speed_profile(),\n",
        "                          c.num_blocks,\n",
        ("tests/engines/test_simulated.py::"
         "test_info_reports_the_latency_model_as_the_engines_speed_profile",
         "tests/manager/test_engine_pool.py::"
         "test_a_simulated_engine_given_no_profile_is_costed_as_its_model_runs"),
        where="SimulatedEngine.info"),
    Mutation(
        "app_clock_counts_the_session_open", "parrot/sim/workloads/base.py",
        "        started = env.now()\n",
        "        started = opening\n",
        ("tests/sim/test_workloads.py::"
         "test_an_applications_clock_starts_once_its_session_is_open",),
        where="app_session"),
    Mutation(
        "earlier_clock_unmarked", "bench/paper/live_cells.py",
        "        if value != \"n/a\" and _earlier_clock(live, r, ref_exp):\n",
        "        if False:\n",
        ("tests/bench/test_live_cells.py::"
         "test_a_run_on_the_earlier_app_clock_is_marked_on_the_ratios_it_enters",),
        where="live_cell"),
    Mutation(
        "search_part_clock_ignored", "bench/paper/live_cells.py",
        "    if PART_CLOCK in searched and searched.get(\"reference_rate\"):\n",
        "    if False:\n",
        ("tests/bench/test_live_cells.py::"
         "test_a_rate_search_part_on_the_earlier_clock_stays_marked_after_a_later_part",),
        where="_earlier_clock"),
    Mutation(
        "rate_search_max_rate_ignored", "bench/paper/live_experiments.py",
        " " * 33 + "(\"max_rate\", max_rate), (\"refinements\", refinements))\n",
        " " * 33 + "(\"refinements\", refinements))\n",
        ("tests/bench/test_live_paper.py::"
         "test_a_shorter_rate_search_changes_only_what_is_given",),
        where="with_rate_search"),
    Mutation(
        "deferred_open_sent_eagerly", "parrot/frontend/session.py",
        "            if self.credentials is None and self._opening is None:\n",
        "            if False:\n",
        ("tests/frontend/test_session.py::test_a_deferred_open_travels_with_the_first_batch",),
        where="Session._flush"),
    Mutation(
        "batch_open_before_its_body_parses", "parrot/server/wire_routes.py",
        "            grant = self.admit_session(token)  # who asks, before what they ask is read\n",
        "            grant = self.admit_session(token)  # who asks, before what they ask is read\n"
        "            self._open_session(grant)\n",
        ("tests/server/test_security.py::"
         "test_a_batch_that_opens_its_session_is_let_in_as_a_session_open_is",),
        where="WireAPI.submit_batch"),
    Mutation(
        "batch_open_without_the_tenant_key", "parrot/server/wire_routes.py",
        "            grant = self.admit_session(token)  # again: others may have opened "
        "sessions since\n",
        "            grant = TenantGrant(\"a\", \"\")  # another tenant than the key's\n",
        ("tests/server/test_security.py::"
         "test_a_batch_that_opens_its_session_is_let_in_as_a_session_open_is",),
        where="WireAPI.submit_batch"),
    Mutation(
        "batch_open_skips_the_call_limits", "parrot/server/wire_routes.py",
        "            self.admission.check(None, len(batch.calls), grant.tenant)\n",
        "",
        ("tests/server/test_overload.py::"
         "test_a_batch_that_would_open_a_session_is_held_to_the_same_limits",),
        where="WireAPI.submit_batch"),
    Mutation(
        "launch_key_without_alignment", "parrot_kernels/launch.py",
        "        return (arg.dtype, arg.get_device(), arg.data_ptr() % 16 == 0)\n",
        "        return (arg.dtype, arg.get_device())\n",
        ("tests/kernels/test_kernels_launch.py::"
         "test_a_key_that_may_specialise_differently_goes_through_the_jit",),
        where="_arg_key"),
    Mutation(
        "replay_without_the_layout_check", "parrot_kernels/launch.py",
        "        if not all(_same_layout(o, n) for o, n in zip(old, new)):\n",
        "        if False:\n",
        ("tests/kernels/test_kernels_launch.py::"
         "test_a_replay_with_another_layout_declines",),
        where="Recording.replay"),
    Mutation(
        "replay_of_a_view_made_inside", "parrot_kernels/launch.py",
        "                      and arg.untyped_storage().data_ptr() in storages):\n",
        "                      and False):\n",
        ("tests/kernels/test_kernels_launch.py::"
         "test_a_view_made_inside_the_wrapper_is_not_replayed",),
        where="Recording._plan"),
    Mutation(
        "attention_replayed_with_the_first_layers_tensors", "parrot/engines/builtin/llama/model.py",
        "and replay[0].replay(replay[1], tensors):\n",
        "and replay[0].replay(replay[1], replay[1]):\n",
        ("tests/engines/builtin/test_attention_replay.py::"
         "test_the_first_layer_records_and_the_others_replay_with_their_caches",),
        where="LlamaModel.attention"),
    Mutation(
        "attention_recorded_beside_a_torch_decode", "parrot/engines/builtin/llama/model.py",
        "(not nd or getattr(self._decode, \"replayable\", False))",
        "(not nd or True)",
        ("tests/engines/builtin/test_attention_replay.py::"
         "test_a_decode_path_that_is_not_only_launches_is_never_replayed",),
        where="LlamaModel.attention"),
    Mutation(
        "mixed_step_prefill_before_its_padded_decode", "parrot/engines/builtin/llama/model.py",
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
         "test_a_mixed_step_writes_its_padded_decode_rows_straight_into_the_output",),
        where="LlamaModel.attention"),
    Mutation(
        "packed_upload_unaligned", "parrot/engines/builtin/cuda/staging.py",
        "    align = ALIGN_BYTES // itemsize\n",
        "    align = 1\n",
        ("tests/engines/builtin/cuda/test_staging.py::"
         "test_upload_packed_gives_each_array_its_shape_and_values_on_16_byte_boundaries",),
        where="aligned_offsets"),
    Mutation(
        "openai_routes_greedy_by_default", "parrot/server/openai_requests.py",
        'OPENAI_SAMPLING_DEFAULTS: dict[str, Any] = {"temperature": 1.0, "top_p": 1.0}\n',
        'OPENAI_SAMPLING_DEFAULTS: dict[str, Any] = {"temperature": 0.0, "top_p": 1.0}\n',
        ("tests/server/test_openai_api.py::"
         "test_sampling_defaults_are_openais_on_the_openai_routes_only",),
        where="<module>"),
    Mutation(
        "context_length_exceeded_as_a_failed_call", "parrot/server/openai_api.py",
        "        if not (isinstance(exc, CallFailedError) and isinstance(exc.__cause__, "
        "PromptTooLongError)):\n",
        "        if True:\n",
        ("tests/server/test_openai_api.py::"
         "test_a_prompt_over_the_window_is_context_length_exceeded",),
        where="_Window.error"),
    Mutation(
        "openai_unknown_fields_refused", "parrot/server/openai_requests.py",
        '        log.debug("%s: ignored unknown field(s) %s", route, ignored)\n',
        '        raise _bad(ignored[0], f"{route}: unsupported field(s) {ignored}")\n',
        ("tests/server/test_openai_api.py::"
         "test_unknown_and_newer_fields_are_accepted_and_ignored",),
        where="_common"),
    Mutation(
        "simulated_engine_never_ends_its_turn", "parrot/engines/simulated.py",
        "                                    eos_mean_tokens=None if sampling.ignore_eos\n",
        "                                    eos_mean_tokens=None if True\n",
        ("tests/engines/test_simulated.py::"
         "test_a_generate_ends_its_turn_by_itself_unless_ignore_eos",
         "tests/server/test_openai_api.py::"
         "test_a_chat_without_max_tokens_on_the_sim_config_ends_by_itself"),
        where="SimulatedEngine._chunks"),
    Mutation(
        "second_ctrl_c_ignored", "parrot/cli/serve.py",
        "        (signals[1] if signals[0].is_set() else signals[0]).set()\n",
        "        signals[0].set()\n",
        ("tests/cli/test_start_stop.py::"
         "test_ctrl_c_drains_with_a_countdown_and_a_second_stops_within_2_s",),
        where="serve.on_signal"),
    Mutation(
        "port_in_use_found_after_the_engines", "parrot/cli/serve.py",
        "    check_port_free(bind_host, bind_port)\n",
        "",
        ("tests/cli/test_start_stop.py::"
         "test_a_port_in_use_is_one_line_before_any_engine_starts",),
        where="serve"),
    Mutation(
        "refused_engine_token_retried_forever", "parrot/cli/engine.py",
        "            if refused >= MAX_REFUSED_REGISTRATIONS:\n",
        "            if False:\n",
        ("tests/cli/test_start_stop.py::"
         "test_an_engine_with_a_wrong_admin_token_stops_after_a_few_tries",),
        where="register_until_accepted"),
    Mutation(
        "bench_failure_reason_hidden", "parrot/cli/bench.py",
        "    if failures:\n        print(failures)\n",
        "",
        ("tests/cli/test_bench_workloads.py::test_a_failing_variant_says_why",),
        where="main"),
    Mutation(
        "timeline_one_row_per_engine", "parrot/sim/plots.py",
        "        lane = next((i for i, end in enumerate(ends) if end <= dispatched), len(ends))\n",
        "        lane = 0 if ends else len(ends)\n",
        ("tests/sim/test_plots.py::test_calls_running_together_on_one_engine_get_a_row_each",),
        where="timeline_lanes"),
    Mutation(
        "engine_counter_typo_accepted", "parrot/engines/counters.py",
        "    if unknown:\n", "    if False:\n",
        ("tests/engines/test_engine_counters.py::"
         "test_engine_counters_orders_by_the_registry_and_refuses_unknown_names_and_non_integers",
         "tests/engines/test_engine_counters.py::"
         "test_counter_reads_zero_where_not_counted_and_refuses_an_unknown_name"),
        where="check_counter_names"),
    Mutation(
        "engine_stats_flat_counters_dropped", "parrot/engines/protocol.py",
        "        if isinstance(data, Mapping) and \"counters\" not in data:\n",
        "        if False:\n",
        ("tests/engines/test_engine_counters.py::"
         "test_the_older_flat_form_is_folded_into_counters",),
        where="EngineStats.from_wire"),
    Mutation(
        "literal_path_keeps_only_its_first_route", "parrot/server/wire_routes.py",
        "            literal: list(self._matching(literal)) for _, pattern, _, _ in self._routes\n",
        "            literal: list(self._matching(literal))[:1] for _, pattern, _, _ in "
        "self._routes\n",
        ("tests/server/test_bad_input.py::test_wrong_method_is_405_json",),
        where="WireAPI.__init__"),
    Mutation(
        "json_body_byte_order_mark_let_through_to_the_decoder", "parrot/server/json_body.py",
        "        if text.startswith(\"\\ufeff\"):  # what json.loads refuses before decoding\n",
        "        if False:\n",
        ("tests/server/test_bad_input.py::test_hostile_bodies_are_400_json",),
        where="parse_json_body"),
    Mutation(
        "body_read_without_its_timeout", "parrot/server/http_api.py",
        "        if request.content.is_eof():\n",
        "        if True:\n",
        ("tests/server/test_overload.py::test_slow_body_is_408_json",),
        where="read_json"),
    Mutation(
        "request_count_child_shared_across_statuses", "parrot/server/metrics.py",
        "        key = (method, route, status)\n",
        "        key = (method, route, 0)\n",
        ("tests/server/test_metrics.py::"
         "test_request_counts_are_kept_per_method_route_and_status_on_every_request",),
        where="Metrics._request_count"),
    Mutation(
        "engine_counters_exported_unscaled", "parrot/server/metrics.py",
        "                family.add_metric([name], stats.counter(counter.name) * counter.scale)\n",
        "                family.add_metric([name], stats.counter(counter.name))\n",
        ("tests/server/test_metrics.py::"
         "test_engine_work_counters_are_exported_in_seconds_and_tokens",),
        where="ManagerCollector.reported"),
    Mutation(
        "batch_ops_of_an_iteration_gathered", "parrot/engines/batch_client.py",
        "            asyncio.get_running_loop().call_soon(self._flush)\n",
        "            self._flush()\n",
        ("tests/engines/test_batch_client.py::"
         "test_concurrent_generates_leave_in_one_request_and_match_the_engine",),
        where="OpBatcher._schedule_flush"),
    Mutation(
        "batch_op_let_go_aborted", "parrot/engines/batch_client.py",
        "            self._abort_later([op.id])\n",
        "            pass\n",
        ("tests/engines/test_batch_client.py::"
         "test_an_op_let_go_early_is_aborted_and_its_batch_mate_runs_on",),
        where="OpBatcher.release"),
    Mutation(
        "batch_stream_gone_aborts_its_ops", "parrot/engines/batch_server.py",
        "                task.cancel()\n",
        "                pass\n",
        ("tests/engines/test_batch_server.py::test_a_client_that_goes_away_aborts_its_ops",
         "tests/engines/test_batch_client.py::"
         "test_a_stalled_batch_times_out_and_the_engine_drops_its_ops"),
        where="BatchRoutes.batch"),
    Mutation(
        "batch_chunks_of_one_line_merged", "parrot/engines/batch_server.py",
        "            self._open_chunks[op_id] = event\n",
        "            pass\n",
        ("tests/engines/test_batch_server.py::"
         "test_an_ops_chunks_that_wait_for_the_writer_merge_into_one_event",),
        where="Outbox.chunk"),
    Mutation(
        "batch_abort_waits_for_the_engines_answer", "parrot/engines/batch_client.py",
        "        if request.ops and request.let_go is not None:\n",
        "        if False:\n",
        ("tests/engines/test_batch_client.py::"
         "test_an_op_let_go_before_the_engine_answered_is_aborted_once_it_has",),
        where="OpBatcher.release"),
    Mutation(
        "simulated_only_client_aborts_counted", "parrot/engines/sim_batch.py",
        "        if by_client and req.kind is SimRequestKind.GENERATE:\n",
        "        if req.kind is SimRequestKind.GENERATE:\n",
        ("tests/engines/test_simulated.py::"
         "test_fills_and_failed_generates_are_not_aborted_work",),
        where="SimBatch.abort"),
    Mutation(
        "builtin_aborted_generate_counted_once", "parrot/engines/builtin/engine.py",
        "            if work.fail(EngineError(\"generate abandoned by its caller\")):\n",
        "            if work.fail(EngineError(\"generate abandoned by its caller\")) or True:\n",
        ("tests/engines/builtin/test_aborted_work.py::"
         "test_a_cancelled_or_closed_generate_counts_what_it_decoded",
         "tests/engines/builtin/test_aborted_work.py::"
         "test_a_generate_freed_under_and_then_let_go_counts_once"),
        where="BuiltinEngine.generate"),
    Mutation(
        "builtin_freed_generate_counted", "parrot/engines/builtin/engine.py",
        "        self._count_abort(self._scheduler.free(ctx, defer=self._batching.step_in_flight)"
        ")\n",
        "        self._scheduler.free(ctx, defer=self._batching.step_in_flight)\n",
        ("tests/engines/builtin/test_aborted_work.py::"
         "test_a_generate_freed_under_and_then_let_go_counts_once",),
        where="BuiltinEngine.free_context"),
    Mutation(
        "vllm_finished_stream_not_aborted", "parrot/engines/vllm_engine.py",
        "            if not finished:   # closed after its last chunk: it finished, nothing "
        "thrown away\n",
        "            if True:\n",
        ("tests/engines/test_vllm_engine.py::"
         "test_a_generate_let_go_mid_way_counts_the_tokens_vllm_handed_over",),
        where="VLLMEngine.generate"),
    Mutation(
        "deduction_skips_co_producers", "parrot/manager/deduction.py",
        "                mark(co_producer)   # a group it shares with `call` changed\n",
        "                pass\n",
        ("tests/manager/test_deduction_incremental.py::"
         "test_a_finished_member_shrinks_its_group_and_the_last_one_dissolves_it",),
        where="deduce_changed"),
    Mutation(
        "deduction_demand_not_propagated_upstream", "parrot/manager/deduction.py",
        "                    mark(producer)   # lower ranks: decided after this one\n",
        "                    pass\n",
        ("tests/manager/test_deduction_incremental.py::"
         "test_incremental_deduction_decides_what_a_full_one_would",),
        where="deduce_changed"),
    Mutation(
        "deduction_level_not_closed_under_groups", "parrot/manager/deduction.py",
        "                    level.append(producer)\n",
        "                    pass\n",
        ("tests/manager/test_deduction_incremental.py::"
         "test_incremental_deduction_decides_what_a_full_one_would",),
        where="_level_groups_of"),
    Mutation(
        "finished_call_not_logged_for_deduction", "parrot/manager/lifecycle.py",
        "            call.graph_changes[call.call_id] = None\n",
        "            pass\n",
        ("tests/manager/test_deduction_incremental.py::"
         "test_a_finished_member_shrinks_its_group_and_the_last_one_dissolves_it",),
        where="transition"),
    Mutation(
        "reranked_consumer_not_logged", "parrot/manager/dag.py",
        "                        self._changed[consumer.call_id] = None\n",
        "                        pass\n",
        ("tests/manager/test_deduction_incremental.py::"
         "test_a_late_producer_moves_its_consumer_out_of_its_depths_group",),
        where="SessionGraph._raise_downstream_ranks"),
    Mutation(
        "deduction_redoes_every_live_call", "parrot/manager/deduction.py",
        "    if graph.needs_full_deduction:\n",
        "    if True:\n",
        ("tests/manager/test_deduction_incremental.py::"
         "test_a_round_deduces_the_calls_it_added_not_the_sessions_live_calls",),
        where="deduce_changed"),
    Mutation(
        "round_dispatched_in_one_block", "parrot/manager/manager.py",
        "            await slices.next()\n",
        "            pass\n",
        ("tests/manager/test_dispatch_slices.py::"
         "test_a_round_of_thousands_yields_to_the_loop_every_slice",),
        where="Manager.step_in_slices"),
    Mutation(
        "slice_dispatches_a_call_failed_meanwhile", "parrot/manager/manager.py",
        "            if d.call.state is not CallState.READY or not d.engine.is_healthy:\n",
        "            if False:\n",
        ("tests/manager/test_dispatch_slices.py::"
         "test_a_call_failed_between_slices_is_skipped_and_the_rest_dispatched",
         "tests/manager/test_dispatch_slices.py::"
         "test_a_call_whose_engine_went_down_between_slices_is_queued_again"),
        where="Manager.step_in_slices"),
    Mutation(
        "queued_prefill_not_counted_off", "parrot/manager/engine_pool.py",
        "            self.queued_prefill_tokens -= before.prefill_tokens\n",
        "            self.queued_prefill_tokens -= 0\n",
        ("tests/manager/test_engine_pool_accounting.py::"
         "test_the_prefill_queued_follows_the_running_calls_without_walking_them",),
        where="EngineState._set_running"),
    Mutation(
        "engine_calls_not_bounded_by_its_batch", "parrot/manager/engine_pool.py",
        "        return None if self.info.serving is None else self.info.serving.max_num_seqs\n",
        "        return None\n",
        ("tests/manager/test_call_slots.py::"
         "test_an_engine_process_runs_at_most_its_batch_of_calls_at_once",),
        where="EngineState._max_calls"),
    Mutation(
        "call_slots_ignore_priority", "parrot/manager/call_slots.py",
        "        heapq.heappush(self._waiting, (priority, next(self._arrivals), granted))\n",
        "        heapq.heappush(self._waiting, (0, next(self._arrivals), granted))\n",
        ("tests/manager/test_call_slots.py::"
         "test_waiters_go_latency_first_then_in_arrival_order",),
        where="CallSlots.acquire"),
    Mutation(
        "full_collections_as_often_as_ever", "parrot/cli/limits.py",
        "    gc.set_threshold(young, middle, YOUNGER_PER_FULL_COLLECTION)\n",
        "    gc.set_threshold(young, middle, 10)\n",
        ("tests/cli/test_limits.py::"
         "test_a_settled_heap_freezes_start_up_and_makes_full_collections_rarer",),
        where="settle_heap"),
    Mutation(
        "start_up_objects_not_frozen", "parrot/cli/limits.py",
        "    gc.freeze()\n",
        "",
        ("tests/cli/test_limits.py::"
         "test_a_settled_heap_freezes_start_up_and_makes_full_collections_rarer",),
        where="settle_heap"),
    Mutation(
        "precompile_every_bucket_covers", "parrot/engines/builtin/cuda/precompile.py",
        "        new = sorted(launched - seen, key=repr)\n",
        "        new = sorted(launched, key=repr)\n",
        ("tests/engines/builtin/cuda/test_precompile.py::"
         "test_covering_keys_use_every_specialisation_of_the_whole_list",),
        where="first_met"),
    Mutation(
        "precompile_not_dealt", "parrot/engines/builtin/cuda/precompile_worker.py",
        "    dealt = [(task, one) for task, specs in found for one in specs][worker::workers]\n",
        "    dealt = [(task, one) for task, specs in found for one in specs]\n",
        ("tests/engines/builtin/cuda/test_precompile.py::"
         "test_workers_compile_each_specialisation_once_between_them",),
        where="compile_share"),
    Mutation(
        "precompile_stamp_after_a_failure", "parrot/engines/builtin/cuda/precompile.py",
        "        if not failed and self.stamp is not None:\n",
        "        if self.stamp is not None:\n",
        ("tests/engines/builtin/cuda/test_precompile.py::"
         "test_a_failing_worker_never_fails_the_start",),
        where="AttentionPrecompile.wait"),
    Mutation(
        "start_cache_never_read", "parrot/engines/builtin/start_cache.py",
        "    if path is None or not path.is_file():\n",
        "    if True:\n",
        ("tests/engines/builtin/llama/test_linear_choice.py::"
         "test_a_measured_choice_is_kept_and_read_at_the_next_start",
         "tests/engines/builtin/cuda/test_precompile.py::"
         "test_covering_buckets_are_found_once_and_read_at_the_next_start",
         "tests/engines/builtin/observe/test_startup_probe.py::"
         "test_a_measured_profile_is_kept_and_read_by_the_next_start"),
        where="read_kept"),
    Mutation(
        "stopgaps_never_deferred", "parrot/engines/builtin/cuda/buckets.py",
        "            + [k for k in stopgaps if k[0] > above])\n",
        "            + [])\n",
        ("tests/engines/builtin/cuda/test_startup.py::"
         "test_stopgaps_of_more_rows_than_the_eager_graphs_are_deferred_after_the_paged_ones",
         "tests/engines/builtin/cuda/test_startup.py::"
         "test_warm_up_defers_the_stopgaps_with_the_larger_graphs"),
        where="deferred_keys"),
    Mutation(
        "detokenizer_rust_decode_despite_cleanup", "parrot/engines/builtin/detokenizer.py",
        "    if backend is not None and getattr(tokenizer, \"clean_up_tokenization_spaces\", "
        "True) is False:\n",
        "    if backend is not None:\n",
        ("tests/engines/builtin/test_detokenizer.py::"
         "test_the_rust_decoder_is_used_only_where_it_gives_the_same_text",),
        where="rust_backend"),
    Mutation(
        "detokenizer_rust_stream_for_any_decoder", "parrot/engines/builtin/detokenizer.py",
        "                and isinstance(self._backend.decoder, _RUST_STREAM[0]) and not (\n",
        "                and not (\n",
        ("tests/engines/builtin/test_detokenizer.py::"
         "test_the_rust_stream_gives_the_python_rules_pieces_token_by_token",),
        where="TextStream.__init__"),
    Mutation(
        "detokenizer_rust_stream_after_a_split_character", "parrot/engines/builtin/detokenizer.py",
        "                    self._ids and self._decode(self._ids).endswith(_REPLACEMENT)):\n",
        "                    False):\n",
        ("tests/engines/builtin/test_detokenizer.py::"
         "test_a_context_ending_inside_a_character_keeps_the_python_rule",),
        where="TextStream.__init__"),
    Mutation(
        "chunk_channel_never_wakes_its_reader", "parrot/engines/builtin/channel.py",
        "                waiter.set_result(None)\n",
        "                pass\n",
        ("tests/engines/builtin/test_channel.py::"
         "test_items_come_out_in_order_and_a_waiting_reader_wakes",),
        where="Channel.put"),
    Mutation(
        "tokenizer_never_direct", "parrot/engines/builtin/llama/tokenizer.py",
        "    if fast is not None and why_not is None:\n",
        "    if False:\n",
        ("tests/engines/builtin/llama/test_tokenizer.py::"
         "test_a_random_model_gets_a_direct_tokenizer_at_once",
         "tests/engines/builtin/llama/test_tokenizer.py::"
         "test_an_engine_with_a_direct_tokenizer_never_imports_transformers"),
        where="start_tokenizer"),
    Mutation(
        "tokenizer_direct_despite_a_rewriting_config", "parrot/engines/builtin/llama/tokenizer.py",
        "    if rewriting:\n",
        "    if False:\n",
        ("tests/engines/builtin/llama/test_tokenizer.py::"
         "test_what_transformers_would_change_loads_through_transformers",),
        where="_direct"),
    Mutation(
        "launch_ahead_stops_at_any_ending_row", "parrot/engines/builtin/runner.py",
        "        if ending == len(host.sample_chunks) or (ending and rows.groups is not None):\n",
        "        if ending:\n",
        ("tests/engines/builtin/cuda/test_lookahead.py::"
         "test_rows_that_end_ride_along_in_the_prediction",),
        where="ModelRunner._fed_prediction"),
    Mutation(
        "precompile_skips_the_linear_kernels", "parrot/engines/builtin/cuda/precompile.py",
        "                + [(\"linear\", *launch) for launch in self.linear]\n",
        "                + []\n",
        ("tests/engines/builtin/cuda/test_precompile.py::"
         "test_spec_round_trips_through_json",
         "tests/engines/builtin/cuda/test_precompile.py::"
         "test_workers_compile_the_linear_choices_kernels_too"),
        where="PrecompileSpec.tasks"),
    Mutation(
        "first_chat_imports_on_the_loop", "parrot/server/openai_api.py",
        "        if not renderer_loaded():   # the first chat: its import beside the loop\n",
        "        if False:\n",
        ("tests/server/test_openai_api.py::"
         "test_the_first_chat_loads_the_renderer_beside_the_loop",),
        where="OpenAIRoutes.chat_completions"),
    Mutation(
        "late_producer_unseen_by_its_consumer", "parrot/manager/dag.py",
        "                self._input_producers[consumer.call_id] = self._producers_of(consumer)\n",
        "                pass\n",
        ("tests/manager/test_deduction_incremental.py::"
         "test_incremental_deduction_decides_what_a_full_one_would",),
        where="SessionGraph.add_call"),
    Mutation(
        "precompile_workers_capped_at_eight",
        "parrot/engines/builtin/cuda/early_precompile.py",
        "    return max(1, min(MAX_WORKERS, usable_cores() - 1))\n",
        "    return max(1, min(8, usable_cores() - 1))\n",
        ("tests/engines/builtin/cuda/test_precompile.py::"
         "test_workers_default_to_every_core_but_the_engines",),
        where="default_workers"),
    Mutation(
        "precompile_skips_the_prefill_tiles", "parrot/engines/builtin/cuda/precompile.py",
        "                + [(\"prefill\", i) for i in range(len(self.prefill))])\n",
        "                + [])\n",
        ("tests/engines/builtin/cuda/test_precompile.py::"
         "test_workers_compile_the_paged_prefills_tiles_each_once_between_them",),
        where="PrecompileSpec.tasks"),
    Mutation(
        "precompile_covering_not_handed_over",
        "parrot/engines/builtin/cuda/precompile_worker.py",
        "    if worker == 0 and spec.covering is not None:\n",
        "    if False:\n",
        ("tests/engines/builtin/cuda/test_precompile.py::"
         "test_worker_0_hands_the_warm_up_its_covering_buckets",),
        where="compile_share"),
    Mutation(
        "a_fill_a_step_ends_still_holds_launch_ahead",
        "parrot/engines/builtin/batch_scheduler.py",
        "        ending = () if batch is None else {\n",
        "        ending = () if True else {\n",
        ("tests/engines/builtin/test_batch_scheduler_order.py::"
         "test_a_fill_the_batch_ends_holds_nothing_back_after_it",
         "tests/engines/builtin/cuda/test_lookahead.py::"
         "test_the_decode_step_after_a_mixed_step_that_ends_a_fill_is_launched_ahead"),
        where="BatchScheduler.prefill_waits_after"),
    Mutation(
        "nothing_launched_ahead_after_a_mixed_step", "parrot/engines/builtin/runner.py",
        "            elif host.prefills and host.decode_lens and host.groups is None:\n",
        "            elif False:\n",
        ("tests/engines/builtin/cuda/test_lookahead.py::"
         "test_the_decode_step_after_a_mixed_step_that_ends_a_fill_is_launched_ahead",),
        where="ModelRunner.step"),
    Mutation(
        "a_context_scheduled_twice_in_a_step", "parrot/engines/builtin/batch_scheduler.py",
        "            if id(ctx) in protected or (decodes and not work.is_decoding):\n",
        "            if False:\n",
        ("tests/engines/builtin/test_batch_scheduler_order.py::"
         "test_a_decode_preempted_by_an_older_decode_in_the_same_step_runs_once",),
        where="BatchScheduler._take"),
    Mutation(
        "prefix_cache_reuses_the_pending_tokens_block",
        "parrot/engines/builtin/block_manager.py",
        "        usable = max(len(ctx.token_ids) - 1, 0) // self.block_size\n",
        "        usable = len(ctx.token_ids) // self.block_size\n",
        ("tests/engines/builtin/test_block_manager.py::"
         "test_prefix_caching_reuses_the_longest_computed_prefix_but_never_the_pending_block",),
        where="BlockManager.reuse_cached"),
    Mutation(
        "prefix_cache_digest_without_the_chain", "parrot/engines/builtin/block_manager.py",
        "        previous = hashlib.blake2b(previous + block, digest_size=16).digest()\n",
        "        previous = hashlib.blake2b(block, digest_size=16).digest()\n",
        ("tests/engines/builtin/test_block_manager.py::"
         "test_a_blocks_name_covers_every_token_before_it",),
        where="extend_digests"),
    Mutation(
        "decodes_and_prefill_never_apart", "parrot/engines/builtin/batch_scheduler.py",
        "        apart = (not decodes_only and self.max_mixed_decode_rows is not None"
        " and waiting\n",
        "        apart = (False and self.max_mixed_decode_rows is not None and waiting\n",
        ("tests/engines/builtin/test_engine.py::"
         "test_decodes_and_prefill_apart_give_the_same_tokens",
         "tests/engines/builtin/test_batch_scheduler_order.py::"
         "test_past_max_mixed_decode_rows_decodes_and_prefill_take_turns"),
        where="BatchScheduler._pick_chunks"),
    Mutation(
        "speed_probe_fills_share_one_sequence", "parrot/engines/speed_probe.py",
        "    rng = random.Random(seed)\n",
        "    rng = random.Random(0)\n",
        ("tests/engines/builtin/test_prefix_caching.py::"
         "test_the_speed_probe_never_measures_a_cached_prefill",),
        where="token_ids"),
    Mutation(
        "executor_never_puts_the_prompt_in_the_generate", "parrot/manager/executor.py",
        "    in_generate = engine.info.takes_prompt_in_generate\n",
        "    in_generate = False\n",
        ("tests/manager/test_executor_prompt_in_generate.py::"
         "test_text_before_each_output_rides_in_its_generate_and_changes_nothing_else",),
        where="_run_once"),
    Mutation(
        "sim_prompt_last_chunk_samples_nothing", "parrot/engines/sim_batch.py",
        "one\n                    self._decode_token(req, req.context)\n",
        "one\n                    pass\n",
        ("tests/engines/test_sim_prompt_in_generate.py::"
         "test_the_same_tokens_as_a_fill_and_a_generate_one_decode_step_sooner",),
        where="SimBatch._apply"),
    Mutation(
        "builtin_prompt_len_never_reported", "parrot/engines/builtin/batch_scheduler.py",
        "            work.prompt_len = len(ctx.token_ids)\n",
        "            work.prompt_len = None\n",
        ("tests/engines/builtin/test_prompt_in_generate.py::"
         "test_a_prompt_in_the_generate_gives_the_fill_then_generate_tokens_a_step_sooner",),
        where="BatchScheduler._start"),
    Mutation(
        "background_work_held_beside_latency_calls", "parrot/policies/app_centric.py",
        "                for slot in slots:\n                    slot.isolates = True\n",
        "                pass\n",
        ("tests/policies/test_work_conserving.py::"
         "test_background_work_is_held_to_the_latency_limit_beside_latency_calls",),
        where="AppCentricPolicy.schedule"),
    Mutation(
        "background_is_demand_throughput", "parrot/policies/app_centric.py",
        "                and all(call.demand is Criterion.THROUGHPUT for call in unit)):\n",
        "                and all(call.demand is not Criterion.LATENCY for call in unit)):\n",
        ("tests/policies/test_work_conserving.py::"
         "test_throughput_work_a_latency_critical_call_waits_on_is_not_background",),
        where="AppCentricPolicy._tier"),
    Mutation(
        "background_placed_last", "parrot/policies/app_centric.py",
        "        return sorted(tiered, key=_TIER)   # (stable: each tier keeps its order)\n",
        "        return sorted(tiered, key=lambda unit: min(unit[0], _THROUGHPUT))\n",
        ("tests/policies/test_work_conserving.py::"
         "test_background_work_comes_after_the_work_someone_waits_on",),
        where="AppCentricPolicy._by_priority"),
    Mutation(
        "call_view_carries_demand", "parrot/manager/scheduler.py",
        "                has_waiting_consumer=call.has_waiting_consumer, demand=call.demand))\n",
        "                has_waiting_consumer=call.has_waiting_consumer))\n",
        ("tests/manager/test_scheduler.py::"
         "test_criteria_given_at_submit_are_deduced_before_the_first_round",),
        where="Scheduler._call_views"),
    Mutation(
        "round_not_coalesced", "parrot/manager/scheduler.py",
        "        if self.coalesce_s > 0:\n",
        "        if False:\n",
        ("tests/manager/test_round_coalescing.py::"
         "test_calls_ready_in_consecutive_turns_share_one_round",),
        where="Scheduler.wait"),
    Mutation(
        "round_coalescing_past_a_quiet_turn", "parrot/manager/scheduler.py",
        "                if not self._wakeup.is_set() or loop.time() >= deadline:\n",
        "                if loop.time() >= deadline:\n",
        ("tests/manager/test_round_coalescing.py::"
         "test_a_lone_call_is_placed_one_turn_after_its_wake",),
        where="Scheduler.wait"),
    Mutation(
        "round_coalescing_without_a_time_bound", "parrot/manager/scheduler.py",
        "                if not self._wakeup.is_set() or loop.time() >= deadline:\n",
        "                if not self._wakeup.is_set():\n",
        ("tests/manager/test_round_coalescing.py::"
         "test_a_loop_that_keeps_bringing_work_gets_its_round_within_the_time_bound",),
        where="Scheduler.wait"),
    Mutation(
        "round_coalescing_without_a_turn_limit", "parrot/manager/scheduler.py",
        "            for _ in range(COALESCE_TURNS):\n",
        "            while True:\n",
        ("tests/manager/test_round_coalescing.py::"
         "test_more_turns_of_work_than_the_limit_get_more_rounds",),
        where="Scheduler.wait"),
    Mutation(
        "sim_whole_generate_signals_every_token", "parrot/engines/sim_batch.py",
        "        elif not req.whole or (req.num_done == 1 and req.signal_first_token):\n",
        "        elif True:\n",
        ("tests/engines/test_simulated_generate_all.py::"
         "test_a_whole_generate_wakes_its_collector_at_its_end",),
        where="SimBatch._decode_token"),
    Mutation(
        "sim_generate_all_streams", "parrot/engines/simulated.py",
        "        result = await collect_generate(self._chunks(request, whole=True, "
        "first=first))\n",
        "        result = await collect_generate(self._chunks(request, whole=False, "
        "first=first))\n",
        ("tests/engines/test_simulated_generate_all.py::"
         "test_a_whole_generate_wakes_its_collector_at_its_end",),
        where="SimulatedEngine.generate_all"),
    Mutation(
        "sim_whole_generate_untimed", "parrot/engines/simulated.py",
        "                    if first is not None and not generated and "
        "req.first_token_at is not None:\n",
        "                    if False:\n",
        ("tests/engines/test_simulated_generate_all.py::"
         "test_generate_all_answers_as_reading_the_stream_does",),
        where="SimulatedEngine._chunks"),
    Mutation(
        "sim_whole_generate_tpot_from_its_end", "parrot/engines/simulated.py",
        "                        timer.first_token(first.at)\n",
        "                        pass\n",
        ("tests/engines/test_simulated_generate_all.py::"
         "test_generate_all_answers_as_reading_the_stream_does",),
        where="SimulatedEngine._chunks"),
    Mutation(
        "pool_window_kept_on_reconnect", "parrot/manager/engine_pool.py",
        "        state.reconnect(spec, engine, info)\n        self._note_window()\n",
        "        state.reconnect(spec, engine, info)\n",
        ("tests/manager/test_manager.py::"
         "test_an_engine_back_with_another_window_moves_the_max_tokens_bound",),
        where="EnginePool.reconnect"),
    Mutation(
        "plain_placement_without_the_calm_rule", "parrot/policies/app_centric.py",
        "        calm = (not self.params.isolate_criteria or not first.isolates\n",
        "        calm = (True or not first.isolates\n",
        ("tests/policies/test_app_centric_plain.py::"
         "test_lone_calls_go_where_the_general_path_puts_them",),
        where="AppCentricPolicy._lone_fastest"),
    Mutation(
        "plain_placement_ties_to_the_first", "parrot/policies/slots.py",
        "        elif first_idle and slot.num_by_criterion[criterion] > 0:\n",
        "        elif False:\n",
        ("tests/policies/test_app_centric_plain.py::"
         "test_ties_go_to_an_engine_serving_the_criterion_then_the_first",),
        where="fastest_with_room"),
    Mutation(
        "plain_placement_ignores_the_task_group", "parrot/policies/app_centric.py",
        "        if first is None or (call.task_group is not None and "
        "self.params.colocate_task_groups):\n",
        "        if first is None:\n",
        ("tests/policies/test_app_centric_plain.py::"
         "test_lone_calls_go_where_the_general_path_puts_them",),
        where="AppCentricPolicy._lone_fastest"),
    Mutation(
        "engine_view_kept_across_running_changes", "parrot/manager/engine_pool.py",
        "        self._changes += 1   # (add_call, remove_call and the notes all come "
        "through here)\n",
        "",
        ("tests/manager/test_engine_view_reuse.py::test_every_change_shows_in_the_next_view",),
        where="EngineState._set_running"),
    Mutation(
        "engine_view_kept_across_health", "parrot/manager/engine_pool.py",
        "        key = (self._changes, self.is_healthy, self.contexts.num_ahead_tokens)\n",
        "        key = (self._changes, True, self.contexts.num_ahead_tokens)\n",
        ("tests/manager/test_engine_view_reuse.py::"
         "test_an_idle_engine_gives_its_last_view_until_something_changes",),
        where="EngineState.view"),
    Mutation(
        "saturation_partial_sum_strict", "parrot/policies/app_centric.py",
        "        if free >= demand:\n", "        if free > demand:\n",
        ("tests/policies/test_app_centric_round.py::"
         "test_demand_exceeds_only_what_the_engines_have_free_together",),
        where="exceeds_free"),
    Mutation(
        "isolation_without_throughput_always", "parrot/policies/app_centric.py",
        "        return bool(latency_free)\n", "        return True\n",
        ("tests/policies/test_app_centric_round.py::"
         "test_with_no_throughput_work_a_round_isolates_where_an_engine_serves_no_latency",),
        where="can_isolate"),
    Mutation(
        "whole_generate_first_token_ignored", "parrot/manager/executor.py",
        "        if result.first_token_s is not None:",
        "        if False:",
        ("tests/server/test_metrics.py::test_metrics_count_requests_calls_and_engines",),
        where="_generate"),
    Mutation(
        "collect_generate_untimed", "parrot/engines/protocol.py",
        "            prompt_len, first_token_s = chunk.prompt_len, loop.time() - started\n",
        "            prompt_len = chunk.prompt_len\n",
        ("tests/engines/test_simulated_generate_all.py::"
         "test_generate_all_answers_as_reading_the_stream_does",),
        where="collect_generate"),
    Mutation(
        "batch_whole_answer_untimed", "parrot/engines/batch_server.py",
        "            outbox.put({\"id\": op_id, \"chunk\": result.to_wire()})\n",
        "            outbox.chunk(op_id, GenerateChunk(result.text, result.token_ids,\n"
        "                                              result.finish_reason, result.prompt_len))\n",
        ("tests/engines/test_batch_server.py::test_a_batch_gives_what_the_per_op_routes_give",
         "tests/engines/test_batch_client.py::"
         "test_concurrent_generates_leave_in_one_request_and_match_the_engine"),
        where="BatchRoutes._generate"),
)
