"""Emulated links (``labkit.netem``): the rate a shaped link carries against the rate it was given.

Two nodes in network namespaces on one shaped switch; one TCP stream from node1 to node0, timed
to the receiver's ack, in rounds (median reported). Per configured rate:

- *payload*: TCP bytes delivered per second, over the configured rate in bytes/s. The shaper
  counts whole frames, headers included (66 of each 1514-byte frame), so the ceiling is
  1448 / 1514 = 0.956 of the rate. Goal: within 10% of the rate;
- *lan0 counter*: node0's received bytes per second as the labs' per-node tables read them
  (``/proc/net/dev``); it counts a segmentation-offload packet's headers once, so it reads
  about the payload rate.

Then ``alpha`` and ``B`` of the 1 Gbit/s link as the cost model sees them (``netem.measure_link``).
"""
from __future__ import annotations

import statistics

from labkit.bench import entry, ratio

RATES = ("100mbit", "1gbit")
CEILING = 1448 / 1514  # TCP payload per Ethernet frame (MSS with timestamps / frame): what a shaped link can carry


def _one_rate(link: str, nbytes: int, rounds: int) -> dict:
    from labkit import netem

    payload, counted = [], []
    with netem.EmulatedNetwork(2, link) as net:
        for _ in range(rounds):
            before = net.counters("node0")["lan0"][1]
            rate = netem.throughput(net, "node1", "node0", nbytes)
            # the warm-up and the timed transfer both crossed lan0: its bytes per payload byte
            counted.append(rate * (net.counters("node0")["lan0"][1] - before) / (2 * nbytes))
            payload.append(rate)
    configured = netem.parse_link(link).bytes_per_s
    return {"link": link, "configured MB/s": configured / 1e6, "payload MB/s": statistics.median(payload) / 1e6,
            "lan0 counter MB/s": statistics.median(counted) / 1e6,
            "payload / rate": statistics.median(payload) / configured,
            "payload / ceiling": statistics.median(payload) / configured / CEILING}


def run(quick: bool = False) -> dict:
    from labkit import netem

    mode, why = netem.availability("1gbit")
    if mode is None:
        return {"title": "Emulated links: achieved vs configured rate", "rows": [], "ratios": [],
                "notes": [f"skipped: {why}"]}
    rounds = 2 if quick else 5
    rows = [_one_rate(link, 12_500_000 if link == "1gbit" else 2_500_000, rounds) for link in RATES]
    link = netem.measure_link("1gbit", repeats=2 if quick else 3)
    ratios = []
    for r in rows:
        ratios.append(ratio(f"{r['link']}: TCP payload / configured rate (ceiling {CEILING:.3f}: headers)",
                            r["payload / rate"], ">= 0.9"))
        ratios.append(ratio(f"{r['link']}: TCP payload / configured rate, at most", r["payload / rate"], "<= 1.1"))
    ratios.append(ratio("1gbit: cost model's B (micro-benchmark) / configured rate", link.bandwidth / 125e6, ""))
    return {"title": "Emulated links: achieved vs configured rate",
            "rows": rows, "ratios": ratios,
            "notes": [f"{mode} mode; one TCP stream node1 -> node0, median of {rounds} rounds "
                      f"(each: a warm-up transfer, then the timed one)",
                      f"1gbit link for the cost model: alpha {link.alpha_s * 1e6:.0f} us, "
                      f"B {link.bandwidth / 1e6:.1f} MB/s (fit error {link.rel_error:.3f})"]}


if __name__ == "__main__":
    entry(run)
