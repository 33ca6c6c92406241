"""The stream operators of docs/streams.md, written again from the document in plain
Python, as the reference the end-to-end test (tests/stream_test.sh) checks Meridian's
results against.

  reference.py make OUT_DIR     writes the records to publish (records.txt, one per
                                line, in publishing order) and the spec's parameters
  reference.py count OUT_DIR    prints how many window results the records make
  reference.py check OUT_DIR RESULTS COUNTERS [--restored]
                                computes every window from records.txt and compares
                                with the results Meridian published (one JSON per line)
                                and the counters `stream run --json` printed. With
                                --restored (a run killed and restored from its
                                checkpoint, tests/stream_fault_test.sh): a result may
                                come again, the very same; the broker may deliver a
                                record again, counted as a duplicate or late; with
                                --once, the results hold each window once all the
                                same (a dataset sink); with --chained, the results
                                are the depot's stream's over the factory's results
                                (tests/stream/depot.yaml)
"""
import json
import math
import random
import sys

# The spec in tests/stream/factory.yaml, the same figures.
SIZE, SLIDE, OOO, LATENESS = 4000, 2000, 500, 500
FILTER_MIN, FILTER_MAX = -40.0, 125.0
SCALE, OFFSET = 1.8, 32.0
THRESHOLD, HISTORY = 2.5, 5
T0 = 1767225600000


def make(out_dir):
    rng = random.Random(7)
    devices = ["press-%d" % i for i in range(6)]
    base = {d: 20 + 5 * rng.random() for d in devices}
    order = []
    for k in range(300):
        for d in devices:
            v = round(base[d] + 3 * math.sin(k / 20) + rng.random() - 0.5, 2)
            if rng.random() < 0.01:
                v += 30  # a spike
            if rng.random() < 0.005:
                v = 999.0  # filtered out
            order.append({"device": d, "seq": k, "event_time_ms": T0 + 100 * k + rng.randint(-80, 80), "value": v})
    lines = [json.dumps(r, separators=(",", ":")) for r in order]
    # Out of order: neighbours swapped.
    for i in range(0, len(lines) - 1):
        if rng.random() < 0.15:
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
    # Late: some records held back 420 places (70 per device, 7 s of event time).
    for _ in range(12):
        i = rng.randrange(0, len(lines) - 500)
        lines.insert(i + 420, lines.pop(i))
    # Delivered twice (as QoS 1 may): a copy a few places on.
    for _ in range(40):
        i = rng.randrange(0, len(lines) - 10)
        lines.insert(i + rng.randint(1, 8), lines[i])
    # Malformed.
    lines.insert(100, "not json")
    lines.insert(500, '{"device":"press-1","seq":5,"event_time_ms":%d,"value":1,"unit":"C"}' % T0)
    lines.insert(900, '{"device":"press-2","seq":1,"event_time_ms":%d,"value":"' % T0 + "x" * 1200 + '"}')
    with open(out_dir + "/records.txt", "w") as f:
        f.write("\n".join(lines) + "\n")


def reference(lines):
    c = dict(records=0, accepted=0, duplicates=0, late=0, filtered=0, malformed=0, results=0, anomalies=0)
    max_t = None
    windows = {}  # (device, start) -> {seq: (t, value)}
    held = {}     # device -> seqs in open windows
    history = {}
    results = []

    def wm():
        return None if max_t is None else max_t - OOO

    def written(start):
        return wm() is not None and start + SIZE + LATENESS <= wm()

    def fire(device, start):
        recs = windows.pop((device, start))
        seqs = sorted(recs)
        vals = [recs[s][1] for s in seqs]
        n = len(vals)
        total = 0.0
        for v in vals:
            total += v
        mean = total / n
        sq = 0.0
        for v in vals:
            sq += (v - mean) * (v - mean)
        for s in seqs:
            if recs[s][0] // SLIDE * SLIDE == start:
                held[device].discard(s)
        h = history.setdefault(device, [])
        score = 0.0
        if len(h) >= 2:
            hs = 0.0
            for m in h:
                hs += m
            hm = hs / len(h)
            hq = 0.0
            for m in h:
                hq += (m - hm) * (m - hm)
            hstd = math.sqrt(hq / len(h))
            if hstd > 0:
                score = abs(mean - hm) / hstd
        h.append(mean)
        if len(h) > HISTORY:
            h.pop(0)
        anomaly = score >= THRESHOLD
        c["results"] += 1
        c["anomalies"] += anomaly
        results.append(dict(device=device, window_start_ms=start, window_end_ms=start + SIZE, count=n, sum=total,
                            min=min(vals), max=max(vals), mean=mean, stddev=math.sqrt(sq / n), first_seq=seqs[0],
                            last_seq=seqs[-1], score=score, anomaly=anomaly))

    def fire_ready(flush):
        for key in sorted(windows, key=lambda k: (k[1] + SIZE, k[0], k[1])):
            if flush or written(key[1]):
                fire(*key)

    for line in lines:
        c["records"] += 1
        try:
            r = json.loads(line)
            ok = (isinstance(r, dict) and set(r) == {"device", "seq", "event_time_ms", "value"} and len(line) <= 1024
                  and isinstance(r["value"], (int, float)))
        except ValueError:
            ok = False
        if not ok:
            c["malformed"] += 1
            continue
        v = float(r["value"])
        if not (FILTER_MIN <= v <= FILTER_MAX):
            c["filtered"] += 1
            continue
        v = v * SCALE + OFFSET
        d, seq, t = r["device"], r["seq"], r["event_time_ms"]
        last = t // SLIDE * SLIDE
        starts = [s for s in range(last - SIZE + SLIDE, last + 1, SLIDE) if not written(s)]
        if not starts:
            c["late"] += 1
            continue
        if seq in held.get(d, ()):
            c["duplicates"] += 1
            continue
        held.setdefault(d, set()).add(seq)
        for s in starts:
            windows.setdefault((d, s), {})[seq] = (t, v)
        c["accepted"] += 1
        if max_t is None or t > max_t:
            max_t = t
            fire_ready(False)
    fire_ready(True)
    return results, c


