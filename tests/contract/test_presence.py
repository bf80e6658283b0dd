"""The workers' list (``ledger.presence``: ``GET /healthz``'s ``workers``) on fakeredis, a real
redis-server and a Redis Cluster: a worker counts once however often it beats, while its last
beat is at most ``SEEN_MS`` old; a beat trims the ones older than that, so the list never
grows past the live workers; ``leave`` takes one off at once."""

from __future__ import annotations

from ledger import keys
from ledger.presence import SEEN_MS, Presence
from ledger.store import Client

NOW = 1_700_000_000_000


def test_a_worker_counts_once_while_its_last_beat_is_recent(client: Client) -> None:
    presence = Presence(client)
    assert presence.count(NOW) == 0
    for beat in range(2):
        presence.beat("w1", NOW + beat * 5_000)  # its last beat at NOW + 5 s
    presence.beat("w2", NOW + 10_000)
    assert presence.count(NOW + 10_000) == 2
    assert presence.count(NOW + 5_000 + SEEN_MS) == 2
    assert presence.count(NOW + 5_001 + SEEN_MS) == 1  # w1's last beat is older than the window
    assert presence.count(NOW + 10_000 + 2 * SEEN_MS) == 0


def test_a_beat_trims_the_workers_not_seen_for_the_window(client: Client) -> None:
    presence = Presence(client)
    for n in range(50):  # workers that came and went without leaving (killed)
        presence.beat(f"gone{n}", NOW + n)
    presence.beat("alive", NOW + SEEN_MS + 100)
    assert client.zrange(keys.workers(), 0, -1) == [b"alive"]


def test_leave_takes_a_worker_off_at_once(client: Client) -> None:
    presence = Presence(client)
    presence.beat("w1", NOW)
    presence.beat("w2", NOW)
    presence.leave("w1")
    presence.leave("never-there")
    assert presence.count(NOW) == 1
    assert client.zrange(keys.workers(), 0, -1) == [b"w2"]
