"""`hicache bench transfer` runs end to end on a small config and checks the targets it measures."""

import json

from conformance.cli.main import main


def test_small_run_reports_layouts_and_checks_measured_targets(capsys):
    rc = main(["bench", "transfer", "--tokens", "256", "--layers", "2", "--kv-dim", "64", "--page-size", "16",
               "--layouts", "layer_first,page_first_direct", "--repeat", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert set(out["layouts"]) == {"layer_first", "page_first_direct"}
    assert set(out["layouts"]["layer_first"]) == {"d2h", "h2d", "h2d_all_layer"}
    assert out["plan"]["layer_first"]["segments"] == 78
    checked = {t["metric"]: t for t in out["targets"]}
    assert checked["plan_segments_page_first_direct_seed"]["ok"]
    assert checked["plan_segments_page_first_direct_seed"]["measured"] == 39_936
    # The copy-ratio target is defined for the default config only: not checked on a small one.
    assert "transfer_ratio_vs_memcpy" not in checked
