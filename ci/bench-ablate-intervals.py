"""`hicache ablate --scenario seed --json --quiet` with a hand-built parameter ensemble of N members
(BENCHMARKS.md, "ablate --scenario seed with intervals"): the profile and N-1 copies with each jointly
fitted parameter scaled by a seeded factor in [0.9, 1.1]. Prints the wall, the answer and the seconds
spent pricing across the ensemble (every call of hicache_ref.sim.price.spread.spread), on stderr.

Usage: PYTHONPATH=$PWD python ci/bench-ablate-intervals.py 64
"""

import contextlib
import io
import json
import random
import sys
import time

from hicache_ref.sim.fit.derive import JOINT, with_values
from hicache_ref.sim.price import spread, uncertainty

MEMBERS = int(sys.argv[1]) if len(sys.argv) > 1 else 64


def ensemble(profile):
    rng = random.Random(0)
    out = [profile]
    for _ in range(MEMBERS - 1):
        values = {}
        for key, lo, hi, _ in JOINT:
            section, name = key.split(".")
            values[key] = min(hi, max(lo, getattr(getattr(profile, section), name) * rng.uniform(0.9, 1.1)))
        out.append(with_values(profile, **values))
    return tuple(out)


pricing = [0.0, 0]
inner = spread.spread


def timed(members, price):
    t = time.perf_counter()
    try:
        return inner(members, price)
    finally:
        pricing[0] += time.perf_counter() - t
        pricing[1] += 1


uncertainty.ensemble = ensemble
spread.spread = timed
from conformance.cli.main import main  # noqa: E402  (after the ensemble is in place)

t0 = time.perf_counter()
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = main(["ablate", "--scenario", "seed", "--json", "--quiet"])
wall = time.perf_counter() - t0
a = json.loads(out.getvalue())["answer"]
print(f"members {MEMBERS}, exit {rc}, wall {wall:.1f} s, answer {a['answer']} TTFT {a['ttft_change_pct']:+.2f}% "
      f"{a['ttft_change_pct_interval']}; pricing over the ensemble {pricing[0]:.2f} s in {pricing[1]} calls",
      file=sys.stderr)
