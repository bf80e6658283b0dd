"""The heartbeat bench's reading of ``MONITOR`` (issue 27): commands sent apart from a script's."""

from __future__ import annotations

from bench.heartbeat_bench import parse_monitor

RAW = (
    b"+OK\r\n"
    b'+1700000000.100000 [0 127.0.0.1:40000] "EXISTS" "dres:turn:t1:cancel"\r\n'
    b'+1700000000.200000 [0 127.0.0.1:40000] "EVALSHA" "abc" "2" "k1" "k2"\r\n'
    b'+1700000000.200100 [0 lua] "HGET" "dres:turn:t1:meta" "epoch"\r\n'
    b'+1700000000.200200 [0 lua] "HSET" "dres:turn:t1:meta" "lease_until" "1"\r\n'
    b'+1700000000.300000 [0 127.0.0.1:40001] "ZRANGEBYSCORE" "dres:act'
)


def test_commands_sent_and_run_in_scripts_are_counted_apart_and_a_cut_line_not_at_all() -> None:
    calls = parse_monitor(RAW)
    assert dict(calls.sent) == {"exists": 1, "evalsha": 1}
    assert dict(calls.scripted) == {"hget": 1, "hset": 1}
    assert sum(calls.total().values()) == 4
