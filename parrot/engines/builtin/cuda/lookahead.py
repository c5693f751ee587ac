"""Launch-ahead for decode graph steps: the GPU runs step n+1 while the host finishes step n.

Between two decode steps the host streams the sampled tokens, runs the scheduler and fills
the next step's inputs (measured on an H200 at batch 64: ~2.4 ms of a ~11.6 ms step, with the
GPU idle). But a decode-only batch that simply continues is predictable: every row feeds back
the token it just sampled at the next position. So after sampling step n the runner launches
that predicted step n+1 from its graph (asynchronously) and returns; when the scheduler's real
step n+1 arrives, the runner compares it with the prediction, field by field, and uses the
launched results only when it is the prediction, or the prediction less rows that finished
(`graphs.predicted_rows_index`; else it runs the real step as usual).

When no row is under a grammar the prediction does not wait for the tokens at all: the next
step is queued on the GPU right behind step n, its token ids copied on the device from step
n's tokens there (the argmax, or for sampled rows the draw sampler.py makes on the device:
`runner._fed_source`; `DecodeGraphs.launch_ahead_fed`), and step n's tokens are read back
while step n+1 runs, so the GPU does not idle between the steps for the read-back, the
host's checks and the staging. A row that then turns out to finish (EOS, a stop token) is
simply left out of the real step, as is a row whose end is known beforehand (max_tokens, a
full window); only a step whose rows all end that way is not predicted.

Why a wrong guess is harmless: the predicted step writes K/V only at each row's next position,
and only when that slot lies in a block the row already owns that is not full (a not-full
block is never shared: forks share full blocks and copy the partial one; a row whose next
position starts a new block continues only into a block the scheduler reserved for it
(`reserve_next_block`), which nothing else holds). That is the KV the
real step would write for the same token; if the row stops instead, the slot lies past its
computed tokens, where nothing reads before a later step writes it again; and all GPU work is
ordered on one stream, so a block freed and handed to another context is written by that
context's own steps after the predicted one. A row known to finish with this token
(max_tokens, EOS or a stop token, a full window) rides along in the prediction and the real
step leaves it out: a decode step reads every weight whatever its rows, so the extra row costs
little, while skipping the prediction would expose the host's time between the steps at every
step where some row ends (at 256 rows of 64-384-token outputs, most steps). The prediction is
skipped only when every row is known to finish, so the GPU does not compute a step nobody
wants, or when a row of a shared-prefix step is (its groups are planned over all its rows, so
that step is used only as predicted); an unpredictable end of every row (a stop string) costs
one wasted decode step. A newly admitted request would too (the next step adds its prefill or
its row), so it waits one step instead: while a step launched ahead is in flight the engine
schedules the decodes alone (`BatchScheduler.schedule(decode_only=True)`), which is the
prediction, used; and nothing is launched ahead while prefill work that could join the next
step waits
(`ModelRunner.hold_ahead`, `BatchScheduler.has_prefill_work`), so the step after takes the
request with nothing to waste.

That mixed step (decode rows and a prefill chunk, run through the piecewise graphs or
eagerly) is not a graph step, but when its prefill ends there (a Fill's last chunk, which
never decodes: `BatchScheduler.prefill_waits_after`) the step after it is its decode rows
continuing, predicted and launched the same way once its tokens are read; a shared-prefix
mixed step is not (its rows are grouped otherwise beside a prefill). Before, the step after
every mixed step ran with the host's time exposed (~13 ms at 250 LLaMA-7B rows on an H200,
docs/results/serving_h200.md).
"""

from __future__ import annotations

from dataclasses import replace

from parrot.engines.builtin.context import Work
from parrot.engines.builtin.cuda.graphs import DecodeRows


def ends_regardless(work: Work, max_context_len: int | None) -> bool:
    """Whether work's generation ends with its next token, whatever that token is."""
    return (work.state.is_finished or work.num_generated + 1 >= work.sampling.max_tokens
            or (max_context_len is not None
                and len(work.context.token_ids) + 1 >= max_context_len))


def finishes(work: Work, token: int, eos_token_ids: frozenset[int],
             max_context_len: int | None) -> bool:
    """Whether `token` (about to be appended) ends work's generation for a known reason."""
    params = work.sampling
    return (ends_regardless(work, max_context_len) or token in params.stop_token_ids
            or (token in eos_token_ids and not params.ignore_eos))


def next_rows(rows: DecodeRows, tokens: list[int], block_size: int,
              owned: list[list[int]] | None = None) -> DecodeRows | None:
    """The decode step after `rows` when every row continues with its sampled token, or None
    when it cannot be predicted. `owned[r]`: every block row r's context holds (its table may
    reach one block past the current one: the scheduler's `reserve_next_block`), so a row
    whose next position starts a new block can continue into it; without that block such a
    step is not predicted. In a shared-prefix step the groups stay as they are (the new block
    is the row's own, so the re-planned step shares the same prefix) and the row's suffix
    table grows by it."""
    crossing = [(p + 1) % block_size == 0 for p in rows.positions]
    if any(crossing) and owned is None:
        return None
    groups = rows.groups
    suffix_tables = None if groups is None else list(groups.suffix_tables)
    tables, slots = [], []
    for r, p in enumerate(rows.positions):
        if not crossing[r]:
            tables.append(rows.tables[r])
            slots.append(rows.slots[r] + 1)
            continue
        assert owned is not None
        block = (p + 1) // block_size
        if block >= len(owned[r]):
            return None                  # no block reserved for this row's next position
        tables.append(owned[r][:block + 1])
        slots.append(owned[r][block] * block_size)
        if suffix_tables is not None:
            suffix_tables[r] = suffix_tables[r] + [owned[r][block]]
    if groups is not None:
        assert suffix_tables is not None
        groups = replace(groups, suffix_tables=suffix_tables,
                         suffix_lens=[n + 1 for n in groups.suffix_lens])
    return DecodeRows(list(tokens), [p + 1 for p in rows.positions], slots, tables,
                      [n + 1 for n in rows.seq_lens], groups)