def chained(lines):
    """The depot's stream (tests/stream/depot.yaml) over the factory's results: each
    result a record (device, window start, window end - 1, mean), in 20 s tumbling
    windows with 2 s of out-of-orderness, no filter or map, the same detect."""
    global SIZE, SLIDE, OOO, LATENESS, FILTER_MIN, FILTER_MAX, SCALE, OFFSET
    firsts, _ = reference(lines)
    records = [json.dumps({"device": r["device"], "seq": r["window_start_ms"], "event_time_ms": r["window_end_ms"] - 1,
                           "value": r["mean"]}, separators=(",", ":")) for r in firsts]
    SIZE, SLIDE, OOO, LATENESS = 20000, 20000, 2000, 0
    FILTER_MIN, FILTER_MAX = -math.inf, math.inf
    SCALE, OFFSET = 1.0, 0.0
    return reference(records)


def check(out_dir, results_path, counters_path, restored=False, once=False, chain=False):
    with open(out_dir + "/records.txt") as f:
        lines = f.read().splitlines()
    want, want_c = chained(lines) if chain else reference(lines)
    with open(results_path) as f:
        got = [json.loads(l) for l in f if l.startswith("{")]
    with open(counters_path) as f:
        got_c = json.loads(f.read().strip().splitlines()[-1])
    bad = 0
    # What a broker delivers again after a restore is one more record read, counted as
    # a duplicate (its window still open) or late (written): every other counter is exact.
    again = got_c.get("records", 0) - want_c["records"] if restored else 0
    if restored and (again < 0 or got_c.get("duplicates", 0) < want_c["duplicates"] or
                     got_c.get("late", 0) < want_c["late"] or
                     got_c["duplicates"] - want_c["duplicates"] + got_c["late"] - want_c["late"] != again):
        print("records delivered again: %d more records, %d more duplicates, %d more late" %
              (again, got_c.get("duplicates", 0) - want_c["duplicates"], got_c.get("late", 0) - want_c["late"]))
        bad += 1
    for k, v in want_c.items():
        if restored and k in ("records", "duplicates", "late"):
            continue
        if got_c.get(k) != v:
            print("counter %s: Meridian %s, reference %s" % (k, got_c.get(k), v))
            bad += 1
    by_key = {}
    repeated = 0
    for r in got:
        key = (r["device"], r["window_start_ms"])
        if key in by_key:
            # A dataset sink's file holds each result once, restored or not.
            if not restored or once or by_key[key] != r:
                print("duplicate result for", key, "" if by_key[key] == r else "(with other figures)")
                bad += 1
            repeated += 1
        by_key[key] = r
    for w in want:
        key = (w["device"], w["window_start_ms"])
        g = by_key.pop(key, None)
        if g is None:
            print("missing result for", key)
            bad += 1
        elif g != w:
            print("result for %s differs:\n  Meridian  %s\n  reference %s" % (key, g, w))
            bad += 1
    for key in by_key:
        print("unexpected result for", key)
        bad += 1
    # In order: each window first comes where the reference writes it.
    first = []
    for r in got:
        key = (r["device"], r["window_start_ms"])
        if key not in first:
            first.append(key)
    if first != [(w["device"], w["window_start_ms"]) for w in want]:
        print("results out of order")
        bad += 1
    print("reference: %d windows, %d anomalies; records %d: accepted %d, duplicates %d, late %d, filtered %d, "
          "malformed %d; %d mismatches" % (len(want), want_c["anomalies"], want_c["records"], want_c["accepted"],
                                           want_c["duplicates"], want_c["late"], want_c["filtered"],
                                           want_c["malformed"], bad))
    if restored:
        print("after the restore: %d results published again (each the same), %d records delivered again" %
              (repeated, again))
    # The data must exercise every path, or the test proves less than it says.
    for k in () if chain else ("duplicates", "late", "filtered", "malformed", "anomalies"):
        if want_c[k] == 0:
            print("the records exercise no %s" % k)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "count":
        with open(sys.argv[2] + "/records.txt") as f:
            print(len(reference(f.read().splitlines())[0]))
    else:
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4], "--restored" in sys.argv[5:], "--once" in sys.argv[5:],
                       "--chained" in sys.argv[5:]))
